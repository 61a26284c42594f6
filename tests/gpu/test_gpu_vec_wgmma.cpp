// VecAttention's two score passes (methods/vec/vec_device.h, VecScorePass): mma.sync fragments and
// warpgroup MMAs (head_dim 128, sm_90). On the same inputs both must select the host's keys within
// the rounding bound (tests/gpu/vec_selection_check.h), each plan record for record the host's cut
// of its own selection, and the two selections may differ only at keys where one of them differs
// from the host, all within the bound: odd lengths, one split and several, GQA 1, 4 and 7, causal
// and not, both 16-bit dtypes. The environment switch (MMSPARSE_VEC_SCORE) picks wgmma where it is
// compiled for and mma elsewhere, and names a bad value or an unsupported request.

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <iterator>
#include <optional>
#include <string>
#include <vector>

#include "attention_harness.h"
#include "common/errors.h"
#include "common/random.h"
#include "cuda/runtime/engine.h"
#include "device_buffer.h"
#include "index_test_support.h"
#include "methods/estimate/index_builders.h"
#include "methods/vec/vec_device.h"
#include "mmsparse/patterns.h"
#include "mmsparse/plan.h"
#include "mmsparse/status.h"
#include "plan_records.h"
#include "stream_test.h"
#include "vec_selection_check.h"

namespace mmsparse::test {
namespace {

using testing::expect_error;

class GpuVecScorePasses : public StreamTest {};

// Sets kVecScorePassVariable for its lifetime (unset for nullopt), then restores it.
class ScorePassSetting {
 public:
  explicit ScorePassSetting(const std::optional<std::string>& value) {
    const char* before = std::getenv(cuda::kVecScorePassVariable);
    if (before != nullptr) before_ = before;
    set(value);
  }
  ~ScorePassSetting() { set(before_); }
  ScorePassSetting(const ScorePassSetting&) = delete;
  ScorePassSetting& operator=(const ScorePassSetting&) = delete;

