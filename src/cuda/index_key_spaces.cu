// 2D-boundary tiles on the GPU (MMInference Alg. 3): a tile's keys from its group's lines in every
// key space, exactly as the host makes them (VerticalSlashPattern::add_tile_keys in each space,
// TileKeys::write across the spaces). In a space with compact frontiers [lo, hi] every selected
// diagonal d < hi is the compact band [max(0, lo - 1 - d), hi - d): read as columns, key by key,
// when the space is compact and the band narrower than kNarrowBandKeys, else as a span split at the
// space's ranges; every selected vertical < hi is a column.
//
// A block per tile marks those keys in two bitmaps over original positions, span keys and column
// keys, a window of kWindowKeys keys at a time, and reads the records off them: the maximal runs of
// span keys are the merged spans (TileKeys::write merges spans that overlap or touch, which leaves
// exactly the maximal runs of their union), the column keys outside every span are the columns,
// both ascending. The sets are TileKeys's, so the records are the host's, whatever the selected
// lines. A block-wide scan ranks the run starts, run ends and columns of each window.

#include <cub/block/block_scan.cuh>

#include <cstdint>

#include "cuda/cuda_check.h"
#include "cuda/index_kernels.h"
#include "cuda/index_lines.cuh"
#include "patterns/vertical_slash.h"

namespace mmsparse::cuda::index {
namespace {

constexpr int kThreads = 256;
constexpr int kWordBits = 32;
// Keys per bitmap window: two bitmaps of 16 KB; a 128K-token layer takes one window per tile.
constexpr int64_t kWindowKeys = int64_t{1} << 17;
constexpr int kWindowWords = static_cast<int>(kWindowKeys / kWordBits);
constexpr int kWordsPerThread = kWindowWords / kThreads;
static_assert(kWindowWords % kThreads == 0);

// Counts of one window's records, summed over the block by a scan.
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
  __device__ bool past(int64_t key) const { return key >= begin + kWindowKeys; }
};

// The compact keys [begin, end) of `space` as span keys, one piece per range they cross.
__device__ void mark_compact_span(const KeySpaceView& space, int64_t begin, int64_t end,
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

// One space's keys of the tile (VerticalSlashPattern::add_tile_keys with one run of frontiers),
// the block's threads taking lines in turn.
__device__ void mark_space(const KeySpaceView& space, const SpaceFrontiers& rows,
                           const Lines& lines, const Window& window) {
  if (rows.high < 1) return;
  const int32_t below = lower_bound(lines.slashes, lines.slash_count, rows.high);
  for (int32_t j = static_cast<int32_t>(threadIdx.x); j < below; j += kThreads) {
    const int64_t diagonal = lines.slashes[j];
    const int64_t begin = rows.low - 1 - diagonal > 0 ? rows.low - 1 - diagonal : 0;
    const int64_t end = rows.high - diagonal;
    if (space.compact && end - begin < detail::kNarrowBandKeys) {
      for (int64_t key = begin; key < end; ++key) {
        const int64_t original = space.original(key);
        window.mark(window.bits->columns, original, original + 1);
      }
    } else {
      mark_compact_span(space, begin, end, window);
    }
  }
  const int32_t visible = lower_bound(lines.verticals, lines.vertical_count, rows.high);
  for (int32_t j = static_cast<int32_t>(threadIdx.x); j < visible; j += kThreads) {
    const int64_t original = space.original(lines.verticals[j]);
    window.mark(window.bits->columns, original, original + 1);
  }
}

// Where a tile's records go (fill) or its counts (count).
struct TileTargets {
  int64_t* span_counts;    // count: [tiles]
  int64_t* column_counts;  // count: [tiles]
  FillTargets fill;        // fill
};

template <bool kFill>
__global__ void __launch_bounds__(kThreads)
    key_space_tiles_kernel(const KeySpaceTiles geometry, const SelectedLines selected,
                           const TileTargets targets) {
  using BlockScan = cub::BlockScan<RecordCounts, kThreads>;
  __shared__ Bitmaps bits;
  __shared__ typename BlockScan::TempStorage scan_storage;
  const int64_t index = blockIdx.x;
  const int64_t slot = index / geometry.tiles_per_head;
  const int64_t position = index % geometry.tiles_per_head;
  const VerticalSlashTile rows = geometry.tiles[position];
  const SpaceFrontiers* frontiers = geometry.frontiers + position * geometry.spaces;

  // Keys read lie below key_end: each space's last visible compact key is its largest original one.
  int64_t key_end = 0;
  for (int32_t s = 0; s < geometry.spaces; ++s) {
    if (frontiers[s].high < 1) continue;
    const int64_t last = geometry.space[s].original(frontiers[s].high - 1) + 1;
    key_end = last > key_end ? last : key_end;
  }

  SpanRecord* spans = nullptr;
  int32_t* columns = nullptr;
  if constexpr (kFill) {
    spans = targets.fill.sections.spans + targets.fill.span_offsets[index];
    columns = targets.fill.sections.columns + targets.fill.column_offsets[index];
  }
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
    for (int32_t s = 0; s < geometry.spaces; ++s) {
      mark_space(geometry.space[s], frontiers[s],
                 selected.of(static_cast<int64_t>(rows.group) * geometry.spaces + s, slot), window);
    }
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
    BlockScan(scan_storage).ExclusiveScan(mine, before, RecordCounts{}, SumCounts{}, window_total);
    if constexpr (kFill) {
      int64_t start = total.starts + before.starts;
      int64_t end = total.ends + before.ends;
      int64_t column = total.columns + before.columns;
      for (int w = first_word; w < first_word + kWordsPerThread && w < words; ++w) {
        const uint32_t span = bits.spans[w];
        const uint32_t shifted = (span << 1) | previous(w);
        const int64_t word_key = begin + static_cast<int64_t>(w) * kWordBits;
        for (uint32_t b = span & ~shifted; b != 0; b &= b - 1) {
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

  if (threadIdx.x != 0) return;
  if constexpr (kFill) {
    targets.fill.write_tile(index, slot, position, geometry.tiles_per_head,
                            static_cast<int64_t>(gridDim.x), rows, total.starts, total.columns,
                            total.keys);
  } else {
    targets.span_counts[index] = total.starts;
    targets.column_counts[index] = total.columns;
  }
}

}  // namespace

void launch_count_key_space_tiles(const KeySpaceTiles& geometry, const SelectedLines& selected,
                                  int64_t tiles, int64_t* span_counts, int64_t* column_counts,
                                  cudaStream_t stream) {
  if (tiles == 0) return;
  key_space_tiles_kernel<false><<<static_cast<unsigned>(tiles), kThreads, 0, stream>>>(
      geometry, selected, {span_counts, column_counts, {}});
  check_launch("2D-boundary index: count tiles");
}

void launch_fill_key_space_tiles(const KeySpaceTiles& geometry, const SelectedLines& selected,
                                 int64_t tiles, const FillTargets& targets, cudaStream_t stream) {
  if (tiles == 0) return;
  key_space_tiles_kernel<true><<<static_cast<unsigned>(tiles), kThreads, 0, stream>>>(
      geometry, selected, {nullptr, nullptr, targets});
  check_launch("2D-boundary index: fill tiles");
}

}  // namespace mmsparse::cuda::index
