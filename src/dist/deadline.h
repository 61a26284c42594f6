#pragma once
// Waits that end by a deadline even when what they wait on never does: a collective held up by a
// dead peer spins on the GPU for ever, and a host call behind it (a copy, a free, a stream
// synchronisation) blocks with it. Plain C++ with the clock, the query and the pause passed in, so
// the logic is tested on the CPU with a fake clock.

#include <condition_variable>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

namespace mmsparse::dist::detail {

// What one poll of a waited operation found.
enum class WaitState {
  kPending,   // not complete yet (cudaErrorNotReady, ncclInProgress)
  kComplete,  // done
  kFailed,    // an error was reported (the query keeps its details)
};

struct WaitOutcome {
  WaitState state = WaitState::kPending;  // kPending: the deadline passed first
  double waited_seconds = 0.0;            // from `since_seconds` to the last poll
};

// Polls `query` until it reports completion or failure, or until `now_seconds()` is more than
// `timeout_seconds` past `since_seconds` (then kPending); `pause` runs between polls. The query is
// polled once more after the deadline is seen, so an operation that completed while the caller
// was descheduled is not reported as timed out.
WaitOutcome wait_until_deadline(const std::function<WaitState()>& query,
                                const std::function<double()>& now_seconds,
                                const std::function<void()>& pause, double since_seconds,
                                double timeout_seconds);

// A process's last line of defence: a step (a timed run, a gather of host values) is armed with a
// bound when it begins and disarmed when it ends; if it is still armed past its bound, whatever the
// thread doing it is blocked in (a host call with no deadline of its own), `on_overdue` runs once,
// on the watchdog's thread, with a message naming the step and how long it has run.
class StepWatchdog {
 public:
  // `now_seconds`: the clock (steady, any origin).
  StepWatchdog(std::function<double()> now_seconds,
               std::function<void(const std::string& message)> on_overdue);
  ~StepWatchdog();
  StepWatchdog(const StepWatchdog&) = delete;
  StepWatchdog& operator=(const StepWatchdog&) = delete;

  // Starts a thread that calls check() every `interval_seconds` (> 0) until destruction.
  void start(double interval_seconds);
  // `step` must end within `bound_seconds` (> 0) of now; replaces any step armed before.
  void arm(const std::string& step, double bound_seconds);
  void disarm();
  // Names the part of the armed step now running (its bound is unchanged), for the report.
  void set_phase(const std::string& phase);
  // Runs on_overdue (once per armed step) when the armed step is past its bound; returns whether
  // it did.
  bool check();

 private:
  std::function<double()> now_seconds_;
  std::function<void(const std::string&)> on_overdue_;
  std::mutex mutex_;
  std::condition_variable stop_signal_;
  bool stopping_ = false;
  std::optional<std::string> step_;  // the armed step
  std::string phase_;                // the part of it running now
  double armed_at_ = 0.0;
  double bound_seconds_ = 0.0;
  std::thread thread_;
};

// Arms `watchdog` (when not null) for one step for the lifetime of this object.
class WatchedStep {
 public:
  WatchedStep(StepWatchdog* watchdog, const std::string& step, double bound_seconds);
  ~WatchedStep();
  WatchedStep(const WatchedStep&) = delete;
  WatchedStep& operator=(const WatchedStep&) = delete;

 private:
  StepWatchdog* watchdog_;
};

}  // namespace mmsparse::dist::detail
