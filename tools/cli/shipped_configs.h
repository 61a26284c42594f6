#pragma once
// The MMInference per-head configs shipped in the repository's configs/ folder (configs/README.md
// says how each was searched), compiled into the CLI so that `mmsparse bench` with no flags runs
// one wherever the binary is installed. A config is named after the workload it was searched for,
// `<preset>-<seq_len>.json`: its windows and line budgets are absolute numbers scaled to that
// length (docs/search.md, "Scaling") and its grid strides follow that layout, so it applies to that
// workload only.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace mmsparse::cli {

struct ShippedConfig {
  std::string file;  // "configs/video-qwen2.5vl-128k-4096.json"
  std::string json;  // the file's text
};

// The file name a config for `preset` at `seq_len` tokens has in configs/.
std::string shipped_config_file(const std::string& preset, int64_t seq_len);

// Every config compiled in, by file name.
const std::vector<ShippedConfig>& shipped_configs();

// Of `configs`, the one for `preset` at `seq_len` tokens: the one searched at that length, or at
// 131072 tokens and more (where scale_spec_to_length changes no value) the longest searched
// between 131072 and seq_len.
std::optional<ShippedConfig> select_shipped_config(const std::vector<ShippedConfig>& configs,
                                                   const std::string& preset, int64_t seq_len);

}  // namespace mmsparse::cli
