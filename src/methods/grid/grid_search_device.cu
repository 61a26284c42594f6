// The grid head's search on the GPU (index_kernels.h), on the softmax rows of the last-q estimate
// (methods/estimate/estimate_device.cu), as the host builder's search (grid.cpp, search_grid):
//   evidence    a thread per (head slot, key): the key's eligible mass over the estimate rows in
//               row order (sink and local entries left out, as GridEvidence does); entry counts
//               follow from the shape
//   background  a block per head slot: the entry cost, kEntryCost × the mean eligible mass
//   strides     a block per (head slot, candidate stride): every row's slash mass (a warp per
//               row), every phase's vertical mass (threads per phase), the best phase
//   choose      a block per head slot: the best stride and its phase
// Scores are the host's (same terms, same parameters, double sums); only the summation order
// differs, so the choice is the host's wherever it is clear (docs/dynamic_patterns.md, "Contract
// for GPU index builders"). Ties go to the smaller stride, then the smaller phase, as on the host.
// The search serves every boundary mode (one estimate's rows, their coordinates from its
// segments). The conversion of its lines into a plan is grid_device.cu (boundary none/K) and
// grid_groups_device.cu (Q/2D).

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "cuda/common/cuda_check.h"
#include "cuda/common/math.h"
#include "methods/estimate/dynamic_head.h"
#include "methods/estimate/index_kernels.h"
#include "methods/estimate/modality_boundary.h"
#include "methods/grid/grid_geometry.h"
#include "mmsparse/status.h"

namespace mmsparse::cuda::index {
namespace {

// Threads per block of every search kernel.
constexpr int kThreads = 256;
constexpr int kWarps = kThreads / kWarpLanes;

using grid::ceil_div;
using grid::floor_mod;
using grid::max64;
using grid::min64;

struct SearchParams {
  const float* probabilities;  // [slots, rows, keys]
  int64_t rows, keys;
  // The estimate rows' coordinates (frontier - 1 in the key space: ascending, negative for rows
  // that see no key), segment by segment.
  int64_t segment_count;
  EstimateSegment segments[kMaxEstimateSegments];
  detail::GridOptions options;
  int64_t first_stride, strides;
  double* column_mass;     // [slots, keys] eligible mass per key
  double* entry_cost;      // [slots]
  double* stride_scores;   // [slots, strides] the best phase's score
  int64_t* stride_phases;  // [slots, strides]

