#pragma once
// How a rank process of mmsparse-dist-bench ends on a fault: promptly, with a message, whatever
// NCCL or the CUDA runtime is waiting for.

#include <string>

namespace mmsparse::dist_bench {

// Exit status of a rank that failed (its own error, a peer's, or the launcher's SIGTERM).
inline constexpr int kRankFailed = 1;

// SIGTERM (sent by our launcher when another rank failed, and by torchrun likewise) ends this rank
// at once with a message naming it and kRankFailed: a rank blocked on a dead peer has nothing left
// to save, and the signal reaches it wherever it waits.
void end_on_sigterm(int rank);

// Reports a communicator fault now and ends the process `seconds` later unless it has ended by
// then: the error normally reaches main first, but unwinding can block (a cudaFree waits for every
// kernel, a kernel may wait for a dead peer) and so can NCCL's abort.
void end_within(int rank, const std::string& reason, double seconds);

// Ends the process now with kRankFailed after printing `reason` (a step past its bound: the thread
// that runs it is blocked, so unwinding is not an option).
[[noreturn]] void exit_now(int rank, const std::string& reason);

}  // namespace mmsparse::dist_bench
