#pragma once
// The synthetic problem of a timed run, generated across the ranks: each rank generates a 1/W
// slice of the rows (Workload::materialize_rows: bit for bit the rows materialize() gives, every
// value a pure function of seed, head and position), uploads it into its slot of the global q, k,
// v on its GPU, and one all-gather per tensor gives every rank the whole problem on the device.
// A scheme's local rows are then device-to-device copies, and single-GPU dense reads the global
// tensors as they are. No rank of a timed run materializes the whole problem on the host; the
// short runs that check against references do (HostProblem).

#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

#include "bench_options.h"
#include "mmsparse/device.h"
#include "mmsparse/dist.h"
#include "mmsparse/tools/workload.h"
#include "rank_support.h"

namespace mmsparse::dist_bench {

// The workload the options describe (preset, length, heads, needles).
WorkloadSpec workload_spec(const BenchOptions& options);
// Query rows at the end: --query, else the workload's final question (at least one row).
int64_t query_length(const BenchOptions& options, const Workload& workload);

struct DeviceProblem {
  DeviceTensor q, k, v;  // [1, total, heads, head_dim] bf16, the whole problem on this rank's GPU
  int64_t context_len = 0;
  int64_t query_len = 0;
  int64_t generated_rows = 0;     // by this rank
  double generate_seconds = 0.0;  // this rank's host generation
  double exchange_seconds = 0.0;  // upload and all-gather
  int64_t total_len() const { return context_len + query_len; }
};

// Every rank calls it with the same options; `threads` generate this rank's slice (0: all cores).
DeviceProblem generate_on_ranks(const BenchOptions& options, dist::Communicator& communicator,
                                cudaStream_t stream, int threads);

// The whole problem on the host, generated in this process: short sequences (--check's
// single-GPU references, --accuracy's sweep).
struct HostProblem {
  WorkloadSpec spec;
  Workload::Tensors host;  // q, k, v: [1, total_len(), heads, head_dim] bf16
  std::vector<Needle> needles;
  int64_t context_len = 0;
  int64_t query_len = 0;
  int64_t total_len() const { return context_len + query_len; }
};
HostProblem make_host_problem(const BenchOptions& options);

// A rank's local q, k, v of `split` copied from the global device tensors, and its output.
LocalProblem local_from_device(const DeviceProblem& problem, const dist::SequenceSplit& split,
                               int rank, Device device, cudaStream_t stream);

}  // namespace mmsparse::dist_bench