  __device__ int64_t coordinate(int64_t row) const {
    for (int64_t s = 0; s < segment_count; ++s) {
      const EstimateSegment& segment = segments[s];
      if (row < segment.rows) return segment.frontier - 1 + row * segment.step;
      row -= segment.rows;
    }
    return -1;
  }
  // The first row whose coordinate is at least c (rows when none is): coordinates ascend.
  __device__ int64_t first_row_reaching(int64_t c) const {
    int64_t first = 0;
    for (int64_t s = 0; s < segment_count; ++s) {
      const EstimateSegment& segment = segments[s];
      const int64_t top = segment.frontier - 1 + (segment.rows - 1) * segment.step;
      if (segment.rows > 0 && top >= c) {
        return first + (segment.step == 0 ? 0 : max64(0, c - (segment.frontier - 1)));
      }
      first += segment.rows;
    }
    return first;
  }
  // Row r's eligible keys are [sink, coordinate_r + 1 - local), so a key's eligible rows are those
  // whose coordinate reaches key + local: the first of them, and how many there are (the same for
  // every head slot, so computed where needed rather than stored).
  __device__ int64_t first_eligible_row(int64_t key) const {
    return first_row_reaching(key + options.local);
  }
  __device__ int64_t eligible_entries(int64_t key) const {
    return key >= options.sink ? rows - first_eligible_row(key) : 0;
  }
  // Calls add(row) for the rows whose coordinate has this phase, ascending (rows that see no key
  // included where their coordinate does: they add nothing).
  template <class Add>
  __device__ void for_each_row_of_phase(int64_t phase, int64_t stride, Add&& add) const {
    int64_t first = 0;
    for (int64_t s = 0; s < segment_count; ++s) {
      const EstimateSegment& segment = segments[s];
      const int64_t c0 = segment.frontier - 1;
      if (segment.step == 0) {
        if (c0 >= 0 && floor_mod(c0, stride) == phase) {
          for (int64_t r = 0; r < segment.rows; ++r) add(first + r);
        }
      } else {
        for (int64_t r = floor_mod(phase - c0, stride); r < segment.rows; r += stride) {
          add(first + r);
        }
      }
      first += segment.rows;
    }
  }
};

// A thread per (key, head slot): GridEvidence's column mass, rows ascending.
__global__ void grid_evidence_kernel(const SearchParams params) {
  const int64_t key = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t slot = blockIdx.y;
  if (key >= params.keys) return;
  double mass = 0.0;
  if (key >= params.options.sink) {
    const float* column = params.probabilities + slot * params.rows * params.keys + key;
    for (int64_t r = params.first_eligible_row(key); r < params.rows; ++r) {
      mass += column[r * params.keys];
    }
  }
  params.column_mass[slot * params.keys + key] = mass;
}

// A block per head slot: kEntryCost × the mean eligible mass per entry (0 without entries).
__global__ void __launch_bounds__(kThreads) grid_background_kernel(const SearchParams params) {
  __shared__ double masses[kThreads];
  __shared__ int64_t entries[kThreads];
  const int64_t slot = blockIdx.x;
  const int x = static_cast<int>(threadIdx.x);
  double mass = 0.0;
  int64_t count = 0;
  for (int64_t key = x; key < params.keys; key += kThreads) {
    mass += params.column_mass[slot * params.keys + key];
    count += params.eligible_entries(key);
  }
  masses[x] = mass;
  entries[x] = count;
  __syncthreads();
  for (int half = kThreads / 2; half > 0; half /= 2) {
    if (x < half) {
      masses[x] += masses[x + half];
      entries[x] += entries[x + half];
    }
    __syncthreads();
  }
  if (x == 0) {
    params.entry_cost[slot] =
        detail::kEntryCost * (entries[0] > 0 ? masses[0] / static_cast<double>(entries[0]) : 0.0);
  }
}

struct Candidate {
  double score;
  int64_t index;  // phase or stride: ties go to the smaller
};

__device__ inline bool better(const Candidate& a, const Candidate& b) {
  return a.score > b.score || (a.score == b.score && a.index < b.index);
}

// The block's best candidate (every thread offers one), valid in thread 0.
__device__ Candidate block_best(Candidate mine, Candidate* shared /* [kWarps] */) {
  const int lane = static_cast<int>(threadIdx.x) % kWarpLanes;
  const int warp = static_cast<int>(threadIdx.x) / kWarpLanes;
  for (int offset = kWarpLanes / 2; offset > 0; offset /= 2) {
    const Candidate other{__shfl_down_sync(kAllLanes, mine.score, offset),
                          __shfl_down_sync(kAllLanes, mine.index, offset)};
    if (better(other, mine)) mine = other;
  }
  if (lane == 0) shared[warp] = mine;
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int w = 1; w < kWarps; ++w) {
      if (better(shared[w], mine)) mine = shared[w];
    }
  }
  return mine;
}

// Each row's slash lines under `stride`: its keys at distances that are multiples of the stride,
// from the first multiple outside the local window down to the sink; a warp per row writes the
// row's mass and entries.
__device__ void slash_row_masses(const SearchParams& params, int64_t stride,
                                 const float* probabilities /* [rows, keys] */,
                                 double* row_mass /* [rows] */, int64_t* row_entries /* [rows] */) {
  const int lane = static_cast<int>(threadIdx.x) % kWarpLanes;
  const int warp = static_cast<int>(threadIdx.x) / kWarpLanes;
  const detail::GridOptions& options = params.options;
  const int64_t first_distance = ceil_div(options.local, stride) * stride;
  for (int64_t r = warp; r < params.rows; r += kWarps) {
    const int64_t top = params.coordinate(r) - first_distance;
    const int64_t count = top >= options.sink ? (top - options.sink) / stride + 1 : 0;
    double mass = 0.0;
    for (int64_t j = lane; j < count; j += kWarpLanes) {
      mass += probabilities[r * params.keys + top - j * stride];
    }
    for (int offset = kWarpLanes / 2; offset > 0; offset /= 2) {
      mass += __shfl_xor_sync(kAllLanes, mass, offset);
    }
    if (lane == 0) {
      row_mass[r] = mass;
      row_entries[r] = count;
    }
  }
}

// The rows' slash mass and entries summed in row order (thread 0; none without slash lines).
__device__ void sum_slash_rows(const SearchParams& params, const double* row_mass,
                               const int64_t* row_entries, double& total_mass,
                               int64_t& total_entries) {
  double mass = 0.0;
  int64_t entries = 0;
  for (int64_t r = 0; params.options.slash && r < params.rows; ++r) {
    mass += row_mass[r];
    entries += row_entries[r];
  }
  total_mass = mass;
  total_entries = entries;
}

