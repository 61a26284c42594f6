// dist::Communicator over NCCL (include/mmsparse/dist_nccl.h). Operations run on a communication
// stream ordered after the caller's stream by an event; the caller's stream waits on an event of
// the operation. Non-blocking communicators: every NCCL call that reports ncclInProgress is polled
// to completion with ncclCommGetAsyncError under the timeout; synchronize() polls every operation
// issued since the last one against a deadline of its own (a dead peer on a P2P transport raises no
// NCCL error: the kernel just spins), and the abort waits for ncclCommAbort only so long.

#include <cuda_runtime.h>
#include <nccl.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <deque>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "dist/bounded_call.h"
#include "dist/deadline.h"
#include "mmsparse/dist_nccl.h"
#include "mmsparse/status.h"

namespace mmsparse::dist {
namespace {

using Clock = std::chrono::steady_clock;
constexpr auto kPollInterval = std::chrono::microseconds(20);  // timing granularity of synchronize
constexpr auto kFilePollInterval = std::chrono::milliseconds(10);

void check_cuda(cudaError_t result, const std::string& what) {
  if (result != cudaSuccess) {
    throw Error(ErrorCode::kBackendError,
                "NCCL transport: " + what + ": " + cudaGetErrorString(result));
  }
}

// "15.0 s": one decimal is the resolution the bounds are stated in.
std::string seconds_text(double seconds) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.1f s", seconds);
  return text;
}

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// The steady clock in seconds, for wait_until_deadline.
double clock_seconds() {
  return std::chrono::duration<double>(Clock::now().time_since_epoch()).count();
}

double clock_seconds(Clock::time_point point) {
  return std::chrono::duration<double>(point.time_since_epoch()).count();
}

void pause_between_polls() { std::this_thread::sleep_for(kPollInterval); }

// Rank 0 publishes the unique id; the others wait for the file.
ncclUniqueId exchange_unique_id(const NcclOptions& options) {
  ncclUniqueId id{};
  if (options.id_file.empty()) {
    throw_invalid_argument("id_file", "a path every rank can read (the rendezvous file)", "empty");
  }
  if (options.rank == 0) {
    const ncclResult_t result = ncclGetUniqueId(&id);
    if (result != ncclSuccess) {
      throw Error(ErrorCode::kBackendError,
                  std::string("ncclGetUniqueId failed: ") + ncclGetErrorString(result));
    }
    const std::string temporary = options.id_file + ".tmp." + std::to_string(getpid());
    {
      std::ofstream file(temporary, std::ios::binary | std::ios::trunc);
      file.write(reinterpret_cast<const char*>(&id), sizeof(id));
      if (!file) throw Error(ErrorCode::kIoError, "cannot write the NCCL id file " + temporary);
    }
    std::filesystem::rename(temporary, options.id_file);  // atomic: readers see all or nothing
    return id;
  }
  const auto start = Clock::now();
  while (true) {
    std::ifstream file(options.id_file, std::ios::binary);
    if (file && file.read(reinterpret_cast<char*>(&id), sizeof(id))) return id;
    if (seconds_since(start) > options.faults.timeout_seconds) {
      throw Error(ErrorCode::kBackendError, "rank " + std::to_string(options.rank) + " waited " +
                                                std::to_string(options.faults.timeout_seconds) +
                                                " s for rank 0's NCCL id in " + options.id_file +
                                                " (is rank 0 running, with the same --id-file?)");
    }
    std::this_thread::sleep_for(kFilePollInterval);
  }
}

// "rank 1" or "ranks 0, 2, 3": the peers an operation of this rank waits on.
std::string peers_text(const std::vector<int>& peers) {
  std::string text = peers.size() == 1 ? "rank " : "ranks ";
  for (std::size_t i = 0; i < peers.size(); ++i) {
    text += (i > 0 ? ", " : "") + std::to_string(peers[i]);
  }
  return text;
}

class NcclCommunicator final : public Communicator {
 public:
  NcclCommunicator(ncclComm_t comm, bool owned, int device, NcclFaultOptions faults, int rank,
                   int world)
      : comm_(comm),
        owned_(owned),
        device_(device),
        faults_(std::move(faults)),
        rank_(rank),
        world_(world) {
    if (!(faults_.timeout_seconds > 0.0)) {
      throw_invalid_argument("timeout_seconds", "> 0", std::to_string(faults_.timeout_seconds));
    }
    if (!(faults_.abort_wait_seconds >= 0.0)) {
      throw_invalid_argument("abort_wait_seconds", ">= 0",
                             std::to_string(faults_.abort_wait_seconds));
    }
    check_cuda(cudaSetDevice(device_), "cudaSetDevice");
    // The highest priority: the scheduler places a collective's blocks as soon as attention
    // blocks retire, so communication overlaps instead of queueing behind a whole kernel.
    int lowest = 0;
    int highest = 0;
    check_cuda(cudaDeviceGetStreamPriorityRange(&lowest, &highest), "stream priorities");
    check_cuda(cudaStreamCreateWithPriority(&comm_stream_, cudaStreamNonBlocking, highest),
               "stream");
    check_cuda(cudaEventCreateWithFlags(&ordered_, cudaEventDisableTiming), "event");
    check_cuda(cudaMalloc(&barrier_word_, sizeof(int32_t)), "cudaMalloc");
  }

