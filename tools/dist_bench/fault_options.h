#pragma once
// Checks of mmsparse-dist-bench's fault-test and GPU-count options, made before any rank starts
// (plain C++: tested on the CPU).

#include <optional>
#include <string>

namespace mmsparse::dist_bench {

// Exit status of a run skipped because the host has too few GPUs: ctest reports it as skipped
// (SKIP_RETURN_CODE 77, the automake convention).
inline constexpr int kExitSkipped = 77;

// --fault-kill-rank R (R >= 0) with `world` ranks: throws kInvalidArgument naming the flag unless
// 0 <= R < world and another rank is left to detect the fault (world >= 2). R < 0: no fault test.
void check_fault_rank(int fault_kill_rank, int world);

// Why a run that needs `min_ranks` ranks (--min-gpus) cannot run with `world`: a message for the
// skip; nullopt when it can run.
std::optional<std::string> skip_reason(int min_ranks, int world);

}  // namespace mmsparse::dist_bench
