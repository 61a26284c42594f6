#pragma once
// The plan: the one sparse representation every pattern compiles to and every backend executes.
//
// For each (batch element, query head) — a "head slot" — a plan holds
//  * a query order: a sequence of arithmetic runs over original query positions. No runs means the
//    identity. Grid heads use one run per phase (start + i*stride), modality grouping one run per
//    segment, an arbitrary permutation runs of length one. Backends compute positions by index
//    arithmetic; nothing is permuted in memory.
//  * query tiles: ranges [begin, end) of positions *in that order*, at most tile_rows long. Tiles
//  need
//    not be uniform (a modality boundary can start a new tile); queries in no tile get O = 0 and
//    LSE = -inf.
//  * per tile, in CSR form: key spans [begin, end) at any alignment, strided spans (every step-th
//    key of [begin, end): a grid head's lines, kept as arithmetic rather than listed) and gathered
//    key columns. Strided spans and columns are both gathered by the engines; a strided span costs
//    a record where a column list would cost a key each.
//  * per tile, a mask policy applied to every (query, key) pair the tile covers: causal on original
//    positions (bottom-right aligned when kv_len > q_len), and optionally a window (with sink keys
//    exempt from it), a minimum distance, a periodic band, same-media, and modality-pair
//    restrictions, and bidirectional attention inside each media item (these need the token
//    arrays). Policies live in a small table; tiles refer to them by index. The rule itself is
//    src/core/mask_rule.h, shared by every backend.
//  * optionally, further passes: plans over the same shape, each with its own query order and
//    tiles, that cover pairs disjoint from this plan's and from each other's. A row's attention is
//    over the union of what every pass covers; backends run the passes apart and merge their
//    partial (O, LSE) by LSE. Passes let one pattern give a row two tile geometries (a grid
//    head's local window in natural order, its grid lines in phase-major order).
//
//  * optionally, key orders: a tile may read K and V through a permutation of the keys instead of
//    in place, so that keys scattered through the sequence (text keys and images' sink keys, read
//    by an image tile) become one contiguous span that a kernel reads by one tensor copy.
//    key_orders[o][p] is the original key position of physical slot p of order o, or kPaddingKey
//    for a padding slot (zero K and V, covered by no span) that aligns regions to chunks; an order
//    maps no original key twice and may be longer than kv_len. A tile with tile_key_orders[t] = o
//    has its spans over physical slots of order o and is masked on the original positions: it
//    computes, for each slot p of each span, the pair (query, key_orders[o][p]) if its mask allows
//    it. Empty tile_key_orders: every tile in place. Key-ordered tiles take spans only (no strided
//    spans, no columns) that cover no padding, and one of two masks. A plain causal mask (no
//    window, minimum distance, band, media or modality terms) requires spans whose original
//    positions strictly increase and, before a span's last run of consecutive positions, keys low
//    enough for every row: a kernel positions a span's slot p at p + shift with the one shift
//    order[end - 1] - (end - 1), exact on the last run and, before it, at least the true position
//    and at most order[r] - 1 (r the last run's first slot), which validate() requires to be <= the
//    aligned position of the tile's lowest row, so masking and chunk classification by those
//    positions stay exact. The unmasked policy (causal false and no other term) keeps every pair,
//    so no position is read: its spans may hold keys in any order (a bidirectional image tile
//    reading keys after its rows).
//
// Invariant: within a tile, spans and strided spans are pairwise disjoint (no key in two of
// them), columns are unique and lie outside every span and strided span, so every (query, key)
// pair is computed at most once by a pass. validate() checks it; that passes
// are disjoint from each other, check_passes_disjoint() does (it costs a walk over every pass's
// key ranges).
//
// The CPU reference defines the semantics: attention over a plan computes exactly the pairs that
// the tiles cover and the mask allows.

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "mmsparse/layout.h"

