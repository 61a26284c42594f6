#pragma once
// A minimal parallel-for for the CPU backend: static chunks over std::thread. Clarity over speed.

#include <algorithm>
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

// Runs body(i) for i in [0, count) on up to `threads` threads, items interleaved so uneven work
// (causal rows) spreads evenly. The first exception thrown by any item is rethrown.
inline void parallel_for(int64_t count, int threads, const std::function<void(int64_t)>& body) {
  const int workers = static_cast<int>(std::min<int64_t>(resolve_threads(threads), count));
  if (workers <= 1) {
    for (int64_t i = 0; i < count; ++i) body(i);
    return;
  }
  std::exception_ptr failure;
  std::mutex failure_mutex;
  std::vector<std::thread> pool;
  pool.reserve(workers);
  for (int w = 0; w < workers; ++w) {
    pool.emplace_back([&, w] {
      try {
        for (int64_t i = w; i < count; i += workers) body(i);
      } catch (...) {
        std::lock_guard<std::mutex> lock(failure_mutex);
        if (!failure) failure = std::current_exception();
      }
    });
  }
  for (auto& thread : pool) thread.join();
  if (failure) std::rethrow_exception(failure);
}

}  // namespace mmsparse::detail
