// The in-process transport: W threads sharing memory, one communicator each. Every operation is a
// rendezvous (publish, barrier, copy from the peers, barrier), so tickets are complete on return.
// A fault on any rank (an exception, a timeout, mismatched sizes) aborts the group: every waiting
// and later operation throws with the first reason.
//
// On a device (W ranks sharing one GPU, for the GPU tests of the algorithm), each operation first
// waits for the device, copies through the backend (staged in host memory: a test transport, not
// a fast one), and the ranks take turns on the device between operations, so that no two threads
// drive the engine at once.

#include <chrono>
#include <condition_variable>
#include <cstring>
#include <exception>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/backend.h"
#include "mmsparse/device.h"
#include "mmsparse/dist.h"
#include "mmsparse/status.h"

namespace mmsparse::dist {
namespace {

// What a rank published for the operation in flight.
struct Published {
  const void* send = nullptr;
  int64_t bytes = 0;
  int to = -1;  // send_recv's destination; -1 for an all-gather
};

class Group {
 public:
  Group(int world, double timeout_seconds)
      : world_(world),
        timeout_(std::chrono::duration<double>(timeout_seconds)),
        published_(static_cast<std::size_t>(world)) {}

  int world() const { return world_; }
  Published& published(int rank) { return published_[static_cast<std::size_t>(rank)]; }
  std::mutex& device_turn() { return device_turn_; }

  void barrier(int rank) {
    std::unique_lock lock(mutex_);
    throw_if_aborted();
    const int64_t generation = generation_;
    if (++arrived_ == world_) {
      arrived_ = 0;
      ++generation_;
      changed_.notify_all();
      return;
    }
    const bool passed =
        changed_.wait_for(lock, timeout_, [&] { return generation_ != generation || aborted_; });
    throw_if_aborted();
    if (!passed) {
      abort_locked("rank " + std::to_string(rank) + " waited more than " +
                   std::to_string(timeout_.count()) + " s for its peers");
      throw_if_aborted();
    }
  }

  void abort(const std::string& reason) {
    std::lock_guard lock(mutex_);
    abort_locked(reason);
  }

 private:
  void abort_locked(const std::string& reason) {
    if (!aborted_) {
      aborted_ = true;
      reason_ = reason;
    }
    changed_.notify_all();
  }
  void throw_if_aborted() const {
    if (aborted_) throw Error(ErrorCode::kBackendError, "communicator aborted: " + reason_);
  }

  const int world_;
  const std::chrono::duration<double> timeout_;
  std::vector<Published> published_;
  std::mutex device_turn_;
  std::mutex mutex_;
  std::condition_variable changed_;
  int arrived_ = 0;
  int64_t generation_ = 0;
  bool aborted_ = false;
  std::string reason_;
};

class InProcessCommunicator final : public Communicator {
 public:
  InProcessCommunicator(Group& group, int rank, Device device)
      : group_(group), rank_(rank), device_(device) {
    if (on_device()) turn_ = std::unique_lock(group_.device_turn());
  }

  int rank() const override { return rank_; }
  int world_size() const override { return group_.world(); }
  Device device() const override { return device_; }

  Ticket all_gather(const void* send, int64_t send_bytes, void* recv,
                    std::span<const GatherSlot> slots, void* /*stream*/) override {
    if (static_cast<int>(slots.size()) != group_.world()) {
      group_.abort("rank " + std::to_string(rank_) + " passed " + std::to_string(slots.size()) +
                   " gather slots for " + std::to_string(group_.world()) + " ranks");
    }
    const Rendezvous rendezvous(*this, {send, send_bytes, -1});
    for (int peer = 0; peer < group_.world(); ++peer) {
      const Published& from = group_.published(peer);
      const GatherSlot& slot = slots[static_cast<std::size_t>(peer)];
      if (from.to != -1 || from.bytes != slot.bytes) {
        group_.abort("all_gather on rank " + std::to_string(rank_) + " expected " +
                     std::to_string(slot.bytes) + " bytes from rank " + std::to_string(peer) +
                     ", which sent " + std::to_string(from.bytes) +
                     (from.to != -1 ? " in a send_recv" : ""));
        group_.barrier(rank_);  // throws
      }
      copy(static_cast<std::byte*>(recv) + slot.offset, from.send, slot.bytes);
    }
    return next_ticket_++;
  }

