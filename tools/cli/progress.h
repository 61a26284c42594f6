#pragma once
// Progress of a command's long steps on stderr (dense reference, oracle density, each pattern,
// search stages): on a terminal a bar redrawn in place with the elapsed time and an estimate of the
// time left; elsewhere (logs, pipes) one line per finished step and no carriage returns; nothing
// under --quiet or when JSON goes to stdout (--json -).

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <mutex>
#include <string>

#include "mmsparse/tools/search.h"

namespace mmsparse::cli {

enum class ProgressMode { kQuiet, kLines, kBar };

// kQuiet with --quiet or --json -, else kBar when stderr is a terminal and kLines otherwise.
ProgressMode progress_mode(bool quiet, const std::string& json_path);

// "850 ms", "12.3 s", "4 min 10 s", "1 h 32 min".
std::string format_duration(double seconds);

class StepProgress {
 public:
  // `stream` receives the output (stderr in the CLI); it must outlive this object.
  explicit StepProgress(ProgressMode mode, std::FILE* stream = stderr);

  // A step starts. `estimated_seconds` (0: unknown) stands for the time left until the first
  // update(); afterwards the estimate follows the rate measured so far.
  void begin(const std::string& label, double estimated_seconds = 0.0);
  // The step's fraction done, in [0, 1]; the bar is redrawn at most every kRedrawInterval.
  void update(double fraction);
  // The step ended: the bar's final state, or its one line, with its time and `summary`.
  void end(const std::string& summary = "");

  // update() as a callback (AttentionOptions::on_progress, per-head loops); it refers to this
  // object, so it must not outlive it.
  std::function<void(double)> fraction_callback();

  ProgressMode mode() const { return mode_; }

  static constexpr std::chrono::milliseconds kRedrawInterval{200};

 private:
  void draw_bar(double fraction);

  ProgressMode mode_;
  std::FILE* stream_;
  std::string label_;
  bool active_ = false;
  double estimated_seconds_ = 0.0;
  std::chrono::steady_clock::time_point started_;
  std::chrono::steady_clock::time_point last_draw_;
};

// A search layer's progress as a StepProgress step: SearchOptions::on_scope_done runs on the
// search's worker threads; the fraction done counts the heads' scopes (intra, cross and inter;
// the raise stage, when a recall target asks for it, runs once they are all done).
class SearchProgress {
 public:
  explicit SearchProgress(StepProgress& steps) : steps_(steps) {}
  void begin_layer(const std::string& label, int64_t heads, int64_t scopes_per_head = 1);
  // For SearchOptions::on_scope_done; refers to this object.
  std::function<void(int64_t q_head, const ScopeSearch& search)> scope_callback();
  void end_layer(const std::string& summary);

 private:
  StepProgress& steps_;
  std::mutex mutex_;  // the worker threads report concurrently
  int64_t scopes_ = 0;
  int64_t scopes_done_ = 0;
};

}  // namespace mmsparse::cli
