// The bench's CUDA-event timeline (event_trace.h).

#include "event_trace.h"

#include <fmt/core.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <tuple>
#include <utility>

#include "mmsparse/status.h"

namespace mmsparse::dist_bench {
namespace {

// Chrome-trace timestamps are microseconds.
constexpr double kMicrosecondsPerMs = 1000.0;
// Space between consecutive runs in the merged timeline, in ms.
constexpr double kRunGapMs = 0.5;

void check_cuda(cudaError_t result, const char* what) {
  if (result != cudaSuccess) {
    throw Error(ErrorCode::kBackendError, std::string(what) + ": " + cudaGetErrorString(result));
  }
}

cudaEvent_t record(cudaStream_t stream) {
  cudaEvent_t event = nullptr;
  check_cuda(cudaEventCreate(&event), "trace event");
  check_cuda(cudaEventRecord(event, stream), "trace event record");
  return event;
}

using Span = std::pair<double, double>;

// The union of intervals as disjoint sorted spans.
std::vector<Span> merged(std::vector<Span> spans) {
  std::sort(spans.begin(), spans.end());
  std::vector<Span> out;
  for (const Span& span : spans) {
    if (!out.empty() && span.first <= out.back().second) {
      out.back().second = std::max(out.back().second, span.second);
    } else {
      out.push_back(span);
    }
  }
  return out;
}

double length(const std::vector<Span>& spans) {
  double total = 0.0;
  for (const Span& span : spans) total += span.second - span.first;
  return total;
}

// Length of the intersection of two unions (each disjoint and sorted).
double overlap(const std::vector<Span>& a, const std::vector<Span>& b) {
  double total = 0.0;
  std::size_t i = 0, j = 0;
  while (i < a.size() && j < b.size()) {
    total += std::max(0.0, std::min(a[i].second, b[j].second) - std::max(a[i].first, b[j].first));
    if (a[i].second < b[j].second) {
      ++i;
    } else {
      ++j;
    }
  }
  return total;
}

std::string part_path(const std::string& path, int rank) {
  return path + ".rank" + std::to_string(rank);
}

}  // namespace

EventTrace::EventTrace(int rank, cudaStream_t compute_stream)
    : rank_(rank), compute_(compute_stream) {}

EventTrace::~EventTrace() {
  for (const Mark& mark : marks_) cudaEventDestroy(mark.event);
  for (const Run& run : runs_) cudaEventDestroy(run.origin);
}

void EventTrace::begin_run(const std::string& scheme) {
  int index = 0;
  for (const Run& run : runs_) index += run.scheme == scheme ? 1 : 0;
  runs_.push_back({scheme, index, record(compute_)});
}

void EventTrace::mark(std::string_view phase, bool begin, void* stream) {
  if (runs_.empty()) return;  // outside a traced run
  const auto cuda_stream = static_cast<cudaStream_t>(stream);
  const Lane lane = cuda_stream == compute_ ? Lane::kCompute : Lane::kCommunication;
  marks_.push_back(
      {std::string(phase), lane, static_cast<int>(runs_.size()) - 1, begin, record(cuda_stream)});
}

std::vector<TraceInterval> EventTrace::intervals() const {
  std::vector<TraceInterval> out;
  // Open marks per (lane, name): a phase ends on the stream it began on.
  std::map<std::pair<Lane, std::string>, std::vector<const Mark*>> open;
  for (const Mark& mark : marks_) {
    const auto key = std::make_pair(mark.lane, mark.name);
    if (mark.begin) {
      open[key].push_back(&mark);
      continue;
    }
    std::vector<const Mark*>& stack = open[key];
    if (stack.empty()) continue;
    const Mark& begin = *stack.back();
    stack.pop_back();
    const Run& run = runs_[static_cast<std::size_t>(begin.run)];
    float begin_ms = 0.0f, end_ms = 0.0f;
    check_cuda(cudaEventElapsedTime(&begin_ms, run.origin, begin.event), "trace event time");
    check_cuda(cudaEventElapsedTime(&end_ms, run.origin, mark.event), "trace event time");
    out.push_back({rank_, run.scheme, run.index, mark.lane, mark.name, begin_ms, end_ms});
  }
  return out;
}

std::vector<TraceSummary> summarize(const std::vector<TraceInterval>& intervals) {
  std::map<std::tuple<std::string, int, int>, std::vector<const TraceInterval*>> groups;
  for (const TraceInterval& interval : intervals) {
    groups[{interval.scheme, interval.run, interval.rank}].push_back(&interval);
  }
  std::vector<TraceSummary> out;
  for (const auto& [key, members] : groups) {
    std::vector<Span> compute, communication;
    double end = 0.0;
    for (const TraceInterval* interval : members) {
      (interval->lane == Lane::kCompute ? compute : communication)
          .emplace_back(interval->begin_ms, interval->end_ms);
      end = std::max(end, interval->end_ms);
    }
    const std::vector<Span> busy = merged(compute);
    const std::vector<Span> talking = merged(communication);
    TraceSummary summary;
    summary.scheme = std::get<0>(key);
    summary.run = std::get<1>(key);
    summary.rank = std::get<2>(key);
    summary.span_ms = end;
    summary.compute_ms = length(busy);
    summary.communication_ms = length(talking);
    summary.overlapped_ms = overlap(busy, talking);
    out.push_back(summary);
  }
  return out;
}

void write_trace_part(const std::string& path, int rank, const std::vector<TraceInterval>& own) {
  nlohmann::json part = nlohmann::json::array();
  for (const TraceInterval& interval : own) {
    part.push_back({interval.rank, interval.scheme, interval.run, static_cast<int>(interval.lane),
                    interval.name, interval.begin_ms, interval.end_ms});
  }
  std::ofstream file(part_path(path, rank));
  file << part.dump() << "\n";
  if (!file) throw Error(ErrorCode::kIoError, "--trace: cannot write " + part_path(path, rank));
}

namespace {

std::vector<TraceInterval> read_parts(const std::string& path, int world) {
  std::vector<TraceInterval> all;
  for (int rank = 0; rank < world; ++rank) {
    std::ifstream file(part_path(path, rank));
    if (!file) throw Error(ErrorCode::kIoError, "--trace: cannot read " + part_path(path, rank));
    for (const nlohmann::json& row : nlohmann::json::parse(file)) {
      all.push_back({row[0].get<int>(), row[1].get<std::string>(), row[2].get<int>(),
                     static_cast<Lane>(row[3].get<int>()), row[4].get<std::string>(),
                     row[5].get<double>(), row[6].get<double>()});
    }
    std::filesystem::remove(part_path(path, rank));
  }
  return all;
}

void print_summary(const std::vector<TraceSummary>& summaries) {
  fmt::print(
      "event trace (CUDA events; traced runs after the timed ones), per scheme, rank and run:\n");
  fmt::print("{:<14} {:>4} {:>3} {:>10} {:>11} {:>9} {:>11} {:>11} {:>9}\n", "scheme", "rank",
             "run", "span ms", "compute ms", "comm ms", "overlapped", "exposed ms", "exposed");
  for (const TraceSummary& s : summaries) {
    const double overlapped = s.communication_ms > 0 ? s.overlapped_ms / s.communication_ms : 1.0;
    const double exposed = s.span_ms > 0 ? s.exposed_ms() / s.span_ms : 0.0;
    fmt::print("{:<14} {:>4} {:>3} {:>10.3f} {:>11.3f} {:>9.3f} {:>10.1f}% {:>11.3f} {:>8.1f}%\n",
               s.scheme, s.rank, s.run, s.span_ms, s.compute_ms, s.communication_ms,
               100.0 * overlapped, s.exposed_ms(), 100.0 * exposed);
  }
  fmt::print(
      "comm = union of the communication stream's operations; overlapped = the part of it during "
      "compute phases; exposed = the rest, as a share of the run's span\n");
}

}  // namespace

std::vector<TraceSummary> merge_trace_parts(const std::string& path, int world) {
  const std::vector<TraceInterval> all = read_parts(path, world);
  // Runs one after another: each run's offset is the end of the previous one on every rank.
  std::vector<std::pair<std::string, int>> order;
  std::map<std::pair<std::string, int>, double> span;
  for (const TraceInterval& interval : all) {
    const auto key = std::make_pair(interval.scheme, interval.run);
    if (span.find(key) == span.end()) order.push_back(key);
    span[key] = std::max(span[key], interval.end_ms);
  }
  std::map<std::pair<std::string, int>, double> offset;
  double next = 0.0;
  for (const auto& key : order) {
    offset[key] = next;
    next += span[key] + kRunGapMs;
  }
  nlohmann::json events = nlohmann::json::array();
  for (int rank = 0; rank < world; ++rank) {
    events.push_back({{"name", "process_name"},
                      {"ph", "M"},
                      {"pid", rank},
                      {"args", {{"name", "rank " + std::to_string(rank)}}}});
    for (const auto& [lane, name] : {std::pair{Lane::kCompute, "compute stream"},
                                     std::pair{Lane::kCommunication, "communication stream"}}) {
      events.push_back({{"name", "thread_name"},
                        {"ph", "M"},
                        {"pid", rank},
                        {"tid", static_cast<int>(lane)},
                        {"args", {{"name", name}}}});
    }
  }
  for (const TraceInterval& interval : all) {
    const double start = offset[{interval.scheme, interval.run}] + interval.begin_ms;
    events.push_back({{"name", interval.name},
                      {"cat", interval.scheme},
                      {"ph", "X"},
                      {"pid", interval.rank},
                      {"tid", static_cast<int>(interval.lane)},
                      {"ts", start * kMicrosecondsPerMs},
                      {"dur", (interval.end_ms - interval.begin_ms) * kMicrosecondsPerMs},
                      {"args", {{"scheme", interval.scheme}, {"run", interval.run}}}});
  }
  nlohmann::json document;
  document["traceEvents"] = events;
  document["displayTimeUnit"] = "ms";
  std::ofstream file(path);
  file << document.dump() << "\n";
  if (!file) throw Error(ErrorCode::kIoError, "--trace: cannot write " + path);
  std::vector<TraceSummary> summaries = summarize(all);
  print_summary(summaries);
  fmt::print("trace written to {} (chrome://tracing or ui.perfetto.dev)\n", path);
  return summaries;
}

}  // namespace mmsparse::dist_bench
