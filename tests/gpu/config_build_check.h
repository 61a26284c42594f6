#pragma once
// What the GPU tests of per-head configs and estimating builders share: a problem's q and k as the
// builders take them (host views and device copies), a config built on the device from them, and
// the check of a config of static heads against its host build.

#include <cuda_runtime.h>

#include <vector>

#include "attention_harness.h"
#include "common/random.h"
#include "cuda/runtime/config_builder.h"
#include "device_buffer.h"
#include "mmsparse/layout.h"
#include "mmsparse/patterns.h"
#include "mmsparse/plan.h"

namespace mmsparse::test {

// q and k of `inputs` on the host and on the device, each as PatternInputs with `scale`. Neither
// copied nor moved: `device` views the buffers of `q` and `k`.
struct PatternOperands {
  PatternOperands(const AttentionInputs& inputs, float scale);
  PatternOperands(const PatternOperands&) = delete;
  PatternOperands& operator=(const PatternOperands&) = delete;

  PatternInputs host;    // inputs' host q and k
  DeviceOperand q;       // [batch, q_len, q_heads, head_dim]
  DeviceOperand k;       // [batch, kv_len, kv_heads, head_dim]
  PatternInputs device;  // q and k above
};

// The per-head config of `resolved_specs` (one per query head of `shape`) built on the device:
// dynamic heads estimated from operands.device, those the GPU does not take built on the host from
// operands.host, host-built heads over `layout` (may be null). Waits for `stream`, so that the
// operands may be freed after it returns.
cuda::ConfigBuild build_config_and_wait(const std::vector<PatternSpec>& resolved_specs,
                                        const PlanShape& shape, const ModalityLayout* layout,
                                        const PatternOperands& operands, cudaStream_t stream);

// The config of static `resolved_specs` (one per query head of `shape`) over `layout`, built on the
// device, against build_plan's plan of them: the same records, every head built on the GPU but
// those whose image tiles read a key order (built on the host), and attention through it equal to
// the CPU oracle's on random inputs of `size`.
void expect_static_config_matches_host(const std::vector<PatternSpec>& resolved_specs,
                                       const PlanShape& shape, const ModalityLayout& layout,
                                       const ProblemSize& size, Random& random,
                                       cudaStream_t stream);

}  // namespace mmsparse::test
