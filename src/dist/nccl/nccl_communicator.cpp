// dist::Communicator over NCCL (include/mmsparse/dist_nccl.h). Operations run on a communication
// stream ordered after the caller's stream by an event; the caller's stream waits on an event of
// the operation. Non-blocking communicators: every NCCL call that reports ncclInProgress is polled
// to completion with ncclCommGetAsyncError under the timeout, and synchronize() polls the streams
// the same way, so faults end in an abort and an error instead of a hang.

#include <cuda_runtime.h>
#include <nccl.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <thread>

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

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

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
    if (seconds_since(start) > options.timeout_seconds) {
      throw Error(ErrorCode::kBackendError, "rank " + std::to_string(options.rank) + " waited " +
                                                std::to_string(options.timeout_seconds) +
                                                " s for rank 0's NCCL id in " + options.id_file +
                                                " (is rank 0 running, with the same --id-file?)");
    }
    std::this_thread::sleep_for(kFilePollInterval);
  }
}

class NcclCommunicator final : public Communicator {
 public:
  NcclCommunicator(ncclComm_t comm, bool owned, int device, double timeout_seconds, int rank,
                   int world)
      : comm_(comm),
        owned_(owned),
        device_(device),
        timeout_seconds_(timeout_seconds),
        rank_(rank),
        world_(world) {
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
    for (auto& [ticket, event] : pending_) cudaEventDestroy(event);
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
    return finish();
  }

  Ticket send_recv(const void* send, int64_t send_bytes, int to, void* recv, int64_t recv_bytes,
                   int from, void* stream) override {
    begin(stream);
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
    return finish();
  }

  void wait(Ticket ticket, void* stream) override {
    const auto found = pending_.find(ticket);
    if (found == pending_.end()) return;  // already waited on
    check_cuda(cudaStreamWaitEvent(static_cast<cudaStream_t>(stream), found->second, 0),
               "cudaStreamWaitEvent");
    cudaEventDestroy(found->second);  // released once the wait is enqueued
    pending_.erase(found);
  }

  void synchronize(void* stream) override {
    throw_if_aborted();
    cudaEvent_t done[2];
    check_cuda(cudaEventCreateWithFlags(&done[0], cudaEventDisableTiming), "event");
    check_cuda(cudaEventCreateWithFlags(&done[1], cudaEventDisableTiming), "event");
    check_cuda(cudaEventRecord(done[0], static_cast<cudaStream_t>(stream)), "cudaEventRecord");
    check_cuda(cudaEventRecord(done[1], comm_stream_), "cudaEventRecord");
    const auto start = Clock::now();
    try {
      for (cudaEvent_t event : done) {
        while (true) {
          const cudaError_t state = cudaEventQuery(event);
          if (state == cudaSuccess) break;
          if (state != cudaErrorNotReady) check_cuda(state, "the rank's stream");
          poll_once(start, "synchronize");
        }
      }
    } catch (...) {
      cudaEventDestroy(done[0]);
      cudaEventDestroy(done[1]);
      throw;
    }
    cudaEventDestroy(done[0]);
    cudaEventDestroy(done[1]);
    for (auto& [ticket, event] : pending_) cudaEventDestroy(event);
    pending_.clear();
  }

  void barrier() override {
    begin(nullptr);
    check_nccl(
        ncclAllReduce(barrier_word_, barrier_word_, 1, ncclInt32, ncclSum, comm_, comm_stream_),
        "ncclAllReduce (barrier)");
    finish();
    synchronize(nullptr);
  }

  void abort(const std::string& reason) override {
    if (aborted_) return;
    aborted_ = true;
    reason_ = reason;
    ncclCommAbort(comm_);
  }

  // Polls a non-blocking call's completion (ncclInProgress) under the timeout.
  void wait_ready(const char* what) {
    const auto start = Clock::now();
    while (true) {
      ncclResult_t state = ncclSuccess;
      const ncclResult_t query = ncclCommGetAsyncError(comm_, &state);
      if (query != ncclSuccess) state = query;
      if (state == ncclSuccess) return;
      if (state != ncclInProgress) fail(state, what);
      if (seconds_since(start) > timeout_seconds_) timeout(what);
      std::this_thread::sleep_for(kPollInterval);
    }
  }

