#pragma once
// VecAttention's run pass (vec_device.cu's design comment): one CTA per plan tile (a pooled block,
// or with union_tiles the tile_blocks consecutive blocks of a plan-height tile), each warp one
// segment of the tile's steps (below, kRunSegments), reads the keep
// masks the score pass stored (a union tile ORs its blocks' masks: the union of their selections),
// adds the tile's sinks and diagonal, and cuts the tile's keys
// into maximal runs of consecutive keys; a run holding a sink or diagonal key, or at least
// kVecMinSpanKeys keys, is a span, the others' keys are columns (vec.h, vec_add_tile_keys). The
// count pass stores each tile's span records, column keys and kept keys; the write pass, after the
// exclusive sums, writes them at the tile's offsets, ascending. A run crossing a segment's first
// key is the count pass's to classify once its segments are joined (the start it needs is an
// earlier segment's); the count pass stores each segment's start before it and record offsets, so
// the write pass's warps walk their segments independently. Included by vec_device.cu only.
//
// A warp covers kRunStepKeys keys per step, 32 per lane as one bit word. Run starts and ends are
// bit operations on the word and its neighbours' edge bits (ballots; the step's first word sees
// the previous step's last bit, its last word the next step's first); the start of the run that
// ends at a bit is the latest start bit at or before it: in the lane's word, or else the last start
// of the nearest earlier lane with one (a ballot and a shuffle), or of the steps before. Each lane
// then classifies the runs ending in its word with bit operations, not one by one (classify_word:
// a run inside a word is too short for a span unless it holds a sink or diagonal key, and only
// the word's first run to end can have begun before it), so the count pass does no per-run work.
// The write pass places a lane's span records by a warp exclusive sum, stages the step's column
// keys in shared memory by word, each key by the lane of its word (step_columns: a column run's
// keys in earlier words are those words' bits), at offsets from a warp sum of popcounts, either a
// lane walking its own bits or the warp placing one word at a time (stage_column_bits, whichever
// the step's words make cheaper), and copies the step's columns out with coalesced stores.

#include <cstdint>

#include "cuda/common/math.h"
#include "cuda/common/warp.cuh"
#include "cuda/runtime/plan_view.cuh"
#include "methods/vec/vec.h"
#include "methods/vec/vec_select.cuh"

namespace mmsparse::cuda::vec_kernels {

constexpr int kRunWarps = 4;
constexpr int kRunThreads = kRunWarps * kWarpSize;
// Resident CTAs per SM the run kernels are compiled for: 12 fit at 40 registers a thread and the
// write pass's 17 KB stage (plus 1 KB the driver reserves) in the 228 KB of an H100 SM. Without
// the bound ptxas gave the write pass 48 registers, 10 CTAs, and the pass is latency-bound.
constexpr int kRunCtasPerSm = 12;
constexpr int kWordKeys = 32;
constexpr int kRunStepKeys = kWarpSize * kWordKeys;
constexpr int kMinSpanKeys = static_cast<int>(detail::kVecMinSpanKeys);
// The column keys of the runs ending in one step: the step's keys, plus a column run's keys before
// the step (shorter than kMinSpanKeys).
constexpr int kStageKeys = kRunStepKeys + kMinSpanKeys;
// A step's staged column keys (at most kRunStepKeys, the step's) and span records (at most one per
// run end) share one 32-bit warp sum: the columns in the low kStagedCountBits bits.
constexpr int kStagedCountBits = 16;
constexpr int32_t kStagedCountMask = (1 << kStagedCountBits) - 1;
static_assert(kRunStepKeys <= kStagedCountMask && kRunStepKeys < (1 << (31 - kStagedCountBits)),
              "a step's column and span counts fit their bits");

// The bits of keys [begin, end) within the word of keys [base, base + kWordKeys).
__device__ inline uint32_t word_range_bits(int32_t begin, int32_t end, int32_t base) {
  const int32_t from = max(begin, base) - base;
  const int32_t to = min(end, base + kWordKeys) - base;
  if (from >= to) return 0u;
  const uint32_t below_to = to == kWordKeys ? ~0u : (1u << to) - 1u;
  return below_to & ~((1u << from) - 1u);
}

// One plan tile's keys as bit words: its blocks' kept candidates (ORed from their masks, only the
// key tiles the score pass wrote for every one of them) with the tile's sinks and diagonal.
// Causal, a later block's mask range reaches further than the first's, but only into keys of the
// tile's diagonal (a block's candidates end where its own diagonal begins), which the diagonal's
// bits hold already; non-causal, every block's range is the same. So the first block's range,
// which is the tile's (rows_keys over the tile's rows), reads written masks only and misses
// nothing.
struct TileWords {
  const uint16_t* masks;  // [blocks, mask_pitch] the keep masks of the tile's blocks
  int32_t mask_pitch;
  int32_t blocks;                // pooled blocks in the tile
  BlockKeys keys;                // the tile's: sinks, its rows' diagonal, candidates
  int32_t mask_begin, mask_end;  // key tiles of the masks the tile reads
  int32_t words;                 // words holding its keys (none from words * kWordKeys on)

