// SIGTERM handling and the exit deadline of a rank process.

#include "rank_exit.h"

#include <fmt/core.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <thread>

namespace mmsparse::dist_bench {
namespace {

// Formatted before the handler is installed: a signal handler may only call async-signal-safe
// functions (write, _exit), so it cannot format.
char sigterm_message[128];
std::size_t sigterm_message_length = 0;

void on_sigterm(int /*signal*/) {
  [[maybe_unused]] const ssize_t written =
      write(STDERR_FILENO, sigterm_message, sigterm_message_length);
  _exit(kRankFailed);
}

}  // namespace

void end_on_sigterm(int rank) {
  const int length = std::snprintf(sigterm_message, sizeof(sigterm_message),
                                   "mmsparse-dist-bench: rank %d: stopped by SIGTERM (the launcher "
                                   "saw another rank fail)\n",
                                   rank);
  sigterm_message_length =
      length > 0 ? std::min(static_cast<std::size_t>(length), sizeof(sigterm_message) - 1) : 0;
  struct sigaction action;
  std::memset(&action, 0, sizeof(action));
  action.sa_handler = on_sigterm;
  sigemptyset(&action.sa_mask);
  sigaction(SIGTERM, &action, nullptr);
}

void end_within(int rank, const std::string& reason, double seconds) {
  fmt::print(stderr, "mmsparse-dist-bench: rank {}: communicator fault: {} (ending within {} s)\n",
             rank, reason, seconds);
  std::fflush(stderr);
  std::thread([rank, seconds] {
    std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
    fmt::print(stderr,
               "mmsparse-dist-bench: rank {}: still running {} s after the fault (NCCL's abort or "
               "a CUDA call waits on the dead peer): exiting\n",
               rank, seconds);
    std::fflush(stderr);
    std::fflush(stdout);
    _exit(kRankFailed);
  }).detach();
}

void exit_now(int rank, const std::string& reason) {
  fmt::print(stderr, "mmsparse-dist-bench: rank {}: {}: exiting\n", rank, reason);
  std::fflush(stderr);
  std::fflush(stdout);
  _exit(kRankFailed);
}

}  // namespace mmsparse::dist_bench
