// What mmsparse-dist-bench builds on, on the CPU: a rank's rows of the synthetic workload generated
// alone equal the whole problem's rows; dist::attention keeps each row's LSE when asked; the
// accuracy sweep recalls 1 in the exactness mode and less with small passing blocks; phases are
// marked for a tracer in the order the algorithm runs them.

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <numeric>
#include <optional>
#include <string>
#include <vector>

#include "accuracy.h"
#include "common/errors.h"
#include "common/random.h"
#include "fault_options.h"
#include "mmsparse/dist.h"
#include "mmsparse/status.h"
#include "mmsparse/tools/workload.h"

namespace mmsparse::dist_bench {
namespace {

Workload small_workload(const std::string& preset, int64_t length, int64_t needles) {
  WorkloadSpec spec;
  spec.preset = preset;
  spec.seq_len = length;
  spec.q_heads = 4;
  spec.kv_heads = 2;
  spec.head_dim = 32;
  spec.needles = needles;
  return Workload::create(spec);
}

TEST(DistInputs, RowsGeneratedAloneEqualTheWholeProblemBitForBit) {
  const Workload workload = small_workload("video-qwen2.5vl-128k", 3001, 0);
  const Workload::Tensors whole = workload.materialize(DType::kBFloat16);
  // Scattered, out of order, a repeat, the first and the last row: a rank's layout and more.
  const std::vector<int64_t> positions = {3000, 0, 17, 1500, 1501, 17, 2999, 64, 1};
  const Workload::Tensors part = workload.materialize_rows(positions, DType::kBFloat16, 2);
  for (const auto& [all, rows] :
       {std::pair{&whole.q, &part.q}, std::pair{&whole.k, &part.k}, std::pair{&whole.v, &part.v}}) {
    const int64_t row_bytes = all->shape()[2] * all->shape()[3] * 2;
    ASSERT_EQ(rows->shape()[1], static_cast<int64_t>(positions.size()));
    for (std::size_t n = 0; n < positions.size(); ++n) {
      EXPECT_EQ(0, std::memcmp(rows->data() + static_cast<int64_t>(n) * row_bytes,
                               all->data() + positions[n] * row_bytes,
                               static_cast<std::size_t>(row_bytes)))
          << "row " << positions[n];
    }
  }
}

TEST(DistInputs, RowsOutsideTheSequenceAreNamed) {
  const Workload workload = small_workload("video-qwen2.5vl-128k", 512, 0);
  const std::vector<int64_t> positions = {0, 512};
  try {
    workload.materialize_rows(positions, DType::kBFloat16);
    FAIL() << "expected an error";
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(error.what()).find("positions[1]"), std::string::npos) << error.what();
  }
}

AccuracyInputs needle_inputs(int64_t length, int64_t needles) {
  const Workload workload = small_workload("mixed-interleaved", length, needles);
  AccuracyInputs inputs;
  inputs.host = workload.materialize(DType::kFloat32);
  inputs.q = inputs.host.q.view();
  inputs.k = inputs.host.k.view();
  inputs.v = inputs.host.v.view();
  inputs.query_len = std::max<int64_t>(workload.seq_len() - workload.question_begin(), 1);
  inputs.context_len = workload.seq_len() - inputs.query_len;
  inputs.needles = workload.needles();
  return inputs;
}

TEST(DistAccuracy, ExactnessModeRecallsOneAndSmallPassingBlocksLess) {
  const AccuracyInputs inputs = needle_inputs(2048, 4);
  AccuracySweep sweep;
  sweep.worlds = {2, 4};
  sweep.anchor_divisors = {64};
  sweep.passing_divisors = {512, 64};
  const std::vector<AccuracyRow> rows = accuracy_sweep(sweep, inputs, host_row_copy());
  ASSERT_EQ(rows.size(), 6u);         // per world: the exact row, then two passing lengths
  constexpr double kRoundoff = 1e-4;  // fp32 LSEs of the same keys merged in another order
  for (const AccuracyRow& row : rows) {
    SCOPED_TRACE("W " + std::to_string(row.world) + " l_p n/" +
                 std::to_string(row.passing_divisor));
    // The query rows attend every key in every mode.
    EXPECT_NEAR(row.query_recall_mean, 1.0, kRoundoff);
    EXPECT_NEAR(row.query_recall_min, 1.0, kRoundoff);
    EXPECT_LE(row.context_recall_mean, 1.0 + kRoundoff);
    if (row.passing_divisor == 0) {
      EXPECT_NEAR(row.context_recall_mean, 1.0, kRoundoff);
      EXPECT_NEAR(row.context_recall_min, 1.0, kRoundoff);
      EXPECT_EQ(row.needles_kept, row.needle_pairs);
    } else {
      EXPECT_LT(row.context_recall_min, 1.0 - kRoundoff);  // dropped keys hold some mass
      EXPECT_LE(row.needles_kept, row.needle_pairs);
    }
  }
  // Passing more keys covers more mass (same world, same anchor).
  EXPECT_GT(rows[2].context_recall_mean, rows[1].context_recall_mean);
  EXPECT_GT(rows[5].context_recall_mean, rows[4].context_recall_mean);
  EXPECT_GT(rows[0].needle_pairs + rows[3].needle_pairs, 0);  // the needles sit in passed blocks
}

// Records each rank's marks, in order.
class RecordingTracer final : public dist::PhaseTracer {
 public:
  void mark(std::string_view phase, bool begin, void* /*stream*/) override {
    marks.push_back((begin ? "+" : "-") + std::string(phase));
  }
  std::vector<std::string> marks;
};

std::vector<std::string> traced_marks(dist::Scheme scheme, int rank_to_record) {
  test::Random random(7);
  const int64_t context = 700, query = 9, world = 2;
  dist::DistConfig config;
  config.scheme = scheme;
  const dist::SequenceSplit split = dist::split_sequence(config, context, query, world);
  const Tensor q = random.normal_tensor(DType::kFloat32, {1, context + query, 4, 16});
  const Tensor k = random.normal_tensor(DType::kFloat32, {1, context + query, 2, 16});
  const Tensor v = random.normal_tensor(DType::kFloat32, {1, context + query, 2, 16});
  std::vector<std::string> recorded;
  std::mutex mutex;
  dist::run_in_process(world, [&](dist::Communicator& communicator) {
    const int rank = communicator.rank();
    const int64_t local = dist::local_length(split, rank);
    Tensor local_q(DType::kFloat32, {1, local, 4, 16}), local_k(DType::kFloat32, {1, local, 2, 16}),
        local_v(DType::kFloat32, {1, local, 2, 16}), out(DType::kFloat32, {1, local, 4, 16});
    dist::gather_local(split, rank, q.view(), local_q.view());
    dist::gather_local(split, rank, k.view(), local_k.view());
    dist::gather_local(split, rank, v.view(), local_v.view());
    RecordingTracer tracer;
    communicator.set_tracer(&tracer);
    dist::attention(config, split, communicator, local_q.view(), local_k.view(), local_v.view(),
                    out.view());
    communicator.set_tracer(nullptr);
    const std::lock_guard lock(mutex);
    if (rank == rank_to_record) recorded = tracer.marks;
  });
  return recorded;
}

TEST(DistTrace, SpavaMarksItsPhasesInOrder) {
  const std::vector<std::string> expected = {
      "+select block 1",    "-select block 1",    "+select block 2",    "-select block 2",
      "+query attention",   "-query attention",   "+anchor attention",  "-anchor attention",
      "+block 1 attention", "-block 1 attention", "+block 2 attention", "-block 2 attention",
      "+query merge",       "-query merge"};
  EXPECT_EQ(traced_marks(dist::Scheme::kSpava, 1), expected);
}

TEST(DistTrace, RingMarksEveryStepAndTheMerge) {
  const std::vector<std::string> expected = {"+step 0 attention",
                                             "-step 0 attention",
                                             "+step 1 attention",
                                             "-step 1 attention",
                                             "+merge",
                                             "-merge"};
  EXPECT_EQ(traced_marks(dist::Scheme::kZigzagRing, 0), expected);
}

TEST(DistLse, AWrongShapeIsNamed) {
  test::Random random(3);
  dist::DistConfig config;
  const dist::SequenceSplit split = dist::split_sequence(config, 300, 4, 1);
  const int64_t local = dist::local_length(split, 0);
  const Tensor q = random.normal_tensor(DType::kFloat32, {1, local, 2, 8});
  const Tensor kv = random.normal_tensor(DType::kFloat32, {1, local, 1, 8});
  Tensor out(DType::kFloat32, {1, local, 2, 8});
  Tensor lse(DType::kFloat32, {1, 2, local + 1});
  try {
    dist::run_in_process(1, [&](dist::Communicator& communicator) {
      dist::attention(config, split, communicator, q.view(), kv.view(), kv.view(), out.view(), {},
                      nullptr, lse.view());
    });
    FAIL() << "expected an error";
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(error.what()).find("lse"), std::string::npos) << error.what();
  }
}

