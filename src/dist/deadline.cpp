// wait_until_deadline and the step watchdog (deadline.h).

#include "dist/deadline.h"

#include <chrono>
#include <cstdio>
#include <utility>

#include "mmsparse/status.h"

namespace mmsparse::dist::detail {
namespace {

// "12.3 s": the resolution the bounds are stated in.
std::string seconds_text(double seconds) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.1f s", seconds);
  return text;
}

}  // namespace

WaitOutcome wait_until_deadline(const std::function<WaitState()>& query,
                                const std::function<double()>& now_seconds,
                                const std::function<void()>& pause, double since_seconds,
                                double timeout_seconds) {
  if (!(timeout_seconds > 0.0)) {
    throw_invalid_argument("timeout_seconds", "> 0", std::to_string(timeout_seconds));
  }
  while (true) {
    const double waited = now_seconds() - since_seconds;
    const WaitState state = query();
    if (state != WaitState::kPending) return {state, waited};
    if (waited > timeout_seconds) return {WaitState::kPending, waited};
    pause();
  }
}

StepWatchdog::StepWatchdog(std::function<double()> now_seconds,
                           std::function<void(const std::string&)> on_overdue)
    : now_seconds_(std::move(now_seconds)), on_overdue_(std::move(on_overdue)) {}

StepWatchdog::~StepWatchdog() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  stop_signal_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void StepWatchdog::start(double interval_seconds) {
  if (!(interval_seconds > 0.0)) {
    throw_invalid_argument("interval_seconds", "> 0", std::to_string(interval_seconds));
  }
  if (thread_.joinable()) return;
  thread_ = std::thread([this, interval = std::chrono::duration<double>(interval_seconds)] {
    std::unique_lock lock(mutex_);
    while (!stop_signal_.wait_for(lock, interval, [this] { return stopping_; })) {
      lock.unlock();
      check();
      lock.lock();
    }
  });
}

void StepWatchdog::arm(const std::string& step, double bound_seconds) {
  if (!(bound_seconds > 0.0)) {
    throw_invalid_argument("bound_seconds", "> 0", std::to_string(bound_seconds));
  }
  const double now = now_seconds_();
  std::lock_guard lock(mutex_);
  step_ = step;
  phase_.clear();
  armed_at_ = now;
  bound_seconds_ = bound_seconds;
}

void StepWatchdog::disarm() {
  std::lock_guard lock(mutex_);
  step_.reset();
}

void StepWatchdog::set_phase(const std::string& phase) {
  std::lock_guard lock(mutex_);
  phase_ = phase;
}

bool StepWatchdog::check() {
  std::string message;
  {
    std::lock_guard lock(mutex_);
    if (!step_) return false;
    const double running = now_seconds_() - armed_at_;
    if (running <= bound_seconds_) return false;
    const std::string phase = phase_.empty() ? "" : " (in: " + phase_ + ")";
    message = "step \"" + *step_ + "\"" + phase + " still running " + seconds_text(running) +
              " after it began (bound " + seconds_text(bound_seconds_) +
              "): the rank is blocked in a call with no deadline of its own (a CUDA copy, free or "
              "synchronisation behind a collective a dead peer holds up)";
    step_.reset();  // once per armed step
  }
  on_overdue_(message);  // outside the lock: it may end the process or take its time
  return true;
}

WatchedStep::WatchedStep(StepWatchdog* watchdog, const std::string& step, double bound_seconds)
    : watchdog_(watchdog) {
  if (watchdog_ != nullptr) watchdog_->arm(step, bound_seconds);
}

WatchedStep::~WatchedStep() {
  if (watchdog_ != nullptr) watchdog_->disarm();
}

}  // namespace mmsparse::dist::detail