namespace mmsparse {

inline constexpr int kDefaultTileRows = 64;
inline constexpr int32_t kKeysInPlace = -1;  // tile_key_orders: the tile reads K and V in place
inline constexpr int32_t kPaddingKey = -1;   // key_orders: a padding slot (zero K and V)

struct QueryRun {
  int64_t start = 0;  // first original query position
  int64_t count = 0;  // number of positions
  int64_t step = 1;   // distance between consecutive positions (> 0)
  bool operator==(const QueryRun&) const = default;
};

struct QueryTile {
  int64_t begin = 0;  // index into the head's query order
  int64_t end = 0;
  bool operator==(const QueryTile&) const = default;
};

struct KeySpan {
  int32_t begin = 0;  // key positions [begin, end)
  int32_t end = 0;
  bool operator==(const KeySpan&) const = default;
};

// Keys begin, begin + step, begin + 2·step, ... below end. step >= 2 (a span is step 1) and end is
// the last key + 1, so that equal key sets have equal records.
struct StridedSpan {
  int32_t begin = 0;
  int32_t end = 0;
  int32_t step = 2;
  int64_t count() const {
    return end > begin ? (static_cast<int64_t>(end) - begin - 1) / step + 1 : 0;
  }
  bool operator==(const StridedSpan&) const = default;
};

// Whether two strided spans have a key in common.
bool strided_spans_share_keys(const StridedSpan& a, const StridedSpan& b);

// Bit for the (query modality, key modality) pair in MaskPolicy::modality_pairs.
constexpr uint16_t modality_pair_bit(Modality query, Modality key) {
  return static_cast<uint16_t>(1u << (static_cast<int>(query) * kNumModalities + static_cast<int>(key)));
}
inline constexpr uint16_t kAllModalityPairs = (1u << (kNumModalities * kNumModalities)) - 1;

// The distance of a pair is aligned_query - key (aligned_query = query + kv_len - q_len).
struct MaskPolicy {
  bool causal = true;
  int64_t window = 0;       // > 0: keep keys with aligned_query - key < window; 0: unlimited
  int64_t window_sink = 0;  // keys < window_sink are exempt from the window (StreamingLLM sinks)
  // Keep pairs at distance >= min_distance: a causal cut moved min_distance keys back, which lets a
  // pass reach "keys at least one period back" on the common shape.
  int64_t min_distance = 0;
  // period > 0: keep pairs whose distance mod period < band (0 < band <= period; needs causal, so
  // distances are never negative): a periodic band, grid lines that a tile of several phases
  // shares. period 0 (and band 0): no band.
  int64_t period = 0;
  int64_t band = 0;
  bool same_media = false;  // keep pairs where both tokens belong to the same media item
  uint16_t modality_pairs = kAllModalityPairs;  // allowed (query, key) modality pairs
  // Keep the pairs whose tokens belong to one media item whatever causal and the window say:
  // attention inside an image is bidirectional, causal elsewhere (Gemma 3). same_media and
  // modality_pairs still apply. Needs min_distance 0 and no period (passes use those to stay
  // disjoint, which lifted pairs would break). The tile's key lists must hold the keys past the
  // diagonal that the lift keeps.
  bool media_bidirectional = false;
  // constexpr: the mask rule (src/core/mask_rule.h), host and device code, calls it.
  constexpr bool needs_token_arrays() const {
    return same_media || media_bidirectional || modality_pairs != kAllModalityPairs;
  }
  bool operator==(const MaskPolicy&) const = default;
};

struct PlanShape {
  int64_t batch = 1;  // 1: the same plan serves every batch element
  int64_t heads = 1;  // query heads
  int64_t q_len = 0;
  int64_t kv_len = 0;
  int64_t tile_rows = kDefaultTileRows;
  int64_t causal_offset() const { return kv_len - q_len; }  // query i aligns with key i + offset
  int64_t head_slots() const { return batch * heads; }
  bool operator==(const PlanShape&) const = default;
};

struct Plan {
  PlanShape shape;

  std::vector<MaskPolicy> masks;            // distinct policies, referenced by tile_masks
  std::vector<int64_t> head_run_offsets;    // [head_slots + 1] into runs
  std::vector<QueryRun> runs;
  std::vector<int64_t> head_tile_offsets;   // [head_slots + 1] into tiles
  std::vector<QueryTile> tiles;
  std::vector<int32_t> tile_masks;          // [tiles] index into masks
  std::vector<int64_t> tile_span_offsets;   // [tiles + 1] into spans
  std::vector<KeySpan> spans;
  std::vector<int64_t> tile_strided_offsets;  // [tiles + 1] into strided_spans
  std::vector<StridedSpan> strided_spans;
  std::vector<int64_t> tile_column_offsets;  // [tiles + 1] into columns
  std::vector<int32_t> columns;

