#pragma once
// Helpers shared by the search tests.

#include "mmsparse/tools/workload.h"

namespace mmsparse::test {

// Small enough for the CPU reference on one core, long enough for grid plans to fit the budget:
// the 1M preset's 12×20-token frames give 34 frames at 8192 tokens.
inline WorkloadSpec small_video_workload() {
  WorkloadSpec spec;
  spec.preset = "video-qwen2.5vl-1m";
  spec.seq_len = 8192;
  spec.q_heads = 4;
  spec.kv_heads = 2;
  spec.head_dim = 64;
  return spec;
}

}  // namespace mmsparse::test
