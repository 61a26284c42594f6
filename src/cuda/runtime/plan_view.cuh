#pragma once
// The device-side view of a DevicePlan: the records packed into its buffer and the index
// arithmetic the kernels do on them (token tests; the query order's lookup is query_rows.cuh).
// Host packing (device_plan.cu) and the kernels share these definitions.

#include <cstddef>
#include <cstdint>

#include "core/engine_chunks.h"
#include "core/mask_rule.h"
#include "cuda/runtime/engine.h"

namespace mmsparse::cuda {

// A query run with its position in the head's order: order indices [order_begin, next run's
// order_begin) map to positions start + (index - order_begin) * step. Never empty: a head's runs
// begin at strictly increasing order indices (the upload drops empty runs, the device builders
// make none; record-for-record parity tests hold them to the upload).
struct RunRecord {
  int32_t order_begin;
  int32_t start;
  int32_t step;
};

// One query tile with everything a CTA needs to start: its rows in the head's order, its head slot
// (derived at upload), its mask record and its key lists.
struct TileRecord {
  int32_t begin;  // order indices [begin, end)
  int32_t end;
  int32_t head_slot;   // batch_element * heads + head, or head for a broadcast plan
  int32_t mask;        // index into masks
  int64_t span_begin;  // [span_begin, span_end) into spans (spans and strided spans)
  int64_t span_end;
  int64_t column_begin;  // [column_begin, column_end) into columns
  int64_t column_end;
};

// A MaskPolicy in kernel-friendly widths. Windows that can never bind are stored as 0 (none), so
// every quantity fits int32 (positions are checked to fit at launch).
struct MaskRecord {
  int32_t causal;
  int32_t window;        // > 0: keep keys with aligned_query - key < window (keys >= window_sink)
  int32_t window_sink;   // keys below it are exempt from the window
  int32_t min_distance;  // > 0: keep pairs with aligned_query - key >= min_distance
  int32_t period;        // > 0: keep pairs with (aligned_query - key) mod period < band (causal)
  int32_t band;
  int32_t same_media;
  uint32_t modality_pairs;      // bit query_modality * kNumModalities + key_modality
  int32_t needs_tokens;         // the policy reads token_info (MaskPolicy::needs_token_arrays)
  int32_t media_bidirectional;  // pairs of one media item skip causal and the window
  // The interface of core/mask_rule.h's Policy.
  __host__ __device__ bool needs_token_arrays() const { return needs_tokens != 0; }
};

// A tile's key range: keys begin, begin + step, ... below end. A plan's span is step 1, its
// strided span step >= 2; a tile lists its spans first. Builders that write a record member by
// member must set step and width too (a buffer's memory is not zeroed).
//
// A lattice (width > 1, only ever made by the upload, device_plan.cu) is `width` consecutive
// strided spans of one step and one period count merged into one record: keys begin + i·step + t
// for t < width, end = its last key + 1. The wgmma kernel copies a chunk of it, kBlockN / width
// periods of `width` rows, with one tensor copy through a view of K/V cut into periods of `step`
// rows (DevicePlan::lattice_step).
struct SpanRecord {
  int32_t begin;
  int32_t end;
  int32_t step = 1;
  int32_t width = 1;
};

// DevicePlanLayout::span_shifts entry of a key range read in place. A key-ordered tile's spans are
// rows of the engine's copy of K and V in key-order layout (order o's slot p at row
// o * key_order_slots + p) and their entry is the shift from those rows to key positions,
// order[end - 1] - (end - 1) - o * key_order_slots (plan.h): exact on the span's last run of
// consecutive keys and, before it, at or below every row of the tile, so masks and chunk
// classification read row + shift as the key's position.
inline constexpr int32_t kSpanInPlace = INT32_MIN;

// A tile's rows as arithmetic, where they allow it: row r (< end - begin) of the tile lies at
// position start + (r / width) · outer_step + (r mod width) · inner_step. A grid head's tile is
// `phases` consecutive positions in each of several periods (width = phases, inner_step 1,
// outer_step the period). width 0: the rows have no such form, the kernels look them up in the
// runs (query_rows.cuh).
struct RowLattice {
  int32_t start = 0;
  int32_t width = 0;
  int32_t inner_step = 0;
  int32_t outer_step = 0;
};

// What a CTA reads first, in one record of a section in launch order (DevicePlanLayout::
// launch_records, uploads for attention only): its tile, tiles[schedule[blockIdx.x]], that tile's
// first key range (a default record when it has none) and, for a permuted head, its rows as a
// RowLattice, so that neither its query rows nor its first key copy waits for more than this one
// load.
struct LaunchRecord {
  TileRecord tile;
  SpanRecord first_range;
  RowLattice rows;
};
static_assert(sizeof(LaunchRecord) == sizeof(TileRecord) + sizeof(SpanRecord) + sizeof(RowLattice),
              "launch records are packed (tests read them byte for byte)");

// The width of every lattice record (engine_chunks.h's kLatticeSpans): with 128-key chunks, a
// chunk is 16 periods of 8 keys, the geometry a grid-like band of 64 keys per period needs
// (grid_mask.cpp; measurements in docs/history/perf-notes.md).
inline constexpr int32_t kLatticeWidth = static_cast<int32_t>(kLatticeSpans);

// The number of keys of a key range.
__host__ __device__ inline int64_t range_keys(const SpanRecord& range) {
  const int64_t periods =
      (static_cast<int64_t>(range.end) - range.width - range.begin + range.step) / range.step;
  return periods * range.width;
}

// token_info packs each token as core/mask_rule.h does (mask_rule::pack_token), the form the mask
// rule reads; kNoToken stands for the token of a query that precedes every key.
using mask_rule::kNoToken;

struct PlanView {
  const int64_t* head_run_offsets;  // [head_slots + 1] into runs
  const RunRecord* runs;            // [runs]
  // Every head's order is runs [0, shared_runs) (0: the identity order), which a kernel knows
  // without loading head_run_offsets; kPerHeadRuns otherwise (DevicePlanLayout::shared_runs).
  int32_t shared_runs;
  const TileRecord* tiles;          // [tiles]
  const int32_t* schedule;          // [tiles] tile of each CTA column (blockIdx.x), heaviest first
  const LaunchRecord* launch_records;  // [tiles] in launch order, or null (not uploaded for it)
  const MaskRecord* masks;          // [masks]
  const SpanRecord* spans;          // [spans] key ranges: the plan's spans and strided spans
  const int32_t* columns;           // [columns] key positions
  const int32_t* token_info;        // [kv_len] packed tokens, or null when no mask needs them
  // [spans] kSpanInPlace or the shift of a key-ordered span (kSpanInPlace above); null for plans
  // without key orders, whose kernels load nothing more.
  const int32_t* span_shifts;
};

// Typed pointers into the plan's device buffer.
PlanView make_plan_view(const DevicePlan& plan);

// --- Packing, shared by the upload (device_plan.cu) and the device builders (methods/static/static_device.cu) ---

// Every section of the buffer starts on this boundary, enough for the widest record member and for
// vector loads; align_section rounds a byte count up to it.
inline constexpr std::size_t kSectionAlignment = 16;
std::size_t align_section(std::size_t bytes);
// The kernels index positions, order indices and head slots in int32, and form differences of an
// aligned query position and a key, which lie in (-q_len, kv_len): throws kUnsupported otherwise.
void check_int32_ranges(const PlanShape& shape);
MaskRecord make_mask_record(const MaskPolicy& policy, int64_t kv_len);

// Order-index slot of a tile row that lies beyond the tile's end.
inline constexpr int32_t kNoRow = -1;

}  // namespace mmsparse::cuda
