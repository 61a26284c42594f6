#pragma once
// A minimal parallel-for for the CPU backend: static chunks over std::thread. Clarity over speed.

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace mmsparse::detail {

inline int resolve_threads(int requested) {
  if (requested > 0) return requested;
  const unsigned hardware = std::thread::hardware_concurrency();
  return hardware == 0 ? 1 : static_cast<int>(hardware);
}

// How a parallel_for reports the items it has done: report(done_items) runs on the calling thread,
// about every `interval` while the items run (the caller throttles further if it must).
struct LoopProgress {
  std::chrono::milliseconds interval{0};
  std::function<void(int64_t done_items)> report;
};

// Runs body(i) for i in [0, count) on up to `threads` threads, items interleaved so uneven work
// (causal rows) spreads evenly. The first exception thrown by any item is rethrown. With
// `progress`, the calling thread reports the items done while the workers run; without, nothing
// is counted.
inline void parallel_for(int64_t count, int threads, const std::function<void(int64_t)>& body,
                         const LoopProgress* progress = nullptr) {
  const int workers = static_cast<int>(std::min<int64_t>(resolve_threads(threads), count));
  if (workers <= 1) {
    auto last_report = std::chrono::steady_clock::now();
    for (int64_t i = 0; i < count; ++i) {
      body(i);
      if (progress != nullptr &&
          std::chrono::steady_clock::now() - last_report >= progress->interval) {
        progress->report(i + 1);
        last_report = std::chrono::steady_clock::now();
      }
    }
    return;
  }
  std::exception_ptr failure;
  std::mutex mutex;  // guards failure and finished_workers
  std::condition_variable all_finished;
  int finished_workers = 0;
  std::atomic<int64_t> done_items{0};
  std::vector<std::thread> pool;
  pool.reserve(workers);
  for (int w = 0; w < workers; ++w) {
    pool.emplace_back([&, w] {
      try {
        for (int64_t i = w; i < count; i += workers) {
          body(i);
          if (progress != nullptr) done_items.fetch_add(1, std::memory_order_relaxed);
        }
      } catch (...) {
        std::lock_guard<std::mutex> lock(mutex);
        if (!failure) failure = std::current_exception();
      }
      std::lock_guard<std::mutex> lock(mutex);
      ++finished_workers;
      all_finished.notify_one();
    });
  }
  if (progress != nullptr) {
    std::unique_lock<std::mutex> lock(mutex);
    while (!all_finished.wait_for(lock, progress->interval,
                                  [&] { return finished_workers == workers; })) {
      lock.unlock();
      try {
        progress->report(done_items.load(std::memory_order_relaxed));
      } catch (...) {
        // The workers must be joined before anything propagates: keep the first failure.
        lock.lock();
        if (!failure) failure = std::current_exception();
        break;
      }
      lock.lock();
    }
  }
  for (auto& thread : pool) thread.join();
  if (failure) std::rethrow_exception(failure);
}

}  // namespace mmsparse::detail
