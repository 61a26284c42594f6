// Every bad argument to the attention entry points gets an Error with the right code and a message
// that names the argument and what was expected.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "common/errors.h"
#include "common/random.h"
#include "cpu/attention_helpers.h"
#include "mmsparse/attention.h"
#include "mmsparse/build_info.h"
#include "mmsparse/tools/metrics.h"
#include "mmsparse/plan.h"
#include "mmsparse/status.h"

namespace mmsparse {
namespace {

using mmsparse::testing::expect_error;

constexpr int64_t kBatch = 2, kQLen = 13, kKvLen = 21, kHeads = 4, kKvHeads = 2, kDim = 8;

// A valid problem whose tensors each test breaks in one way.
struct Problem {
  Tensor q{DType::kFloat32, {kBatch, kQLen, kHeads, kDim}};
  Tensor k{DType::kFloat32, {kBatch, kKvLen, kKvHeads, kDim}};
  Tensor v{DType::kFloat32, {kBatch, kKvLen, kKvHeads, kDim}};
  Tensor out{DType::kFloat32, {kBatch, kQLen, kHeads, kDim}};
  Tensor lse{DType::kFloat32, {kBatch, kHeads, kQLen}};
  Tensor mask{DType::kUInt8, {1, kHeads, kQLen, kKvLen}};
  TensorView qv = q.view(), kv = k.view(), vv = v.view(), outv = out.view(), lsev = lse.view(),
             maskv = mask.view();