// This thread's best phase under `stride` (the vertical phase of the lines): `parts` threads sum
// a phase's vline keys, the first of them adds the slash lines of the rows off that phase and
// scores the lines. Block-wide; `part_mass` and `part_entries` are [kThreads] shared scratch.
__device__ Candidate best_phase_of_thread(const SearchParams& params, int64_t stride, int64_t slot,
                                          const double* row_mass, const int64_t* row_entries,
                                          double total_mass, int64_t total_entries,
                                          double* part_mass, int64_t* part_entries) {
  const int x = static_cast<int>(threadIdx.x);
  const double cost = params.entry_cost[slot];
  // Phases beyond the keys have no keys and no rows, so they all score like the first of them:
  // the search stops there.
  const int64_t phases = min64(stride, params.keys + 1);
  const int64_t parts = stride < kThreads ? kThreads / stride : 1;  // threads per phase
  const int64_t per_round = kThreads / parts;
  const double* mass_by_key = params.column_mass + slot * params.keys;
  Candidate mine{-INFINITY, 0};
  for (int64_t round = 0; round < phases; round += per_round) {
    const int64_t phase = round + x / parts;
    const int64_t part = x % parts;
    const bool active = x / parts < per_round && phase < phases;
    double mass = 0.0;
    int64_t entries = 0;
    if (active) {
      for (int64_t key = phase + part * stride; key < params.keys; key += parts * stride) {
        mass += mass_by_key[key];
        entries += params.eligible_entries(key);
      }
    }
    part_mass[x] = mass;
    part_entries[x] = entries;
    __syncthreads();
    if (active && part == 0) {
      double vertical_mass = 0.0;
      int64_t vertical_entries = 0;
      for (int64_t q = 0; q < parts; ++q) {
        vertical_mass += part_mass[x + q];
        vertical_entries += part_entries[x + q];
      }
      // A row's slash keys lie on its own phase's vline: rows of this phase add nothing new.
      double phase_mass = 0.0;
      int64_t phase_entries = 0;
      if (params.options.slash) {
        params.for_each_row_of_phase(phase, stride, [&](int64_t r) {
          phase_mass += row_mass[r];
          phase_entries += row_entries[r];
        });
      }
      const double lines_mass = vertical_mass + (total_mass - phase_mass);
      const int64_t lines_entries = vertical_entries + (total_entries - phase_entries);
      const Candidate candidate{lines_mass - cost * static_cast<double>(lines_entries), phase};
      if (better(candidate, mine)) mine = candidate;
    }
    __syncthreads();
  }
  return mine;
}

// A block per (candidate stride, head slot): score_stride of grid.cpp.
__global__ void __launch_bounds__(kThreads) grid_stride_kernel(const SearchParams params) {
  __shared__ double row_mass[kMaxEstimateRows];
  __shared__ int64_t row_entries[kMaxEstimateRows];
  __shared__ double part_mass[kThreads];
  __shared__ int64_t part_entries[kThreads];
  __shared__ double total_mass;
  __shared__ int64_t total_entries;
  __shared__ Candidate warp_best[kWarps];
  const int64_t stride = params.first_stride + blockIdx.x;
  const int64_t slot = blockIdx.y;
  const detail::GridOptions& options = params.options;

  if (options.slash) {
    slash_row_masses(params, stride, params.probabilities + slot * params.rows * params.keys,
                     row_mass, row_entries);
  }
  __syncthreads();
  if (threadIdx.x == 0) sum_slash_rows(params, row_mass, row_entries, total_mass, total_entries);
  __syncthreads();
  const int64_t out = slot * params.strides + blockIdx.x;
  if (!options.vline && !options.hline) {
    if (threadIdx.x == 0) {
      params.stride_scores[out] =
          total_mass - params.entry_cost[slot] * static_cast<double>(total_entries);
      params.stride_phases[out] = 0;
    }
    return;
  }
  const Candidate best =
      block_best(best_phase_of_thread(params, stride, slot, row_mass, row_entries, total_mass,
                                      total_entries, part_mass, part_entries),
                 warp_best);
  if (threadIdx.x == 0) {
    params.stride_scores[out] = best.score;
    params.stride_phases[out] = best.index;
  }
}

