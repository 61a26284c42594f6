#pragma once
// Options of mmsparse-dist-bench, shared by the launcher and the ranks.

#include <cstdint>
#include <string>
#include <vector>

namespace mmsparse::dist_bench {

struct BenchOptions {
  std::string preset = "video-qwen2.5vl-128k";  // synthetic workload preset
  int64_t length = 131072;                      // tokens in all: context, then the query block
  int64_t query_len = 0;  // query tokens at the end; 0: the workload's final question
  int64_t q_heads = 0, kv_heads = 0, head_dim = 0;  // 0: the preset's
  int64_t needles = -1;  // retrieval keys planted in the media; -1: the preset's default
  std::vector<std::string> schemes;  // spava, zigzag-ring, star, apb, dense
  int64_t anchor_len = -1;
  int64_t passing_len = -1;
  // Sparse attention inside each rank for the schemes named with "+sparse" (spava+sparse, ...).
  std::string local_pattern;
  int warmup = 2;
  int repeats = 5;
  bool check = false;            // correctness mode instead of timing
  int64_t check_max_len = 4096;  // the CPU reference of the approximations is O(n^2) memory
  std::string json_path;
  std::string id_file;
  double timeout_seconds = 300.0;   // covers the ranks materialising 1M-token workloads apart
  double abort_wait_seconds = 5.0;  // how long a rank waits for ncclCommAbort after a fault
  // Launcher: SIGTERM the other ranks as soon as one fails (off: each must detect it on its own).
  bool signal_peers = true;
  int gpus = 0;              // launcher: ranks to start (0: every visible GPU)
  int min_gpus = 1;          // launcher: fewer ranks than this: skipped (exit 77)
  int fault_kill_rank = -1;  // fault test: this rank kills itself after the warm-up
  double fault_bound_seconds = 60.0;
  // Event trace: after each scheme's timed runs, trace_runs more runs record CUDA events on the
  // compute and communication streams; written as Chrome-trace JSON to trace_path (rank 0).
  std::string trace_path;
  int trace_runs = 1;
  // Accuracy mode: Spava's recall against dense over l_a and l_p, in this process (W virtual
  // ranks through the in-process transport), on GPU 0 or on the CPU.
  bool accuracy = false;
  bool accuracy_on_cpu = false;
  std::vector<int> accuracy_worlds{2, 4, 8};
};

// Accuracy mode (accuracy_mode.cpp): runs the sweep and prints it; returns the exit code.
int run_accuracy(const BenchOptions& options);

// Identity of this process when it runs as a rank.
struct RankIdentity {
  int rank = 0;
  int world = 1;
  int local_rank = 0;
};

// Runs this rank's part; returns the process exit code.
int run_rank(const BenchOptions& options, const RankIdentity& identity);

}  // namespace mmsparse::dist_bench
