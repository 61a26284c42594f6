// Fault-test and GPU-count checks of mmsparse-dist-bench (fault_options.h).

#include "fault_options.h"

#include "mmsparse/status.h"

namespace mmsparse::dist_bench {

void check_fault_rank(int fault_kill_rank, int world) {
  if (fault_kill_rank < 0) return;
  if (world < 2) {
    throw_invalid_argument("--fault-kill-rank",
                           "a run of at least 2 ranks (another rank must detect the fault)",
                           std::to_string(world) + " rank (one visible GPU or --gpus 1)");
  }
  if (fault_kill_rank >= world) {
    throw_invalid_argument("--fault-kill-rank",
                           "a rank in [0, " + std::to_string(world - 1) + "] (" +
                               std::to_string(world) + " ranks run)",
                           std::to_string(fault_kill_rank));
  }
}

std::optional<std::string> skip_reason(int min_ranks, int world) {
  if (world >= min_ranks) return std::nullopt;
  return "SKIPPED: this run needs at least " + std::to_string(min_ranks) + " GPUs (--min-gpus), " +
         std::to_string(world) + " visible (CUDA_VISIBLE_DEVICES or --gpus)";
}

}  // namespace mmsparse::dist_bench
