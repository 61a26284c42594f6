#pragma once
// `mmsparse bench` with neither --pattern nor --config shows what the tool is for: dense, the
// MMInference per-head config shipped for the workload (configs/, searched on another seed than
// the bench's) and the static baselines, ending in a one-line verdict (speedup, recall, needles,
// share of the tile-oracle bound). A workload without a shipped config runs the static baselines
// and says how to search one.

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "mmsparse/patterns.h"
#include "mmsparse/tools/workload.h"
#include "report.h"

namespace mmsparse::cli {

// Needles the default run plants when the preset plants none and --needles is not given, so
// that the verdict says whether the config keeps what a retrieval question reads (the needle
// count of the MMInference end-to-end bar, scripts/mminference-e2e.sh).
inline constexpr int64_t kDefaultBenchNeedles = 4;

// The shipped config for a workload, or why there is none.
struct DefaultConfig {
  std::optional<PatternConfig> config;
  std::string file;         // configs/<preset>-<seq_len>.json
  std::string calibration;  // the config's search record: what it was searched on
  bool same_seed = false;   // searched on the bench's own seed: not a held-out check
  std::string missing;      // why no config runs (empty when one does)
};

// The config shipped for `workload` (resolved: heads, head dim and needles filled in) at
// `seq_len` tokens: the one searched at that length, or at 128K tokens and more (where no value
// scales with length) the longest searched between 128K and seq_len. It runs only on the preset's
// own heads and head dim (its windows, budgets and strides are absolute numbers).
DefaultConfig default_bench_config(const WorkloadSpec& workload, int64_t seq_len);

// The search that writes the config for `workload` at `seq_len` (another seed than the bench's).
std::string default_config_search_command(const WorkloadSpec& workload, int64_t seq_len, bool gpu);

// The verdict of a default run on `layer` whose run `config_run` is the shipped config (none:
// static baselines only): one line, and the same in JSON.
std::string default_verdict_line(const LayerReport& layer, std::optional<std::size_t> config_run,
                                 const DefaultConfig& config, bool gpu);
nlohmann::json default_verdict_json(const LayerReport& layer, std::optional<std::size_t> config_run,
                                    const DefaultConfig& config);

}  // namespace mmsparse::cli
