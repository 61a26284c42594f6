// One rank of mmsparse-dist-bench: the synthetic workload, each scheme timed (with and without its
// communication, for the exposed communication share) or checked against single-GPU references.

#include <cuda_runtime.h>
#include <fmt/core.h>
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <fstream>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "bench_inputs.h"
#include "bench_options.h"
#include "dist/deadline.h"
#include "event_trace.h"
#include "fault_options.h"
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
// How much longer than --timeout a watched step may run before the watchdog ends the rank: the
// communicator's own deadlines (the same --timeout, from each collective's issue) report first
// whenever the rank's thread is polling one; the watchdog catches it blocked anywhere else.
constexpr double kWatchdogMarginSeconds = 1.0;
constexpr double kWatchdogIntervalSeconds = 0.05;

// The rank's watchdog and the bound of every step it watches: each step that waits on the GPU or
// on peers (a timed run, a gather of host values, the final synchronisation) ends within the
// bound, or the rank aborts NCCL and exits naming the step.
struct Watch {
  dist::detail::StepWatchdog* watchdog = nullptr;
  double bound_seconds = 0.0;
  dist::detail::WatchedStep step(const std::string& name) const {
    return {watchdog, name, bound_seconds};
  }
  void phase(const std::string& name) const {
    if (watchdog != nullptr) watchdog->set_phase(name);
  }
};

// Median milliseconds of `work` between a barrier and a synchronize, after the warm-up.
double time_runs(Communicator& communicator, cudaStream_t stream, const BenchOptions& options,
                 const Watch& watch, const std::string& name, const std::function<void()>& work,
                 bool fault_point) {
  std::vector<double> times;
  for (int run = 0; run < options.warmup + options.repeats; ++run) {
    const auto step = watch.step(name + " run " + std::to_string(run + 1));
    watch.phase("barrier");
    communicator.barrier();
    if (fault_point && run == options.warmup && communicator.rank() == options.fault_kill_rank) {
      fmt::print(stderr, "rank {}: killing itself mid-run (fault test)\n", communicator.rank());
      raise(SIGKILL);
    }
    watch.phase("attention (issuing its kernels and collectives)");
    const auto start = std::chrono::steady_clock::now();
    work();
    watch.phase("synchronize (waiting for the collectives and the stream)");
    communicator.synchronize(stream);
    const double ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    if (run >= options.warmup) times.push_back(ms);
  }
  std::sort(times.begin(), times.end());
  return times.empty() ? 0.0 : times[times.size() / 2];
}

// Extra runs of `work` recording the event trace (not timed).
void trace_runs(Communicator& communicator, cudaStream_t stream, const BenchOptions& options,
                const Watch& watch, EventTrace* trace, const std::string& name,
                const std::function<void()>& work) {
  if (trace == nullptr) return;
  for (int run = 0; run < options.trace_runs; ++run) {
    const auto step = watch.step(name + " traced run " + std::to_string(run + 1));
    communicator.barrier();
    trace->begin_run(name);
    communicator.set_tracer(trace);
    work();
    communicator.set_tracer(nullptr);
    communicator.synchronize(stream);
  }
}

SchemeResult time_scheme(const std::string& name, const BenchOptions& options,
                         const DeviceProblem& problem, Communicator& communicator,
                         cudaStream_t stream, const Watch& watch, bool fault_point,
                         EventTrace* trace) {
  SchemeResult result;
  result.name = name;
  const int rank = communicator.rank();
  const Device device = communicator.device();
  AttentionOptions attention_options;
  attention_options.stream = stream;
  if (name == kDense) {
    // Single-GPU dense on rank 0 over the global tensors; the others wait at the barriers.
    std::optional<DeviceTensor> out, lse;
    const TensorView q = problem.q.view();
    if (rank == 0) {
      out.emplace(DType::kBFloat16, q.shape_vector(), device);
      lse.emplace(DType::kFloat32, std::vector<int64_t>{1, q.shape[2], problem.total_len()},
                  device);
    }
    const double ms = time_runs(
        communicator, stream, options, watch, name,
        [&] {
          if (rank == 0) {
            attention_dense(q, problem.k.view(), problem.v.view(), out->view(), lse->view(),
                            attention_options);
          }
        },
        false);
    const auto step = watch.step(name + ": gather of the medians");
    result.median_ms = gather_doubles(communicator, {ms})[0];
    result.compute_only_ms = result.median_ms;
    result.compute_min_ms = result.median_ms;
    return result;
  }
  const dist::DistConfig config = config_for(name, options);
  const dist::SequenceSplit split = dist::split_sequence(
      config, problem.context_len, problem.query_len, communicator.world_size());
  std::optional<dist::detail::WatchedStep> setup(std::in_place, watch.watchdog,
                                                 name + ": local rows and the config check",
                                                 watch.bound_seconds);
  LocalProblem local = local_from_device(problem, split, rank, device, stream);
  dist::check_same_config(communicator, config, split, local.q.view(), local.k.view());
  setup.reset();
  dist::Workspace workspace;
  const auto run = [&](Communicator& through) {
    dist::attention(config, split, through, local.q.view(), local.k.view(), local.v.view(),
                    local.out.view(), attention_options, &workspace);
  };
  const double ms = time_runs(
      communicator, stream, options, watch, name, [&] { run(communicator); }, fault_point);
  SilentCommunicator silent(communicator);
  const double compute_ms = time_runs(
      communicator, stream, options, watch, name + " without communication", [&] { run(silent); },
      false);
  trace_runs(communicator, stream, options, watch, trace, name, [&] { run(communicator); });
  const auto step = watch.step(name + ": gather of the medians");
  const std::vector<double> all = gather_doubles(communicator, {ms, compute_ms});
  result.compute_min_ms = all[1];
  for (int r = 0; r < communicator.world_size(); ++r) {
    result.median_ms = std::max(result.median_ms, all[2 * r]);
    result.compute_only_ms = std::max(result.compute_only_ms, all[2 * r + 1]);
    result.compute_min_ms = std::min(result.compute_min_ms, all[2 * r + 1]);
  }
  return result;
}

