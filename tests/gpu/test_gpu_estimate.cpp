// The GPU estimate and top-k kernels (methods/estimate/index_kernels.h) on their own, against the
// host estimate (methods/estimate/estimation.h), their oracle: on fresh random inputs (odd lengths,
// GQA groups of 1, 4 and 7, last_q 64, 128 and odd, head_dim 64 and 128, both dtypes, random
// memory layouts; Q-boundary segments, 2D key spaces) the softmax rows, column sums and diagonal
// sums agree within a relative tolerance below the plans' clear-cut margin (kClearGap) and far
// above the rounding the other summation order adds; two runs agree bit for bit; and the top-k
// selection equals the host's top_k exactly (same doubles in, so no tolerance) on arrays with ties
// at the cut, long runs of equal keys and keys that differ only in their last bits.

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "attention_harness.h"
#include "common/random.h"
#include "cuda/common/stream_scratch.h"
#include "device_buffer.h"
#include "index_build_cases.h"
#include "index_test_support.h"
#include "methods/estimate/estimation.h"
#include "methods/estimate/index_builders.h"
#include "methods/estimate/index_kernels.h"
#include "mmsparse/patterns.h"
#include "mmsparse/plan.h"
#include "stream_test.h"

namespace mmsparse::test {
namespace {

// The GPU's scores differ from the host's by the dot product's summation order (the tensor core's
// fp32 accumulation; about 1e-6 to 1e-5 of a probability on these inputs, more on a peaked
// softmax); a wrong row, key or diagonal is off by far more than this, and it stays below the
// plan tests' clear-cut margin (kClearGap).
constexpr double kRelativeTolerance = 2e-4;
static_assert(kRelativeTolerance < kClearGap);
// Probabilities that underflow differently near the float range's end.
constexpr double kAbsoluteTolerance = 1e-30;
constexpr std::array<int64_t, 3> kGroups = {1, 4, 7};
constexpr std::array<int64_t, 3> kKvHeads = {1, 2, 3};
constexpr std::array<int64_t, 2> kFixedLastQueries = {64, 128};
constexpr int64_t kMaxOddLastQueries = 150;
constexpr int64_t kMaxQueries = 700;
constexpr int64_t kMaxExtraKeys = 300;
constexpr float kPeakedScale = 4.0f;  // times 1/sqrt(head_dim): a peaked softmax
constexpr char kPattern[] = "vertical-slash";

class GpuEstimate : public StreamTest {};

bool near(double gpu, double host) {
  return std::abs(gpu - host) <= kRelativeTolerance * std::abs(host) + kAbsoluteTolerance;
}

// An estimate's outputs downloaded from the device.
struct DeviceEstimate {
  int64_t slots = 0, rows = 0, scores = 0;
  std::vector<double> columns;       // [slots, scores]
  std::vector<double> diagonals;     // [slots, scores]
  std::vector<float> probabilities;  // [slots, rows, scores]
};

template <class T>
std::vector<T> download(const std::byte* base, std::size_t offset, int64_t count) {
  std::vector<T> host(static_cast<std::size_t>(count));
  expect_cuda(
      cudaMemcpy(host.data(), base + offset, host.size() * sizeof(T), cudaMemcpyDeviceToHost),
      "cudaMemcpy estimate");
  return host;
}

DeviceEstimate run_estimate(const cuda::EstimateOperands& operands, int64_t last_q,
                            cudaStream_t stream) {
  const cuda::index::EstimateExtents extents = cuda::index::estimate_extents(operands, last_q);
  cuda::ScratchLayout layout;
  const cuda::index::EstimateRegions regions =
      cuda::index::add_estimate_regions(layout, extents, true);
  DeviceBuffer scratch(layout.bytes());
  scratch.poison();  // every value compared must have been written
  auto* base = static_cast<std::byte*>(scratch.data());
  cuda::index::launch_estimate(operands, extents, cuda::index::estimate_scratch(base, regions),
                               stream);
  expect_cuda(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
  expect_cuda(cudaGetLastError(), "estimate kernels");
  DeviceEstimate estimate{extents.slots, extents.rows, extents.scores, {}, {}, {}};
  estimate.columns = download<double>(base, regions.column_sums, extents.slots * extents.scores);
  estimate.diagonals =
      download<double>(base, regions.diagonal_sums, extents.slots * extents.scores);
  estimate.probabilities =
      download<float>(base, *regions.probabilities, extents.slots * extents.rows * extents.scores);
  return estimate;
}

// Counts the entries of `gpu` (slot s at s * stride) outside the tolerance of the host's.
int64_t mismatches(const std::vector<double>& gpu, const std::vector<double>& host, int64_t offset,
                   const std::string& what) {
  int64_t bad = 0;
  for (std::size_t i = 0; i < host.size(); ++i) {
    const double value = gpu[static_cast<std::size_t>(offset) + i];
    if (!near(value, host[i]) && bad++ == 0) {
      ADD_FAILURE() << what << " " << i << ": gpu " << value << ", host " << host[i];
    }
  }
  return bad;
}

// The host estimate of every head slot, compared row by row and sum by sum.
void expect_host_estimate(const DeviceEstimate& gpu, const AttentionInputs& inputs,
                          const ProblemSize& size) {
  const PlanShape shape = plan_shape(size);
  const PatternInputs host_inputs{inputs.q.view, inputs.k.view, size.scale};
  const detail::KeySpace keys = detail::KeySpace::all_keys(shape.kv_len);
  detail::KeyCache cache;
  std::vector<int64_t> rows;
  for (int64_t r = shape.q_len - gpu.rows; r < shape.q_len; ++r) rows.push_back(r);
  for (int64_t slot = 0; slot < gpu.slots; ++slot) {
    SCOPED_TRACE("head slot " + std::to_string(slot) + " of " + std::to_string(gpu.slots));
    const detail::HeadOperands operands(host_inputs, shape, slot, cache);
    const detail::Estimate host =
        detail::estimate_last_queries(operands, rows, keys, shape.causal_offset());
    ASSERT_EQ(host.max_frontier(), gpu.scores);
    EXPECT_EQ(mismatches(gpu.columns, host.column_sums(), slot * gpu.scores, "column"), 0);
    EXPECT_EQ(mismatches(gpu.diagonals, host.diagonal_sums(), slot * gpu.scores, "diagonal"), 0);
    // The host keeps only rows that see a key; they are the GPU's last ones.
    const int64_t skipped = gpu.rows - host.rows();
    int64_t bad = 0;
    for (int64_t r = 0; r < host.rows(); ++r) {
      const std::span<const float> p = host.probabilities(r);
      const float* row = gpu.probabilities.data() + ((slot * gpu.rows) + skipped + r) * gpu.scores;
      for (std::size_t key = 0; key < p.size(); ++key) {
        if (!near(row[key], p[key]) && bad++ == 0) {
          ADD_FAILURE() << "probability row " << r << " key " << key << ": gpu " << row[key]
                        << ", host " << p[key];
        }
      }
    }
    EXPECT_EQ(bad, 0) << "softmax entries off";
  }
}

ProblemSize estimate_problem(Random& random, int64_t group, int64_t head_dim) {
  ProblemSize size;
  size.batch = random.uniform_int(1, 2);
  size.kv_heads = pick(random, kKvHeads);
  size.group = group;
  size.head_dim = head_dim;
  size.dtype = pick(random, kDtypes);
  size.q_len = random.uniform_int(0, kMaxQueries / 2) * 2 + 1;  // odd
  size.kv_len = random.bernoulli(0.8) ? size.q_len + random.uniform_int(0, kMaxExtraKeys)
                                      : random.uniform_int(1, size.q_len);
  size.tile_rows = pick(random, kTileRows);
  size.scale =
      (random.bernoulli(0.5) ? 1.0f : kPeakedScale) / std::sqrt(static_cast<float>(size.head_dim));
  return size;
}

TEST_F(GpuEstimate, MatchesTheHostEstimateOnRandomInputs) {
  Random random;
  SCOPED_TRACE(random.trace());
  for (const int64_t group : kGroups) {
    for (const int64_t head_dim : kHeadDims) {
      const int64_t odd_last_q = random.uniform_int(0, kMaxOddLastQueries / 2) * 2 + 1;
      for (const int64_t last_q : {kFixedLastQueries[0], kFixedLastQueries[1], odd_last_q}) {
        const ProblemSize size = estimate_problem(random, group, head_dim);
        SCOPED_TRACE("last_q " + std::to_string(last_q) + " " + describe(size) + " scale " +
                     std::to_string(size.scale));
        const AttentionInputs inputs = random_inputs(random, size);
        const DeviceOperand q(inputs.q);
        const DeviceOperand k(inputs.k);
        const cuda::EstimateOperands operands =
            cuda::make_estimate_operands(kPattern, {q.view, k.view, size.scale}, plan_shape(size));
        const DeviceEstimate first = run_estimate(operands, last_q, stream_);
        expect_host_estimate(first, inputs, size);
        // Nothing depends on scheduling: a second run repeats every bit.
        const DeviceEstimate second = run_estimate(operands, last_q, stream_);
        EXPECT_EQ(std::memcmp(first.columns.data(), second.columns.data(),
                              first.columns.size() * sizeof(double)),
                  0);
        EXPECT_EQ(std::memcmp(first.diagonals.data(), second.diagonals.data(),
                              first.diagonals.size() * sizeof(double)),
                  0);
      }
    }
  }
}

// A selected subset of heads (a per-head config's section) estimates exactly those heads.
TEST_F(GpuEstimate, HeadSelectionEstimatesTheSelectedHeads) {
  Random random;
  SCOPED_TRACE(random.trace());
  ProblemSize size = estimate_problem(random, 7, 128);
  size.batch = 2;
  size.kv_heads = 2;
  SCOPED_TRACE(describe(size));
  const AttentionInputs inputs = random_inputs(random, size);
  const DeviceOperand q(inputs.q);
  const DeviceOperand k(inputs.k);
  const std::vector<int32_t> heads = {1, 5, 6, 9, 13};
  const cuda::EstimateOperands operands = cuda::select_heads(
      kPattern,
      cuda::make_estimate_operands(kPattern, {q.view, k.view, size.scale}, plan_shape(size)),
      heads);
  const int64_t last_q = 64;
  const DeviceEstimate gpu = run_estimate(operands, last_q, stream_);
  const HostScores host = host_scores({inputs.q.view, inputs.k.view, size.scale}, plan_shape(size),
                                      last_q, std::vector<int64_t>(heads.begin(), heads.end()));
  ASSERT_EQ(static_cast<int64_t>(host.columns.size()), gpu.slots);
  for (int64_t slot = 0; slot < gpu.slots; ++slot) {
    SCOPED_TRACE("slot " + std::to_string(slot));
    const auto s = static_cast<std::size_t>(slot);
    EXPECT_EQ(mismatches(gpu.columns, host.columns[s], slot * gpu.scores, "column"), 0);
    EXPECT_EQ(mismatches(gpu.diagonals, host.diagonals[s], slot * gpu.scores, "diagonal"), 0);
  }
}

// --- Segments and key spaces ------------------------------------------------------------

constexpr int64_t kSpaceLength = 901;  // q_len = kv_len: a position aligns with its own key
constexpr int64_t kMaxRangeKeys = 120;
constexpr int64_t kMaxGapKeys = 90;
constexpr int64_t kMaxRuns = 8;  // runs of estimate rows: segments
constexpr int64_t kMaxRunRows = 10;

// Ascending disjoint ranges of [0, length) with gaps of at least one key between them.
std::vector<detail::IndexRange> random_ranges(Random& random, int64_t length) {
  std::vector<detail::IndexRange> ranges;
  for (int64_t start = random.uniform_int(0, kMaxGapKeys); start < length;) {
    const int64_t end = std::min(length, start + random.uniform_int(1, kMaxRangeKeys));
    ranges.push_back({start, end});
    start = end + random.uniform_int(1, kMaxGapKeys);
  }
  return ranges;
}

// Up to kMaxRuns runs of consecutive positions, one inside each of the last pieces, ascending.
std::vector<int64_t> random_runs(Random& random, const std::vector<detail::IndexRange>& pieces) {
  std::vector<int64_t> positions;
  const auto first =
      static_cast<int64_t>(pieces.size()) - std::min<int64_t>(kMaxRuns, pieces.size());
  for (auto piece = static_cast<std::size_t>(first); piece < pieces.size(); ++piece) {
    const detail::IndexRange& range = pieces[piece];
    const int64_t rows = std::min(range.end - range.begin, random.uniform_int(1, kMaxRunRows));
    const int64_t start = random.uniform_int(range.begin, range.end - rows);
    for (int64_t r = 0; r < rows; ++r) positions.push_back(start + r);
  }
  return positions;
}

// The gaps between and around `ranges` in [0, length).
std::vector<detail::IndexRange> gaps_of(const std::vector<detail::IndexRange>& ranges,
                                        int64_t length) {
  std::vector<detail::IndexRange> gaps;
  int64_t start = 0;
  for (const detail::IndexRange& range : ranges) {
    if (range.begin > start) gaps.push_back({start, range.begin});
    start = range.end;
  }
  if (start < length) gaps.push_back({start, length});
  return gaps;
}

// A Q-boundary group's rows over all keys (segments of step 1) and a 2D-boundary pair's over one
// modality's keys in compact coordinates, the rows in that modality (step 1) or in another one
// (step 0, one frontier per run): the sums against the host estimate of the same rows and keys.
TEST_F(GpuEstimate, SegmentsAndKeySpacesMatchTheHostEstimate) {
  Random random;
  SCOPED_TRACE(random.trace());
  for (const int64_t group : kGroups) {
    ProblemSize size = estimate_problem(random, group, pick(random, kHeadDims));
    size.q_len = kSpaceLength;
    size.kv_len = kSpaceLength;
    const PlanShape shape = plan_shape(size);
    const AttentionInputs inputs = random_inputs(random, size);
    const DeviceOperand q(inputs.q);
    const DeviceOperand k(inputs.k);
    const cuda::EstimateOperands operands =
        cuda::make_estimate_operands(kPattern, {q.view, k.view, size.scale}, shape);
    const std::vector<detail::IndexRange> ranges = random_ranges(random, kSpaceLength);
    const detail::KeySpace space(ranges);
    std::vector<int64_t> begins;
    for (const detail::IndexRange& range : ranges) begins.push_back(range.begin);
    DeviceBuffer device_begins(begins.size() * sizeof(int64_t));
    DeviceBuffer device_prefix(space.prefix().size() * sizeof(int64_t));
    device_begins.upload(begins.data());
    device_prefix.upload(space.prefix().data());
    const cuda::index::KeySpaceView space_view{static_cast<const int64_t*>(device_begins.data()),
                                               static_cast<const int64_t*>(device_prefix.data()),
                                               static_cast<int32_t>(ranges.size()),
                                               !space.is_identity()};
    enum class Rows { kAllKeys, kOwnSpace, kOtherSpace };
    for (const Rows mode : {Rows::kAllKeys, Rows::kOwnSpace, Rows::kOtherSpace}) {
      const bool all_keys = mode == Rows::kAllKeys;
      const std::vector<int64_t> positions =
          random_runs(random, mode == Rows::kOtherSpace ? gaps_of(ranges, kSpaceLength) : ranges);
      SCOPED_TRACE("rows " + std::to_string(static_cast<int>(mode)) + ", " +
                   std::to_string(positions.size()) + " in " + std::to_string(ranges.size()) +
                   " ranges, " + describe(size));
      const cuda::index::EstimateExtents extents =
          all_keys ? cuda::index::estimate_extents(operands, positions, kPattern)
                   : cuda::index::estimate_extents(operands, positions, space,
                                                   mode == Rows::kOwnSpace, kPattern);
      cuda::ScratchLayout layout;
      const cuda::index::EstimateRegions regions =
          cuda::index::add_estimate_regions(layout, extents, false);
      DeviceBuffer scratch(layout.bytes());
      scratch.poison();
      auto* base = static_cast<std::byte*>(scratch.data());
      cuda::index::launch_estimate(operands, extents, cuda::index::estimate_scratch(base, regions),
                                   stream_, all_keys ? cuda::index::KeySpaceView{} : space_view);
      expect_cuda(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
      expect_cuda(cudaGetLastError(), "estimate kernels");
      const std::vector<double> columns =
          download<double>(base, regions.column_sums, extents.slots * extents.scores);
      const std::vector<double> diagonals =
          download<double>(base, regions.diagonal_sums, extents.slots * extents.scores);
      const detail::KeySpace keys = all_keys ? detail::KeySpace::all_keys(kSpaceLength) : space;
      detail::KeyCache cache;
      for (int64_t slot = 0; slot < extents.slots; ++slot) {
        SCOPED_TRACE("head slot " + std::to_string(slot));
        const detail::HeadOperands head({inputs.q.view, inputs.k.view, size.scale}, shape, slot,
                                        cache);
        const detail::Estimate host =
            detail::estimate_last_queries(head, positions, keys, shape.causal_offset());
        ASSERT_EQ(host.max_frontier(), extents.scores);
        EXPECT_EQ(mismatches(columns, host.column_sums(), slot * extents.scores, "column"), 0);
        EXPECT_EQ(mismatches(diagonals, host.diagonal_sums(), slot * extents.scores, "diagonal"),
                  0);
      }
    }
  }
}

// --- Top-k ----------------------------------------------------------------------------------

enum class ScoreKind { kUniform, kFewValues, kMostlyZero, kAdjacentDoubles };
constexpr std::array<ScoreKind, 4> kScoreKinds = {ScoreKind::kUniform, ScoreKind::kFewValues,
                                                  ScoreKind::kMostlyZero,
                                                  ScoreKind::kAdjacentDoubles};
constexpr std::array<int64_t, 7> kScoreSizes = {1, 7, 4095, 4097, 9000, 20011, 131072};
constexpr int64_t kFewValues = 5;
constexpr double kNonZeroShare = 0.01;
constexpr int64_t kAdjacentSpread = 20000;  // ulps between the lowest and highest key
constexpr int kSelectSlots = 3;
constexpr int kTopKTrials = 12;

std::vector<double> random_scores(Random& random, ScoreKind kind, int64_t size) {
  std::vector<double> scores(static_cast<std::size_t>(size));
  const double base = random.uniform(0.5, 2.0);
  for (double& score : scores) {
    switch (kind) {
      case ScoreKind::kUniform:
        score = random.uniform(0.0, 64.0);
        break;
      case ScoreKind::kFewValues:
        score = static_cast<double>(random.uniform_int(0, kFewValues - 1)) / kFewValues;
        break;
      case ScoreKind::kMostlyZero:
        score = random.bernoulli(kNonZeroShare) ? random.uniform() : 0.0;
        break;
      case ScoreKind::kAdjacentDoubles: {
        // Keys that share every digit but the last ones: the select runs to the last digit.
        uint64_t bits = 0;
        std::memcpy(&bits, &base, sizeof(bits));
        bits += static_cast<uint64_t>(random.uniform_int(0, kAdjacentSpread));
        std::memcpy(&score, &bits, sizeof(bits));
        break;
      }
    }
  }
  return scores;
}

// One selection's device arrays: scores of every slot, its lines and counts.
struct DeviceSelection {
  DeviceBuffer scores, lines, counts;
  cuda::index::LineSelection selection;
};

DeviceSelection upload_selection(const std::vector<double>& scores, int64_t size, int64_t budget,
                                 int64_t forced) {
  const int64_t capacity = std::max<int64_t>(1, std::min(budget, size));
  DeviceSelection device{DeviceBuffer(scores.size() * sizeof(double)),
                         DeviceBuffer(kSelectSlots * capacity * sizeof(int32_t)),
                         DeviceBuffer(kSelectSlots * sizeof(int32_t)),
                         {}};
  device.scores.upload(scores.data());
  device.selection = {static_cast<const double*>(device.scores.data()),
                      size,
                      budget,
                      forced,
                      static_cast<int32_t*>(device.lines.data()),
                      capacity,
                      static_cast<int32_t*>(device.counts.data())};
  return device;
}

void expect_host_top_k(const DeviceSelection& device, const std::vector<double>& scores,
                       int64_t size) {
  const cuda::index::LineSelection& selection = device.selection;
  std::vector<int32_t> lines(static_cast<std::size_t>(kSelectSlots * selection.capacity));
  std::vector<int32_t> counts(kSelectSlots);
  device.lines.download(lines.data());
  device.counts.download(counts.data());
  for (int slot = 0; slot < kSelectSlots; ++slot) {
    const std::vector<double> slot_scores(scores.begin() + slot * size,
                                          scores.begin() + (slot + 1) * size);
    const std::vector<int64_t> host =
        detail::top_k(slot_scores, selection.budget, selection.forced);
    ASSERT_EQ(counts[static_cast<std::size_t>(slot)], static_cast<int32_t>(host.size()))
        << "slot " << slot;
    const int32_t* gpu = lines.data() + slot * selection.capacity;
    for (std::size_t i = 0; i < host.size(); ++i) {
      ASSERT_EQ(gpu[i], host[i]) << "slot " << slot << " line " << i;
    }
  }
}

TEST_F(GpuEstimate, TopKEqualsTheHostTopKWithTies) {
  Random random;
  SCOPED_TRACE(random.trace());
  for (const int64_t size : kScoreSizes) {
    for (int trial = 0; trial < kTopKTrials; ++trial) {
      const ScoreKind kind = pick(random, kScoreKinds);
      // Budgets over the whole range: none, forced only, a cut inside, every line and beyond.
      const int64_t forced = random.uniform_int(0, std::min<int64_t>(size + 2, 300));
      const int64_t budget = random.bernoulli(0.2) ? forced + random.uniform_int(0, 1) * size
                                                   : random.uniform_int(forced, size + 2);
      SCOPED_TRACE("size " + std::to_string(size) + " kind " +
                   std::to_string(static_cast<int>(kind)) + " budget " + std::to_string(budget) +
                   " forced " + std::to_string(forced));
      const std::vector<double> first_scores = random_scores(random, kind, kSelectSlots * size);
      const std::vector<double> second_scores =
          random_scores(random, pick(random, kScoreKinds), kSelectSlots * size);
      const int64_t second_budget = random.uniform_int(0, size);
      const DeviceSelection first = upload_selection(first_scores, size, budget, forced);
      const DeviceSelection second = upload_selection(second_scores, size, second_budget, 0);
      cuda::index::launch_select_lines(first.selection, second.selection, kSelectSlots, stream_);
      expect_cuda(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
      expect_cuda(cudaGetLastError(), "select kernel");
      expect_host_top_k(first, first_scores, size);
      expect_host_top_k(second, second_scores, size);
    }
  }
}

}  // namespace
}  // namespace mmsparse::test