  ~NcclCommunicator() override {
    // An abort that did not return may still be tearing NCCL down, and a spinning kernel would make
    // cudaFree wait for ever: leave everything to the process's end.
    if (abandoned_) return;
    for (const InFlight& operation : in_flight_) cudaEventDestroy(operation.event);
    // An aborted communicator is gone already (ncclCommAbort frees it).
    if (owned_ && !aborted_) {
      // Finalize flushes outstanding work; a peer that is gone makes it fail or time out, which
      // aborts.
      try {
        check_nccl(ncclCommFinalize(comm_), "ncclCommFinalize");
        ncclCommDestroy(comm_);
      } catch (const Error&) {
      }
    }
    if (abandoned_) return;
    cudaFree(barrier_word_);
    cudaEventDestroy(ordered_);
    cudaStreamDestroy(comm_stream_);
  }

  int rank() const override { return rank_; }
  int world_size() const override { return world_; }
  Device device() const override { return {DeviceType::kCUDA, device_}; }

  Ticket all_gather(const void* send, int64_t send_bytes, void* recv,
                    std::span<const GatherSlot> slots, void* stream) override {
    if (static_cast<int>(slots.size()) != world_ ||
        send_bytes != slots[static_cast<std::size_t>(rank_)].bytes) {
      abort("rank " + std::to_string(rank_) + " all_gather: " + std::to_string(send_bytes) +
            " bytes to send for a slot of " +
            std::to_string(slots.size() > static_cast<std::size_t>(rank_)
                               ? slots[static_cast<std::size_t>(rank_)].bytes
                               : -1));
      throw_aborted();
    }
    begin(stream);
    const std::string phase = "all_gather " + std::to_string(send_bytes) + " B";
    mark(phase, true);
    auto* bytes = static_cast<std::byte*>(recv);
    bool uniform = true;
    for (int r = 0; r < world_; ++r) {
      const GatherSlot& slot = slots[static_cast<std::size_t>(r)];
      uniform = uniform && slot.bytes == send_bytes && slot.offset == r * send_bytes;
    }
    check_nccl(ncclGroupStart(), "ncclGroupStart");
    if (uniform) {
      check_nccl(ncclAllGather(send, recv, static_cast<size_t>(send_bytes), ncclUint8, comm_,
                               comm_stream_),
                 "ncclAllGather");
    } else {
      // Slots of different sizes: one broadcast per root in one group (an all-gather-v).
      for (int r = 0; r < world_; ++r) {
        const GatherSlot& slot = slots[static_cast<std::size_t>(r)];
        if (slot.bytes == 0) continue;
        const void* source = r == rank_ ? send : bytes + slot.offset;
        check_nccl(ncclBroadcast(source, bytes + slot.offset, static_cast<size_t>(slot.bytes),
                                 ncclUint8, r, comm_, comm_stream_),
                   "ncclBroadcast");
      }
    }
    check_nccl(ncclGroupEnd(), "ncclGroupEnd (all_gather)");
    mark(phase, false);
    return finish("all_gather of " + std::to_string(send_bytes) + " bytes (waits on " +
                  peers_text(every_peer()) + ")");
  }

