// Generation of a timed run's problem across the ranks, and local copies on the device.

#include "bench_inputs.h"

#include <algorithm>
#include <chrono>
#include <numeric>
#include <string>
#include <vector>

#include "mmsparse/status.h"

namespace mmsparse::dist_bench {
namespace {

void check_cuda(cudaError_t result, const char* what) {
  if (result != cudaSuccess) {
    throw Error(ErrorCode::kBackendError, std::string(what) + ": " + cudaGetErrorString(result));
  }
}

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

int64_t row_bytes(const TensorView& view) {
  return view.shape[2] * view.shape[3] * static_cast<int64_t>(dtype_size(view.dtype));
}

// The rows rank `rank` of `world` generates: an even, contiguous share of the sequence.
struct RowRange {
  int64_t begin = 0;
  int64_t end = 0;
};
RowRange share(int64_t total, int rank, int world) {
  return {total * rank / world, total * (rank + 1) / world};
}

}  // namespace

WorkloadSpec workload_spec(const BenchOptions& options) {
  WorkloadSpec spec;
  spec.preset = options.preset;
  spec.seq_len = options.length;
  spec.q_heads = options.q_heads;
  spec.kv_heads = options.kv_heads;
  spec.head_dim = options.head_dim;
  if (options.needles >= 0) {
    spec.needles = options.needles;
  } else {
    for (const PresetInfo& info : workload_presets()) {
      if (info.name == options.preset) spec.needles = info.default_needles;
    }
  }
  return spec;
}

int64_t query_length(const BenchOptions& options, const Workload& workload) {
  const int64_t question = workload.seq_len() - workload.question_begin();
  return options.query_len > 0 ? options.query_len : std::max<int64_t>(question, 1);
}

HostProblem make_host_problem(const BenchOptions& options) {
  const Workload workload = Workload::create(workload_spec(options));
  HostProblem problem;
  problem.spec = workload.spec();
  problem.query_len = query_length(options, workload);
  problem.context_len = workload.seq_len() - problem.query_len;
  problem.host = workload.materialize(DType::kBFloat16);
  problem.needles = workload.needles();
  return problem;
}

DeviceProblem generate_on_ranks(const BenchOptions& options, dist::Communicator& communicator,
                                cudaStream_t stream, int threads) {
  const Workload workload = Workload::create(workload_spec(options));
  const WorkloadSpec& spec = workload.spec();
  const int64_t total = workload.seq_len();
  const Device device = communicator.device();
  DeviceProblem problem{
      DeviceTensor(DType::kBFloat16, {1, total, spec.q_heads, spec.head_dim}, device),
      DeviceTensor(DType::kBFloat16, {1, total, spec.kv_heads, spec.head_dim}, device),
      DeviceTensor(DType::kBFloat16, {1, total, spec.kv_heads, spec.head_dim}, device)};
  problem.query_len = query_length(options, workload);
  problem.context_len = total - problem.query_len;
  const int world = communicator.world_size();
  const RowRange own = share(total, communicator.rank(), world);
  std::vector<int64_t> positions(static_cast<std::size_t>(own.end - own.begin));
  std::iota(positions.begin(), positions.end(), own.begin);
  auto start = std::chrono::steady_clock::now();
  const Workload::Tensors slice = workload.materialize_rows(positions, DType::kBFloat16, threads);
  problem.generated_rows = own.end - own.begin;
  problem.generate_seconds = seconds_since(start);

  start = std::chrono::steady_clock::now();
  const Tensor* host_parts[] = {&slice.q, &slice.k, &slice.v};
  const DeviceTensor* device_parts[] = {&problem.q, &problem.k, &problem.v};
  for (int part = 0; part < 3; ++part) {
    const TensorView global = device_parts[part]->view();
    const int64_t bytes_per_row = row_bytes(global);
    auto* base = static_cast<std::byte*>(global.data);
    std::vector<dist::GatherSlot> slots;
    for (int r = 0; r < world; ++r) {
      const RowRange rows = share(total, r, world);
      slots.push_back({rows.begin * bytes_per_row, (rows.end - rows.begin) * bytes_per_row});
    }
    const dist::GatherSlot& mine = slots[static_cast<std::size_t>(communicator.rank())];
    check_cuda(
        cudaMemcpyAsync(base + mine.offset, host_parts[part]->data(),
                        static_cast<std::size_t>(mine.bytes), cudaMemcpyHostToDevice, stream),
        "upload of the generated rows");
    communicator.all_gather(base + mine.offset, mine.bytes, base, slots, stream);
  }
  communicator.synchronize(stream);
  problem.exchange_seconds = seconds_since(start);
  return problem;
}

LocalProblem local_from_device(const DeviceProblem& problem, const dist::SequenceSplit& split,
                               int rank, Device device, cudaStream_t stream) {
  const int64_t local_len = dist::local_length(split, rank);
  const TensorView q = problem.q.view();
  const TensorView k = problem.k.view();
  LocalProblem local{
      DeviceTensor(DType::kBFloat16, {1, local_len, q.shape[2], q.shape[3]}, device),
      DeviceTensor(DType::kBFloat16, {1, local_len, k.shape[2], k.shape[3]}, device),
      DeviceTensor(DType::kBFloat16, {1, local_len, k.shape[2], k.shape[3]}, device),
      DeviceTensor(DType::kBFloat16, {1, local_len, q.shape[2], q.shape[3]}, device)};
  const std::pair<const DeviceTensor*, const DeviceTensor*> parts[] = {
      {&problem.q, &local.q}, {&problem.k, &local.k}, {&problem.v, &local.v}};
  for (const auto& [global, part] : parts) {
    const int64_t bytes_per_row = row_bytes(global->view());
    const auto* from = static_cast<const std::byte*>(global->view().data);
    auto* to = static_cast<std::byte*>(part->view().data);
    for (const dist::Segment& segment : dist::local_layout(split, rank)) {
      if (segment.len == 0) continue;
      check_cuda(cudaMemcpyAsync(to + segment.local_begin * bytes_per_row,
                                 from + segment.global_begin * bytes_per_row,
                                 static_cast<std::size_t>(segment.len * bytes_per_row),
                                 cudaMemcpyDeviceToDevice, stream),
                 "local rows");
    }
  }
  check_cuda(cudaStreamSynchronize(stream), "local rows");
  return local;
}

}  // namespace mmsparse::dist_bench
