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
#include "mmsparse/status.h"

namespace mmsparse::cuda {
namespace {

// Device memory allocated and freed in order on one stream.
class StreamBuffer {
 public:
  StreamBuffer(std::size_t bytes, cudaStream_t stream) : stream_(stream) {
    check_cuda(cudaMallocAsync(&data_, bytes, stream), "attention_passes: cudaMallocAsync");
  }
  ~StreamBuffer() {
    // Destructors cannot report errors; a failed free leaves the memory to the pool.
    if (data_ != nullptr) cudaFreeAsync(data_, stream_);
  }
  StreamBuffer(StreamBuffer&& other) noexcept
      : data_(std::exchange(other.data_, nullptr)), stream_(other.stream_) {}
  StreamBuffer(const StreamBuffer&) = delete;
  StreamBuffer& operator=(const StreamBuffer&) = delete;
  StreamBuffer& operator=(StreamBuffer&&) = delete;
  void* data() const { return data_; }

 private:
  void* data_ = nullptr;
  cudaStream_t stream_;
};

// Scratch results start on this boundary (the kernels move rows as 16-byte vectors).
constexpr std::size_t kScratchAlignment = 16;

std::size_t aligned_bytes(std::size_t bytes) {
  return (bytes + kScratchAlignment - 1) / kScratchAlignment * kScratchAlignment;
}

}  // namespace

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
  const std::size_t out_bytes =
      aligned_bytes(static_cast<std::size_t>(rows * args.head_dim) * dtype_size(args.dtype));
  const std::size_t lse_bytes = aligned_bytes(static_cast<std::size_t>(rows) * sizeof(float));
  const Strides4 out_strides{args.q_len * args.q_heads * args.head_dim,
                             args.q_heads * args.head_dim, args.head_dim, 1};
  const Strides3 lse_strides{args.q_heads * args.q_len, args.q_len, 1};

  std::vector<StreamBuffer> scratch;
  std::vector<MergePart> parts{
      {args.dtype, args.out, args.out_strides, args.lse, args.lse_strides}};
  for (std::size_t p = 1; p < passes.size(); ++p) {
    scratch.emplace_back(out_bytes + lse_bytes, stream);
    auto* base = static_cast<std::byte*>(scratch.back().data());
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