  Ticket send_recv(const void* send, int64_t send_bytes, int to, void* recv, int64_t recv_bytes,
                   int from, void* /*stream*/) override {
    const Rendezvous rendezvous(*this, {send, send_bytes, to});
    const Published& source = group_.published(from);
    if (source.to != rank_ || source.bytes != recv_bytes) {
      group_.abort("send_recv on rank " + std::to_string(rank_) + " expected " +
                   std::to_string(recv_bytes) + " bytes from rank " + std::to_string(from) +
                   ", which sent " + std::to_string(source.bytes) + " bytes to rank " +
                   std::to_string(source.to));
      group_.barrier(rank_);  // throws
    }
    copy(recv, source.send, recv_bytes);
    return next_ticket_++;
  }

  void wait(Ticket /*ticket*/, void* /*stream*/) override {}
  void synchronize(void* /*stream*/) override {
    if (on_device()) mmsparse::synchronize(device_);
  }
  void barrier() override { const Rendezvous rendezvous(*this, {}); }
  void abort(const std::string& reason) override { group_.abort(reason); }

 private:
  // One operation: publish, wait for every rank, (the caller copies), wait again so that no
  // buffer is reused while a peer reads it. On a device, the rank's work is finished first and
  // its turn on the device is given up while it waits.
  class Rendezvous {
   public:
    Rendezvous(InProcessCommunicator& self, Published published) : self_(self) {
      if (self_.on_device()) {
        mmsparse::synchronize(self_.device_);
        self_.turn_.unlock();
      }
      self_.group_.published(self_.rank_) = published;
      self_.group_.barrier(self_.rank_);
    }
    ~Rendezvous() noexcept(false) {
      if (std::uncaught_exceptions() > 0) return;
      self_.group_.barrier(self_.rank_);
      if (self_.on_device()) self_.turn_.lock();
    }
    Rendezvous(const Rendezvous&) = delete;
    Rendezvous& operator=(const Rendezvous&) = delete;

   private:
    InProcessCommunicator& self_;
  };

  bool on_device() const { return device_.type != DeviceType::kCPU; }

  void copy(void* target, const void* source, int64_t bytes) {
    if (bytes == 0 || target == source) return;
    if (!on_device()) {
      std::memmove(target, source, static_cast<std::size_t>(bytes));
      return;
    }
    Backend& backend = backend_for_memory("in-process communicator", device_);
    staging_.resize(static_cast<std::size_t>(bytes));
    backend.copy_to_host(staging_.data(), source, staging_.size(), device_);
    backend.copy_to_device(target, staging_.data(), staging_.size(), device_);
  }

  Group& group_;
  int rank_;
  Device device_;
  std::unique_lock<std::mutex> turn_;
  std::vector<std::byte> staging_;
  Ticket next_ticket_ = 0;
};

}  // namespace

void run_in_process(int world, const std::function<void(Communicator&)>& body,
                    double timeout_seconds, Device device) {
  if (world < 1) throw_invalid_argument("world", ">= 1 rank", std::to_string(world));
  if (!(timeout_seconds > 0.0)) {
    throw_invalid_argument("timeout_seconds", "> 0", std::to_string(timeout_seconds));
  }
  Group group(world, timeout_seconds);
  std::mutex failure_mutex;
  std::exception_ptr first_failure;
  std::vector<std::thread> threads;
  for (int rank = 0; rank < world; ++rank) {
    threads.emplace_back([&, rank] {
      InProcessCommunicator communicator(group, rank, device);
      try {
        body(communicator);
      } catch (const std::exception& error) {
        {
          std::lock_guard lock(failure_mutex);
          if (!first_failure) first_failure = std::current_exception();
        }
        group.abort("rank " + std::to_string(rank) + " failed: " + error.what());
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  if (first_failure) std::rethrow_exception(first_failure);
}

}  // namespace mmsparse::dist
