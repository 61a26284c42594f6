// run_bounded: a detached worker and a condition variable shared through a shared_ptr, so that a
// worker that outlives the wait still finds its state alive.

#include "dist/bounded_call.h"

#include <chrono>
#include <condition_variable>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "mmsparse/status.h"

namespace mmsparse::dist::detail {
namespace {

struct CallState {
  std::mutex mutex;
  std::condition_variable finished;
  bool done = false;
  std::exception_ptr failure;
};

}  // namespace

bool run_bounded(std::function<void()> work, double seconds) {
  if (!(seconds >= 0.0)) throw_invalid_argument("seconds", ">= 0", std::to_string(seconds));
  auto state = std::make_shared<CallState>();
  std::thread([state, work = std::move(work)] {
    std::exception_ptr failure;
    try {
      work();
    } catch (...) {
      failure = std::current_exception();
    }
    {
      std::lock_guard lock(state->mutex);
      state->done = true;
      state->failure = failure;
    }
    state->finished.notify_all();
  }).detach();
  std::unique_lock lock(state->mutex);
  const bool returned = state->finished.wait_for(lock, std::chrono::duration<double>(seconds),
                                                 [&] { return state->done; });
  if (returned && state->failure) std::rethrow_exception(state->failure);
  return returned;
}

}  // namespace mmsparse::dist::detail
