#pragma once
// A vertical-slash head slot's tiles (TileGeometry), which the plan arranges
// (vertical_slash_device.cu), and the writing of their records from the selected lines
// (tile_records_device.cu).

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "cuda/common/math.h"
#include "methods/estimate/index_kernels.h"
#include "methods/vertical_slash/lines_device.cuh"
#include "mmsparse/plan.h"

namespace mmsparse::cuda::index {

// The tiles of a head slot: by arithmetic in the identity order (boundary none/K), or listed
// (boundary Q: device memory, [tiles_per_head]).
struct TileGeometry {
  int64_t q_len, kv_len, tile_rows, offset, tiles_per_head;
  const VerticalSlashTile* listed;

  __host__ __device__ int64_t frontier(int64_t row) const {
    const int64_t aligned_end = row + offset + 1;
    return aligned_end < 0 ? 0 : (aligned_end > kv_len ? kv_len : aligned_end);
  }
  // The tile of consecutive query positions [first, last] at order indices [begin, end).
  __host__ __device__ VerticalSlashTile tile_of(int64_t begin, int64_t end, int64_t first,
                                                int64_t last, int32_t group) const {
    const int64_t low = frontier(first);
    return {begin, end, low > 1 ? low : 1, frontier(last), group};
  }
  __host__ __device__ VerticalSlashTile tile(int64_t t) const {
    if (listed != nullptr) return listed[t];
    const int64_t begin = t * tile_rows;
    const int64_t end = begin + tile_rows < q_len ? begin + tile_rows : q_len;
    return tile_of(begin, end, begin, end - 1, 0);
  }
};

// The identity order's tiles, by arithmetic.
inline TileGeometry tile_geometry(const PlanShape& shape) {
  return {shape.q_len,
          shape.kv_len,
          shape.tile_rows,
          shape.causal_offset(),
          ceil_div(shape.q_len, shape.tile_rows),
          nullptr};
}

// Where write_tile_records counts, scans and sorts: device arrays of one build.
struct TileRecordScratch {
  int64_t* span_counts;     // [tiles]
  int64_t* column_counts;   // [tiles]
  int64_t* span_offsets;    // [tiles]: the counts' exclusive scan
  int64_t* column_offsets;  // [tiles]
  uint32_t* keys;           // [tiles]: the schedule sort's keys (keys read per tile)
  uint32_t* sorted_keys;    // [tiles]
  int32_t* indices;         // [tiles]: the schedule sort's values (tile indices)
  void* temp;               // CUB storage, max(scan_bytes, sort_bytes)
  std::size_t scan_bytes;   // one scan's storage
  std::size_t sort_bytes;   // the sort's storage
  int sort_bits;            // the sort's key bits
};

// Each tile's spans and columns from the selected lines: counted (a warp per tile, or a block per
// tile over 2D key spaces), scanned into offsets, written, and the tiles sorted into the upload's
// heaviest-first schedule.
// `listed_tiles`: the device copy of build.head_tiles, [tiles_per_head], read only where the build
// lists its tiles (else they follow by arithmetic).
void write_tile_records(const VerticalSlashBuild& build, const PlanSections& sections,
                        const KeySpaceTiles& space_tiles, const SelectedLines& selected,
                        const VerticalSlashTile* listed_tiles, const TileRecordScratch& scratch,
                        cudaStream_t stream);

}  // namespace mmsparse::cuda::index
