#pragma once
// A tile's keys as bitmaps, for the conversions whose tiles read keys no closed form lists
// (methods/vertical_slash/key_spaces_device.cu: 2D-boundary vertical-slash;
// methods/grid/grid_group_tiles_device.cu: Q/2D-boundary grid).
// A block marks the keys its tile reads in two shared-memory bitmaps over original positions, span
// keys and column keys, one window of kWindowKeys keys at a time, and reads the plan records off
// them: the maximal runs of span keys are the merged spans (TileKeys::write merges spans that
// overlap or touch, which leaves exactly the maximal runs of their union), the column keys outside
// every span are the columns, both ascending. So the records are TileKeys's whatever was marked,
// and marking a key twice is harmless. A block-wide scan ranks the run starts, run ends and
// columns of each window.

#include <cub/block/block_scan.cuh>

#include <cstdint>

#include "methods/estimate/index_kernels.h"
#include "cuda/runtime/plan_view.cuh"

namespace mmsparse::cuda::index::bitmaps {

inline constexpr int kThreads = 256;
inline constexpr int kWordBits = 32;
// Keys per bitmap window: two bitmaps of 16 KB; a 128K-token layer takes one window per tile.
inline constexpr int64_t kWindowKeys = int64_t{1} << 17;
inline constexpr int kWindowWords = static_cast<int>(kWindowKeys / kWordBits);
inline constexpr int kWordsPerThread = kWindowWords / kThreads;
static_assert(kWindowWords % kThreads == 0);

// Counts of a tile's records, summed over the block by a scan.
struct RecordCounts {
  int starts = 0;   // span runs beginning
  int ends = 0;     // span runs ending
  int columns = 0;  // column keys outside the spans
  int keys = 0;     // span keys + columns: the schedule's sort key
};

struct SumCounts {
  __device__ RecordCounts operator()(const RecordCounts& a, const RecordCounts& b) const {
    return {a.starts + b.starts, a.ends + b.ends, a.columns + b.columns, a.keys + b.keys};
  }
};

struct Bitmaps {
  uint32_t spans[kWindowWords];
  uint32_t columns[kWindowWords];
};

using BlockScan = cub::BlockScan<RecordCounts, kThreads>;

// The block's shared memory for one tile.
struct TileStorage {
  Bitmaps bits;
  typename BlockScan::TempStorage scan;
};

// The window [begin, begin + kWindowKeys) of original keys.
struct Window {
  int64_t begin;
  Bitmaps* bits;

  // Sets the bits of the original keys [first, last) that lie in the window.
  __device__ void mark(uint32_t* words, int64_t first, int64_t last) const {
    first = first > begin ? first : begin;
    last = last < begin + kWindowKeys ? last : begin + kWindowKeys;
    while (first < last) {
      const int64_t local = first - begin;
      const int bit = static_cast<int>(local % kWordBits);
      const int64_t room = kWordBits - bit;
      const int count = static_cast<int>(last - first < room ? last - first : room);
      const uint32_t ones = count == kWordBits ? ~0u : (1u << count) - 1u;
      atomicOr(words + local / kWordBits, ones << bit);
      first += count;
    }
  }
  __device__ void mark_column(int64_t key) const { mark(bits->columns, key, key + 1); }
  __device__ bool past(int64_t key) const { return key >= begin + kWindowKeys; }
};

// The compact keys [begin, end) of `space` as span keys, one piece per range they cross.
__device__ inline void mark_compact_span(const KeySpaceView& space, int64_t begin, int64_t end,
                                         const Window& window) {
  if (space.ranges == 0) {
    window.mark(window.bits->spans, begin, end);
    return;
  }
  for (int32_t r = space.range_of(begin); begin < end; ++r) {
    const int64_t original = space.begins[r] + begin - space.prefix[r];
    if (window.past(original)) return;  // ranges ascend: the rest lies beyond the window
    const int64_t piece_end = end < space.prefix[r + 1] ? end : space.prefix[r + 1];
    window.mark(window.bits->spans, original, original + piece_end - begin);
    begin = piece_end;
  }
}

// The tile's records: for each window up to key_end (every key read lies below it), the block
// clears the bitmaps, calls mark(window) (every thread; marks with atomicOr) and reads the runs
// and columns off them, writing them to `spans` and `columns` when kFill. Returns the totals (in
// every thread).
template <bool kFill, class Mark>
__device__ RecordCounts read_tile_records(TileStorage& storage, int64_t key_end, const Mark& mark,
                                          SpanRecord* spans, int32_t* columns) {
  Bitmaps& bits = storage.bits;
  RecordCounts total;
  uint32_t carry = 0;  // whether the key before the window is a span key
  const int first_word = static_cast<int>(threadIdx.x) * kWordsPerThread;
  // The windows cover key_end itself, which no span holds: every run's end is seen.
  for (int64_t begin = 0; begin <= key_end; begin += kWindowKeys) {
    const Window window{begin, &bits};
    const int64_t window_keys =
        key_end - begin + 1 < kWindowKeys ? key_end - begin + 1 : kWindowKeys;
    const int words = static_cast<int>((window_keys + kWordBits - 1) / kWordBits);
    for (int w = static_cast<int>(threadIdx.x); w < words; w += kThreads) {
      bits.spans[w] = 0;
      bits.columns[w] = 0;
    }
    __syncthreads();
    mark(window);
    __syncthreads();

    // Run starts are span bits whose previous key is not one, run ends the first key after a run.
    const auto previous = [&](int w) -> uint32_t {
      return w == 0 ? carry : bits.spans[w - 1] >> (kWordBits - 1);
    };
    RecordCounts mine;
    for (int w = first_word; w < first_word + kWordsPerThread && w < words; ++w) {
      const uint32_t span = bits.spans[w];
      const uint32_t shifted = (span << 1) | previous(w);
      const uint32_t column = bits.columns[w] & ~span;
      mine.starts += __popc(span & ~shifted);
      mine.ends += __popc(~span & shifted);
      mine.columns += __popc(column);
      mine.keys += __popc(span) + __popc(column);
    }
    RecordCounts before;
    RecordCounts window_total;
    BlockScan(storage.scan).ExclusiveScan(mine, before, RecordCounts{}, SumCounts{}, window_total);
    if constexpr (kFill) {
      int64_t start = total.starts + before.starts;
      int64_t end = total.ends + before.ends;
      int64_t column = total.columns + before.columns;
      for (int w = first_word; w < first_word + kWordsPerThread && w < words; ++w) {
        const uint32_t span = bits.spans[w];
        const uint32_t shifted = (span << 1) | previous(w);
        const int64_t word_key = begin + static_cast<int64_t>(w) * kWordBits;
        for (uint32_t b = span & ~shifted; b != 0; b &= b - 1) {
          spans[start].step = 1;
          spans[start].width = 1;
          spans[start++].begin = static_cast<int32_t>(word_key + __ffs(b) - 1);
        }
        for (uint32_t b = ~span & shifted; b != 0; b &= b - 1) {
          spans[end++].end = static_cast<int32_t>(word_key + __ffs(b) - 1);
        }
        for (uint32_t b = bits.columns[w] & ~span; b != 0; b &= b - 1) {
          columns[column++] = static_cast<int32_t>(word_key + __ffs(b) - 1);
        }
      }
    }
    total = SumCounts{}(total, window_total);
    // A window short of kWindowWords holds key_end: the last one.
    carry = words == kWindowWords ? bits.spans[kWindowWords - 1] >> (kWordBits - 1) : 0u;
    __syncthreads();  // the window is read before the next one clears it
  }
  return total;
}

}  // namespace mmsparse::cuda::index::bitmaps
