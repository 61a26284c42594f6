#pragma once
// The NCCL transport of dist::Communicator (CUDA builds with NCCL: the library mmsparse_dist_nccl).
// No NCCL or CUDA headers: communicators and streams travel as void*.
//
// Each operation is ordered after the caller's stream by an event, runs on a communication stream
// of its own, and hands back an event the caller's stream waits on: no host synchronisation inside
// a layer. Communicators are non-blocking (NCCL's config.blocking = 0); synchronize() polls the
// stream and ncclCommGetAsyncError, and on an NCCL error or after `timeout_seconds` without
// progress aborts the communicator (ncclCommAbort) and throws Error(kBackendError) saying which,
// so a dead or stalled peer ends every rank within the timeout instead of hanging.

#include <memory>
#include <string>

#include "mmsparse/dist.h"

namespace mmsparse::dist {

struct NcclOptions {
  int rank = 0;
  int world = 1;
  int device = 0;  // CUDA device index of this rank
  // Rendezvous: rank 0 writes NCCL's unique id to this path (atomically, by rename); the others
  // wait for it up to timeout_seconds. Use a fresh path per job (a stale file from a crashed job
  // makes the others time out with an error rather than join). Rank 0 removes it once all joined.
  std::string id_file;
  double timeout_seconds = 120.0;
};

// A communicator of its own (created and destroyed with the returned object).
std::unique_ptr<Communicator> make_nccl_communicator(const NcclOptions& options);

// Wraps an existing ncclComm_t (passed as void*) of an application that owns it: not destroyed
// with the wrapper; it must have been created non-blocking for the timeouts to apply.
std::unique_ptr<Communicator> wrap_nccl_communicator(void* nccl_comm, int device,
                                                     double timeout_seconds = 120.0);

}  // namespace mmsparse::dist