  Ticket send_recv(const void* send, int64_t send_bytes, int to, void* recv, int64_t recv_bytes,
                   int from, void* stream) override {
    begin(stream);
    const std::string phase = "send_recv " + std::to_string(send_bytes) + " B";
    mark(phase, true);
    check_nccl(ncclGroupStart(), "ncclGroupStart");
    if (send_bytes > 0) {
      check_nccl(
          ncclSend(send, static_cast<size_t>(send_bytes), ncclUint8, to, comm_, comm_stream_),
          "ncclSend");
    }
    if (recv_bytes > 0) {
      check_nccl(
          ncclRecv(recv, static_cast<size_t>(recv_bytes), ncclUint8, from, comm_, comm_stream_),
          "ncclRecv");
    }
    check_nccl(ncclGroupEnd(), "ncclGroupEnd (send_recv)");
    mark(phase, false);
    return finish("send_recv (sends " + std::to_string(send_bytes) + " bytes to rank " +
                  std::to_string(to) + ", receives " + std::to_string(recv_bytes) +
                  " bytes from rank " + std::to_string(from) + ")");
  }

  void wait(Ticket ticket, void* stream) override {
    for (const InFlight& operation : in_flight_) {
      if (operation.ticket != ticket) continue;
      // The event stays until synchronize() (which checks the operation's deadline) or until a
      // later operation finds it complete; a ticket not found has completed already.
      check_cuda(cudaStreamWaitEvent(static_cast<cudaStream_t>(stream), operation.event, 0),
                 "cudaStreamWaitEvent");
      return;
    }
  }

  void synchronize(void* stream) override {
    throw_if_aborted();
    // Each operation against its own deadline, oldest first: the first one overdue is the one a
    // dead or stalled peer holds up, and the error names it and the peers it waits on.
    for (const InFlight& operation : in_flight_) {
      await(operation.event, operation.issued, operation.what);
    }
    cudaEvent_t done = nullptr;
    check_cuda(cudaEventCreateWithFlags(&done, cudaEventDisableTiming), "event");
    try {
      check_cuda(cudaEventRecord(done, static_cast<cudaStream_t>(stream)), "cudaEventRecord");
      await(done, Clock::now(), "the rank's stream (the work after its last collective)");
    } catch (...) {
      if (!abandoned_) cudaEventDestroy(done);
      throw;
    }
    cudaEventDestroy(done);
    for (const InFlight& operation : in_flight_) cudaEventDestroy(operation.event);
    in_flight_.clear();
  }

  void barrier() override {
    begin(nullptr);
    check_nccl(
        ncclAllReduce(barrier_word_, barrier_word_, 1, ncclInt32, ncclSum, comm_, comm_stream_),
        "ncclAllReduce (barrier)");
    finish("barrier (an all-reduce; waits on " + peers_text(every_peer()) + ")");
    synchronize(nullptr);
  }

  // Reports first (on_abort), then aborts NCCL for at most abort_wait_seconds: ncclCommAbort is
  // blocking even on a non-blocking communicator and tears it down in the calling thread, which
  // can wait for peers that are gone and, through cudaFree, for the whole device.
  // Safe to call from another thread (a watchdog) while the rank's thread is blocked.
  void abort(const std::string& reason) override {
    {
      const std::lock_guard lock(reason_mutex_);
      if (aborted_) return;
      reason_ = reason;
      aborted_ = true;
    }
    if (faults_.on_abort) {
      try {
        faults_.on_abort(reason);
      } catch (...) {  // reporting must not keep the abort from happening
      }
    }
    const ncclComm_t comm = comm_;
    bool returned = true;
    try {
      returned = detail::run_bounded([comm] { ncclCommAbort(comm); }, faults_.abort_wait_seconds);
    } catch (...) {
    }
    if (!returned) {
      abandoned_ = true;
      const std::lock_guard lock(reason_mutex_);
      reason_ += "; ncclCommAbort had not returned after " +
                 seconds_text(faults_.abort_wait_seconds) + " and was left running";
    }
  }

  // Polls a non-blocking call's completion (ncclInProgress) under the timeout.
  void wait_ready(const char* what) {
    ncclResult_t failure = ncclSuccess;
    const detail::WaitOutcome outcome = detail::wait_until_deadline(
        [&] {
          if (aborted_) return detail::WaitState::kFailed;  // by the watchdog: touch no NCCL
          failure = async_error();
          if (failure == ncclSuccess) return detail::WaitState::kComplete;
          return failure == ncclInProgress ? detail::WaitState::kPending
                                           : detail::WaitState::kFailed;
        },
        [] { return clock_seconds(); }, pause_between_polls, clock_seconds(),
        faults_.timeout_seconds);
    settle(outcome, failure, cudaSuccess, what);
  }