  // Key orders: a tile may read K and V through one instead of in place. key_orders[o][p] is the
  // original key position of physical slot p (kPaddingKey: a padding slot, zero K and V, that no
  // span covers); an order maps no original key twice and may be longer than kv_len (padding
  // aligns regions to chunks). A tile with tile_key_orders[t] = o has its spans over physical
  // slots of order o, and is masked on the original positions. Empty tile_key_orders: every tile
  // in place.
  std::vector<std::vector<int32_t>> key_orders;
  std::vector<int32_t> tile_key_orders;  // [tiles] index into key_orders, or kKeysInPlace

  // Per key position [kv_len]; required when a mask needs them (query i reads position
  // i + causal_offset). Filled from a ModalityLayout by attach_layout().
  std::vector<uint8_t> token_modality;
  std::vector<int32_t> token_media;

  // Passes 1, 2, ... (this plan is pass 0): the same shape, no passes of their own, pairs disjoint
  // from every other pass's. Empty for a plan of one pass.
  std::vector<Plan> extra_passes;

  int64_t head_slots() const { return shape.head_slots(); }
  int64_t num_tiles() const { return static_cast<int64_t>(tiles.size()); }
  int64_t num_passes() const { return 1 + static_cast<int64_t>(extra_passes.size()); }
  // The key order tile t reads through, or kKeysInPlace.
  int32_t tile_key_order(int64_t t) const {
    return tile_key_orders.empty() ? kKeysInPlace : tile_key_orders[static_cast<std::size_t>(t)];
  }
  // Whether a tile of some pass reads through a key order.
  bool has_key_orders() const;
  // Pass p: this plan for 0, extra_passes[p - 1] otherwise.
  const Plan& pass(int64_t p) const;

  // Original query position of order index `i` of a head slot (identity without runs).
  int64_t query_position(int64_t head_slot, int64_t order_index) const;
  // All positions of a head's order, materialised (length q_len).
  std::vector<int64_t> query_order(int64_t head_slot) const;

  // layout.length() must equal kv_len; attaches to every pass.
  void attach_layout(const ModalityLayout& layout);

  // Throws Error(kInvalidArgument) naming the offending field, head and tile: offsets not
  // monotone or of the wrong size, runs that are not a permutation of [0, q_len), tiles out of
  // range or longer than tile_rows, spans/strided spans/columns out of [0, kv_len), strided spans
  // with step < 2 or an end past their last key + 1, overlapping coverage within
  // a tile, masks with bad fields or that need token arrays without them; for extra passes, the
  // same for each (named "pass p"), a shape other than this plan's, or passes of their own. Key
  // orders: entries outside [0, kv_len) other than kPaddingKey or repeated, tile_key_orders of the
  // wrong size or out of range, and key-ordered tiles that break the restrictions above.
  void validate() const;

  std::string summary() const;  // "heads=28 tiles=57344 spans=... columns=..."
};

// Incremental construction: begin_head() for each head slot in order, then tiles with their spans
// and columns.
class PlanBuilder {
 public:
  explicit PlanBuilder(PlanShape shape);
  void begin_head(const std::vector<QueryRun>& order = {});
  // A key order for tiles to read through (Plan::key_orders); identical orders share an index.
  int32_t add_key_order(std::vector<int32_t> order);
  // Masks deduplicated. key_order: an index from add_key_order, whose physical slots the tile's
  // spans then cover, or kKeysInPlace.
  void begin_tile(int64_t begin, int64_t end, const MaskPolicy& mask = {},
                  int32_t key_order = kKeysInPlace);
  // Ignores empty spans. Keys are positions in [0, kv_len), or slots of the tile's key order.
  // Merges with the tile's previous span when they touch, except in key-ordered tiles (each span
  // there has its own shift; splitting a range is how a caller meets the shift rule above).
  void add_span(int64_t begin, int64_t end);
  // Every step-th key of [begin, end) from begin: nothing when empty, a span for step 1, a column
  // for one key, else a StridedSpan with end moved to its last key + 1 (end may lie past kv_len,
  // the keys may not).
  void add_strided_span(int64_t begin, int64_t end, int64_t step);
  void add_column(int64_t key);
  // Token arrays for masks that need them (same-media, modality pairs), checked by finish().
  void attach_layout(const ModalityLayout& layout);
  Plan finish();  // validates