  __device__ uint32_t word(int32_t index) const {
    if (index >= words) return 0u;
    const int32_t base = index * kWordKeys;
    uint32_t bits = word_range_bits(0, keys.sink_end, base) |
                    word_range_bits(keys.diagonal_begin, keys.diagonal_end, base);
    const int32_t tile = 2 * index;
    const bool low = tile >= mask_begin && tile < mask_end;
    const bool high = tile + 1 >= mask_begin && tile + 1 < mask_end;
    if (!low && !high) return bits;
    for (int32_t block = 0; block < blocks; ++block) {
      const uint16_t* row = masks + static_cast<int64_t>(block) * mask_pitch;
      if (low && high) {
        // Both tiles in one 4-byte load: rows start at even tiles (mask_pitch is even), the low
        // tile in the low half.
        bits |= *reinterpret_cast<const uint32_t*>(row + tile);
        continue;
      }
      if (low) bits |= row[tile];
      if (high) bits |= static_cast<uint32_t>(row[tile + 1]) << kTileKeys;
    }
    return bits;
  }
  // Whether the run of keys [start, last] is a span.
  __device__ bool is_span(int32_t start, int32_t last) const {
    const bool anchored =
        start < keys.sink_end || (keys.diagonal_begin < keys.diagonal_end &&
                                  start < keys.diagonal_end && last >= keys.diagonal_begin);
    return anchored || last - start + 1 >= kMinSpanKeys;
  }
};

// Plan tile `tile` (slot-major: tile / p.tiles is its head slot).
__device__ inline TileWords tile_words(const VecKernelParams& p, int64_t tile) {
  const auto slot = tile / p.tiles;
  const auto first_block = static_cast<int32_t>(tile % p.tiles) * p.tile_blocks;
  TileWords words;
  words.blocks = min(p.tile_blocks, p.blocks - first_block);
  words.mask_pitch = p.mask_pitch;
  words.masks = p.masks + (slot * p.blocks + first_block) * p.mask_pitch;
  const int64_t row_begin = static_cast<int64_t>(first_block) * p.pooling;
  words.keys = rows_keys(p, row_begin,
                         min(static_cast<int64_t>(p.q_len),
                             row_begin + static_cast<int64_t>(words.blocks) * p.pooling));
  words.mask_begin = words.keys.sink_end / kTileKeys;
  words.mask_end = words.keys.candidate_end > words.keys.sink_end
                       ? static_cast<int32_t>(ceil_div(words.keys.candidate_end, kTileKeys))
                       : words.mask_begin;
  // Causal: no key past the sinks and the diagonal; otherwise any key.
  const int32_t key_end =
      p.causal != 0 ? max(words.keys.sink_end, words.keys.diagonal_end) : p.kv_len;
  words.words = static_cast<int32_t>(ceil_div(key_end, kWordKeys));
  return words;
}

// The runs of one lane's word in a step: starts and ends as bits, and the start of a run begun
// before the word.
struct WordRuns {
  uint32_t starts, ends;
  int32_t base;          // the word's first key
  int32_t start_before;  // the latest run start before the word (-1: none)

