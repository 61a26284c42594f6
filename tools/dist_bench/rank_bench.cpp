// One rank of mmsparse-dist-bench: the synthetic workload, each scheme timed (with and without its
// communication, for the exposed communication share) or checked against single-GPU references.

#include <cuda_runtime.h>
#include <fmt/core.h>
#include <signal.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "bench_options.h"
#include "mmsparse/attention.h"
#include "mmsparse/device.h"
#include "mmsparse/dist.h"
#include "mmsparse/dist_nccl.h"
#include "mmsparse/status.h"
#include "mmsparse/tools/workload.h"
#include "rank_exit.h"
#include "rank_support.h"

namespace mmsparse::dist_bench {
namespace {

using dist::Communicator;

constexpr const char* kDense = "dense";
// After NCCL's abort has had its wait: time for the error to unwind to main and be printed.
constexpr double kUnwindSeconds = 2.0;

struct Problem {
  Workload::Tensors host;  // [1, length, heads, head_dim] bf16
  std::vector<Needle> needles;
  int64_t context_len = 0;
  int64_t query_len = 0;
  int64_t q_heads = 0, kv_heads = 0, head_dim = 0;
  int64_t length() const { return context_len + query_len; }
};

Problem make_problem(const BenchOptions& options) {
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
  const Workload workload = Workload::create(spec);
  Problem problem;
  const int64_t question = workload.seq_len() - workload.question_begin();
  problem.query_len = options.query_len > 0 ? options.query_len : std::max<int64_t>(question, 1);
  problem.context_len = workload.seq_len() - problem.query_len;
  problem.q_heads = workload.spec().q_heads;
  problem.kv_heads = workload.spec().kv_heads;
  problem.head_dim = workload.spec().head_dim;
  problem.host = workload.materialize(DType::kBFloat16);
  problem.needles = workload.needles();
  return problem;
}

// Median milliseconds of `work` between a barrier and a synchronize, after the warm-up.
double time_runs(Communicator& communicator, cudaStream_t stream, const BenchOptions& options,
                 const std::function<void()>& work, bool fault_point) {
  std::vector<double> times;
  for (int run = 0; run < options.warmup + options.repeats; ++run) {
    communicator.barrier();
    if (fault_point && run == options.warmup && communicator.rank() == options.fault_kill_rank) {
      fmt::print(stderr, "rank {}: killing itself mid-run (fault test)\n", communicator.rank());
      raise(SIGKILL);
    }
    const auto start = std::chrono::steady_clock::now();
    work();
    communicator.synchronize(stream);
    const double ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    if (run >= options.warmup) times.push_back(ms);
  }
  std::sort(times.begin(), times.end());
  return times.empty() ? 0.0 : times[times.size() / 2];
}

SchemeResult time_scheme(const std::string& name, const BenchOptions& options,
                         const Problem& problem, Communicator& communicator, cudaStream_t stream,
                         bool fault_point) {
  SchemeResult result;
  result.name = name;
  const int rank = communicator.rank();
  const Device device = communicator.device();
  AttentionOptions attention_options;
  attention_options.stream = stream;
  if (name == kDense) {
    // Single-GPU dense on rank 0; the others wait at the barriers.
    std::optional<DeviceTensor> q, k, v, out, lse;
    if (rank == 0) {
      q.emplace(DeviceTensor::from_host(problem.host.q.view(), device));
      k.emplace(DeviceTensor::from_host(problem.host.k.view(), device));
      v.emplace(DeviceTensor::from_host(problem.host.v.view(), device));
      out.emplace(DType::kBFloat16, problem.host.q.shape(), device);
      lse.emplace(DType::kFloat32, std::vector<int64_t>{1, problem.q_heads, problem.length()},
                  device);
    }
    const double ms = time_runs(
        communicator, stream, options,
        [&] {
          if (rank == 0) {
            attention_dense(q->view(), k->view(), v->view(), out->view(), lse->view(),
                            attention_options);
          }
        },
        false);
    result.median_ms = gather_doubles(communicator, {ms})[0];
    result.compute_only_ms = result.median_ms;
    result.compute_min_ms = result.median_ms;
    return result;
  }
  const dist::DistConfig config = config_for(name, options);
  const dist::SequenceSplit split = dist::split_sequence(
      config, problem.context_len, problem.query_len, communicator.world_size());
  LocalProblem local = upload_local(problem.host, split, rank, device);
  dist::check_same_config(communicator, config, split, local.q.view(), local.k.view());
  dist::Workspace workspace;
  const auto run = [&](Communicator& through) {
    dist::attention(config, split, through, local.q.view(), local.k.view(), local.v.view(),
                    local.out.view(), attention_options, &workspace);
  };
  const double ms = time_runs(
      communicator, stream, options, [&] { run(communicator); }, fault_point);
  SilentCommunicator silent(communicator);
  const double compute_ms = time_runs(
      communicator, stream, options, [&] { run(silent); }, false);
  const std::vector<double> all = gather_doubles(communicator, {ms, compute_ms});
  result.compute_min_ms = all[1];
  for (int r = 0; r < communicator.world_size(); ++r) {
    result.median_ms = std::max(result.median_ms, all[2 * r]);
    result.compute_only_ms = std::max(result.compute_only_ms, all[2 * r + 1]);
    result.compute_min_ms = std::min(result.compute_min_ms, all[2 * r + 1]);
  }
  return result;
}

void print_table(const std::vector<SchemeResult>& results, const Problem& problem, int world,
                 const std::string& gpu) {
  fmt::print(
      "mmsparse-dist-bench: synthetic workload, {} tokens ({} context + {} query), heads "
      "{}/{}, head_dim {}, bf16, {} x {}\n",
      problem.length(), problem.context_len, problem.query_len, problem.q_heads, problem.kv_heads,
      problem.head_dim, world, gpu);
  const auto find = [&](const char* name) -> const SchemeResult* {
    for (const SchemeResult& result : results) {
      if (result.name == name) return &result;
    }
    return nullptr;
  };
  const SchemeResult* dense = find(kDense);
  const SchemeResult* ring = find("zigzag-ring");
  fmt::print("{:<13} {:>11} {:>11} {:>13} {:>10} {:>9} {:>9}\n", "scheme", "median ms",
             "no-comm ms", "exposed comm", "imbalance", "vs dense", "vs ring");
  for (const SchemeResult& result : results) {
    const double exposed =
        result.median_ms > 0 ? 1.0 - result.compute_only_ms / result.median_ms : 0.0;
    const double imbalance =
        result.compute_only_ms > 0 ? 1.0 - result.compute_min_ms / result.compute_only_ms : 0.0;
    fmt::print("{:<13} {:>11.2f} {:>11.2f} {:>12.1f}% {:>9.1f}% {:>8.2f}x {:>8.2f}x\n", result.name,
               result.median_ms, result.compute_only_ms, 100.0 * std::max(0.0, exposed),
               100.0 * imbalance, dense ? dense->median_ms / result.median_ms : 0.0,
               ring ? ring->median_ms / result.median_ms : 0.0);
  }
  fmt::print(
      "exposed comm = 1 - (the slowest rank's time with no data moved) / (its time); "
      "imbalance = 1 - fastest / slowest rank's compute\n");
}

void write_json(const BenchOptions& options, const std::vector<SchemeResult>& results,
                const Problem& problem, int world, const std::string& gpu) {
  if (options.json_path.empty()) return;
  nlohmann::json document;
  document["workload"] = {{"preset", options.preset},     {"synthetic", true},
                          {"length", problem.length()},   {"context", problem.context_len},
                          {"query", problem.query_len},   {"q_heads", problem.q_heads},
                          {"kv_heads", problem.kv_heads}, {"head_dim", problem.head_dim}};
  document["world"] = world;
  document["gpu"] = gpu;
  for (const SchemeResult& result : results) {
    document["schemes"].push_back({{"name", result.name},
                                   {"median_ms", result.median_ms},
                                   {"compute_only_ms", result.compute_only_ms},
                                   {"compute_min_ms", result.compute_min_ms},
                                   {"checked", result.checked},
                                   {"passed", result.passed},
                                   {"relative_error", result.relative_error},
                                   {"max_abs_error", result.max_abs_error},
                                   {"reference", result.reference}});
  }
  std::ofstream file(options.json_path);
  file << document.dump(2) << "\n";
  if (!file) throw Error(ErrorCode::kIoError, "--json: cannot write " + options.json_path);
}

}  // namespace

int run_rank(const BenchOptions& options, const RankIdentity& identity) {
  end_on_sigterm(identity.rank);
  dist::NcclOptions nccl;
  nccl.rank = identity.rank;
  nccl.world = identity.world;
  nccl.device = identity.local_rank;
  nccl.id_file = options.id_file;
  nccl.faults.timeout_seconds = options.timeout_seconds;
  nccl.faults.abort_wait_seconds = options.abort_wait_seconds;
  const double exit_seconds = options.abort_wait_seconds + kUnwindSeconds;
  nccl.faults.on_abort = [rank = identity.rank, exit_seconds](const std::string& reason) {
    end_within(rank, reason, exit_seconds);
  };
  const std::unique_ptr<Communicator> communicator = dist::make_nccl_communicator(nccl);
  cudaStream_t stream = nullptr;
  if (cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) != cudaSuccess) {
    throw Error(ErrorCode::kBackendError, "cudaStreamCreate failed");
  }
  const Problem problem = make_problem(options);
  cudaDeviceProp properties{};
  cudaGetDeviceProperties(&properties, identity.local_rank);
  const std::string gpu = properties.name;
  std::vector<SchemeResult> results;
  bool first_timed = true;
  for (const std::string& name : options.schemes) {
    if (options.check) {
      if (name == kDense) continue;
      results.push_back(check_scheme(name, options, problem.host, problem.context_len,
                                     problem.query_len, *communicator, stream));
      continue;
    }
    results.push_back(time_scheme(name, options, problem, *communicator, stream, first_timed));
    first_timed = false;
  }
  if (identity.rank == 0 && !problem.needles.empty()) {
    print_needles_kept(options, problem.host, problem.needles, problem.context_len,
                       problem.query_len, identity.world);
  }
  bool all_passed = true;
  for (const SchemeResult& result : results) all_passed = all_passed && result.passed;
  if (identity.rank == 0) {
    if (options.check) {
      print_checks(results);
    } else {
      print_table(results, problem, identity.world, gpu);
    }
    write_json(options, results, problem, identity.world, gpu);
  }
  communicator->synchronize(stream);
  cudaStreamDestroy(stream);
  return all_passed ? 0 : 1;
}

}  // namespace mmsparse::dist_bench
