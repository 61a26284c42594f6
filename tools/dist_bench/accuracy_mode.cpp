// mmsparse-dist-bench --accuracy: Spava's recall against dense over l_a and l_p, in this process
// (W virtual ranks through the in-process transport) on GPU 0 or on the CPU.

#include <cuda_runtime.h>
#include <fmt/core.h>

#include <chrono>
#include <cmath>
#include <fstream>
#include <optional>
#include <utility>

#include "accuracy.h"
#include "bench_inputs.h"
#include "bench_options.h"
#include "mmsparse/device.h"
#include "mmsparse/status.h"

namespace mmsparse::dist_bench {
namespace {

// The exactness rows' recall may differ from 1 only by fp32 LSE merges in another order.
constexpr double kExactRecallTolerance = 1e-3;

RowCopy device_row_copy() {
  return [](const TensorView& from, const TensorView& to) {
    const auto bytes = static_cast<std::size_t>(from.numel()) * dtype_size(from.dtype);
    const cudaError_t result = cudaMemcpy(to.data, from.data, bytes, cudaMemcpyDeviceToDevice);
    if (result != cudaSuccess) {
      throw Error(ErrorCode::kBackendError,
                  std::string("accuracy: device copy: ") + cudaGetErrorString(result));
    }
  };
}

bool exact_rows_recall_one(const std::vector<AccuracyRow>& rows) {
  bool ok = true;
  for (const AccuracyRow& row : rows) {
    if (row.passing_divisor != 0) continue;
    for (const double recall : {row.query_recall_min, row.context_recall_min}) {
      if (!(std::abs(recall - 1.0) <= kExactRecallTolerance)) {
        fmt::print(stderr, "accuracy: W {} with whole blocks passed recalls {} (expected 1)\n",
                   row.world, recall);
        ok = false;
      }
    }
  }
  return ok;
}

}  // namespace

int run_accuracy(const BenchOptions& options) {
  const auto start = std::chrono::steady_clock::now();
  HostProblem problem = make_host_problem(options);
  AccuracyInputs inputs;
  inputs.host = std::move(problem.host);
  inputs.query_len = problem.query_len;
  inputs.context_len = problem.context_len;
  inputs.needles = std::move(problem.needles);
  std::optional<DeviceTensor> q, k, v;
  RowCopy copy;
  if (options.accuracy_on_cpu) {
    inputs.q = inputs.host.q.view();
    inputs.k = inputs.host.k.view();
    inputs.v = inputs.host.v.view();
    copy = host_row_copy();
  } else {
    const Device device{DeviceType::kCUDA, 0};
    q.emplace(DeviceTensor::from_host(inputs.host.q.view(), device));
    k.emplace(DeviceTensor::from_host(inputs.host.k.view(), device));
    v.emplace(DeviceTensor::from_host(inputs.host.v.view(), device));
    inputs.q = q->view();
    inputs.k = k->view();
    inputs.v = v->view();
    copy = device_row_copy();
  }
  AccuracySweep sweep;
  sweep.worlds = options.accuracy_worlds;
  sweep.timeout_seconds = options.timeout_seconds;
  const std::vector<AccuracyRow> rows = accuracy_sweep(sweep, inputs, copy);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const WorkloadSpec& spec = problem.spec;
  std::string worlds;
  for (const int world : options.accuracy_worlds) {
    worlds += (worlds.empty() ? "" : ", ") + std::to_string(world);
  }
  const std::string title = fmt::format(
      "Spava accuracy vs l_a, l_p (SYNTHETIC {}: {} tokens = {} context + {} query, {} needles, "
      "heads {}/{}, head_dim {}, bf16; {} in-process ranks on {}; {:.1f} s)",
      spec.preset, problem.total_len(), inputs.context_len, inputs.query_len, inputs.needles.size(),
      spec.q_heads, spec.kv_heads, spec.head_dim, worlds,
      options.accuracy_on_cpu ? "the CPU" : "GPU 0", seconds);
  print_accuracy(rows, title);
  if (!options.json_path.empty()) {
    std::ofstream file(options.json_path);
    file << accuracy_json(rows, title) << "\n";
    if (!file) throw Error(ErrorCode::kIoError, "--json: cannot write " + options.json_path);
  }
  return exact_rows_recall_one(rows) ? 0 : 1;
}

}  // namespace mmsparse::dist_bench