  void dense(const AttentionOptions& options = {}) const {
    attention_dense(qv, kv, vv, outv, lsev, options);
  }
  void masked() const { attention_masked(qv, kv, vv, maskv, outv, lsev); }
  void planned(const Plan& plan) const { attention_planned(plan, qv, kv, vv, outv, lsev); }
};

TensorView with_shape(TensorView view, std::initializer_list<int64_t> shape) {
  view.ndim = static_cast<int>(shape.size());
  int d = 0;
  for (int64_t extent : shape) view.shape[d++] = extent;
  int64_t stride = 1;
  for (int e = view.ndim - 1; e >= 0; --e) {
    view.strides[e] = stride;
    stride *= view.shape[e];
  }
  return view;
}

TEST(AttentionErrors, ValidProblemRuns) {
  const Problem p;
  EXPECT_NO_THROW(p.dense());
  EXPECT_NO_THROW(p.masked());
}

TEST(AttentionErrors, WrongNumberOfDimensions) {
  Problem p;
  p.qv = with_shape(p.qv, {kBatch, kQLen, kHeads * kDim});
  expect_error([&] { p.dense(); }, ErrorCode::kInvalidArgument,
               {"q:", "4 dimensions", "[batch, q_len, q_heads, head_dim]", "got 3"});
  Problem p2;
  p2.kv = with_shape(p2.kv, {1, kBatch, kKvLen, kKvHeads, kDim});
  expect_error([&] { p2.dense(); }, ErrorCode::kInvalidArgument, {"k:", "4 dimensions", "got 5"});
}

TEST(AttentionErrors, MismatchedBatchHeadDimAndSequence) {
  Problem batch;
  batch.kv.shape[0] = 1;
  expect_error([&] { batch.dense(); }, ErrorCode::kInvalidArgument,
               {"k batch", "expected 2", "got 1"});
  Problem dim;
  dim.kv = with_shape(dim.kv, {kBatch, kKvLen / 2, kKvHeads, kDim * 2});
  dim.vv = dim.kv;
  expect_error([&] { dim.dense(); }, ErrorCode::kInvalidArgument,
               {"k head_dim", "expected 8", "got 16"});
  Problem sequence;
  sequence.vv.shape[1] = kKvLen - 1;
  expect_error([&] { sequence.dense(); }, ErrorCode::kInvalidArgument,
               {"v shape", "[2, 21, 2, 8]", "[2, 20, 2, 8]"});
}

TEST(AttentionErrors, QueryHeadsNotDivisibleByKvHeads) {
  Problem p;
  p.kv = with_shape(p.kv, {kBatch, kKvLen, 3, kDim});
  p.vv = p.kv;
  expect_error([&] { p.dense(); }, ErrorCode::kInvalidArgument,
               {"q heads", "multiple of kv_heads = 3", "got 4"});
}

TEST(AttentionErrors, DtypeMismatchAndUnsupportedDtype) {
  Problem mismatch;
  const Tensor k_bf16(DType::kBFloat16, {kBatch, kKvLen, kKvHeads, kDim});
  mismatch.kv = k_bf16.view();
  expect_error([&] { mismatch.dense(); }, ErrorCode::kInvalidArgument,
               {"k dtype", "float32", "got bfloat16"});
  Problem integer;
  for (TensorView* view : {&integer.qv, &integer.kv, &integer.vv, &integer.outv}) {
    view->dtype = DType::kInt32;
  }
  expect_error([&] { integer.dense(); }, ErrorCode::kInvalidArgument,
               {"q dtype", "float32, float16 or bfloat16", "got int32"});
}

TEST(AttentionErrors, OutputsOfWrongShapeOrDtype) {
  Problem out_shape;
  out_shape.outv = with_shape(out_shape.outv, {kBatch, kQLen, kHeads, kDim / 2});
  expect_error([&] { out_shape.dense(); }, ErrorCode::kInvalidArgument,
               {"out shape", "[2, 13, 4, 8]", "got [2, 13, 4, 4]"});
  Problem out_dtype;
  const Tensor out_bf16(DType::kBFloat16, {kBatch, kQLen, kHeads, kDim});
  out_dtype.outv = out_bf16.view();
  expect_error([&] { out_dtype.dense(); }, ErrorCode::kInvalidArgument,
               {"out dtype", "float32", "got bfloat16"});
  Problem lse_shape;
  lse_shape.lsev = with_shape(lse_shape.lsev, {kBatch, kQLen, kHeads});  // [batch, q_len, heads]
  expect_error([&] { lse_shape.dense(); }, ErrorCode::kInvalidArgument,
               {"lse shape", "[2, 4, 13]", "got [2, 13, 4]"});
  Problem lse_dtype;
  const Tensor lse_bf16(DType::kBFloat16, {kBatch, kHeads, kQLen});
  lse_dtype.lsev = lse_bf16.view();
  expect_error([&] { lse_dtype.dense(); }, ErrorCode::kInvalidArgument,
               {"lse dtype", "float32", "got bfloat16"});
}

TEST(AttentionErrors, NullDataWithElements) {
  const std::vector<std::pair<std::string, TensorView Problem::*>> arguments = {
      {"q", &Problem::qv},
      {"k", &Problem::kv},
      {"v", &Problem::vv},
      {"out", &Problem::outv},
      {"lse", &Problem::lsev}};
  for (const auto& [name, member] : arguments) {
    Problem p;
    (p.*member).data = nullptr;
    expect_error([&] { p.dense(); }, ErrorCode::kInvalidArgument,
                 {name + " data", "non-null", "null"});
  }
}

bool cuda_engine_built() {
  const std::vector<std::string> backends = build_info().backends;
  return std::find(backends.begin(), backends.end(), "cuda-sm90a") != backends.end();
}

// Labels every view of `problem` as living on `device` (the memory stays on the host).
void label_device(Problem& problem, Device device) {
  for (TensorView* view : {&problem.qv, &problem.kv, &problem.vv, &problem.outv, &problem.lsev,
                           &problem.maskv}) {
    view->device = device;
  }
}

TEST(AttentionErrors, CudaTensorsAreUnsupportedWithoutTheEngine) {
  if (cuda_engine_built()) {
    GTEST_SKIP() << "this build has the CUDA engine; tests/gpu covers CUDA tensors";
  }
  Problem all_cuda;
  label_device(all_cuda, Device{DeviceType::kCUDA, 0});
  expect_error([&] { all_cuda.dense(); }, ErrorCode::kUnsupported,
               {"attention_dense", "CUDA engine"});
  expect_error([&] { all_cuda.planned(test::dense_plan(kHeads, kQLen, kKvLen, true)); },
               ErrorCode::kUnsupported, {"attention_planned", "CUDA engine"});
}

TEST(AttentionErrors, MaskedOracleIsCpuOnly) {
  // Validation and the refusal come before any device memory is touched, so host memory labelled
  // as a CUDA device is safe here in every build.
  Problem all_cuda;
  label_device(all_cuda, Device{DeviceType::kCUDA, 0});
  expect_error([&] { all_cuda.masked(); }, ErrorCode::kUnsupported, {"attention_masked"});
}

TEST(AttentionErrors, MixedDevicesAreInvalid) {
  const Device cuda{DeviceType::kCUDA, 0};
  Problem mixed;
  mixed.kv.device = cuda;
  expect_error([&] { mixed.dense(); }, ErrorCode::kInvalidArgument, {"k device", "cpu", "cuda:0"});
  Problem mixed_out;
  mixed_out.outv.device = cuda;
  expect_error([&] { mixed_out.dense(); }, ErrorCode::kInvalidArgument,
               {"out device", "cpu", "cuda:0"});
  Problem other_gpu;
  label_device(other_gpu, cuda);
  other_gpu.vv.device = Device{DeviceType::kCUDA, 1};
  expect_error([&] { other_gpu.dense(); }, ErrorCode::kInvalidArgument,
               {"v device", "cuda:0", "cuda:1"});
}

TEST(AttentionErrors, PlanShapeMismatch) {
  const Problem p;
  expect_error([&] { p.planned(test::dense_plan(kHeads / 2, kQLen, kKvLen, true)); },
               ErrorCode::kInvalidArgument, {"plan heads", "expected 4", "got 2"});
  expect_error([&] { p.planned(test::dense_plan(kHeads, kQLen + 1, kKvLen, true)); },
               ErrorCode::kInvalidArgument, {"plan q_len", "expected 13", "got 14"});
  expect_error([&] { p.planned(test::dense_plan(kHeads, kQLen, kKvLen - 1, true)); },
               ErrorCode::kInvalidArgument, {"plan kv_len", "expected 21", "got 20"});
  Plan batch3 = test::dense_plan(kHeads, kQLen, kKvLen, true);
  batch3.shape.batch = 3;
  expect_error([&] { p.planned(batch3); }, ErrorCode::kInvalidArgument,
               {"plan batch", "1 or 2", "got 3"});
  // A plan whose arrays contradict its shape is refused before any key is read.
  Plan broken = test::dense_plan(kHeads, kQLen, kKvLen, true);
  broken.spans.front().end = static_cast<int32_t>(kKvLen + 5);
  expect_error([&] { p.planned(broken); }, ErrorCode::kInvalidArgument, {"plan.spans"});
}

TEST(AttentionErrors, MaskOfWrongShapeOrDtype) {
  Problem dtype;
  const Tensor float_mask(DType::kFloat32, {1, kHeads, kQLen, kKvLen});
  dtype.maskv = float_mask.view();
  expect_error([&] { dtype.masked(); }, ErrorCode::kInvalidArgument,
               {"mask dtype", "uint8", "got float32"});
  Problem shape;
  shape.maskv = with_shape(shape.maskv, {1, kHeads, kQLen, kKvLen - 1});
  expect_error([&] { shape.masked(); }, ErrorCode::kInvalidArgument,
               {"mask shape", "[1, 4, 13, 21]", "got [1, 4, 13, 20]"});
  Problem batch;
  batch.maskv = with_shape(batch.maskv, {3, kHeads, kQLen, kKvLen});
  expect_error([&] { batch.masked(); }, ErrorCode::kInvalidArgument,
               {"mask batch", "1 or 2", "got 3"});
  Problem rank;
  rank.maskv = with_shape(rank.maskv, {kHeads, kQLen, kKvLen});
  expect_error([&] { rank.masked(); }, ErrorCode::kInvalidArgument, {"mask:", "4 dimensions"});
}

TEST(AttentionErrors, BadOptions) {
  const Problem p;
  AttentionOptions nan_scale;
  nan_scale.scale = std::numeric_limits<float>::quiet_NaN();
  expect_error([&] { p.dense(nan_scale); }, ErrorCode::kInvalidArgument,
               {"options.scale", "finite"});
  AttentionOptions negative_scale;
  negative_scale.scale = -0.125f;
  expect_error([&] { p.dense(negative_scale); }, ErrorCode::kInvalidArgument,
               {"options.scale", ">= 0", "got -0.125"});
  AttentionOptions negative_threads;
  negative_threads.num_threads = -1;
  expect_error([&] { p.dense(negative_threads); }, ErrorCode::kInvalidArgument,
               {"options.num_threads", ">= 0", "got -1"});
}

TEST(AttentionErrors, MergeArguments) {
  const Tensor out(DType::kFloat32, {kBatch, kQLen, kHeads, kDim});
  const Tensor lse(DType::kFloat32, {kBatch, kHeads, kQLen});
  const Tensor short_out(DType::kFloat32, {kBatch, kQLen - 1, kHeads, kDim});
  const Tensor bf16_lse(DType::kBFloat16, {kBatch, kHeads, kQLen});
  const std::vector<TensorView> none;
  expect_error([&] { merge_partials(none, none, out.view(), lse.view()); },
               ErrorCode::kInvalidArgument, {"outs", "at least one part", "got 0"});
  const std::vector<TensorView> two_outs = {out.view(), out.view()};
  const std::vector<TensorView> one_lse = {lse.view()};
  expect_error([&] { merge_partials(two_outs, one_lse, out.view(), lse.view()); },
               ErrorCode::kInvalidArgument, {"lses", "2 parts", "got 1"});
  const std::vector<TensorView> mismatched = {out.view(), short_out.view()};
  const std::vector<TensorView> two_lses = {lse.view(), lse.view()};
  expect_error([&] { merge_partials(mismatched, two_lses, out.view(), lse.view()); },
               ErrorCode::kInvalidArgument,
               {"outs[1] shape", "[2, 13, 4, 8]", "got [2, 12, 4, 8]"});
  const std::vector<TensorView> bad_lses = {lse.view(), bf16_lse.view()};
  expect_error([&] { merge_partials(two_outs, bad_lses, out.view(), lse.view()); },
               ErrorCode::kInvalidArgument, {"lses[1] dtype", "float32", "got bfloat16"});
  expect_error([&] { merge_partials(two_outs, two_lses, out.view(), bf16_lse.view()); },
               ErrorCode::kInvalidArgument, {"lse dtype", "float32", "got bfloat16"});
  TensorView cuda_out = out.view();
  cuda_out.device = Device{DeviceType::kCUDA, 0};
  const std::vector<TensorView> mixed = {out.view(), cuda_out};
  expect_error([&] { merge_partials(mixed, two_lses, out.view(), lse.view()); },
               ErrorCode::kInvalidArgument, {"outs[1] device", "cpu", "cuda:0"});
}

// Zero-length sequences, as attention.h documents them: q_len 0 and batch 0 are no-ops, kv_len 0
// leaves every row without keys, zero heads or head_dim are errors.
TEST(AttentionErrors, ZeroLengthSequences) {
  const Tensor empty_q(DType::kFloat32, {kBatch, 0, kHeads, kDim});
  const Tensor empty_out(DType::kFloat32, {kBatch, 0, kHeads, kDim});
  const Tensor empty_lse(DType::kFloat32, {kBatch, kHeads, 0});
  const Problem p;
  EXPECT_NO_THROW(attention_dense(empty_q.view(), p.kv, p.vv, empty_out.view(), empty_lse.view()));
  const Tensor empty_mask(DType::kUInt8, {1, kHeads, 0, kKvLen});
  EXPECT_NO_THROW(attention_masked(empty_q.view(), p.kv, p.vv, empty_mask.view(), empty_out.view(),
                                   empty_lse.view()));
  // Empty tensors may carry null data.
  TensorView null_q = empty_q.view();
  null_q.data = nullptr;
  EXPECT_NO_THROW(attention_dense(null_q, p.kv, p.vv, empty_out.view(), empty_lse.view()));
  // Even an empty problem validates its arguments.
  expect_error([&] { attention_dense(empty_q.view(), p.kv, p.vv, p.outv, empty_lse.view()); },
               ErrorCode::kInvalidArgument, {"out shape"});

  const Tensor no_keys(DType::kFloat32, {kBatch, 0, kKvHeads, kDim});
  Problem keyless;
  keyless.kv = no_keys.view();
  keyless.vv = no_keys.view();
  std::fill(keyless.out.data_as<float>(), keyless.out.data_as<float>() + keyless.out.numel(),
            test::kNaN);
  keyless.dense();
  for (int64_t n = 0; n < keyless.out.numel(); ++n)
    ASSERT_EQ(keyless.out.data_as<float>()[n], 0.0f);
  for (int64_t n = 0; n < keyless.lse.numel(); ++n)
    ASSERT_EQ(keyless.lse.data_as<float>()[n], -INFINITY);

  Problem no_dim;
  for (TensorView* view : {&no_dim.qv, &no_dim.kv, &no_dim.vv, &no_dim.outv}) view->shape[3] = 0;
  expect_error([&] { no_dim.dense(); }, ErrorCode::kInvalidArgument, {"head_dim", "> 0", "got 0"});
  Problem no_heads;
  no_heads.kv.shape[2] = 0;
  no_heads.vv.shape[2] = 0;
  expect_error([&] { no_heads.dense(); }, ErrorCode::kInvalidArgument, {"k heads", "> 0", "got 0"});
}

TEST(MetricsErrors, ArgumentsAreNamed) {
  const Tensor q(DType::kFloat32, {1, kQLen, kHeads, kDim});
  const Tensor k(DType::kFloat32, {1, kKvLen, kKvHeads, kDim});
  expect_error([&] { oracle_density(q.view(), k.view(), 0, kHeads, 0.9); },
               ErrorCode::kInvalidArgument, {"head", "[0, 4)", "got 4"});
  expect_error([&] { oracle_density(q.view(), k.view(), 0, 0, 1.5); }, ErrorCode::kInvalidArgument,
               {"recall", "(0, 1]"});
  const std::vector<int64_t> rows = {kQLen};
  expect_error([&] { oracle_density(q.view(), k.view(), 0, 0, 0.9, rows); },
               ErrorCode::kInvalidArgument, {"rows", "[0, 13)", "got 13"});
  const Tensor lse(DType::kFloat32, {1, kHeads, kQLen});
  const Tensor other_lse(DType::kFloat32, {1, kHeads, kQLen + 1});
  expect_error([&] { row_recall(lse.view(), other_lse.view(), 0, 0); }, ErrorCode::kInvalidArgument,
               {"lse_plan shape"});
  expect_error([&] { causal_pair_count(-1, 5); }, ErrorCode::kInvalidArgument, {"q_len", ">= 0"});
}

}  // namespace
}  // namespace mmsparse