  // The first key of the run whose last key is bit `end` of the word.
  __device__ int32_t run_start(int end) const {
    const uint32_t below = starts & (end == kWordKeys - 1 ? ~0u : (2u << end) - 1u);
    return below != 0u ? base + kWordKeys - 1 - __clz(below) : start_before;
  }
};

// Bits [from, to] of a word (0 <= from, to < kWordKeys; none when from > to).
__device__ inline uint32_t bits_between(int from, int to) {
  if (from > to) return 0u;
  const uint32_t through_to = to == kWordKeys - 1 ? ~0u : (2u << to) - 1u;
  return through_to & ~((1u << from) - 1u);
}

// The runs ending in one lane's word, classified without visiting them one by one. A run that
// starts and ends in the word holds at most kWordKeys < kMinSpanKeys keys, so it is a span exactly
// when it holds a sink or diagonal key (anchored); since the sinks and the diagonal are intervals
// of kept keys, each lies within one run, found from the run start at or before its first key and
// the run end at or after its last. Only the word's first run to end can have started before the
// word (the "carried" run): it is classified by TileWords::is_span.
struct WordClasses {
  uint32_t span_ends = 0u;  // end bits of the in-word runs that are spans (anchored)
  uint32_t columns = 0u;    // bits of the in-word runs that are columns
  bool carried = false;     // the first run to end started before the word
  bool carried_span = false;
  int32_t carried_start = 0, carried_last = 0;  // its keys
  int32_t spans = 0, column_keys = 0;           // span records and column keys ending in the word
};

// The in-word run of `in_word` holding keys [begin, end) of the word's keys, as bits (none when
// the interval misses the word or lies in a run crossing its edges).
__device__ inline uint32_t anchored_run(const WordRuns& runs, uint32_t in_word, int32_t begin,
                                        int32_t end) {
  const uint32_t interval = word_range_bits(begin, end, runs.base);
  if ((interval & in_word) == 0u) return 0u;
  const int low = __ffs(static_cast<int>(interval)) - 1;
  const int high = kWordKeys - 1 - __clz(interval);
  const int run_start = kWordKeys - 1 - __clz(runs.starts & bits_between(0, low));
  const int run_end = __ffs(static_cast<int>(runs.ends & bits_between(high, kWordKeys - 1))) - 1;
  return bits_between(run_start, run_end);
}

__device__ inline WordClasses classify_word(const TileWords& tile, const WordRuns& runs,
                                            uint32_t word) {
  WordClasses classes;
  if (runs.ends == 0u) return classes;
  const int first_end = __ffs(static_cast<int>(runs.ends)) - 1;
  const int last_end = kWordKeys - 1 - __clz(runs.ends);
  classes.carried = (runs.starts & bits_between(0, first_end)) == 0u;
  uint32_t in_word = word & bits_between(0, last_end);
  if (classes.carried) {
    in_word &= ~bits_between(0, first_end);
    classes.carried_start = runs.start_before;
    classes.carried_last = runs.base + first_end;
    classes.carried_span = tile.is_span(classes.carried_start, classes.carried_last);
  }
  const uint32_t anchored =
      anchored_run(runs, in_word, 0, tile.keys.sink_end) |
      anchored_run(runs, in_word, tile.keys.diagonal_begin, tile.keys.diagonal_end);
  classes.span_ends = runs.ends & anchored;
  classes.columns = in_word & ~anchored;
  classes.spans = __popc(classes.span_ends) + (classes.carried && classes.carried_span);
  classes.column_keys = __popc(classes.columns);
  if (classes.carried && !classes.carried_span) {
    classes.column_keys += classes.carried_last - classes.carried_start + 1;
  }
  return classes;
}

// Writes the span records of the runs ending in this lane's word, ascending, at `span_at`: the
// carried run first (its keys are the lowest).
__device__ inline void write_word_spans(const VecKernelParams& p, const WordRuns& runs,
                                        const WordClasses& classes, int64_t span_at) {
  if (classes.carried && classes.carried_span) {
    p.spans[span_at++] = {classes.carried_start, classes.carried_last + 1, 1, 1};
  }
  for (uint32_t ends = classes.span_ends; ends != 0u; ends &= ends - 1u) {
    const int end = __ffs(static_cast<int>(ends)) - 1;
    p.spans[span_at++] = {runs.run_start(end), runs.base + end + 1, 1, 1};
  }
}

// The column keys a step writes are those of the column runs ending in it. By word, a lane holds
// the bits of its own word that belong to them: its in-word column runs, the head of its carried
// run when that is a column, and its trailing bits (a run going on past the word) when that run
// ends in the step as a column. Such a run ends at the first end of the next lane with an end
// (the words between are all kept), where it is that lane's carried run. Keys of a column run
// ending in the step that lie before the step (fewer than kMinSpanKeys: only the step's first
// lane with an end can have them) are the step's first columns. So every key is staged by the
// lane of its word and the step's columns come out in key order, as the count pass counted them.
struct StepColumns {
  uint32_t bits = 0u;       // this lane's word's column keys written in this step
  int32_t before_step = 0;  // column keys before the step, from the warp's first carried run
};

__device__ inline StepColumns step_columns(const WordRuns& runs, const WordClasses& classes,
                                           uint32_t word, int32_t step_base, int lane) {
  const bool carried_column = classes.carried && !classes.carried_span;
  StepColumns columns;
  columns.bits = classes.columns;
  uint32_t trailing = word;
  if (runs.ends != 0u) {
    const int first_end = __ffs(static_cast<int>(runs.ends)) - 1;
    const int last_end = kWordKeys - 1 - __clz(runs.ends);
    if (carried_column) columns.bits |= bits_between(0, first_end);
    trailing &= ~bits_between(0, last_end);
  }
  const uint32_t lanes_ending = __ballot_sync(kFullWarpMask, runs.ends != 0u);
  const uint32_t later = lanes_ending & ~bits_between(0, lane);
  const int next = later != 0u ? __ffs(static_cast<int>(later)) - 1 : lane;
  const bool trailing_column = __shfl_sync(kFullWarpMask, carried_column, next) && later != 0u;
  if (trailing_column) columns.bits |= trailing;
  const int first = __ffs(static_cast<int>(lanes_ending)) - 1;
  const int32_t before =
      carried_column && classes.carried_start < step_base ? step_base - classes.carried_start : 0;
  columns.before_step = __shfl_sync(kFullWarpMask, before, first);
  return columns;
}

// The shared-memory address of `stage`, held in a register. Taken through a shuffle, which ptxas
// does not recompute: from the pointer itself it rebuilds the stage's shared-window address
// before every predicated store (five instructions each).
__device__ inline uint32_t stage_address(const int32_t* stage) {
  return __shfl_sync(kFullWarpMask, static_cast<uint32_t>(__cvta_generic_to_shared(stage)), 0);
}

constexpr uint32_t kStageKeyBytes = sizeof(int32_t);

// Stores `value` at the shared-memory address `address` (of a stage from stage_address).
__device__ inline void store_shared(uint32_t address, int32_t value) {
  asm volatile("st.shared.b32 [%0], %1;" ::"r"(address), "r"(value) : "memory");
}

// Issued instructions (sm_90a SASS) of the two ways to stage a step's column bits: the warp
// placing one word costs 14 per word holding columns, a lane walking all its word's bits with
// predicated stores about 4 per bit. (A lane visiting only its set bits, the old loop, cost ~10
// per key as often as the fullest word has keys: 20-32 on ragged selections.)
constexpr int kWarpStagingCostPerWord = 14;
constexpr int kLaneStagingCostPerBit = 4;
constexpr int kLaneStagingCost = kLaneStagingCostPerBit * kWordKeys;

// Stages each lane's column bits `bits` (word `lane` of the step from key `step_base`) at its
// offset `at` of the warp's stage, ascending. With few words holding columns the warp places one
// word at a time (each lane stores the key of its bit, at the word's offset plus the bits below
// it); otherwise every lane walks its 32 bits at once, storing where a bit is set. The stage is
// the same either way.
__device__ inline void stage_column_bits(uint32_t bits, int32_t at, int32_t step_base, int lane,
                                         int32_t* stage) {  // stage: [kStageKeys]
  const uint32_t words = __ballot_sync(kFullWarpMask, bits != 0u);
  if (__popc(words) * kWarpStagingCostPerWord < kLaneStagingCost) {
    const uint32_t lane_bit = 1u << lane;
    const uint32_t lanes_below = lane_bit - 1u;
    const uint32_t address = stage_address(stage);
    for (uint32_t left = words; left != 0u; left &= left - 1u) {
      const int source = __ffs(static_cast<int>(left)) - 1;
      const uint32_t source_bits = __shfl_sync(kFullWarpMask, bits, source);
      const int32_t slot =
          __shfl_sync(kFullWarpMask, at, source) + __popc(source_bits & lanes_below);
      const int32_t key = step_base + source * kWordKeys + lane;
      if ((source_bits & lane_bit) != 0u) {
        store_shared(address + static_cast<uint32_t>(slot) * kStageKeyBytes, key);
      }
    }
    return;
  }
  const int32_t base = step_base + lane * kWordKeys;
  uint32_t address = stage_address(stage) + static_cast<uint32_t>(at) * kStageKeyBytes;
#pragma unroll
  for (int bit = 0; bit < kWordKeys; ++bit) {
    const bool column = ((bits >> bit) & 1u) != 0u;
    if (column) store_shared(address, base + bit);
    address += column ? kStageKeyBytes : 0u;
  }
}

// The plan tile (slot-major index) that CTA `order` of the launch serves: positions from the last
// to the first, head slots fastest. Causal, a tile's keys grow with its position, so the longest
// tiles start first and the short ones fill the last wave instead of the long ones trailing it.
__device__ inline int64_t tile_in_launch_order(const VecKernelParams& p, int64_t order,
                                               int64_t tiles) {
  const int64_t slots = tiles / p.tiles;
  return order % slots * p.tiles + (p.tiles - 1 - order / slots);
}

// A tile's steps are cut into kRunSegments segments of consecutive steps, one warp each, and a CTA
// serves one tile: a long tile's sequential walk is a quarter as long, and a CTA's warps end
// together, so a finished CTA's slot takes the next tile instead of idling behind its longest warp.
constexpr int kRunSegments = kRunWarps;

// What a segment's walk needs from the segments before it and where its records go among its
// tile's: the count pass stores it, the write pass starts from it.
struct RunSegment {
  int32_t start_before;   // the latest run start before the segment's first key (-1: none)
  int32_t span_offset;    // span records of the tile's earlier segments
  int32_t column_offset;  // column keys of the tile's earlier segments
};

// The words [begin, end) of segment `segment` of a tile: whole steps, as even as kRunSegments
// allows (the later segments of a tile of few steps are empty).
struct SegmentWords {
  int32_t begin, end;
};

__device__ inline SegmentWords segment_words(const TileWords& words, int segment) {
  const auto steps = static_cast<int32_t>(ceil_div(words.words, kWarpSize));
  const auto per_segment = static_cast<int32_t>(ceil_div(steps, kRunSegments));
  const int32_t first_step = min(steps, segment * per_segment);
  const int32_t end_step = min(steps, first_step + per_segment);
  return {first_step * kWarpSize, min(words.words, end_step * kWarpSize)};
}

// One warp's walk over its segment: the run state carried from step to step, and either the
// segment's counts or the cursors of its next records.
struct SegmentWalk {
  int32_t start_carry = -1;  // the latest run start of the steps before (-1: none known)
  // Counting: the last key of the segment's first run to end, when that run began before the
  // segment (its start is the earlier segments', so the count pass classifies it after the walks).
  int32_t deferred_last = -1;
  // Counting, this lane's: each at most the tile's keys (kv_len, int32).
  int32_t spans = 0, columns = 0, kept = 0;
  int64_t span_cursor = 0, column_cursor = 0;  // writing
};

// Writes (kWrite) or counts the span records and column keys of the runs ending in `segment`'s
// steps, ascending; `stage` ([kStageKeys], writing only) is the warp's.
template <bool kWrite>
__device__ inline void walk_segment(const VecKernelParams& p, const TileWords& words,
                                    SegmentWords segment, int lane, int32_t* stage,
                                    SegmentWalk& walk) {
  if (segment.begin >= segment.end) return;  // warp-uniform
  // The previous step's last key kept: for a segment after the first, the key before it.
  uint32_t last_bit_carry =
      segment.begin > 0 ? words.word(segment.begin - 1) >> (kWordKeys - 1) : 0u;
  uint32_t next = words.word(segment.begin + lane);
  for (int32_t first_word = segment.begin; first_word < segment.end; first_word += kWarpSize) {
    const uint32_t word = next;
    next = words.word(first_word + kWarpSize + lane);
    // The words' edge keys as ballots (lane i's bit is word i's): a word's neighbours' edge bits
    // by shifts, the step's first word after the previous step's last key, its last word before
    // the next step's first (in the next segment for the segment's last step).
    const uint32_t last_keys = __ballot_sync(kFullWarpMask, word >> (kWordKeys - 1));
    const uint32_t first_keys = __ballot_sync(kFullWarpMask, word & 1u);
    const uint32_t next_step_first = __ballot_sync(kFullWarpMask, next & 1u) & 1u;
    const uint32_t previous_last = ((last_keys << 1) | last_bit_carry) >> lane & 1u;
    const uint32_t next_first =
        ((first_keys >> 1) | (next_step_first << (kWarpSize - 1))) >> lane & 1u;
    WordRuns runs;
    runs.base = (first_word + lane) * kWordKeys;
    runs.starts = word & ~((word << 1) | previous_last);
    runs.ends = word & ~((word >> 1) | (next_first << (kWordKeys - 1)));
    const int32_t last_start = runs.base + kWordKeys - 1 - __clz(runs.starts);  // with starts
    // Lanes hold ascending words, so the latest run start before a lane's word is the last start
    // of the nearest earlier lane with one, else the steps before's: a ballot and a shuffle.
    const uint32_t lanes_with_starts = __ballot_sync(kFullWarpMask, runs.starts != 0u);
    const uint32_t earlier = lanes_with_starts & ((1u << lane) - 1u);
    const int32_t earlier_start =
        __shfl_sync(kFullWarpMask, last_start, earlier != 0u ? kWarpSize - 1 - __clz(earlier) : 0);
    runs.start_before = earlier != 0u ? earlier_start : walk.start_carry;
    const int32_t step_last_start =
        __shfl_sync(kFullWarpMask, last_start,
                    lanes_with_starts != 0u ? kWarpSize - 1 - __clz(lanes_with_starts) : 0);
    if (lanes_with_starts != 0u) walk.start_carry = step_last_start;
    last_bit_carry = last_keys >> (kWarpSize - 1);
    if (!kWrite) walk.kept += __popc(word);
    if (__ballot_sync(kFullWarpMask, runs.ends != 0u) == 0u) continue;  // runs go on past the step
    const WordClasses classes = classify_word(words, runs, word);
    if (!kWrite) {
      // Only a segment after the first can have a carried run of unknown start (-1), once: the
      // count pass adds it when the earlier segments' starts are known.
      const bool deferred = classes.carried && runs.start_before < 0;
      if (deferred) walk.deferred_last = classes.carried_last;
      walk.spans += classes.spans - (deferred && classes.carried_span ? 1 : 0);
      walk.columns += classes.column_keys;
      if (deferred && !classes.carried_span) {
        walk.columns -= classes.carried_last - classes.carried_start + 1;
      }
      continue;
    }
    const int32_t lane_spans = classes.spans;
    const int32_t step_base = first_word * kWordKeys;
    const StepColumns staged = step_columns(runs, classes, word, step_base, lane);
    const int32_t lane_staged = __popc(staged.bits);
    // Span records and staged columns summed in one scan, the columns in the low bits.
    const int32_t counts_through = warp_inclusive_sum(lane_spans << kStagedCountBits | lane_staged);
    const int32_t spans_through = counts_through >> kStagedCountBits;
    const int32_t staged_through = staged.before_step + (counts_through & kStagedCountMask);
    write_word_spans(p, runs, classes, walk.span_cursor + spans_through - lane_spans);
#pragma unroll
    for (int32_t i = lane; i < kMinSpanKeys; i += kWarpSize) {
      if (i < staged.before_step) stage[i] = step_base - staged.before_step + i;
    }
    stage_column_bits(staged.bits, staged_through - lane_staged, step_base, lane, stage);
    __syncwarp();
    const int32_t step_counts = __shfl_sync(kFullWarpMask, counts_through, kWarpSize - 1);
    const int32_t step_columns = staged.before_step + (step_counts & kStagedCountMask);
    for (int32_t i = lane; i < step_columns; i += kWarpSize)
      p.columns[walk.column_cursor + i] = stage[i];
    __syncwarp();  // the next step's runs overwrite the stage
    walk.column_cursor += step_columns;
    walk.span_cursor += step_counts >> kStagedCountBits;
  }
}

// One segment's walk as the count pass's fix-up reads it.
struct SegmentSummary {
  int64_t spans, columns, kept;
  int32_t last_start;     // its latest run start (-1: none)
  int32_t deferred_last;  // SegmentWalk::deferred_last
};

// Joins a tile's segments in key order: each one's start before it (the latest start of the
// segments before), its deferred run classified from that start (the run holds every key from it
// to the segment's edge), its records' offsets in the tile, and the tile's totals.
__device__ inline void join_segments(const VecKernelParams& p, const TileWords& words,
                                     const SegmentSummary* summaries,  // [kRunSegments]
                                     RunSegment* segments,             // [kRunSegments]
                                     int64_t tile) {
  RecordCounts total{0, 0};
  int64_t kept = 0;
  int32_t start_before = -1;
  for (int segment = 0; segment < kRunSegments; ++segment) {
    const SegmentSummary& summary = summaries[segment];
    segments[segment] = {start_before, static_cast<int32_t>(total.spans),
                         static_cast<int32_t>(total.columns)};
    RecordCounts own{summary.columns, summary.spans};
    if (summary.deferred_last >= 0) {
      if (words.is_span(start_before, summary.deferred_last)) {
        own.spans += 1;
      } else {
        own.columns += summary.deferred_last - start_before + 1;
      }
    }
    total = total + own;
    kept += summary.kept;
    if (summary.last_start >= 0) start_before = summary.last_start;
  }
  p.counts[tile] = total;
  p.tile_keys[tile] = static_cast<uint32_t>(kept);
}

// Counts the span records, column keys and kept keys of the tile that CTA blockIdx.x serves
// (tile_in_launch_order), and stores its segments' starts and offsets (segments: [tiles,
// kRunSegments]) for the write pass.
__global__ void __launch_bounds__(kRunThreads, kRunCtasPerSm)
    count_runs_kernel(const VecKernelParams p, RunSegment* segments, int64_t tiles) {
  __shared__ SegmentSummary summaries[kRunSegments];
  const int lane = static_cast<int>(threadIdx.x) % kWarpSize;
  const int warp = static_cast<int>(threadIdx.x) / kWarpSize;
  const int64_t tile = tile_in_launch_order(p, blockIdx.x, tiles);
  const TileWords words = tile_words(p, tile);
  SegmentWalk walk;
  walk_segment<false>(p, words, segment_words(words, warp), lane, nullptr, walk);
  const int64_t spans = warp_sum(static_cast<int64_t>(walk.spans));
  const int64_t columns = warp_sum(static_cast<int64_t>(walk.columns));
  const int64_t kept = warp_sum(static_cast<int64_t>(walk.kept));
  const int32_t deferred_last = __reduce_max_sync(kFullWarpMask, walk.deferred_last);
  if (lane == 0) summaries[warp] = {spans, columns, kept, walk.start_carry, deferred_last};
  __syncthreads();
  if (threadIdx.x == 0) join_segments(p, words, summaries, segments + tile * kRunSegments, tile);
}

// Writes the spans and columns of the tile that CTA blockIdx.x serves at its offsets, each warp
// its segment's from the count pass's start and offsets (segments: [tiles, kRunSegments]).
__global__ void __launch_bounds__(kRunThreads, kRunCtasPerSm)
    write_runs_kernel(const VecKernelParams p, const RunSegment* segments, int64_t tiles) {
  __shared__ int32_t stages[kRunWarps][kStageKeys];
  const int lane = static_cast<int>(threadIdx.x) % kWarpSize;
  const int warp = static_cast<int>(threadIdx.x) / kWarpSize;
  const int64_t tile = tile_in_launch_order(p, blockIdx.x, tiles);
  const TileWords words = tile_words(p, tile);
  const RunSegment segment = segments[tile * kRunSegments + warp];
  SegmentWalk walk;
  walk.start_carry = segment.start_before;
  walk.span_cursor = p.offsets[tile].spans + segment.span_offset;
  walk.column_cursor = p.offsets[tile].columns + segment.column_offset;
  walk_segment<true>(p, words, segment_words(words, warp), lane, stages[warp], walk);
}

}  // namespace mmsparse::cuda::vec_kernels
