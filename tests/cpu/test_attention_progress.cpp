// AttentionOptions::on_progress on the CPU reference backend: fractions in (0, 1] that never go
// back, reported on the calling thread only, ending with 1.0, and results identical to a call
// without a callback.

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <thread>
#include <vector>

#include "common/random.h"
#include "cpu/attention_helpers.h"
#include "mmsparse/attention.h"
#include "mmsparse/status.h"

namespace mmsparse::test {
namespace {

constexpr int64_t kSeqLen = 1500;  // long enough that a call lasts several 1 ms intervals
constexpr int64_t kHeads = 4;
constexpr int64_t kKvHeads = 2;
constexpr int64_t kHeadDim = 64;

struct Recorded {
  std::vector<double> fractions;
  bool other_thread = false;
};

void expect_progress_of_dense_call(int threads) {
  Random random;
  SCOPED_TRACE(random.trace());
  const Operand q = random_operand(random, DType::kFloat32, 1, kSeqLen, kHeads, kHeadDim, false);
  const Operand k = random_operand(random, DType::kFloat32, 1, kSeqLen, kKvHeads, kHeadDim, false);
  const Operand v = random_operand(random, DType::kFloat32, 1, kSeqLen, kKvHeads, kHeadDim, false);
  Tensor out(DType::kFloat32, {1, kSeqLen, kHeads, kHeadDim});
  Tensor lse(DType::kFloat32, {1, kHeads, kSeqLen});
  Tensor quiet_out(DType::kFloat32, {1, kSeqLen, kHeads, kHeadDim});
  Tensor quiet_lse(DType::kFloat32, {1, kHeads, kSeqLen});

  Recorded recorded;
  const std::thread::id caller = std::this_thread::get_id();
  AttentionOptions options;
  options.num_threads = threads;
  options.progress_interval_ms = 1;
  options.on_progress = [&](double fraction) {
    recorded.fractions.push_back(fraction);
    recorded.other_thread |= std::this_thread::get_id() != caller;
  };
  attention_dense(q.view, k.view, v.view, out.view(), lse.view(), options);
  attention_dense(q.view, k.view, v.view, quiet_out.view(), quiet_lse.view(),
                  AttentionOptions{.num_threads = threads});

  ASSERT_FALSE(recorded.fractions.empty());
  EXPECT_FALSE(recorded.other_thread);
  EXPECT_EQ(recorded.fractions.back(), 1.0);
  for (std::size_t i = 0; i < recorded.fractions.size(); ++i) {
    EXPECT_GT(recorded.fractions[i], 0.0) << "report " << i;
    EXPECT_LE(recorded.fractions[i], 1.0) << "report " << i;
    if (i > 0) EXPECT_GE(recorded.fractions[i], recorded.fractions[i - 1]) << "report " << i;
  }
  EXPECT_EQ(std::memcmp(out.data(), quiet_out.data(), out.nbytes()), 0);
  EXPECT_EQ(std::memcmp(lse.data(), quiet_lse.data(), lse.nbytes()), 0);
}

TEST(AttentionProgress, DenseOnOneThread) { expect_progress_of_dense_call(1); }

TEST(AttentionProgress, DenseOnSeveralThreads) { expect_progress_of_dense_call(3); }

TEST(AttentionProgress, RejectsAnIntervalBelowOneMillisecond) {
  Random random;
  const Operand q = random_operand(random, DType::kFloat32, 1, 8, 1, kHeadDim, false);
  Tensor out(DType::kFloat32, {1, 8, 1, kHeadDim});
  Tensor lse(DType::kFloat32, {1, 1, 8});
  AttentionOptions options;
  options.progress_interval_ms = 0;
  try {
    attention_dense(q.view, q.view, q.view, out.view(), lse.view(), options);
    FAIL() << "expected an error naming options.progress_interval_ms";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("options.progress_interval_ms"), std::string::npos)
        << error.what();
  }
}

}  // namespace
}  // namespace mmsparse::test