// The problem's shape for the table and the JSON.
struct Shape {
  int64_t length = 0, context_len = 0, query_len = 0;
  int64_t q_heads = 0, kv_heads = 0, head_dim = 0;
};

Shape shape_of(const DeviceProblem& problem) {
  const TensorView q = problem.q.view();
  return {problem.total_len(), problem.context_len,       problem.query_len,
          q.shape[2],          problem.k.view().shape[2], q.shape[3]};
}

Shape shape_of(const HostProblem& problem) {
  return {problem.total_len(),  problem.context_len,   problem.query_len,
          problem.spec.q_heads, problem.spec.kv_heads, problem.spec.head_dim};
}

void print_table(const std::vector<SchemeResult>& results, const Shape& problem, int world,
                 const std::string& gpu) {
  fmt::print(
      "mmsparse-dist-bench: synthetic workload, {} tokens ({} context + {} query), heads "
      "{}/{}, head_dim {}, bf16, {} x {}\n",
      problem.length, problem.context_len, problem.query_len, problem.q_heads, problem.kv_heads,
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
  // A ratio to a scheme that did not run in this bench reads "-", not 0.00x.
  const auto ratio = [](const SchemeResult* base, const SchemeResult& result) {
    return base && result.median_ms > 0 ? fmt::format("{:.2f}x", base->median_ms / result.median_ms)
                                        : std::string("-");
  };
  for (const SchemeResult& result : results) {
    const double exposed =
        result.median_ms > 0 ? 1.0 - result.compute_only_ms / result.median_ms : 0.0;
    const double imbalance =
        result.compute_only_ms > 0 ? 1.0 - result.compute_min_ms / result.compute_only_ms : 0.0;
    fmt::print("{:<13} {:>11.2f} {:>11.2f} {:>12.1f}% {:>9.1f}% {:>9} {:>9}\n", result.name,
               result.median_ms, result.compute_only_ms, 100.0 * std::max(0.0, exposed),
               100.0 * imbalance, ratio(dense, result), ratio(ring, result));
  }
  fmt::print(
      "exposed comm = 1 - (the slowest rank's time with no data moved) / (its time); "
      "imbalance = 1 - fastest / slowest rank's compute\n");
}

void write_json(const BenchOptions& options, const std::vector<SchemeResult>& results,
                const Shape& problem, int world, const std::string& gpu,
                const std::vector<TraceSummary>& trace = {}) {
  if (options.json_path.empty()) return;
  nlohmann::json document;
  document["workload"] = {{"preset", options.preset},     {"synthetic", true},
                          {"length", problem.length},     {"context", problem.context_len},
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
  for (const TraceSummary& summary : trace) {
    document["trace"].push_back({{"scheme", summary.scheme},
                                 {"rank", summary.rank},
                                 {"run", summary.run},
                                 {"span_ms", summary.span_ms},
                                 {"compute_ms", summary.compute_ms},
                                 {"communication_ms", summary.communication_ms},
                                 {"overlapped_ms", summary.overlapped_ms}});
  }
  std::ofstream file(options.json_path);
  file << document.dump(2) << "\n";
  if (!file) throw Error(ErrorCode::kIoError, "--json: cannot write " + options.json_path);
}

// --check: every scheme against single-GPU references, on the whole problem held on the host.
bool check_rank(const BenchOptions& options, const RankIdentity& identity,
                Communicator& communicator, cudaStream_t stream, const Watch& watch,
                const std::string& gpu) {
  const HostProblem problem = make_host_problem(options);
  std::vector<SchemeResult> results;
  for (const std::string& name : options.schemes) {
    if (name == kDense) continue;
    const auto step = watch.step(name + ": check against the single-GPU reference");
    results.push_back(check_scheme(name, options, problem.host, problem.context_len,
                                   problem.query_len, communicator, stream));
  }
  if (identity.rank == 0 && !problem.needles.empty()) {
    print_needles_kept(options, problem.host, problem.needles, problem.context_len,
                       problem.query_len, identity.world);
  }
  bool all_passed = true;
  for (const SchemeResult& result : results) all_passed = all_passed && result.passed;
  if (identity.rank == 0) {
    print_checks(results);
    write_json(options, results, shape_of(problem), identity.world, gpu);
  }
  return all_passed;
}

// Timing: the problem generated across the ranks (bench_inputs.h), each scheme timed, and traced
// after its timed runs with --trace.
bool time_rank(const BenchOptions& options, const RankIdentity& identity,
               Communicator& communicator, cudaStream_t stream, const Watch& watch,
               const std::string& gpu) {
  const int threads = std::max(
      1, static_cast<int>(std::thread::hardware_concurrency()) / std::max(1, identity.world));
  const DeviceProblem problem = generate_on_ranks(options, communicator, stream, threads);
  std::optional<dist::detail::WatchedStep> gather_step(
      std::in_place, watch.watchdog, "gather of the input timings", watch.bound_seconds);
  const std::vector<double> inputs =
      gather_doubles(communicator, {static_cast<double>(problem.generated_rows),
                                    problem.generate_seconds, problem.exchange_seconds});
  if (identity.rank == 0) {
    for (int r = 0; r < identity.world; ++r) {
      fmt::print(
          "rank {}: generated {} of {} rows in {:.2f} s on {} threads, exchanged (upload + "
          "all-gather) in {:.2f} s\n",
          r, static_cast<int64_t>(inputs[3 * r]), problem.total_len(), inputs[3 * r + 1], threads,
          inputs[3 * r + 2]);
    }
  }
  gather_step.reset();
  std::optional<EventTrace> trace;
  if (!options.trace_path.empty()) trace.emplace(identity.rank, stream);
  std::vector<SchemeResult> results;
  bool first_timed = true;
  for (const std::string& name : options.schemes) {
    results.push_back(time_scheme(name, options, problem, communicator, stream, watch, first_timed,
                                  trace ? &*trace : nullptr));
    first_timed = false;
  }
  std::vector<TraceSummary> summaries;
  if (trace) {
    write_trace_part(options.trace_path, identity.rank, trace->intervals());
    {
      const auto step = watch.step("barrier after the trace parts");
      communicator.barrier();
    }
    if (identity.rank == 0) summaries = merge_trace_parts(options.trace_path, identity.world);
  }
  if (identity.rank == 0) {
    print_table(results, shape_of(problem), identity.world, gpu);
    write_json(options, results, shape_of(problem), identity.world, gpu, summaries);
  }
  return true;
}

}  // namespace

int run_rank(const BenchOptions& options, const RankIdentity& identity) {
  check_fault_rank(options.fault_kill_rank, identity.world);
  end_on_sigterm(identity.rank);
  dist::NcclOptions nccl;
  nccl.rank = identity.rank;
  nccl.world = identity.world;
  nccl.device = identity.local_rank;
  nccl.id_file = options.id_file;
  nccl.faults.timeout_seconds = options.timeout_seconds;
  nccl.faults.abort_wait_seconds = options.abort_wait_seconds;
  const double exit_seconds = options.abort_wait_seconds + kUnwindSeconds;
  // Set once a fault was reported: the exit is then armed, and the watchdog leaves it to that.
  const auto fault_reported = std::make_shared<std::atomic<bool>>(false);
  nccl.faults.on_abort = [rank = identity.rank, exit_seconds,
                          fault_reported](const std::string& reason) {
    fault_reported->store(true);
    end_within(rank, reason, exit_seconds);
  };
  const std::unique_ptr<Communicator> communicator = dist::make_nccl_communicator(nccl);
  cudaStream_t stream = nullptr;
  if (cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) != cudaSuccess) {
    throw Error(ErrorCode::kBackendError, "cudaStreamCreate failed");
  }
  cudaDeviceProp properties{};
  cudaGetDeviceProperties(&properties, identity.local_rank);
  const std::string gpu = properties.name;
  // Declared after the communicator: destroyed (its thread stopped) before it.
  dist::detail::StepWatchdog watchdog(
      [] {
        return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
            .count();
      },
      [rank = identity.rank, communicator = communicator.get(),
       fault_reported](const std::string& message) {
        // The rank's own deadline fired first: its abort has --abort-wait, its exit is armed.
        if (fault_reported->load()) return;
        communicator->abort(message);  // reports it and waits at most --abort-wait for NCCL
        exit_now(rank, message);
      });
  watchdog.start(kWatchdogIntervalSeconds);
  const Watch watch{&watchdog, options.timeout_seconds + kWatchdogMarginSeconds};
  const bool passed = options.check
                          ? check_rank(options, identity, *communicator, stream, watch, gpu)
                          : time_rank(options, identity, *communicator, stream, watch, gpu);
  const auto step = watch.step("final synchronisation");
  communicator->synchronize(stream);
  cudaStreamDestroy(stream);
  return passed ? 0 : 1;
}

}  // namespace mmsparse::dist_bench
