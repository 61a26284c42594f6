// The last-q estimate's extents on the host (index_kernels.h): which rows a head's estimate takes
// (its last q rows, or a Q- or 2D-boundary group's last rows as segments of consecutive queries),
// whether they fit the estimate kernels (estimate_device.cu), and the scratch regions those
// kernels need. Pure host arithmetic on the shape: nothing here touches the device.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <span>
#include <string>

#include "cuda/common/cuda_check.h"
#include "cuda/common/math.h"
#include "methods/estimate/dynamic_head.h"
#include "methods/estimate/index_kernels.h"
#include "methods/registry.h"
#include "mmsparse/status.h"

namespace mmsparse::cuda::index {
namespace {


}  // namespace

int64_t checked_estimate_queries(const PatternSpec& resolved_spec, const PlanShape& shape) {
  const int64_t last_q = detail::checked_param(resolved_spec, detail::kLastQueriesParam, 1);
  if (last_q > kMaxEstimateRows && shape.q_len > kMaxEstimateRows) {
    throw Error(ErrorCode::kUnsupported,
                resolved_spec.name + " parameter " + detail::kLastQueriesParam +
                    ": the GPU estimate takes at most " + std::to_string(kMaxEstimateRows) +
                    " rows, got " + std::to_string(last_q));
  }
  return last_q;
}

detail::BoundaryMode checked_boundary(const PatternSpec& resolved_spec,
                                      detail::BoundaryMode last_served) {
  constexpr const char* kModeNames[] = {"0 (none)", "1 (K-boundary)", "2 (Q-boundary)",
                                        "3 (2D-boundary)", "4 (item boundary)"};
  const detail::BoundaryMode mode = detail::boundary_mode(resolved_spec);
  if (mode > last_served) {
    const std::string message = resolved_spec.name + " parameter " + detail::kBoundaryParam +
                                ": the GPU index builder serves " + kModeNames[0] + " to " +
                                kModeNames[static_cast<int>(last_served)] + ", got " +
                                std::to_string(static_cast<int64_t>(mode));
    throw Error(ErrorCode::kUnsupported, message);
  }
  return mode;
}

int64_t EstimateExtents::diagonal_entries() const {
  int64_t entries = 0;
  for (int64_t s = 0; s < segment_count; ++s) {
    const EstimateSegment& segment = segments[static_cast<std::size_t>(s)];
    entries += (segment.rows - 1) * segment.step + kEstimateChunkKeys;
  }
  return entries;
}

namespace {

// The positions' segments (runs of consecutive positions), or nullopt when they do not fit the
// kernels: more than kMaxEstimateSegments, or more diagonal entries than a block holds.
std::optional<EstimateExtents> segment_rows(std::span<const int64_t> positions) {
  EstimateExtents extents;
  int64_t entries = 0;
  for (std::size_t i = 0; i < positions.size();) {
    std::size_t end = i + 1;
    while (end < positions.size() && positions[end] == positions[end - 1] + 1) ++end;
    if (extents.segment_count == kMaxEstimateSegments) return std::nullopt;
    const auto rows = static_cast<int64_t>(end - i);
    extents.segments[static_cast<std::size_t>(extents.segment_count++)] = {positions[i], 0, rows};
    extents.rows += rows;
    entries += rows + kEstimateChunkKeys - 1;
    i = end;
  }
  if (entries > kMaxEstimateDiagonals) return std::nullopt;
  return extents;
}

}  // namespace

bool fits_estimate(std::span<const int64_t> positions) {
  return segment_rows(positions).has_value();
}

namespace {

// The positions' segments, or kUnsupported naming "<pattern> parameter last_q".
EstimateExtents checked_segments(std::span<const int64_t> positions, const std::string& pattern) {
  std::optional<EstimateExtents> extents = segment_rows(positions);
  if (!extents) {
    throw Error(ErrorCode::kUnsupported,
                pattern + " parameter " + detail::kLastQueriesParam + ": the GPU estimate takes " +
                    std::to_string(kMaxEstimateSegments) +
                    " runs of consecutive estimate rows at most, with at most " +
                    std::to_string(kMaxEstimateDiagonals) + " diagonals per key chunk; these " +
                    std::to_string(positions.size()) + " rows exceed that");
  }
  return *extents;
}

// Slots, scores (the last row's frontier, frontiers never descending) and chunks of segments whose
// frontiers are set, over a key space of `keys` keys.
EstimateExtents finish_extents(EstimateExtents extents, const EstimateOperands& operands,
                               int64_t keys) {
  extents.slots = operands.batch * operands.estimated_heads();
  if (extents.rows > 0) {
    const EstimateSegment& last =
        extents.segments[static_cast<std::size_t>(extents.segment_count - 1)];
    extents.scores = std::clamp<int64_t>(last.frontier + (last.rows - 1) * last.step, 0, keys);
  }
  extents.chunks = ceil_div(extents.scores, kEstimateChunkKeys);
  return extents;
}

}  // namespace

EstimateExtents estimate_extents(const EstimateOperands& operands,
                                 std::span<const int64_t> positions, const std::string& pattern) {
  EstimateExtents extents = checked_segments(positions, pattern);
  const int64_t offset = operands.kv_len - operands.q_len;
  for (int64_t s = 0; s < extents.segment_count; ++s) {
    EstimateSegment& segment = extents.segments[static_cast<std::size_t>(s)];
    segment.frontier = segment.position + offset + 1;
  }
  return finish_extents(extents, operands, operands.kv_len);
}

EstimateExtents estimate_extents(const EstimateOperands& operands,
                                 std::span<const int64_t> positions, const detail::KeySpace& space,
                                 bool own, const std::string& pattern) {
  EstimateExtents extents = checked_segments(positions, pattern);
  const int64_t offset = operands.kv_len - operands.q_len;
  for (int64_t s = 0; s < extents.segment_count; ++s) {
    EstimateSegment& segment = extents.segments[static_cast<std::size_t>(s)];
    segment.frontier = space.frontier(segment.position + offset);
    segment.step = own ? 1 : 0;
  }
  return finish_extents(extents, operands, space.size());
}

EstimateRegions add_estimate_regions(ScratchLayout& layout, const EstimateExtents& extents,
                                     bool probabilities) {
  const int64_t slots = extents.slots;
  EstimateRegions regions;
  regions.partial_max = layout.add<float>(slots * extents.rows * extents.chunks);
  regions.partial_sum = layout.add<double>(slots * extents.rows * extents.chunks);
  regions.row_max = layout.add<float>(slots * extents.rows);
  regions.row_sum = layout.add<double>(slots * extents.rows);
  regions.diagonal_partials =
      layout.add<double>(slots * extents.chunks * extents.diagonal_entries());
  regions.column_sums = layout.add<double>(slots * extents.scores);
  regions.diagonal_sums = layout.add<double>(slots * extents.scores);
  if (probabilities) {
    regions.probabilities = layout.add<float>(slots * extents.rows * extents.scores);
  }
  return regions;
}

EstimateScratch estimate_scratch(std::byte* base, const EstimateRegions& regions) {
  EstimateScratch scratch;
  scratch.partial_max = region<float>(base, regions.partial_max);
  scratch.partial_sum = region<double>(base, regions.partial_sum);
  scratch.row_max = region<float>(base, regions.row_max);
  scratch.row_sum = region<double>(base, regions.row_sum);
  scratch.diagonal_partials = region<double>(base, regions.diagonal_partials);
  scratch.column_sums = region<double>(base, regions.column_sums);
  scratch.diagonal_sums = region<double>(base, regions.diagonal_sums);
  if (regions.probabilities) scratch.probabilities = region<float>(base, *regions.probabilities);
  return scratch;
}

EstimateExtents estimate_extents(const EstimateOperands& operands, int64_t last_q) {
  EstimateExtents extents;
  extents.slots = operands.batch * operands.estimated_heads();
  extents.rows = std::min(last_q, operands.q_len);
  if (extents.rows > 0) {
    const int64_t first_row = operands.q_len - extents.rows;
    extents.segment_count = 1;
    extents.segments[0] = {first_row, first_row + operands.kv_len - operands.q_len + 1,
                           extents.rows};
    // The last query aligns with key kv_len - 1, so it sees every key whenever there is one.
    extents.scores = operands.kv_len;
  }
  extents.chunks = ceil_div(extents.scores, kEstimateChunkKeys);
  return extents;
}

}  // namespace mmsparse::cuda::index
