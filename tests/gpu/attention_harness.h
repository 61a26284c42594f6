#pragma once
// Runs one attention problem through the GPU engine and the CPU reference and checks both against
// the fp64 oracle with the kernel check rule: |x - fp64| <= 2 × |naive - fp64| + slack (max over
// elements), separately for O and LSE; rows without keys must be O = 0, LSE = -inf exactly.

#include <cstdint>
#include <ostream>
#include <span>
#include <string>

#include "common/random.h"
#include "cuda/runtime/engine.h"
#include "device_buffer.h"
#include "mmsparse/plan.h"
#include "mmsparse/tensor.h"

namespace mmsparse::test {

struct KernelConfig {
  DType dtype = DType::kBFloat16;
  int64_t head_dim = 128;
  // The kernel the engine is asked for. kWgmma runs where wgmma_serves() says it can (the harness
  // falls back to kAuto for plans with columns or token masks); kMmaSync keeps the mma.sync kernel
  // under test on every plan.
  cuda::AttentionKernel kernel = cuda::AttentionKernel::kMmaSync;
  int64_t tile_rows = kDefaultTileRows;  // of the plans the tests build
};
std::string config_name(const KernelConfig& config);  // "bf16_d128", "bf16_d128_wgmma128"
// GoogleTest prints parameters into test names that ctest keeps; print the stable name.
void PrintTo(const KernelConfig& config, std::ostream* out);

struct ProblemSize {
  int64_t batch = 1;
  int64_t q_len = 0;
  int64_t kv_len = 0;
  int64_t kv_heads = 1;
  int64_t group = 1;  // query heads per KV head
  int64_t head_dim = 128;
  DType dtype = DType::kBFloat16;
  float scale = 0.0f;  // resolved softmax scale
  cuda::AttentionKernel kernel = cuda::AttentionKernel::kMmaSync;
  cuda::CtaSchedule schedule = cuda::CtaSchedule::kAuto;  // of the wgmma kernel
  int64_t tile_rows = kDefaultTileRows;
  int64_t q_heads() const { return kv_heads * group; }
};
std::string describe(const ProblemSize& size);

// Lengths that are not multiples of 64, kv_len > q_len, scale 1/sqrt(head_dim) or a random one.
ProblemSize random_problem(Random& random, const KernelConfig& config, int64_t batch,
                           int64_t group);

struct AttentionInputs {
  HostOperand q;  // [batch, q_len, q_heads, head_dim]
  HostOperand k;  // [batch, kv_len, kv_heads, head_dim]
  HostOperand v;  // [batch, kv_len, kv_heads, head_dim]
};
// Fresh N(0, 1) inputs in random memory layouts (contiguous, head-major, padded rows).
AttentionInputs random_inputs(Random& random, const ProblemSize& size);

struct AttentionResult {
  HostOperand out;  // [batch, q_len, q_heads, head_dim]
  Tensor lse;       // [batch, q_heads, q_len]
};

// The GPU engine on device copies of `inputs`, outputs poisoned first, `out` in `out_layout`, on
// the kernel of size.kernel (kWgmma falls back to kAuto where the wgmma kernel does not serve).
AttentionResult run_gpu(const cuda::DevicePlan& plan, const AttentionInputs& inputs,
                        const ProblemSize& size, OperandLayout out_layout);
// The same for a plan of several passes (cuda::attention_passes).
AttentionResult run_gpu(std::span<const cuda::DevicePlan> passes, const AttentionInputs& inputs,
                        const ProblemSize& size, OperandLayout out_layout);

// Whether run_gpu takes the wgmma kernel for this plan (every pass) and size.
bool runs_on_wgmma(const cuda::DevicePlan& plan, const ProblemSize& size);
bool runs_on_wgmma(std::span<const cuda::DevicePlan> passes, const ProblemSize& size);
// The CPU reference (mmsparse::attention_planned on host views).
AttentionResult run_cpu(const Plan& plan, const AttentionInputs& inputs, const ProblemSize& size);

// The rule above for the GPU result and for the CPU reference.
void expect_matches_oracle(const Plan& plan, const AttentionInputs& inputs, const ProblemSize& size,
                           const AttentionResult& gpu);

// Random layout for an output or input operand.
OperandLayout random_layout(Random& random);

}  // namespace mmsparse::test