 private:
  // An operation issued and not yet synchronized: its completion event, what it is and when.
  struct InFlight {
    Ticket ticket = 0;
    cudaEvent_t event = nullptr;
    std::string what;
    Clock::time_point issued;
  };

  std::vector<int> every_peer() const {
    std::vector<int> peers;
    for (int r = 0; r < world_; ++r) {
      if (r != rank_) peers.push_back(r);
    }
    return peers;
  }

  void begin(void* stream) {
    throw_if_aborted();
    check_cuda(cudaSetDevice(device_), "cudaSetDevice");
    check_cuda(cudaEventRecord(ordered_, static_cast<cudaStream_t>(stream)), "cudaEventRecord");
    check_cuda(cudaStreamWaitEvent(comm_stream_, ordered_, 0), "cudaStreamWaitEvent");
  }

  // An operation's beginning (after the wait for the caller's stream) or end on the
  // communication stream, for the tracer.
  void mark(const std::string& phase, bool starts) {
    if (tracer() != nullptr) tracer()->mark(phase, starts, comm_stream_);
  }

  Ticket finish(std::string what) {
    // Operations already complete need no deadline: without a synchronize() between layers the
    // list stays as short as what is actually in flight.
    while (!in_flight_.empty() && cudaEventQuery(in_flight_.front().event) == cudaSuccess) {
      cudaEventDestroy(in_flight_.front().event);
      in_flight_.pop_front();
    }
    cudaEvent_t event = nullptr;
    check_cuda(cudaEventCreateWithFlags(&event, cudaEventDisableTiming), "event");
    check_cuda(cudaEventRecord(event, comm_stream_), "cudaEventRecord");
    const Ticket ticket = next_ticket_++;
    in_flight_.push_back(
        {ticket, event, std::move(what) + " #" + std::to_string(ticket), Clock::now()});
    return ticket;
  }

  // NCCL's asynchronous error (ncclInProgress while a non-blocking call is under way).
  ncclResult_t async_error() {
    ncclResult_t state = ncclSuccess;
    const ncclResult_t query = ncclCommGetAsyncError(comm_, &state);
    return query != ncclSuccess ? query : state;
  }

  // Waits for `event`, polling NCCL's async error, until `since` + the timeout.
  void await(cudaEvent_t event, Clock::time_point since, const std::string& what) {
    ncclResult_t nccl_failure = ncclSuccess;
    cudaError_t cuda_failure = cudaSuccess;
    const detail::WaitOutcome outcome = detail::wait_until_deadline(
        [&] {
          if (aborted_) return detail::WaitState::kFailed;  // by the watchdog: touch no NCCL
          cuda_failure = cudaEventQuery(event);
          if (cuda_failure == cudaSuccess) return detail::WaitState::kComplete;
          if (cuda_failure != cudaErrorNotReady) return detail::WaitState::kFailed;
          cuda_failure = cudaSuccess;
          nccl_failure = async_error();
          return nccl_failure == ncclSuccess || nccl_failure == ncclInProgress
                     ? detail::WaitState::kPending
                     : detail::WaitState::kFailed;
        },
        [] { return clock_seconds(); }, pause_between_polls, clock_seconds(since),
        faults_.timeout_seconds);
    settle(outcome, nccl_failure, cuda_failure, what.c_str());
  }

  // Returns when the wait completed; else aborts (a failure reported by CUDA or NCCL, or the
  // deadline) and throws.
  void settle(const detail::WaitOutcome& outcome, ncclResult_t nccl_failure,
              cudaError_t cuda_failure, const char* what) {
    if (outcome.state == detail::WaitState::kComplete) return;
    throw_if_aborted();
    if (outcome.state == detail::WaitState::kPending) timeout(what, outcome.waited_seconds);
    if (cuda_failure != cudaSuccess) {
      abort(std::string(what) + " on rank " + std::to_string(rank_) + ": " +
            cudaGetErrorString(cuda_failure));
      throw_aborted();
    }
    fail(nccl_failure, what);
  }