struct ChooseParams {
  const double* stride_scores;
  const int64_t* stride_phases;
  int64_t first_stride, strides;
  detail::GridLines* lines;   // [slots] scratch
  detail::GridLines* chosen;  // [slots] the caller's copy, or null
};

// A block per head slot: the best stride (ties to the smaller) and its phase.
__global__ void __launch_bounds__(kThreads) grid_choose_kernel(const ChooseParams params) {
  __shared__ Candidate warp_best[kWarps];
  const int64_t slot = blockIdx.x;
  Candidate mine{-INFINITY, 0};
  for (int64_t s = threadIdx.x; s < params.strides; s += kThreads) {
    const Candidate candidate{params.stride_scores[slot * params.strides + s], s};
    if (better(candidate, mine)) mine = candidate;
  }
  const Candidate best = block_best(mine, warp_best);
  if (threadIdx.x != 0) return;
  const detail::GridLines lines{params.first_stride + best.index,
                                params.stride_phases[slot * params.strides + best.index]};
  params.lines[slot] = lines;
  if (params.chosen != nullptr) params.chosen[slot] = lines;
}

unsigned blocks_for(int64_t threads) { return static_cast<unsigned>(ceil_div(threads, kThreads)); }

// A thread per entry: the fixed lines.
__global__ void fixed_lines_kernel(detail::GridLines lines_value, int64_t count,
                                   detail::GridLines* lines /* [count] */,
                                   detail::GridLines* chosen /* [count] or null */) {
  const int64_t index = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (index >= count) return;
  lines[index] = lines_value;
  if (chosen != nullptr) chosen[index] = lines_value;
}

}  // namespace

void launch_fixed_grid_lines(const detail::GridOptions& options, int64_t count,
                             detail::GridLines* lines, detail::GridLines* chosen,
                             cudaStream_t stream) {
  if (count == 0) return;
  fixed_lines_kernel<<<blocks_for(count), kThreads, 0, stream>>>({options.stride, 0}, count, lines,
                                                                 chosen);
  check_launch("grid index: fixed_lines_kernel");
}

GridSearchRegions add_grid_search_regions(ScratchLayout& layout, int64_t slots, int64_t keys,
                                          int64_t strides) {
  GridSearchRegions regions;
  regions.column_mass = layout.add<double>(slots * keys);
  regions.entry_cost = layout.add<double>(slots);
  regions.stride_scores = layout.add<double>(slots * strides);
  regions.stride_phases = layout.add<int64_t>(slots * strides);
  return regions;
}

void launch_grid_search(const GridSearch& search, std::byte* base, const GridSearchRegions& regions,
                        cudaStream_t stream) {
  const EstimateExtents& extents = *search.extents;
  const int64_t slots = extents.slots;
  if (slots == 0) return;
  SearchParams params{};
  params.probabilities = search.probabilities;
  params.rows = extents.rows;
  params.keys = extents.scores;
  params.segment_count = extents.segment_count;
  for (int64_t s = 0; s < extents.segment_count; ++s) {
    params.segments[s] = extents.segments[static_cast<std::size_t>(s)];
  }
  params.options = search.options;
  params.first_stride = search.first_stride;
  params.strides = search.last_stride - search.first_stride + 1;
  params.column_mass = region<double>(base, regions.column_mass);
  params.entry_cost = region<double>(base, regions.entry_cost);
  params.stride_scores = region<double>(base, regions.stride_scores);
  params.stride_phases = region<int64_t>(base, regions.stride_phases);
  if (params.keys > 0) {
    grid_evidence_kernel<<<dim3(blocks_for(params.keys), static_cast<unsigned>(slots)), kThreads, 0,
                           stream>>>(params);
    check_launch("grid index: grid_evidence_kernel");
  }
  grid_background_kernel<<<static_cast<unsigned>(slots), kThreads, 0, stream>>>(params);
  check_launch("grid index: grid_background_kernel");
  grid_stride_kernel<<<dim3(static_cast<unsigned>(params.strides), static_cast<unsigned>(slots)),
                       kThreads, 0, stream>>>(params);
  check_launch("grid index: grid_stride_kernel");
  const ChooseParams choose{params.stride_scores, params.stride_phases, params.first_stride,
                            params.strides,       search.lines,         search.chosen};
  grid_choose_kernel<<<static_cast<unsigned>(slots), kThreads, 0, stream>>>(choose);
  check_launch("grid index: grid_choose_kernel");
}

}  // namespace mmsparse::cuda::index
