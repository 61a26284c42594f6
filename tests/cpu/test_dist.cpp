// Sequence-parallel attention on W in-process ranks (threads, the CPU backend): Spava, APB and Star
// equal the single-process reference of the same approximation, their exactness settings and the
// ZigZag ring equal dense causal attention; odd lengths, GQA, faults and bad configs.

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "common/compare.h"
#include "common/random.h"
#include "mmsparse/attention.h"
#include "mmsparse/dist.h"
#include "mmsparse/status.h"

namespace mmsparse::dist {
namespace {

using test::compare;
using test::Random;

// fp32 results of the same pairs in another order (split calls + LSE merges): fp32 roundoff.
constexpr double kFp32Tolerance = 2e-5;

struct Problem {
  int64_t context_len = 0;
  int64_t query_len = 0;
  int64_t q_heads = 0;
  int64_t kv_heads = 0;
  int64_t head_dim = 0;
};

struct Inputs {
  Tensor q, k, v;
};

Inputs random_inputs(Random& random, const Problem& problem) {
  const int64_t total = problem.context_len + problem.query_len;
  return {random.normal_tensor(DType::kFloat32, {1, total, problem.q_heads, problem.head_dim}),
          random.normal_tensor(DType::kFloat32, {1, total, problem.kv_heads, problem.head_dim}),
          random.normal_tensor(DType::kFloat32, {1, total, problem.kv_heads, problem.head_dim})};
}

AttentionOptions single_thread() {
  AttentionOptions options;
  options.num_threads = 1;  // W ranks already run in parallel
  return options;
}

// Runs the scheme on `world` threads; returns the global output assembled from every rank (blocks
// from their owners, anchor and query rows from rank 0) and checks every rank's shared rows agree.
Tensor run_distributed(const DistConfig& config, const SequenceSplit& split, const Inputs& inputs) {
  const std::vector<int64_t> q_shape = inputs.q.shape();
  Tensor global_out(DType::kFloat32, q_shape);
  std::vector<Tensor> local_outs(static_cast<std::size_t>(split.world));
  run_in_process(split.world, [&](Communicator& communicator) {
    const int rank = communicator.rank();
    const int64_t local_len = local_length(split, rank);
    Tensor q(DType::kFloat32, {1, local_len, q_shape[2], q_shape[3]});
    Tensor k(DType::kFloat32, {1, local_len, inputs.k.shape()[2], q_shape[3]});
    Tensor v(DType::kFloat32, {1, local_len, inputs.k.shape()[2], q_shape[3]});
    Tensor out(DType::kFloat32, {1, local_len, q_shape[2], q_shape[3]});
    gather_local(split, rank, inputs.q.view(), q.view());
    gather_local(split, rank, inputs.k.view(), k.view());
    gather_local(split, rank, inputs.v.view(), v.view());
    check_same_config(communicator, config, split, q.view(), k.view());
    Workspace workspace;
    // Twice through one workspace: reused scratch must not leak state between calls.
    for (int repeat = 0; repeat < 2; ++repeat) {
      attention(config, split, communicator, q.view(), k.view(), v.view(), out.view(),
                single_thread(), &workspace);
    }
    scatter_local(split, rank, out.view(), global_out.view(), /*with_shared_rows=*/rank == 0);
    local_outs[static_cast<std::size_t>(rank)] = std::move(out);
  });
  if (split.scheme != Scheme::kZigzagRing) {
    // The query rows are merged on every rank from the same partials: identical everywhere.
    for (int rank = 1; rank < split.world; ++rank) {
      const int64_t query_begin = local_length(split, rank) - split.query_len;
      const int64_t row = q_shape[2] * q_shape[3];
      const float* ours =
          local_outs[static_cast<std::size_t>(rank)].data_as<float>() + query_begin * row;
      const float* first =
          local_outs[0].data_as<float>() + (local_length(split, 0) - split.query_len) * row;
      for (int64_t i = 0; i < split.query_len * row; ++i) {
        EXPECT_EQ(ours[i], first[i]) << "rank " << rank << " query element " << i;
      }
    }
  }
  return global_out;
}

Tensor reference(const DistConfig& config, const SequenceSplit& split, const Inputs& inputs) {
  Tensor out(DType::kFloat32, inputs.q.shape());
  Tensor lse(DType::kFloat32, {1, inputs.q.shape()[2], inputs.q.shape()[1]});
  reference_attention(config, split, inputs.q.view(), inputs.k.view(), inputs.v.view(), out.view(),
                      lse.view(), single_thread());
  return out;
}

Tensor dense(const Inputs& inputs) {
  Tensor out(DType::kFloat32, inputs.q.shape());
  Tensor lse(DType::kFloat32, {1, inputs.q.shape()[2], inputs.q.shape()[1]});
  attention_dense(inputs.q.view(), inputs.k.view(), inputs.v.view(), out.view(), lse.view());
  return out;
}

struct Case {
  Scheme scheme;
  int world;
  Problem problem;
  int64_t anchor_len;
  int64_t passing_len;
  int64_t tile;
};

std::string describe(const Case& c) {
  return std::string(scheme_name(c.scheme)) + " W=" + std::to_string(c.world) +
         " context=" + std::to_string(c.problem.context_len) +
         " query=" + std::to_string(c.problem.query_len) +
         " heads=" + std::to_string(c.problem.q_heads) + "/" + std::to_string(c.problem.kv_heads) +
         " anchor=" + std::to_string(c.anchor_len) + " passing=" + std::to_string(c.passing_len) +
         " tile=" + std::to_string(c.tile);
}

DistConfig config_of(const Case& c) {
  DistConfig config;
  config.scheme = c.scheme;
  config.anchor_len = c.anchor_len;
  config.passing_len = c.passing_len;
  config.tile = c.tile;
  return config;
}

TEST(Dist, ApproximationsEqualTheirSingleProcessReference) {
  Random random;
  const std::vector<Case> cases = {
      {Scheme::kSpava, 1, {90, 3, 2, 1, 8}, 8, 4, 16},  // one rank: both hosts local
      {Scheme::kSpava, 2, {203, 7, 4, 2, 16}, 19, 5, 16},
      {Scheme::kSpava, 3, {301, 5, 6, 2, 8}, kUseDefault, 9, 32},
      {Scheme::kSpava, 4, {257, 3, 2, 1, 16}, 13, 4, 8},
      {Scheme::kSpava, 4, {131, 1, 3, 3, 8}, 0, 3, 16},  // no anchor, MHA
      {Scheme::kApb, 3, {190, 6, 4, 2, 8}, 17, 8, 16},
      {Scheme::kStar, 3, {170, 5, 4, 1, 8}, kUseDefault, kUseDefault, 16},
      {Scheme::kStar, 1, {60, 4, 2, 2, 8}, kUseDefault, kUseDefault, 16},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(describe(c) + " " + random.trace());
    const DistConfig config = config_of(c);
    const SequenceSplit split =
        split_sequence(config, c.problem.context_len, c.problem.query_len, c.world);
    const Inputs inputs = random_inputs(random, c.problem);
    const Tensor actual = run_distributed(config, split, inputs);
    const Tensor expected = reference(config, split, inputs);
    const auto diff = compare(actual.view(), expected.view());
    EXPECT_LE(diff.max_abs, kFp32Tolerance) << diff;
    // And it is an approximation: with passing below the block sizes it differs from dense.
    if (c.scheme == Scheme::kSpava) {
      EXPECT_GT(compare(actual.view(), dense(inputs).view()).max_abs, 1e-3);
    }
  }
}

TEST(Dist, ExactnessSettingsAndTheRingEqualDenseAttention) {
  Random random;
  constexpr int64_t kWholeBlocks = 1 << 20;  // passing clipped to each block: whole blocks pass
  const std::vector<Case> cases = {
      {Scheme::kSpava, 2, {97, 4, 4, 2, 16}, 11, kWholeBlocks, 16},
      {Scheme::kSpava, 3, {211, 9, 6, 3, 8}, kUseDefault, kWholeBlocks, 8},
      {Scheme::kSpava, 4, {150, 2, 4, 1, 8}, 0, kWholeBlocks, 16},
      {Scheme::kApb, 4, {123, 5, 2, 2, 8}, 7, kWholeBlocks, 16},
      {Scheme::kZigzagRing, 1, {45, 2, 2, 1, 8}, kUseDefault, kUseDefault, 16},
      {Scheme::kZigzagRing, 2, {101, 6, 4, 2, 16}, kUseDefault, kUseDefault, 16},
      {Scheme::kZigzagRing, 3, {199, 0, 6, 2, 8}, kUseDefault, kUseDefault, 32},
      {Scheme::kZigzagRing, 4, {77, 3, 4, 4, 8}, kUseDefault, kUseDefault, 8},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(describe(c) + " " + random.trace());
    const DistConfig config = config_of(c);
    const SequenceSplit split =
        split_sequence(config, c.problem.context_len, c.problem.query_len, c.world);
    const Inputs inputs = random_inputs(random, c.problem);
    const Tensor actual = run_distributed(config, split, inputs);
    const auto diff = compare(actual.view(), dense(inputs).view());
    EXPECT_LE(diff.max_abs, kFp32Tolerance) << diff;
  }
}

TEST(Dist, SparseAttentionInsideEachRankEqualsItsReference) {
  Random random;
  // Blocks of 240-480 keys: longer than the vertical-slash bands (tile-wide) reach.
  const Problem problem{1501, 5, 4, 2, 16};
  for (const std::string pattern :
       {"a-shape:sink=4,local=16", "vertical-slash:vertical=2,slash=2,last_q=8,sink=1,local=1"}) {
    for (const Scheme scheme : {Scheme::kSpava, Scheme::kApb}) {
      DistConfig config;
      config.scheme = scheme;
      config.anchor_len = 12;
      config.passing_len = 5;
      config.tile = 16;
      config.local_pattern = pattern;
      SCOPED_TRACE(std::string(scheme_name(scheme)) + " " + pattern + " " + random.trace());
      const SequenceSplit split = split_sequence(config, problem.context_len, problem.query_len, 3);
      const Inputs inputs = random_inputs(random, problem);
      const Tensor actual = run_distributed(config, split, inputs);
      const auto diff = compare(actual.view(), reference(config, split, inputs).view());
      EXPECT_LE(diff.max_abs, kFp32Tolerance) << diff;
      // The pattern drops pairs: the result differs from the same scheme without it.
      DistConfig dense_inside = config;
      dense_inside.local_pattern.clear();
      EXPECT_GT(compare(actual.view(), reference(dense_inside, split, inputs).view()).max_abs,
                1e-3);
    }
  }
  DistConfig bad;
  bad.local_pattern = "no-such-pattern";
  EXPECT_THROW(split_sequence(bad, 100, 4, 2), Error);
}

TEST(Dist, BFloat16RanksTrackTheReference) {
  Random random;
  const Problem problem{181, 6, 4, 2, 32};
  DistConfig config;
  config.anchor_len = 16;
  config.passing_len = 6;
  config.tile = 16;
  const SequenceSplit split = split_sequence(config, problem.context_len, problem.query_len, 3);
  const Inputs inputs = random_inputs(random, problem);
  Inputs rounded{to_contiguous(inputs.q.view(), DType::kBFloat16),
                 to_contiguous(inputs.k.view(), DType::kBFloat16),
                 to_contiguous(inputs.v.view(), DType::kBFloat16)};
  Tensor global_out(DType::kBFloat16, inputs.q.shape());
  run_in_process(split.world, [&](Communicator& communicator) {
    const int rank = communicator.rank();
    const int64_t local_len = local_length(split, rank);
    Tensor q(DType::kBFloat16, {1, local_len, problem.q_heads, problem.head_dim});
    Tensor k(DType::kBFloat16, {1, local_len, problem.kv_heads, problem.head_dim});
    Tensor v(DType::kBFloat16, {1, local_len, problem.kv_heads, problem.head_dim});
    Tensor out(DType::kBFloat16, {1, local_len, problem.q_heads, problem.head_dim});
    gather_local(split, rank, rounded.q.view(), q.view());
    gather_local(split, rank, rounded.k.view(), k.view());
    gather_local(split, rank, rounded.v.view(), v.view());
    attention(config, split, communicator, q.view(), k.view(), v.view(), out.view(),
              single_thread());
    scatter_local(split, rank, out.view(), global_out.view(), rank == 0);
  });
  // The reference runs on the same bf16-rounded inputs, in fp32.
  Inputs widened{to_contiguous(rounded.q.view(), DType::kFloat32),
                 to_contiguous(rounded.k.view(), DType::kFloat32),
                 to_contiguous(rounded.v.view(), DType::kFloat32)};
  const Tensor expected = reference(config, split, widened);
  const auto diff = compare(global_out.view(), expected.view());
  // bf16 outputs of partials and of the merge: a few bf16 roundings of O(1) values.
  EXPECT_LE(diff.max_abs, 3e-2) << diff;
  EXPECT_LE(diff.relative, 1e-2) << diff;
}

}  // namespace
}  // namespace mmsparse::dist
