// Plans of several passes on the GPU: each pass runs as an ordinary plan, pass 0 into the caller's
// out and lse and the others into stream-ordered scratch, then the LSE merge combines them. The
// passes cover disjoint pairs (Plan::extra_passes), so the merge gives the attention of their
// union.
//
// The scratch O is in the call's dtype, the dtype the kernels' epilogues write; the merge reads it
// in fp32, so each further pass adds one rounding of its partial output to that of the result.

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "cuda/cuda_check.h"
#include "cuda/cuda_engine.h"
#include "cuda/plan_view.cuh"
#include "cuda/stream_scratch.h"
#include "mmsparse/status.h"

namespace mmsparse::cuda {

std::vector<DevicePlan> upload_passes(const Plan& plan, void* stream) {
  std::vector<DevicePlan> passes;
  for (int64_t p = 0; p < plan.num_passes(); ++p) passes.emplace_back(plan, p, stream);
  return passes;
}

void attention_passes(std::span<const DevicePlan> passes, const AttentionArgs& args) {
  if (passes.empty()) throw_invalid_argument("passes", "at least one pass", "0");
  for (std::size_t p = 1; p < passes.size(); ++p) {
    if (!(passes[p].shape() == passes[0].shape())) {
      throw_invalid_argument("passes[" + std::to_string(p) + "] shape", "the shape of passes[0]",
                             "another shape");
    }
  }
  attention_planned(passes[0], args);
  if (passes.size() == 1 || args.batch == 0 || args.q_len == 0) return;

  const auto stream = static_cast<cudaStream_t>(args.stream);
  const int64_t rows = args.batch * args.q_len * args.q_heads;
  // Each scratch result starts on a section boundary (the kernels move rows as 16-byte vectors).
  const std::size_t out_bytes =
      align_section(static_cast<std::size_t>(rows * args.head_dim) * dtype_size(args.dtype));
  const std::size_t lse_bytes = align_section(static_cast<std::size_t>(rows) * sizeof(float));
  const Strides4 out_strides{args.q_len * args.q_heads * args.head_dim,
                             args.q_heads * args.head_dim, args.head_dim, 1};
  const Strides3 lse_strides{args.q_heads * args.q_len, args.q_len, 1};

  std::vector<StreamScratch> scratch;
  std::vector<MergePart> parts{
      {args.dtype, args.out, args.out_strides, args.lse, args.lse_strides}};
  for (std::size_t p = 1; p < passes.size(); ++p) {
    scratch.emplace_back(out_bytes + lse_bytes, stream, "attention_passes: cudaMallocAsync");
    std::byte* base = scratch.back().base();
    AttentionArgs pass_args = args;
    pass_args.out = base;
    pass_args.out_strides = out_strides;
    pass_args.lse = reinterpret_cast<float*>(base + out_bytes);
    pass_args.lse_strides = lse_strides;
    attention_planned(passes[p], pass_args);
    parts.push_back({args.dtype, pass_args.out, out_strides, pass_args.lse, lse_strides});
  }

  MergeArgs merge;
  merge.batch = args.batch;
  merge.q_len = args.q_len;
  merge.heads = args.q_heads;
  merge.head_dim = args.head_dim;
  merge.parts = parts;
  merge.dtype = args.dtype;
  merge.out = args.out;
  merge.out_strides = args.out_strides;
  merge.lse = args.lse;
  merge.lse_strides = args.lse_strides;
  merge.stream = args.stream;
  merge_partials(merge);  // out and lse alias part 0, which the merge allows
}

}  // namespace mmsparse::cuda
