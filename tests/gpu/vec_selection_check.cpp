#include "vec_selection_check.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <span>
#include <vector>

#include "cuda/runtime/plan_download.h"
#include "methods/estimate/estimation.h"
#include "methods/vec/vec.h"

namespace mmsparse::test {
namespace {

constexpr Device kCudaDevice{DeviceType::kCUDA, 0};
// Per addition of a score's sum: twice fp32's unit roundoff (vec_selection_check.h).
const float kRoundoff = std::ldexp(1.0f, -22);
// A key's two scores differ by at most twice the per-sum bound; a margin (score minus a maximum)
// by twice that again.
constexpr float kScoreSides = 2.0f;
constexpr float kMarginTerms = 2.0f;
constexpr int kMaxReports = 5;  // mismatches printed per check

// The block's tolerance on margins: kMarginTerms * kScoreSides * head_dim * 2^-22 * scale *
// max over its candidates of sum_d |p_d k_d|.
float margin_tolerance(const detail::HeadOperands& operands, const detail::VecBlock& block,
                       std::span<const detail::VecKeyMargin> margins) {
  const int64_t head_dim = operands.head_dim();
  std::vector<float> pooled(static_cast<std::size_t>(head_dim));
  detail::vec_pooled_query(operands, block.row_begin, block.row_end, pooled.data());
  float largest = 0.0f;
  for (const detail::VecKeyMargin& candidate : margins) {
    const float* key = operands.key(candidate.key);
    float sum = 0.0f;
    for (int64_t d = 0; d < head_dim; ++d) sum += std::abs(pooled[d] * key[d]);
    largest = std::max(largest, sum);
  }
  return kMarginTerms * kScoreSides * static_cast<float>(head_dim) * kRoundoff *
         std::abs(operands.scale()) * largest;
}

std::span<const int32_t> tile_columns(const Plan& plan, int64_t tile) {
  const auto begin = static_cast<std::size_t>(plan.tile_column_offsets[tile]);
  const auto end = static_cast<std::size_t>(plan.tile_column_offsets[tile + 1]);
  return std::span<const int32_t>(plan.columns).subspan(begin, end - begin);
}

// One tile: the device's columns ascending, every one a candidate, and equal to the host's kept
// set except at borderline keys.
void check_tile(const detail::HeadOperands& operands, const detail::VecBlock& block,
                const detail::VecParams& params, std::span<const int32_t> device, int64_t tile,
                VecSelectionStats& stats, int& reports) {
  EXPECT_TRUE(std::is_sorted(device.begin(), device.end()) &&
              std::adjacent_find(device.begin(), device.end()) == device.end())
      << "tile " << tile << ": device columns not strictly ascending";
  const std::vector<detail::VecKeyMargin> margins =
      detail::vec_key_margins(operands, block, params);
  const float tolerance = margin_tolerance(operands, block, margins);
  const float log_alpha = params.log_alpha();
  int64_t found = 0;
  for (const detail::VecKeyMargin& candidate : margins) {
    const bool host_kept = candidate.margin >= log_alpha;
    const bool device_kept =
        std::binary_search(device.begin(), device.end(), static_cast<int32_t>(candidate.key));
    found += device_kept;
    const bool borderline = std::abs(candidate.margin - log_alpha) <= tolerance;
    ++stats.candidates;
    stats.borderline += borderline;
    if (host_kept == device_kept) continue;
    ++stats.differing;
    if (!borderline && reports++ < kMaxReports) {
      ADD_FAILURE() << "tile " << tile << " (rows " << block.row_begin << ".." << block.row_end
                    << ") key " << candidate.key << ": host " << (host_kept ? "keeps" : "drops")
                    << " it (margin " << candidate.margin << ", log alpha " << log_alpha
                    << ", tolerance " << tolerance << "), the device does not";
    }
  }
  EXPECT_EQ(found, static_cast<int64_t>(device.size()))
      << "tile " << tile << ": the device kept keys that are not candidates";
}

}  // namespace

Plan expect_vec_selection_matches(const cuda::DevicePlan& built, const Plan& host,
                                  const PatternSpec& resolved, const PatternInputs& host_inputs,
                                  VecSelectionStats& stats) {
  const detail::VecParams params = detail::vec_params(resolved);
  const PlanShape& shape = host.shape;
  std::vector<std::vector<MaskPolicy>> masks(1);
  if (shape.q_len > 0) masks[0].push_back(detail::vec_mask(params));
  const Plan device =
      cuda::download_plan(std::span<const cuda::DevicePlan>(&built, 1), masks, kCudaDevice);
  Plan adopted = host;
  EXPECT_EQ(device.num_tiles(), host.num_tiles());
  if (device.num_tiles() != host.num_tiles()) return adopted;
  int reports = 0;
  for (int64_t slot = 0; slot < shape.head_slots(); ++slot) {
    detail::KeyCache cache;
    const detail::HeadOperands operands(host_inputs, shape, slot, cache);
    for (int64_t tile = host.head_tile_offsets[slot]; tile < host.head_tile_offsets[slot + 1];
         ++tile) {
      // One tile per pooled block (the device builds pooling <= tile_rows only).
      const int64_t block = host.tiles[tile].begin / params.pooling;
      check_tile(operands, detail::vec_block(shape, params, block), params,
                 tile_columns(device, tile), tile, stats, reports);
    }
  }
  adopted.columns = device.columns;
  adopted.tile_column_offsets = device.tile_column_offsets;
  return adopted;
}

}  // namespace mmsparse::test
