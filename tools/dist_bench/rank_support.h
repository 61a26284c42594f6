#pragma once
// What the timed and the checked runs of a rank share: results, local uploads, scheme configs,
// small collectives of host values, a communicator that skips communication, and the checks.

#include <cuda_runtime.h>

#include <string>
#include <vector>

#include "bench_options.h"
#include "mmsparse/device.h"
#include "mmsparse/dist.h"
#include "mmsparse/tools/workload.h"

namespace mmsparse::dist_bench {

struct SchemeResult {
  std::string name;
  double median_ms = 0.0;        // max over ranks of each rank's median
  double compute_only_ms = 0.0;  // the same without communication (data not exchanged)
  double compute_min_ms = 0.0;   // the fastest rank's compute alone: load balance
  bool checked = false;
  bool passed = true;
  double relative_error = 0.0;
  double max_abs_error = 0.0;
  std::string reference;
};

// A rank's local q, k, v (bf16, uploaded) and its output.
struct LocalProblem {
  DeviceTensor q, k, v, out;
};
LocalProblem upload_local(const Workload::Tensors& host, const dist::SequenceSplit& split, int rank,
                          Device device);

// The config of a scheme name (spava, apb, star, zigzag-ring; spava-exact passes whole blocks).
dist::DistConfig config_for(const std::string& name, const BenchOptions& options);

// Every rank's `values`, rank-major, on every rank (through device memory; synchronises).
std::vector<double> gather_doubles(dist::Communicator& communicator,
                                   const std::vector<double>& values);

// The same operations with no data exchanged: times a scheme's compute alone.
class SilentCommunicator final : public dist::Communicator {
 public:
  explicit SilentCommunicator(dist::Communicator& real) : real_(real) {}
  int rank() const override { return real_.rank(); }
  int world_size() const override { return real_.world_size(); }
  Device device() const override { return real_.device(); }
  Ticket all_gather(const void*, int64_t, void*, std::span<const dist::GatherSlot>,
                    void*) override {
    return 0;
  }
  Ticket send_recv(const void*, int64_t, int, void*, int64_t, int, void*) override { return 0; }
  void wait(Ticket, void*) override {}
  void synchronize(void* stream) override { real_.synchronize(stream); }
  void barrier() override {}
  void abort(const std::string& reason) override { real_.abort(reason); }

 private:
  dist::Communicator& real_;
};

// Runs `name` once and compares the assembled output with a single-GPU reference on rank 0: the
// engine's dense attention for exact schemes, the CPU oracle of the same approximation (same
// selected KVs) for the others (up to --check-max-len tokens). The verdict is rank 0's on every
// rank.
SchemeResult check_scheme(const std::string& name, const BenchOptions& options,
                          const Workload::Tensors& host, int64_t context_len, int64_t query_len,
                          dist::Communicator& communicator, cudaStream_t stream);
void print_checks(const std::vector<SchemeResult>& results);

// How many needles (planted keys the query reads) the passing blocks keep, per KV head, for Spava
// and APB-style at the run's anchor and passing lengths and at half and twice the passing length:
// a needle in the anchor or in a rank's own block is always seen; one elsewhere only if selected.
// Host-side selection over the global tensors (the device selection picks the same keys).
void print_needles_kept(const BenchOptions& options, const Workload::Tensors& host,
                        const std::vector<Needle>& needles, int64_t context_len, int64_t query_len,
                        int world);

}  // namespace mmsparse::dist_bench