 private:
  void begin(void* stream) {
    throw_if_aborted();
    check_cuda(cudaSetDevice(device_), "cudaSetDevice");
    check_cuda(cudaEventRecord(ordered_, static_cast<cudaStream_t>(stream)), "cudaEventRecord");
    check_cuda(cudaStreamWaitEvent(comm_stream_, ordered_, 0), "cudaStreamWaitEvent");
  }

  Ticket finish() {
    cudaEvent_t event = nullptr;
    check_cuda(cudaEventCreateWithFlags(&event, cudaEventDisableTiming), "event");
    check_cuda(cudaEventRecord(event, comm_stream_), "cudaEventRecord");
    pending_[next_ticket_] = event;
    return next_ticket_++;
  }

  void poll_once(Clock::time_point start, const char* what) {
    ncclResult_t state = ncclSuccess;
    const ncclResult_t query = ncclCommGetAsyncError(comm_, &state);
    if (query != ncclSuccess) state = query;
    if (state != ncclSuccess && state != ncclInProgress) fail(state, what);
    if (seconds_since(start) > timeout_seconds_) timeout(what);
    std::this_thread::sleep_for(kPollInterval);
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
    const std::string detail = ncclGetLastError(comm_);
    abort(std::string(what) + " failed on rank " + std::to_string(rank_) + ": " +
          ncclGetErrorString(result) + (detail.empty() ? "" : " (" + detail + ")") +
          (result == ncclRemoteError ? "; a peer rank failed or exited" : ""));
    throw_aborted();
  }

  [[noreturn]] void timeout(const char* what) {
    abort(std::string(what) + " on rank " + std::to_string(rank_) + " made no progress for " +
          std::to_string(timeout_seconds_) +
          " s: a peer rank is dead, stalled, or issued different operations");
    throw_aborted();
  }

  void throw_if_aborted() const {
    if (aborted_) throw_aborted();
  }
  [[noreturn]] void throw_aborted() const {
    throw Error(ErrorCode::kBackendError, "NCCL communicator aborted: " + reason_);
  }

  ncclComm_t comm_;
  bool owned_;
  int device_;
  double timeout_seconds_;
  int rank_ = 0;
  int world_ = 1;
  cudaStream_t comm_stream_ = nullptr;
  cudaEvent_t ordered_ = nullptr;
  void* barrier_word_ = nullptr;
  std::map<Ticket, cudaEvent_t> pending_;
  Ticket next_ticket_ = 0;
  bool aborted_ = false;
  std::string reason_;
};

}  // namespace

std::unique_ptr<Communicator> make_nccl_communicator(const NcclOptions& options) {
  if (options.world < 1 || options.rank < 0 || options.rank >= options.world) {
    throw_invalid_argument("rank, world", "0 <= rank < world",
                           std::to_string(options.rank) + ", " + std::to_string(options.world));
  }
  if (!(options.timeout_seconds > 0.0)) {
    throw_invalid_argument("timeout_seconds", "> 0", std::to_string(options.timeout_seconds));
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
      comm, /*owned=*/true, options.device, options.timeout_seconds, options.rank, options.world);
  communicator->wait_ready("ncclCommInitRankConfig (are all ranks started?)");
  if (options.rank == 0) std::filesystem::remove(options.id_file);
  return communicator;
}

std::unique_ptr<Communicator> wrap_nccl_communicator(void* nccl_comm, int device,
                                                     double timeout_seconds) {
  if (nccl_comm == nullptr) throw_invalid_argument("nccl_comm", "a communicator", "null");
  const auto comm = static_cast<ncclComm_t>(nccl_comm);
  int rank = 0;
  int world = 0;
  if (ncclCommUserRank(comm, &rank) != ncclSuccess || ncclCommCount(comm, &world) != ncclSuccess) {
    throw Error(ErrorCode::kBackendError, "wrap_nccl_communicator: the communicator is not ready");
  }
  return std::make_unique<NcclCommunicator>(comm, /*owned=*/false, device, timeout_seconds, rank,
                                            world);
}

}  // namespace mmsparse::dist
