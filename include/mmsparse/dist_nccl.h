#pragma once
// The NCCL transport of dist::Communicator (CUDA builds with NCCL: the library mmsparse_dist_nccl).
// No NCCL or CUDA headers: communicators and streams travel as void*.
//
// Each operation is ordered after the caller's stream by an event, runs on a communication stream
// of its own, and hands back an event the caller's stream waits on: no host synchronisation inside
// a layer. Communicators are non-blocking (NCCL's config.blocking = 0).
//
// Faults end a rank within a bound of its own, whether NCCL notices them or not: synchronize()
// polls every operation issued since the last one with cudaEventQuery against a deadline per
// operation (issue time + timeout_seconds) and ncclCommGetAsyncError. A peer process that dies is
// often not an NCCL error at all (P2P and shared-memory transports just spin waiting for it), so
// the deadline is what catches it; the error names the operation and the peers it waits on. The
// abort then runs ncclCommAbort for at most abort_wait_seconds (NCCL tears the communicator down in
// the calling thread and can wait on peers and on the device) and throws Error(kBackendError)
// either way.

#include <functional>
#include <memory>
#include <string>

#include "mmsparse/dist.h"

namespace mmsparse::dist {

// How a rank detects a fault and how long it may take to end on one.
struct NcclFaultOptions {
  // An operation not complete this long after it was issued (or the rank's stream, this long into
  // synchronize()) aborts the communicator. Also bounds the wait for rank 0's id file and for init.
  double timeout_seconds = 120.0;
  // How long the abort waits for ncclCommAbort before leaving it running (and the communicator's
  // CUDA resources unreleased) and throwing anyway.
  double abort_wait_seconds = 10.0;
  // Called once with the reason, on the thread that detected the fault, before ncclCommAbort: lets
  // a process that will exit report at once and bound its own exit (mmsparse-dist-bench does).
  std::function<void(const std::string& reason)> on_abort;
};

struct NcclOptions {
  int rank = 0;
  int world = 1;
  int device = 0;  // CUDA device index of this rank
  // Rendezvous: rank 0 writes NCCL's unique id to this path (atomically, by rename); the others
  // wait for it up to faults.timeout_seconds. Use a fresh path per job (a stale file from a crashed
  // job makes the others time out with an error rather than join). Rank 0 removes it once all
  // joined.
  std::string id_file;
  NcclFaultOptions faults;
};

// A communicator of its own (created and destroyed with the returned object).
std::unique_ptr<Communicator> make_nccl_communicator(const NcclOptions& options);

// Wraps an existing ncclComm_t (passed as void*) of an application that owns it: not destroyed
// with the wrapper; it must have been created non-blocking for the timeouts to apply.
std::unique_ptr<Communicator> wrap_nccl_communicator(void* nccl_comm, int device,
                                                     const NcclFaultOptions& faults = {});

}  // namespace mmsparse::dist