 private:
  // Throws naming `caller` unless a tile of the current head is open.
  void require_tile(const char* caller) const;

  Plan plan_;
  bool in_head_ = false;
};

// The boolean mask a plan computes for one head slot, [q_len × kv_len] row-major, 1 = computed.
// Includes the mask policy; the union over passes. Meant for small sizes (tests, pictures).
std::vector<uint8_t> materialize_mask(const Plan& plan, int64_t head_slot);

// Number of (query, key) pairs a head slot computes after masking, summed over passes.
int64_t count_plan_pairs(const Plan& plan, int64_t head_slot);
// The same for every head slot (one validation of the plan).
std::vector<int64_t> count_plan_pairs(const Plan& plan);

// Throws Error(kInvalidArgument) naming the passes, head slot, query and key when two passes
// compute a common pair. Costs a sort of every row's key ranges over all passes: meant for tests
// and small sizes (validate() does not call it).
void check_passes_disjoint(const Plan& plan);

// Attaches `pass` (same shape, one pass) as the plan's next pass and validates the result.
void add_pass(Plan& plan, Plan pass);

// --- Interchange formats (converters; the plan stays the internal format) ---

// MInference's vertical-slash index: per block_size-row query block, key blocks of block_size
// starting at block_offset (any alignment) with a causal mask, plus gathered columns.
struct MInferenceIndex {
  int64_t batch = 1, heads = 1, num_blocks = 0;  // num_blocks = ceil(q_len / block_size)
  int64_t max_blocks = 0, max_columns = 0;       // NNZ_S, NNZ_V
  int64_t block_size = 64;
  std::vector<int32_t> block_count;   // [batch, heads, num_blocks]
  std::vector<int32_t> block_offset;  // [batch, heads, num_blocks, max_blocks]
  std::vector<int32_t> column_count;  // [batch, heads, num_blocks]
  std::vector<int32_t> column_index;  // [batch, heads, num_blocks, max_columns]
};
// Requires one pass, identity query order, uniform tiles of block_size, causal-only masks and no
// key orders. Span pieces shorter than block_size become columns so the conversion is exact.
MInferenceIndex to_minference_index(const Plan& plan);
Plan from_minference_index(const MInferenceIndex& index, int64_t q_len, int64_t kv_len);

// FlexAttention-style block lists: per query block, the key blocks that are partial (mask_mod
// evaluated) and full (no mask). A partial block's mask_mod must reproduce the plan's coverage.
struct BlockLists {
  int64_t batch = 1, heads = 1, num_q_blocks = 0, num_kv_blocks = 0;
  int64_t block_q = 128, block_k = 128;
  std::vector<int32_t> kv_num_blocks;       // [batch, heads, num_q_blocks]
  std::vector<int32_t> kv_indices;          // [batch, heads, num_q_blocks, num_kv_blocks]
  std::vector<int32_t> full_kv_num_blocks;  // [batch, heads, num_q_blocks]
  std::vector<int32_t> full_kv_indices;     // [batch, heads, num_q_blocks, num_kv_blocks]
};
// Rejects plans with key orders (the lists index keys in place).
BlockLists to_block_lists(const Plan& plan, int64_t block_q = 128, int64_t block_k = 128);
// Each listed block becomes a span; `partial_mask` is the policy that partial blocks stood for
// (tiles with only full blocks get a causal mask, which leaves full blocks below the diagonal whole).
Plan from_block_lists(const BlockLists& lists, int64_t q_len, int64_t kv_len,
                      MaskPolicy partial_mask = {});

}  // namespace mmsparse
