// The distributed algorithm's device path on one GPU: W virtual ranks (threads sharing the GPU
// through the in-process transport) run Spava, APB-style, StarAttention, sparse attention inside
// each rank and the ZigZag ring on bf16 CUDA tensors: the GPU selection, the engine calls over
// views of the local and passing buffers, the LSE merges. The assembled output must match the CPU
// oracle of the same approximation (the same selected KVs), or dense attention for exact settings.
// NCCL is not involved (tests/multi_gpu covers it).

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "common/random.h"
#include "mmsparse/attention.h"
#include "mmsparse/device.h"
#include "mmsparse/dist.h"

namespace mmsparse {
namespace {

using test::Random;

constexpr Device kGpu{DeviceType::kCUDA, 0};
// The distributed result may be this many times further from the fp32 oracle than the engine's own
// single-call dense result is from fp32 dense (its partials and merge add a few bf16 roundings).
// Checked on the query rows apart too, so that an error confined to them is not diluted.
constexpr double kBaselineFactor = 3.0;
constexpr double kSlack = 2e-4;

struct GpuCase {
  dist::Scheme scheme;
  int world;
  int64_t context_len, query_len, q_heads, kv_heads;
  int64_t anchor_len, passing_len;
  std::string local_pattern;
  bool exact;  // compare with dense attention
};

std::string describe(const GpuCase& c) {
  return std::string(dist::scheme_name(c.scheme)) + " W=" + std::to_string(c.world) +
         " context=" + std::to_string(c.context_len) + " query=" + std::to_string(c.query_len) +
         " heads=" + std::to_string(c.q_heads) + "/" + std::to_string(c.kv_heads) +
         " anchor=" + std::to_string(c.anchor_len) + " passing=" + std::to_string(c.passing_len) +
         (c.local_pattern.empty() ? "" : " local=" + c.local_pattern);
}

// Over rows [row_begin, row_end) of [1, seq, heads, dim] views.
double relative_error(const TensorView& actual, const TensorView& expected, int64_t row_begin,
                      int64_t row_end) {
  const int64_t row = expected.shape[2] * expected.shape[3];
  double error = 0.0, norm = 0.0;
  for (int64_t i = row_begin * row; i < row_end * row; ++i) {
    const double a = load_float(actual, i);
    const double e = load_float(expected, i);
    error += (a - e) * (a - e);
    norm += e * e;
  }
  return std::sqrt(error / norm);
}

// How far the engine's dense bf16 attention on one GPU is from fp32 dense on the same inputs.
double engine_baseline(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& q32,
                       const Tensor& k32, const Tensor& v32) {
  const int64_t total = q.shape()[1];
  const DeviceTensor device_q = DeviceTensor::from_host(q.view(), kGpu);
  const DeviceTensor device_k = DeviceTensor::from_host(k.view(), kGpu);
  const DeviceTensor device_v = DeviceTensor::from_host(v.view(), kGpu);
  const DeviceTensor out(DType::kBFloat16, q.shape(), kGpu);
  const DeviceTensor lse(DType::kFloat32, {1, q.shape()[2], total}, kGpu);
  attention_dense(device_q.view(), device_k.view(), device_v.view(), out.view(), lse.view());
  Tensor engine(DType::kBFloat16, q.shape());
  out.copy_to_host(engine.view());
  Tensor exact(DType::kFloat32, q.shape());
  Tensor exact_lse(DType::kFloat32, {1, q.shape()[2], total});
  attention_dense(q32.view(), k32.view(), v32.view(), exact.view(), exact_lse.view());
  return relative_error(engine.view(), exact.view(), 0, total);
}

// Runs the case on W threads sharing the GPU; returns the assembled global output (bf16, host).
Tensor run_on_gpu(const dist::DistConfig& config, const dist::SequenceSplit& split, const Tensor& q,
                  const Tensor& k, const Tensor& v) {
  Tensor global(DType::kBFloat16, q.shape());
  dist::run_in_process(
      split.world,
      [&](dist::Communicator& communicator) {
        const int rank = communicator.rank();
        const int64_t local_len = dist::local_length(split, rank);
        const auto upload = [&](const Tensor& tensor) {
          Tensor local(DType::kBFloat16, {1, local_len, tensor.shape()[2], tensor.shape()[3]});
          dist::gather_local(split, rank, tensor.view(), local.view());
          return DeviceTensor::from_host(local.view(), kGpu);
        };
        const DeviceTensor local_q = upload(q), local_k = upload(k), local_v = upload(v);
        const DeviceTensor out(DType::kBFloat16, {1, local_len, q.shape()[2], q.shape()[3]}, kGpu);
        dist::check_same_config(communicator, config, split, local_q.view(), local_k.view());
        dist::Workspace workspace;
        for (int repeat = 0; repeat < 2; ++repeat) {  // reused scratch must not leak state
          dist::attention(config, split, communicator, local_q.view(), local_k.view(),
                          local_v.view(), out.view(), {}, &workspace);
        }
        communicator.synchronize(nullptr);
        Tensor host(DType::kBFloat16, {1, local_len, q.shape()[2], q.shape()[3]});
        out.copy_to_host(host.view());
        dist::scatter_local(split, rank, host.view(), global.view(), rank == 0);
        communicator.barrier();  // keep every rank's device memory until all are done
      },
      /*timeout_seconds=*/120.0, kGpu);
  return global;
}

TEST(GpuDist, VirtualRanksOnOneGpuMatchTheOracle) {
  Random random;
  constexpr int64_t kHeadDim = 128;
  constexpr int64_t kWholeBlocks = int64_t{1} << 30;
  const std::vector<GpuCase> cases = {
      {dist::Scheme::kSpava, 2, 1203, 9, 8, 2, 64, 40, "", false},
      {dist::Scheme::kSpava, 3, 2001, 17, 4, 1, dist::kUseDefault, 32, "", false},
      {dist::Scheme::kSpava, 3, 1501, 5, 8, 2, 32, kWholeBlocks, "", true},
      {dist::Scheme::kApb, 2, 999, 7, 8, 4, 48, 40, "", false},
      {dist::Scheme::kStar, 3, 1100, 3, 8, 2, dist::kUseDefault, dist::kUseDefault, "", false},
      {dist::Scheme::kSpava, 2, 1701, 6, 8, 2, 64, 40, "a-shape:sink=16,local=128", false},
      // Static patterns only: a dynamic one estimated on the device may break near-ties apart from
      // the host estimate the oracle uses (the CPU tests cover dynamic patterns inside ranks).
      {dist::Scheme::kApb, 3, 1701, 6, 8, 2, 64, 40, "tri-shape:sink=16,local=128,bottom=32",
       false},
      {dist::Scheme::kZigzagRing, 2, 1333, 0, 8, 2, 0, 0, "", true},
      {dist::Scheme::kZigzagRing, 3, 1001, 11, 4, 4, 0, 0, "", true},
  };
  for (const GpuCase& c : cases) {
    SCOPED_TRACE(describe(c) + " " + random.trace());
    dist::DistConfig config;
    config.scheme = c.scheme;
    if (c.scheme != dist::Scheme::kZigzagRing) {
      config.anchor_len = c.anchor_len;
      config.passing_len = c.passing_len;
    }
    config.local_pattern = c.local_pattern;
    const dist::SequenceSplit split =
        dist::split_sequence(config, c.context_len, c.query_len, c.world);
    const int64_t total = split.total_len();
    const Tensor q = random.normal_tensor(DType::kBFloat16, {1, total, c.q_heads, kHeadDim});
    const Tensor k = random.normal_tensor(DType::kBFloat16, {1, total, c.kv_heads, kHeadDim});
    const Tensor v = random.normal_tensor(DType::kBFloat16, {1, total, c.kv_heads, kHeadDim});
    const Tensor actual = run_on_gpu(config, split, q, k, v);

    const Tensor q32 = to_contiguous(q.view(), DType::kFloat32);
    const Tensor k32 = to_contiguous(k.view(), DType::kFloat32);
    const Tensor v32 = to_contiguous(v.view(), DType::kFloat32);
    Tensor expected(DType::kFloat32, q.shape());
    Tensor lse(DType::kFloat32, {1, c.q_heads, total});
    if (c.exact) {
      attention_dense(q32.view(), k32.view(), v32.view(), expected.view(), lse.view());
    } else {
      dist::reference_attention(config, split, q32.view(), k32.view(), v32.view(), expected.view(),
                                lse.view());
    }
    const double tolerance = kBaselineFactor * engine_baseline(q, k, v, q32, k32, v32) + kSlack;
    EXPECT_LE(relative_error(actual.view(), expected.view(), 0, total), tolerance);
    if (c.query_len > 0) {
      EXPECT_LE(relative_error(actual.view(), expected.view(), c.context_len, total), tolerance)
          << "query rows";
    }
  }
}

}  // namespace
}  // namespace mmsparse
