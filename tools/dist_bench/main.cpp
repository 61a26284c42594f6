// mmsparse-dist-bench: sequence-parallel attention across the GPUs of one host, on a synthetic
// workload: Spava, ZigZag ring, StarAttention, APB-style and single-GPU dense, timed in one run, or
// checked against single-GPU references (--check).
//
// Launch: run it plainly and it starts one process per visible GPU itself (re-executing this
// binary, so no CUDA state crosses a fork); or under torchrun (RANK, WORLD_SIZE, LOCAL_RANK) or
// mpirun (OMPI_COMM_WORLD_*), where each process is a rank. Ranks meet through an NCCL id file.

#include <fmt/core.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "bench_options.h"
#include "fault_options.h"
#include "mmsparse/status.h"

namespace mmsparse::dist_bench {
namespace {

constexpr int kExitError = 1;
constexpr auto kReapInterval = std::chrono::milliseconds(20);
// How long the other ranks may take to end on their own once one failed (outside fault tests).
constexpr double kFailureGraceSeconds = 60.0;

std::optional<int> env_int(const char* name) {
  const char* value = std::getenv(name);
  if (value == nullptr || *value == '\0') return std::nullopt;
  return std::stoi(value);
}

// The rank this process is, when a launcher (ours, torchrun, mpirun) started it as one.
std::optional<RankIdentity> identity_from_environment() {
  const char* names[][3] = {
      {"RANK", "WORLD_SIZE", "LOCAL_RANK"},
      {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK"}};
  for (const auto& triple : names) {
    const std::optional<int> rank = env_int(triple[0]);
    const std::optional<int> world = env_int(triple[1]);
    if (!rank || !world) continue;
    return RankIdentity{*rank, *world, env_int(triple[2]).value_or(*rank)};
  }
  return std::nullopt;
}

// GPUs this host shows: CUDA_VISIBLE_DEVICES when set, else the driver's list (no CUDA call, so
// the launcher never initialises CUDA).
int visible_gpus() {
  if (const char* visible = std::getenv("CUDA_VISIBLE_DEVICES"); visible != nullptr) {
    const std::string list = visible;
    if (list.empty()) return 0;
    return 1 + static_cast<int>(std::count(list.begin(), list.end(), ','));
  }
  int count = 0;
  std::error_code error;
  for (const auto& entry : std::filesystem::directory_iterator("/proc/driver/nvidia/gpus", error)) {
    (void)entry;
    ++count;
  }
  return count;
}

struct Child {
  pid_t pid = 0;
  int rank = 0;
  bool done = false;
  int status = 0;
  double ended_at = 0.0;  // seconds since launch
};

std::string describe_status(int status) {
  if (WIFEXITED(status)) return "exit " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return "killed by signal " + std::to_string(WTERMSIG(status));
  return "status " + std::to_string(status);
}

// The fault test's verdict: the killed rank died by a signal, and every other rank ended on its
// own with an error (not killed by us) within the bound after it.
int fault_verdict(const BenchOptions& options, const std::vector<Child>& children,
                  std::optional<double> killed_at) {
  if (!killed_at) {
    fmt::print(stderr, "fault test FAILED: rank {} never died\n", options.fault_kill_rank);
    return kExitError;
  }
  double slowest = 0.0;
  for (const Child& child : children) {
    if (child.rank == options.fault_kill_rank) continue;
    const bool own_error = WIFEXITED(child.status) && WEXITSTATUS(child.status) != 0;
    const double after = child.ended_at - *killed_at;
    if (!own_error || after > options.fault_bound_seconds) {
      fmt::print(stderr, "fault test FAILED: rank {} {} {:.1f} s after rank {} died (bound {} s)\n",
                 child.rank, describe_status(child.status), after, options.fault_kill_rank,
                 options.fault_bound_seconds);
      return kExitError;
    }
    slowest = std::max(slowest, after);
  }
  fmt::print(
      "fault test passed: every other rank ended with an error at most {:.1f} s after rank "
      "{} was killed (bound {} s)\n",
      slowest, options.fault_kill_rank, options.fault_bound_seconds);
  return 0;
}

// The first rank that failed makes the others stop now (SIGTERM: they print that and exit with an
// error) instead of each waiting out its timeout on a peer that is gone.
void signal_others(const std::vector<Child>& children, const Child& failed, int status) {
  fmt::print(stderr,
             "mmsparse-dist-bench: rank {} ended ({}): sending SIGTERM to the other ranks\n",
             failed.rank, describe_status(status));
  for (const Child& child : children) {
    if (!child.done && child.pid != failed.pid) kill(child.pid, SIGTERM);  // our own, by pid
  }
}

// Starts `world` ranks of this binary and waits for them. In a fault test, passes when the killed
// rank died and every other rank ended with an error within the bound.
int launch(const BenchOptions& options, int world, char** argv) {
  char directory_template[] = "/tmp/mmsparse-dist-XXXXXX";
  if (mkdtemp(directory_template) == nullptr) {
    throw Error(ErrorCode::kIoError, "cannot create a directory for the NCCL id file");
  }
  const std::string id_file = std::string(directory_template) + "/nccl.id";
  std::vector<Child> children;
  const auto start = std::chrono::steady_clock::now();
  for (int rank = 0; rank < world; ++rank) {
    const pid_t pid = fork();
    if (pid < 0) throw Error(ErrorCode::kBackendError, "fork failed");
    if (pid == 0) {
      setenv("RANK", std::to_string(rank).c_str(), 1);
      setenv("WORLD_SIZE", std::to_string(world).c_str(), 1);
      setenv("LOCAL_RANK", std::to_string(rank).c_str(), 1);
      setenv("MMSPARSE_DIST_ID_FILE", id_file.c_str(), 1);
      execv("/proc/self/exe", argv);
      _exit(127);
    }
    children.push_back({pid, rank});
  }
  const auto seconds = [&] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  };
  std::optional<double> killed_at;  // the fault test's victim
  std::optional<double> failed_at;  // the first rank that ended abnormally
  // Once a rank failed, the others end on their own (NCCL errors, timeouts) or are killed.
  const double grace =
      options.fault_kill_rank >= 0 ? options.fault_bound_seconds : kFailureGraceSeconds;
  std::size_t remaining = children.size();
  while (remaining > 0) {
    int status = 0;
    const pid_t pid = waitpid(-1, &status, WNOHANG);
    if (pid > 0) {
      for (Child& child : children) {
        if (child.pid != pid) continue;
        child = {pid, child.rank, true, status, seconds()};
        if (child.rank == options.fault_kill_rank) killed_at = child.ended_at;
        const bool clean = WIFEXITED(status) && WEXITSTATUS(status) == 0;
        if (!clean && !failed_at) {
          failed_at = child.ended_at;
          if (options.signal_peers) signal_others(children, child, status);
        }
        --remaining;
      }
      continue;
    }
    if (failed_at && seconds() - *failed_at > grace) {
      for (Child& child : children) {
        if (child.done) continue;
        fmt::print(stderr,
                   "mmsparse-dist-bench: rank {} still running {:.0f} s after a rank "
                   "failed: killing it\n",
                   child.rank, grace);
        kill(child.pid, SIGKILL);  // our own children, by pid
      }
      failed_at = seconds();  // give the kills time to land before reporting again
    }
    std::this_thread::sleep_for(kReapInterval);
  }
  std::filesystem::remove_all(directory_template);
  bool all_ok = true;
  for (const Child& child : children) {
    fmt::print(stderr, "mmsparse-dist-bench: rank {} {} after {:.1f} s\n", child.rank,
               describe_status(child.status), child.ended_at);
    all_ok = all_ok && WIFEXITED(child.status) && WEXITSTATUS(child.status) == 0;
  }
  if (options.fault_kill_rank < 0) return all_ok ? 0 : kExitError;
  return fault_verdict(options, children, killed_at);
}

void add_options(CLI::App& app, BenchOptions& options) {
  app.add_option("--preset", options.preset, "synthetic workload preset (mmsparse presets)");
  app.add_option("--length", options.length, "tokens in all (context, then the query block)");
  app.add_option("--query", options.query_len,
                 "query tokens at the end; 0: the workload's question");
  app.add_option("--heads", options.q_heads, "query heads (0: the preset's)");
  app.add_option("--kv-heads", options.kv_heads, "KV heads (0: the preset's)");
  app.add_option("--head-dim", options.head_dim, "head dimension (0: the preset's)");
  app.add_option("--needles", options.needles,
                 "needle keys the final question reads (-1: the preset's); with needles, --check "
                 "and --accuracy report how many the passing blocks keep");
  app.add_option("--schemes", options.schemes,
                 "spava, zigzag-ring, star, apb, dense (default: all); with --check also "
                 "spava-exact and apb-exact (whole blocks passed: must equal dense)")
      ->delimiter(',');
  app.add_option("--anchor", options.anchor_len, "anchor tokens (-1: the scheme's default)");
  app.add_option("--passing", options.passing_len, "passing KVs per host (-1: default)");
  app.add_option("--local-pattern", options.local_pattern,
                 "pattern spec for each rank's block attention in the schemes named with "
                 "\"+sparse\" (added after spava when no --schemes are given)");
  app.add_option("--warmup", options.warmup, "untimed runs per scheme");
  app.add_option("--repeats", options.repeats, "timed runs per scheme (median reported)");
  app.add_flag("--check", options.check, "compare every scheme with single-GPU references");
  app.add_option("--check-max-len", options.check_max_len,
                 "longest sequence the CPU reference of the approximations runs on");
  app.add_option("--json", options.json_path, "write the results as JSON (rank 0)");
  app.add_option("--id-file", options.id_file, "NCCL id rendezvous file (torchrun / mpirun)");
  app.add_option("--timeout", options.timeout_seconds,
                 "seconds a collective may take after it was issued before the rank aborts");
  app.add_option("--abort-wait", options.abort_wait_seconds,
                 "seconds a rank waits for ncclCommAbort after a fault before exiting anyway");
  app.add_flag("!--no-signal-peers", options.signal_peers,
               "launcher: do not SIGTERM the other ranks when one fails (each must then detect "
               "the fault itself, within --timeout)");
  app.add_option("--gpus", options.gpus, "ranks to start (0: every visible GPU)");
  app.add_option("--min-gpus", options.min_gpus,
                 "launcher: when fewer ranks would start, print why and exit with 77 (skipped)");
  app.add_option("--fault-kill-rank", options.fault_kill_rank,
                 "fault test: this rank kills itself after the warm-up; the run passes when the "
                 "others end with an error within --fault-bound");
  app.add_option("--fault-bound", options.fault_bound_seconds, "fault test bound in seconds");
  app.add_option("--trace", options.trace_path,
                 "after each scheme's timed runs, record --trace-runs more with CUDA events on the "
                 "compute and communication streams: Chrome-trace JSON to this file and a summary "
                 "(communication time, overlapped, exposed)");
  app.add_option("--trace-runs", options.trace_runs, "traced runs per scheme (with --trace)");
  app.add_flag("--accuracy", options.accuracy,
               "Spava's recall against dense over l_a in {n/256..n/32} and l_p in {n/512..n/64} "
               "for --accuracy-worlds virtual ranks, in this process (in-process transport, GPU 0; "
               "no NCCL): a table, and JSON with --json");
  app.add_flag("--accuracy-cpu", options.accuracy_on_cpu, "run --accuracy on the CPU");
  app.add_option("--accuracy-worlds", options.accuracy_worlds, "virtual ranks for --accuracy")
      ->delimiter(',');
}

}  // namespace
}  // namespace mmsparse::dist_bench

int main(int argc, char** argv) {
  using namespace mmsparse::dist_bench;
  // NVLink multicast (NVLS) stays off unless the caller turns it on: on shared hosts a fault in it
  // can take every GPU of the host out of service, and these collectives are too small to need it.
  setenv("NCCL_NVLS_ENABLE", "0", /*overwrite=*/0);
  CLI::App app{
      "mmsparse-dist-bench: sequence-parallel attention across GPUs (synthetic workloads)"};
  BenchOptions options;
  add_options(app, options);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& error) {
    return app.exit(error);
  }
  if (options.schemes.empty()) {
    options.schemes =
        options.check
            ? std::vector<std::string>{"spava", "spava-exact", "apb", "star", "zigzag-ring"}
            : std::vector<std::string>{"spava", "zigzag-ring", "star", "apb", "dense"};
    if (!options.local_pattern.empty()) options.schemes.push_back("spava+sparse");
  }
  try {
    if (options.accuracy) return run_accuracy(options);
    if (const auto identity = identity_from_environment()) {
      if (const char* id_file = std::getenv("MMSPARSE_DIST_ID_FILE")) options.id_file = id_file;
      if (options.id_file.empty()) {
        const char* port = std::getenv("MASTER_PORT");
        options.id_file = "/tmp/mmsparse-dist-" + std::to_string(getuid()) + "-" +
                          (port != nullptr ? std::string(port) : std::to_string(getppid())) + ".id";
      }
      try {
        return run_rank(options, *identity);
      } catch (const std::exception& error) {
        // A rank that failed (often because a peer did) leaves at once: its destructors could
        // wait on device work that will never finish. The OS reclaims the GPU and NCCL state.
        fmt::print(stderr, "mmsparse-dist-bench: rank {}: {}\n", identity->rank, error.what());
        std::fflush(stderr);
        std::fflush(stdout);
        _exit(kExitError);
      }
    }
    const int world = options.gpus > 0 ? options.gpus : visible_gpus();
    if (const auto reason = skip_reason(options.min_gpus, world)) {
      fmt::print(stderr, "mmsparse-dist-bench: {}\n", *reason);
      return kExitSkipped;
    }
    if (world < 1) {
      throw mmsparse::Error(mmsparse::ErrorCode::kInvalidArgument,
                            "--gpus: expected >= 1, found no visible GPU (set --gpus)");
    }
    check_fault_rank(options.fault_kill_rank, world);
    return launch(options, world, argv);
  } catch (const mmsparse::Error& error) {
    fmt::print(stderr, "mmsparse-dist-bench: {}: {}\n", mmsparse::error_code_name(error.code()),
               error.what());
    return kExitError;
  } catch (const std::exception& error) {
    fmt::print(stderr, "mmsparse-dist-bench: internal error: {}\n", error.what());
    return kExitError;
  }
}
