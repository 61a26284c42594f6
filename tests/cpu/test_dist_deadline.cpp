// The deadlines a rank of a multi-GPU run lives by, on the CPU with fake clocks: a wait polled
// against its deadline ends when the operation completes, fails, or the deadline passes; a step
// blocked in a call that polls nothing is reported by the watchdog, naming the step.

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <future>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "common/errors.h"
#include "dist/deadline.h"
#include "mmsparse/status.h"

namespace mmsparse::dist::detail {
namespace {

// A clock that moves only when told to: each pause advances it by `step` seconds.
struct FakeClock {
  double now = 100.0;
  double step = 0.5;
  int pauses = 0;
  std::function<double()> reader() {
    return [this] { return now; };
  }
  std::function<void()> pauser() {
    return [this] {
      now += step;
      ++pauses;
    };
  }
};

TEST(DistDeadline, PendingOperationTimesOutJustPastTheDeadline) {
  FakeClock clock;
  int polls = 0;
  const WaitOutcome outcome = wait_until_deadline(
      [&] {
        ++polls;
        return WaitState::kPending;  // a collective a dead peer holds up
      },
      clock.reader(), clock.pauser(), clock.now, 15.0);
  EXPECT_EQ(outcome.state, WaitState::kPending);
  EXPECT_GT(outcome.waited_seconds, 15.0);
  EXPECT_LE(outcome.waited_seconds, 15.0 + clock.step);
  EXPECT_EQ(polls, clock.pauses + 1);
}

TEST(DistDeadline, DeadlineCountsFromTheIssueNotFromTheWait) {
  FakeClock clock;
  const double issued = clock.now - 14.0;  // issued 14 s before the rank began to wait
  const WaitOutcome outcome = wait_until_deadline([] { return WaitState::kPending; },
                                                  clock.reader(), clock.pauser(), issued, 15.0);
  EXPECT_EQ(outcome.state, WaitState::kPending);
  EXPECT_LE(clock.pauses, 3);  // 1 s left: a few polls, not another 15 s
}

TEST(DistDeadline, CompletionAndFailureEndTheWait) {
  FakeClock clock;
  int polls = 0;
  WaitOutcome outcome =
      wait_until_deadline([&] { return ++polls == 4 ? WaitState::kComplete : WaitState::kPending; },
                          clock.reader(), clock.pauser(), clock.now, 15.0);
  EXPECT_EQ(outcome.state, WaitState::kComplete);
  EXPECT_EQ(polls, 4);
  outcome = wait_until_deadline([] { return WaitState::kFailed; }, clock.reader(), clock.pauser(),
                                clock.now, 15.0);
  EXPECT_EQ(outcome.state, WaitState::kFailed);
  // Completed by the time the deadline is seen: polled once more, so not a timeout.
  const double since = clock.now - 20.0;
  outcome = wait_until_deadline([] { return WaitState::kComplete; }, clock.reader(), clock.pauser(),
                                since, 15.0);
  EXPECT_EQ(outcome.state, WaitState::kComplete);
  testing::expect_error(
      [&] {
        wait_until_deadline([] { return WaitState::kPending; }, clock.reader(), clock.pauser(),
                            clock.now, 0.0);
      },
      ErrorCode::kInvalidArgument, {"timeout_seconds"});
}

TEST(DistDeadline, WatchdogReportsAnOverdueStepOnceNamingIt) {
  double now = 0.0;
  std::vector<std::string> reports;
  StepWatchdog watchdog([&] { return now; },
                        [&](const std::string& message) { reports.push_back(message); });
  EXPECT_FALSE(watchdog.check());  // nothing armed
  watchdog.arm("spava run 2", 16.0);
  watchdog.set_phase("synchronize");
  now = 16.0;
  EXPECT_FALSE(watchdog.check());
  now = 16.5;
  EXPECT_TRUE(watchdog.check());
  EXPECT_FALSE(watchdog.check());  // once per armed step
  ASSERT_EQ(reports.size(), 1u);
  EXPECT_NE(reports[0].find("spava run 2\" (in: synchronize)"), std::string::npos);
  EXPECT_NE(reports[0].find("16.5 s"), std::string::npos);
  EXPECT_NE(reports[0].find("bound 16.0 s"), std::string::npos);
  // A step that ends in time is never reported; each new step gets its bound from its start.
  {
    const WatchedStep step(&watchdog, "gather of the medians", 16.0);
    now = 30.0;
  }
  now = 100.0;
  EXPECT_FALSE(watchdog.check());
  watchdog.arm("final synchronisation", 16.0);
  now = 110.0;
  EXPECT_FALSE(watchdog.check());
  testing::expect_error([&] { watchdog.arm("step", 0.0); }, ErrorCode::kInvalidArgument,
                        {"bound_seconds"});
}

// The rank's thread blocked in a call that polls no deadline (a cudaMemcpy behind a collective a
// dead peer holds up, here a future never set): the watchdog's own thread reports it in time.
TEST(DistDeadline, WatchdogThreadCatchesAStepBlockedWithoutADeadline) {
  auto release = std::make_shared<std::promise<void>>();
  std::shared_future<void> released = release->get_future().share();
  std::promise<std::string> report;
  std::future<std::string> reported = report.get_future();
  std::atomic<bool> reported_once{false};
  StepWatchdog watchdog(
      [] {
        return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
            .count();
      },
      [&](const std::string& message) {
        if (reported_once.exchange(true)) return;
        report.set_value(message);
        release->set_value();  // what the rank's exit would do to the blocked call
      });
  watchdog.start(0.01);
  const auto start = std::chrono::steady_clock::now();
  std::thread rank([&] {
    const WatchedStep step(&watchdog, "blocked copy", 0.1);
    released.wait();
  });
  const bool in_time = reported.wait_for(std::chrono::seconds(5)) == std::future_status::ready;
  const auto waited = std::chrono::steady_clock::now() - start;
  if (!in_time && !reported_once.exchange(true)) release->set_value();  // unblock, then fail
  rank.join();
  ASSERT_TRUE(in_time) << "the blocked step was never reported";
  EXPECT_GE(waited, std::chrono::milliseconds(100));
  EXPECT_LT(waited, std::chrono::seconds(3));
  EXPECT_NE(reported.get().find("blocked copy"), std::string::npos);
}

}  // namespace
}  // namespace mmsparse::dist::detail
