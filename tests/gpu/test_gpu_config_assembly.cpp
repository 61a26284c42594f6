// The concatenation of a config's sections (cuda/runtime/config_assembly.cu) at the sizes of the
// shipped mixed-interleaved config, beside test_gpu_config_builder.cpp's small random mixes: a
// grouped grid head slot (2D boundary, per-item sinks, a frame-like fixed stride) has thousands of
// query-order runs, more than one pass of the run copy's threads covers, so the copy's loop over a
// slot's runs takes several steps. Record for record against the host plan.

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "attention_harness.h"
#include "common/random.h"
#include "config_build_check.h"
#include "cuda/runtime/config_builder.h"
#include "methods/estimate/index_builders.h"
#include "mmsparse/layout.h"
#include "mmsparse/patterns.h"
#include "mmsparse/plan.h"
#include "mmsparse/tools/workload.h"
#include "plan_records.h"
#include "stream_test.h"

namespace mmsparse::test {
namespace {

class GpuConfigAssembly : public StreamTest {};

// The run copy's threads per head slot in one pass (config_assembly.cu: 16 blocks of 256).
constexpr int64_t kRunsOfOneCopyPass = 16 * 256;

// The shipped config's grid spec (configs/mixed-interleaved-131072.json), whose stride and lines
// are fixed: its plan follows from the layout alone, so random inputs give the host's plan exactly.
const char* const kConfigGridSpec =
    "grid:boundary=3,hline=0,item_sinks=1,last_q=64,local=0,max_stride=1024,sink=30,slash=1,"
    "stride=448,vline=0";

TEST_F(GpuConfigAssembly, LongRunListsMatchTheHostPlan) {
  constexpr int64_t kLength = 32768;  // ~7000 runs per grid head slot
  Random random;
  SCOPED_TRACE(random.trace());
  WorkloadSpec workload_spec;
  workload_spec.preset = "mixed-interleaved";
  workload_spec.seq_len = kLength;
  workload_spec.q_heads = 1;
  workload_spec.kv_heads = 1;
  const Workload workload = Workload::create(workload_spec);
  const ModalityLayout& layout = workload.layout();

  ProblemSize size;
  size.batch = 2;
  size.q_len = workload.seq_len();
  size.kv_len = workload.seq_len();
  size.kv_heads = 1;
  size.group = 3;
  size.head_dim = 128;
  size.tile_rows = 128;
  size.scale = 1.0f / std::sqrt(static_cast<float>(size.head_dim));
  const AttentionInputs inputs = random_inputs(random, size);
  const PlanShape shape{size.batch, size.q_heads(), size.q_len, size.kv_len, size.tile_rows};

  // Two grid heads (one section of 4 head slots over the batch) around a static head.
  const PatternSpec grid = resolve_pattern(PatternSpec::parse(kConfigGridSpec), &layout);
  const PatternSpec local = resolve_pattern(PatternSpec::parse("a-shape:sink=128,local=1024"));
  const std::vector<PatternSpec> specs = {grid, local, grid};
  ASSERT_TRUE(cuda::builds_grid_on_device(grid, shape, &layout)) << grid.to_string();

  const PatternOperands operands(inputs, size.scale);
  const Plan host = build_plan(specs, shape, &layout, &operands.host);
  for (int64_t slot = 0; slot < shape.head_slots(); ++slot) {
    if (specs[static_cast<std::size_t>(slot % shape.heads)].name != "grid") continue;
    EXPECT_GT(host.head_run_offsets[slot + 1] - host.head_run_offsets[slot], kRunsOfOneCopyPass)
        << "head slot " << slot << ": the copy's loop over a slot's runs would not repeat";
  }

  const cuda::ConfigBuild built = build_config_and_wait(specs, shape, &layout, operands, stream_);
  expect_same_grid_records(built.plan, host, stream_);
}

}  // namespace
}  // namespace mmsparse::test
