#pragma once
// Warnings that save a user's time, printed on stderr before or after the work: a CPU run that
// will take long, a config searched on another input than the one it runs on, and searched heads
// whose best sparse pattern recalls far below the target.

#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "mmsparse/layout.h"
#include "mmsparse/patterns.h"
#include "mmsparse/tools/search.h"

namespace mmsparse::cli {

// Estimated CPU times above this get a warning before the run starts.
inline constexpr double kSlowCpuRunSeconds = 180.0;

// Environment variable that sets the CPU reference backend's rate (attention pairs times head_dim
// per second) instead of measuring it, e.g. a value measured once on this machine.
inline constexpr const char* kCpuRateVariable = "MMSPARSE_CPU_PAIR_DIMS_PER_SECOND";

// The CPU reference backend's rate in attention pairs × head_dim per second on `threads` threads
// (0: all cores), and where it comes from.
struct CpuRate {
  double pair_dims_per_second = 0.0;
  std::string source;  // "measured on a 1024-token dense problem" or the variable's name
};
// From kCpuRateVariable when set (a positive number; anything else is an error naming it), else
// timed on a small dense problem with `head_dim` (tens of milliseconds).
CpuRate cpu_rate(int threads, int64_t head_dim);

// Seconds the CPU reference backend takes for `pairs` attention pairs of `head_dim`.
double cpu_seconds(const CpuRate& rate, int64_t pairs, int64_t head_dim);

// Prints a warning to `stream` when `seconds` (the estimate of `what`, e.g. "the dense reference")
// exceeds kSlowCpuRunSeconds; `advice` says how to make it shorter. Returns whether it warned.
bool warn_if_slow_on_cpu(const std::string& what, double seconds, const CpuRate& rate,
                         const std::string& advice, std::FILE* stream = stderr);

// Before a bench or run on the CPU: the seconds of one layer's dense attention (`dense_pairs`
// computed pairs over all heads and batch elements, `head_dim`), and a warning when `layers`
// layers of it exceed kSlowCpuRunSeconds (`sparse_runs` pattern runs per layer add up to as much
// each). The estimate feeds the progress bar's time left before the first report.
// Without `dense_reference` (a run with no dense pass) the warning speaks of the run, which dense
// bounds from above.
double estimate_dense_on_cpu(int threads, int64_t dense_pairs, int64_t head_dim, int64_t layers,
                             int64_t sparse_runs, bool dense_reference = true,
                             std::FILE* stream = stderr);

// The calibration length a config records (search.seq_len, or for configs written before it, the
// "seq_len N" of search.calibration); nullopt when it records none.
std::optional<int64_t> config_calibration_length(const PatternConfig& config);

// Warnings (one line each, no trailing newline) when the config's search record names another
// length or another layout than the input's; empty when they match or the config records neither.
// `flag` is how the user named the config ("--config model.json").
std::vector<std::string> config_mismatch_warnings(const PatternConfig& config,
                                                  const std::string& flag, int64_t input_length,
                                                  const ModalityLayout* input_layout);
void print_config_mismatch_warnings(const PatternConfig& config, const std::string& flag,
                                    int64_t input_length, const ModalityLayout* input_layout,
                                    std::FILE* stream = stderr);

// Low-recall heads of a search: recall far below the target means the budget holds no sparse
// pattern for the head (a noise-like head with diffuse attention).
inline constexpr double kDefaultSearchRecallTarget = 0.95;  // bench's --recall-target default
inline constexpr double kLowRecallMargin = 0.2;

// The recall under which the search chooses dense by default: the target (the layer's
// --target-mean-recall when set, else kDefaultSearchRecallTarget) less kLowRecallMargin.
double low_recall_threshold(double target_mean_recall);

// A head whose best sparse candidate recalled below the threshold.
struct LowRecallHead {
  int64_t layer = 0;
  int64_t q_head = 0;
  std::string behaviour;  // synthetic heads; empty otherwise
  double best_sparse_recall = 0.0;
  bool raised_to_dense = false;
};
// The heads of `result` whose best sparse candidate (the winner of their inter-modality stage)
// recalled below `threshold`, or that had none; behaviour left empty.
std::vector<LowRecallHead> low_recall_heads(const LayerSearchResult& result, int64_t layer,
                                            double threshold);

// The warning for `heads` (empty string when there are none), e.g. "warning: 4 head(s) recall
// far below the target 0.95 with their best sparse pattern (< 0.75): layer 0 head 5 (dense,
// 0.27), ...; raised to dense (--keep-low-recall-sparse keeps them sparse)".
std::string low_recall_warning(const std::vector<LowRecallHead>& heads, double threshold,
                               double target);

}  // namespace mmsparse::cli