 private:
  static void set(const std::optional<std::string>& value) {
    if (value) {
      setenv(cuda::kVecScorePassVariable, value->c_str(), 1);
    } else {
      unsetenv(cuda::kVecScorePassVariable);
    }
  }
  std::optional<std::string> before_;
};

struct PassRun {
  cuda::VecScorePass pass;
  const char* setting;
  VecSelectionStats stats;
};

PlanShape shape_of(const ProblemSize& size) {
  return {size.batch, size.q_heads(), size.q_len, size.kv_len, size.tile_rows};
}

// Builds `spec` on the device under `run.setting`, checks that run.pass ran and that the plan
// matches the host's within the bound, record for record; returns the host's plan for the device's
// selection.
Plan build_and_check(PassRun& run, const PatternSpec& spec, const ProblemSize& size,
                     const AttentionInputs& inputs, const Plan& host, cudaStream_t stream) {
  const ScorePassSetting setting(std::string(run.setting));
  const DeviceOperand q(inputs.q);
  const DeviceOperand k(inputs.k);
  const PlanShape shape = shape_of(size);
  const PatternSpec resolved = resolve_pattern(spec);
  cuda::VecBuildTimes times;
  const cuda::DevicePlan built = cuda::build_vec_plan_on_device(
      resolved, shape, cuda::make_estimate_operands("vec", {q.view, k.view, size.scale}, shape),
      stream, &times);
  expect_cuda(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
  EXPECT_EQ(times.score_pass, run.pass) << "score pass " << run.setting << " did not run";
  const Plan adopted = expect_vec_selection_matches(
      built, host, resolved, {inputs.q.view, inputs.k.view, size.scale}, run.stats);
  expect_same_records(built, adopted, stream);
  return adopted;
}

// The keys of each tile of `plan` (spans and columns), ascending.
std::vector<int32_t> tile_keys(const Plan& plan, int64_t tile) {
  std::vector<int32_t> keys(plan.columns.begin() + plan.tile_column_offsets[tile],
                            plan.columns.begin() + plan.tile_column_offsets[tile + 1]);
  for (int64_t s = plan.tile_span_offsets[tile]; s < plan.tile_span_offsets[tile + 1]; ++s) {
    for (int32_t key = plan.spans[s].begin; key < plan.spans[s].end; ++key) keys.push_back(key);
  }
  std::sort(keys.begin(), keys.end());
  return keys;
}

// Keys kept by one plan's tile and not the other's, over all tiles.
int64_t differing_keys(const Plan& first, const Plan& second) {
  EXPECT_EQ(first.num_tiles(), second.num_tiles());
  int64_t differing = 0;
  for (int64_t tile = 0; tile < std::min(first.num_tiles(), second.num_tiles()); ++tile) {
    const std::vector<int32_t> a = tile_keys(first, tile);
    const std::vector<int32_t> b = tile_keys(second, tile);
    std::vector<int32_t> only_one;
    std::set_symmetric_difference(a.begin(), a.end(), b.begin(), b.end(),
                                  std::back_inserter(only_one));
    differing += static_cast<int64_t>(only_one.size());
  }
  return differing;
}

// Both passes' runs over several problems, and the keys their plans disagree on.
struct PassPair {
  PassRun mma{cuda::VecScorePass::kMma, "mma", {}};
  PassRun wgmma{cuda::VecScorePass::kWgmma, "wgmma", {}};
  int64_t differing = 0;
};

// A random problem of `q_len` queries and `kv_len` keys at head_dim 128 and `gqa`, built by both
// passes under causal=0 and causal=1 with spec_for(trial) (trial counts up per build; union_tiles
// at random), each checked against the host's plan.
template <class SpecFor>
void build_shape_with_both_passes(Random& random, int64_t q_len, int64_t kv_len, const Gqa& gqa,
                                  const SpecFor& spec_for, std::size_t& trial, PassPair& passes,
                                  cudaStream_t stream) {
  ProblemSize size;
  size.q_len = q_len;
  size.kv_len = kv_len;
  size.kv_heads = gqa.kv_heads;
  size.group = gqa.group;
  size.head_dim = 128;
  size.dtype = pick(random, kDtypes);
  size.tile_rows = 128;
  size.scale = 1.0f / std::sqrt(static_cast<float>(size.head_dim));
  const AttentionInputs inputs = random_inputs(random, size);
  for (const int64_t causal : {int64_t{0}, int64_t{1}}) {
    PatternSpec spec = spec_for(trial++);
    spec.params["causal"] = causal;
    spec.params["union_tiles"] = random.uniform_int(0, 1);
    SCOPED_TRACE(spec.to_string() + " " + describe(size));
    const PatternInputs host_inputs{inputs.q.view, inputs.k.view, size.scale};
    const Plan host = build_plan(spec, shape_of(size), nullptr, &host_inputs);
    const Plan by_mma = build_and_check(passes.mma, spec, size, inputs, host, stream);
    const Plan by_wgmma = build_and_check(passes.wgmma, spec, size, inputs, host, stream);
    passes.differing += differing_keys(by_mma, by_wgmma);
  }
}

// The same for `length` queries and as many keys or a few more.
template <class SpecFor>
void build_with_both_passes(Random& random, int64_t length, const Gqa& gqa, const SpecFor& spec_for,
                            std::size_t& trial, PassPair& passes, cudaStream_t stream) {
  const int64_t kv_len = length + random.uniform_int(0, 1) * random.uniform_int(1, 99);
  build_shape_with_both_passes(random, length, kv_len, gqa, spec_for, trial, passes, stream);
}

// A key the passes disagree on differs from the host's on one side, where it is borderline; each
// pass's borderline keys stay rare (the bound is tight).
void expect_passes_agree(const PassPair& passes) {
  EXPECT_LE(passes.differing, passes.mma.stats.differing + passes.wgmma.stats.differing);
  for (const PassRun* run : {&passes.mma, &passes.wgmma}) {
    EXPECT_LE(run->stats.borderline * kMaxBorderlineShare, run->stats.candidates)
        << run->setting << ": " << run->stats.borderline << " of " << run->stats.candidates
        << " candidates within the bound";
  }
}

// head_dim 128 (the wgmma pass's), odd lengths within one key split and across three (GQA 4 and 7
// there, to keep the host's reference short), GQA 1, 4 and 7 with one or two KV heads, causal and
// not, bf16 and fp16, alphas from dense to sparse selections, groups of the running maximum that
// divide the splits and one that spans the keys.
TEST_F(GpuVecScorePasses, BothPassesSelectTheSameKeysWithinTheRoundingBound) {
  Random random;
  SCOPED_TRACE(random.trace());
  struct Case {
    int64_t length;
    Gqa gqa;
  };
  constexpr int64_t kShort = 777;
  constexpr int64_t kMedium = 3 * 1024 + 65;
  constexpr int64_t kAcrossSplits = 2 * kCheckedSplitKeys + 333;
  constexpr std::array<Case, 10> kCases = {{{kShort, {1, 1}},
                                            {kShort, {1, 4}},
                                            {kShort, {2, 4}},
                                            {kShort, {1, 7}},
                                            {kMedium, {1, 1}},
                                            {kMedium, {1, 4}},
                                            {kMedium, {2, 4}},
                                            {kMedium, {1, 7}},
                                            {kAcrossSplits, {1, 4}},
                                            {kAcrossSplits, {1, 7}}}};
  constexpr std::array<int64_t, 4> kAlphas = {1000, 100000, 600000, 950000};
  constexpr std::array<int64_t, 3> kGroupTiles = {1, 16, 8192};
  constexpr std::array<int64_t, 2> kPoolings = {64, 128};
  const auto spec_for = [&](std::size_t trial) {
    return PatternSpec{"vec",
                       {{"pooling", pick(random, kPoolings)},
                        {"group", kGroupTiles[trial % kGroupTiles.size()]},
                        {"alpha_ppm", kAlphas[trial % kAlphas.size()]}}};
  };
  PassPair passes;
  std::size_t trial = 0;
  for (const Case& test_case : kCases) {
    build_with_both_passes(random, test_case.length, test_case.gqa, spec_for, trial, passes,
                           stream_);
  }
  expect_passes_agree(passes);
  for (const PassRun* run : {&passes.mma, &passes.wgmma}) {
    EXPECT_GT(run->stats.selected_in_spans, 0) << run->setting;
    EXPECT_GT(run->stats.selected_in_columns, 0) << run->setting;
    EXPECT_GT(run->stats.spans_across_splits, 0) << run->setting;
  }
  RecordProperty("keys_the_passes_disagree_on", std::to_string(passes.differing));
}

// Groups of the running maximum that start inside a chunk of 64 keys (the wgmma pass's filter
// takes a chunk's four tiles at once, one per lane of a row's quad, and restarts the maximum
// where a group starts among them): groups of 2, 3, 5 and 7 tiles after sinks of 64 and 128 keys,
// so that groups start at every quad lane, over odd lengths (one split and three) and GQA 1, 4 and
// 7, causal and not.
TEST_F(GpuVecScorePasses, GroupsStartingInsideAChunkMatchTheHost) {
  Random random;
  SCOPED_TRACE(random.trace());
  struct Case {
    int64_t length;
    Gqa gqa;
  };
  constexpr std::array<Case, 5> kCases = {{{777, {1, 1}},
                                           {777, {1, 7}},
                                           {3 * 1024 + 65, {1, 4}},
                                           {3 * 1024 + 65, {2, 4}},
                                           {2 * kCheckedSplitKeys + 333, {1, 4}}}};
  constexpr std::array<int64_t, 4> kGroupTiles = {2, 3, 5, 7};
  constexpr std::array<int64_t, 3> kAlphas = {30000, 300000, 900000};
  constexpr std::array<int64_t, 2> kPoolings = {64, 128};
  // Every group after every sink: the pooling changes after each round of the groups.
  const auto spec_for = [&](std::size_t trial) {
    return PatternSpec{"vec",
                       {{"pooling", kPoolings[trial / kGroupTiles.size() % kPoolings.size()]},
                        {"group", kGroupTiles[trial % kGroupTiles.size()]},
                        {"alpha_ppm", kAlphas[trial % kAlphas.size()]}}};
  };
  PassPair passes;
  std::size_t trial = 0;
  for (const Case& test_case : kCases) {
    build_with_both_passes(random, test_case.length, test_case.gqa, spec_for, trial, passes,
                           stream_);
  }
  expect_passes_agree(passes);
  for (const PassRun* run : {&passes.mma, &passes.wgmma}) {
    EXPECT_GT(run->stats.selected_in_columns, 0) << run->setting;
  }
}

// The wgmma pass's stage ring (four stages, transaction barriers per stage) over scans of 0 to 9
// chunks of 64 keys and one of ~32: a CTA scans from the sinks' end (`pooling` keys) to its last
// block's candidate end, so kv_len = pooling + 64 k - 7 gives k chunks without causality (one
// fewer block's worth with it), chunk counts below, at and past the stage count and not multiples
// of it; kv_len <= pooling leaves the CTA no candidate (it returns before the ring), and causal
// blocks near the top have none while others in the CTA do. GQA 1, 4 and 7, both 16-bit dtypes,
// equal and longer key lengths. A phase error in the ring traps the kernel (a launch error
// within seconds) rather than hanging: this test then fails, it does not time out.
TEST_F(GpuVecScorePasses, ScansOfEveryChunkCountAroundTheStageRingMatchTheHost) {
  Random random;
  SCOPED_TRACE(random.trace());
  constexpr int64_t kChunkKeys = 64;
  constexpr int64_t kOddTail = 7;
  constexpr int64_t kMaxChunks = 9;
  constexpr int64_t kManyChunksLength = 2 * 1024 + 65;
  constexpr std::array<int64_t, 2> kPoolings = {64, 128};
  constexpr std::array<Gqa, 3> kGqas = {{{1, 1}, {1, 4}, {1, 7}}};
  constexpr std::array<int64_t, 3> kAlphas = {30000, 300000, 900000};
  constexpr std::array<int64_t, 3> kGroupTiles = {1, 5, 16};
  PassPair passes;
  std::size_t trial = 0;
  for (const int64_t pooling : kPoolings) {
    const auto spec_for = [&](std::size_t trial_index) {
      return PatternSpec{"vec",
                         {{"pooling", pooling},
                          {"group", kGroupTiles[trial_index % kGroupTiles.size()]},
                          {"alpha_ppm", kAlphas[trial_index % kAlphas.size()]}}};
    };
    std::vector<int64_t> lengths = {pooling - kOddTail, pooling};
    for (int64_t chunks = 1; chunks <= kMaxChunks; ++chunks) {
      lengths.push_back(pooling + chunks * kChunkKeys - kOddTail);
    }
    lengths.push_back(kManyChunksLength);
    for (std::size_t i = 0; i < lengths.size(); ++i) {
      const Gqa& gqa = kGqas[i % kGqas.size()];
      build_shape_with_both_passes(random, lengths[i], lengths[i], gqa, spec_for, trial, passes,
                                   stream_);
    }
    // Keys past the queries: the causal diagonal moves, and so does every CTA's chunk count.
    build_shape_with_both_passes(random, 3 * kChunkKeys + 1, 5 * kChunkKeys + 3, kGqas[1], spec_for,
                                 trial, passes, stream_);
  }
  expect_passes_agree(passes);
  for (const PassRun* run : {&passes.mma, &passes.wgmma}) {
    EXPECT_GT(run->stats.selected_in_columns + run->stats.selected_in_spans, 0) << run->setting;
  }
}

// Unset, the switch takes wgmma at head_dim 128 and mma at 64 (on sm_90, the only architecture
// the library compiles for); "mma" and "wgmma" force one, "wgmma" at head_dim 64 and other values
// are refused by name.
TEST_F(GpuVecScorePasses, TheSwitchPicksThePassAndNamesBadValues) {
  int device = 0;
  int major = 0;
  expect_cuda(cudaGetDevice(&device), "cudaGetDevice");
  expect_cuda(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device),
              "cudaDeviceGetAttribute");
  constexpr int kHopper = 9;
  {
    const ScorePassSetting setting(std::nullopt);
    EXPECT_EQ(cuda::vec_score_pass(128),
              major == kHopper ? cuda::VecScorePass::kWgmma : cuda::VecScorePass::kMma);
    EXPECT_EQ(cuda::vec_score_pass(64), cuda::VecScorePass::kMma);
  }
  {
    const ScorePassSetting setting(std::string("mma"));
    EXPECT_EQ(cuda::vec_score_pass(128), cuda::VecScorePass::kMma);
  }
  {
    const ScorePassSetting setting(std::string("wgmma"));
    if (major == kHopper) {
      EXPECT_EQ(cuda::vec_score_pass(128), cuda::VecScorePass::kWgmma);
    }
    expect_error([] { (void)cuda::vec_score_pass(64); }, ErrorCode::kUnsupported,
                 {cuda::kVecScorePassVariable, "got head_dim 64"});
  }
  {
    const ScorePassSetting setting(std::string("tensor"));
    expect_error([] { (void)cuda::vec_score_pass(128); }, ErrorCode::kInvalidArgument,
                 {cuda::kVecScorePassVariable, "mma, wgmma or unset", "'tensor'"});
  }
  EXPECT_STREQ(cuda::vec_score_pass_name(cuda::VecScorePass::kMma), "mma");
  EXPECT_STREQ(cuda::vec_score_pass_name(cuda::VecScorePass::kWgmma), "wgmma");
}

}  // namespace
}  // namespace mmsparse::test