// A fault test on one GPU has no rank 1 to kill: refused, naming the flag, instead of waiting for
// a death that never comes.
TEST(DistFaultOptions, AKilledRankOutsideTheRunIsRefusedNamingTheFlag) {
  EXPECT_NO_THROW(check_fault_rank(-1, 1));  // no fault test
  EXPECT_NO_THROW(check_fault_rank(1, 2));
  EXPECT_NO_THROW(check_fault_rank(0, 4));
  testing::expect_error([] { check_fault_rank(1, 1); }, ErrorCode::kInvalidArgument,
                        {"--fault-kill-rank", "at least 2 ranks"});
  testing::expect_error([] { check_fault_rank(0, 1); }, ErrorCode::kInvalidArgument,
                        {"--fault-kill-rank", "at least 2 ranks"});
  testing::expect_error([] { check_fault_rank(2, 2); }, ErrorCode::kInvalidArgument,
                        {"--fault-kill-rank", "[0, 1]", "2"});
  testing::expect_error([] { check_fault_rank(7, 4); }, ErrorCode::kInvalidArgument,
                        {"--fault-kill-rank", "[0, 3]", "7"});
}

TEST(DistFaultOptions, TooFewGpusSkipWithTheReason) {
  EXPECT_EQ(kExitSkipped, 77);  // ctest's SKIP_RETURN_CODE in tests/multi_gpu
  EXPECT_FALSE(skip_reason(1, 1).has_value());
  EXPECT_FALSE(skip_reason(2, 2).has_value());
  EXPECT_FALSE(skip_reason(2, 4).has_value());
  const std::optional<std::string> reason = skip_reason(2, 1);
  ASSERT_TRUE(reason.has_value());
  EXPECT_NE(reason->find("SKIPPED"), std::string::npos);
  EXPECT_NE(reason->find("at least 2 GPUs"), std::string::npos);
  EXPECT_NE(reason->find("1 visible"), std::string::npos);
}

}  // namespace
}  // namespace mmsparse::dist_bench