  void check_nccl(ncclResult_t result, const char* what) {
    if (result == ncclSuccess) return;
    if (result == ncclInProgress) {
      wait_ready(what);
      return;
    }
    fail(result, what);
  }

  [[noreturn]] void fail(ncclResult_t result, const char* what) {
    throw_if_aborted();  // aborted by the watchdog: the communicator may be gone already
    const std::string detail = ncclGetLastError(comm_);
    abort(std::string(what) + " failed on rank " + std::to_string(rank_) + ": " +
          ncclGetErrorString(result) + (detail.empty() ? "" : " (" + detail + ")") +
          (result == ncclRemoteError ? "; a peer rank failed or exited" : ""));
    throw_aborted();
  }

  [[noreturn]] void timeout(const char* what, double waited) {
    abort(std::string(what) + " on rank " + std::to_string(rank_) + " not complete " +
          seconds_text(waited) + " after it began (timeout " +
          seconds_text(faults_.timeout_seconds) +
          "): a peer rank is dead, stalled, or issued different operations");
    throw_aborted();
  }

  void throw_if_aborted() const {
    if (aborted_) throw_aborted();
  }
  [[noreturn]] void throw_aborted() const {
    std::string reason;
    {
      const std::lock_guard lock(reason_mutex_);
      reason = reason_;
    }
    throw Error(ErrorCode::kBackendError, "NCCL communicator aborted: " + reason);
  }

  ncclComm_t comm_;
  bool owned_;
  int device_;
  NcclFaultOptions faults_;
  int rank_ = 0;
  int world_ = 1;
  cudaStream_t comm_stream_ = nullptr;
  cudaEvent_t ordered_ = nullptr;
  void* barrier_word_ = nullptr;
  std::deque<InFlight> in_flight_;  // issue order
  Ticket next_ticket_ = 0;
  // Written by abort(), which a watchdog thread may call while the rank's thread polls.
  std::atomic<bool> aborted_{false};
  std::atomic<bool> abandoned_{false};  // ncclCommAbort did not return in time: touch no CUDA state
  mutable std::mutex reason_mutex_;
  std::string reason_;
};

}  // namespace

std::unique_ptr<Communicator> make_nccl_communicator(const NcclOptions& options) {
  if (options.world < 1 || options.rank < 0 || options.rank >= options.world) {
    throw_invalid_argument("rank, world", "0 <= rank < world",
                           std::to_string(options.rank) + ", " + std::to_string(options.world));
  }
  if (!(options.faults.timeout_seconds > 0.0)) {
    throw_invalid_argument("timeout_seconds", "> 0",
                           std::to_string(options.faults.timeout_seconds));
  }
  check_cuda(cudaSetDevice(options.device),
             "cudaSetDevice(" + std::to_string(options.device) + ")");
  const ncclUniqueId id = exchange_unique_id(options);
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  ncclComm_t comm = nullptr;
  const ncclResult_t result =
      ncclCommInitRankConfig(&comm, options.world, id, options.rank, &config);
  if (result != ncclSuccess && result != ncclInProgress) {
    throw Error(ErrorCode::kBackendError,
                std::string("ncclCommInitRankConfig failed: ") + ncclGetErrorString(result));
  }
  auto communicator = std::make_unique<NcclCommunicator>(
      comm, /*owned=*/true, options.device, options.faults, options.rank, options.world);
  communicator->wait_ready("ncclCommInitRankConfig (are all ranks started?)");
  if (options.rank == 0) std::filesystem::remove(options.id_file);
  return communicator;
}

std::unique_ptr<Communicator> wrap_nccl_communicator(void* nccl_comm, int device,
                                                     const NcclFaultOptions& faults) {
  if (nccl_comm == nullptr) throw_invalid_argument("nccl_comm", "a communicator", "null");
  const auto comm = static_cast<ncclComm_t>(nccl_comm);
  int rank = 0;
  int world = 0;
  if (ncclCommUserRank(comm, &rank) != ncclSuccess || ncclCommCount(comm, &world) != ncclSuccess) {
    throw Error(ErrorCode::kBackendError, "wrap_nccl_communicator: the communicator is not ready");
  }
  return std::make_unique<NcclCommunicator>(comm, /*owned=*/false, device, faults, rank, world);
}

}  // namespace mmsparse::dist
