#pragma once
// A timeline of a rank without nsys: dist::PhaseTracer recording CUDA events (timing enabled) on
// the stream of each mark, the compute stream's phases (query attention, block 1, block 2, merge,
// ring steps) and the communication stream's operations (each all_gather / send_recv from the
// moment the communication stream starts it to its end). Read back after the runs, written as
// Chrome-trace JSON (chrome://tracing, ui.perfetto.dev) and summarised: communication time, the
// part of it overlapped by compute phases, and the exposed rest.
//
// Recording costs one cudaEventRecord per mark (no host synchronisation); the bench records only
// extra runs after the timed ones (--trace), so the timed medians are untouched.

#include <cuda_runtime.h>

#include <string>
#include <string_view>
#include <vector>

#include "mmsparse/dist.h"

namespace mmsparse::dist_bench {

enum class Lane { kCompute = 0, kCommunication = 1 };

struct TraceInterval {
  int rank = 0;
  std::string scheme;
  int run = 0;  // traced run of the scheme
  Lane lane = Lane::kCompute;
  std::string name;
  double begin_ms = 0.0;  // since the run began on this rank (after the barrier before it)
  double end_ms = 0.0;
};

class EventTrace final : public dist::PhaseTracer {
 public:
  EventTrace(int rank, cudaStream_t compute_stream);
  ~EventTrace() override;
  EventTrace(const EventTrace&) = delete;
  EventTrace& operator=(const EventTrace&) = delete;

  // Starts a traced run of `scheme`: its origin is recorded on the compute stream now.
  void begin_run(const std::string& scheme);
  void mark(std::string_view phase, bool begin, void* stream) override;
  // The intervals recorded (every event must be complete: call after synchronizing the runs).
  std::vector<TraceInterval> intervals() const;

 private:
  struct Mark {
    std::string name;
    Lane lane;
    int run;
    bool begin;
    cudaEvent_t event;
  };
  struct Run {
    std::string scheme;
    int index;  // among the scheme's traced runs
    cudaEvent_t origin;
  };
  int rank_;
  cudaStream_t compute_;
  std::vector<Run> runs_;
  std::vector<Mark> marks_;
};

// Per rank and traced run: the run's span, communication time (union of the communication
// intervals), the part of it overlapped by compute phases, and the exposed rest.
struct TraceSummary {
  int rank = 0;
  std::string scheme;
  int run = 0;
  double span_ms = 0.0;
  double compute_ms = 0.0;
  double communication_ms = 0.0;
  double overlapped_ms = 0.0;
  double exposed_ms() const { return communication_ms - overlapped_ms; }
};
std::vector<TraceSummary> summarize(const std::vector<TraceInterval>& intervals);

// Each rank writes its intervals to PATH.rank<r>; after a barrier, rank 0 merges them into PATH
// (Chrome-trace JSON: a process per rank, a thread per lane, runs laid one after another), removes
// the parts, prints the summary and returns it.
void write_trace_part(const std::string& path, int rank, const std::vector<TraceInterval>& own);
std::vector<TraceSummary> merge_trace_parts(const std::string& path, int world);

}  // namespace mmsparse::dist_bench
