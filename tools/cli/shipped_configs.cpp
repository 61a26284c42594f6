#include "shipped_configs.h"

#include <algorithm>
#include <charconv>
#include <system_error>

#include "shipped_configs_data.h"

namespace mmsparse::cli {
namespace {

// The length Table 3's windows and budgets are set for: scale_spec_to_length changes no value at
// or above it (docs/search.md, "Scaling"), so a config searched there applies to longer inputs of
// the same preset (frames keep their size; grid strides stay the frame's).
constexpr int64_t kUnscaledLength = 131072;

// The length a config of `preset` was searched at, from its file name; 0 for another preset's.
int64_t searched_length(const ShippedConfig& config, const std::string& preset) {
  const std::string stem = "configs/" + preset + "-";
  const std::string suffix = ".json";
  if (config.file.size() <= stem.size() + suffix.size() || config.file.rfind(stem, 0) != 0 ||
      config.file.compare(config.file.size() - suffix.size(), suffix.size(), suffix) != 0) {
    return 0;
  }
  const char* first = config.file.data() + stem.size();
  const char* last = config.file.data() + config.file.size() - suffix.size();
  int64_t length = 0;
  const auto [end, error] = std::from_chars(first, last, length);
  return error == std::errc{} && end == last ? length : 0;
}

}  // namespace

std::string shipped_config_file(const std::string& preset, int64_t seq_len) {
  return "configs/" + preset + "-" + std::to_string(seq_len) + ".json";
}

const std::vector<ShippedConfig>& shipped_configs() {
  static const std::vector<ShippedConfig> configs = [] {
    std::vector<ShippedConfig> list;
    for (const EmbeddedConfig& config : kEmbeddedConfigs) {
      list.push_back({std::string("configs/") + config.name, config.text});
    }
    return list;
  }();
  return configs;
}

std::optional<ShippedConfig> select_shipped_config(const std::vector<ShippedConfig>& configs,
                                                   const std::string& preset, int64_t seq_len) {
  std::optional<ShippedConfig> best;
  int64_t best_length = 0;
  for (const ShippedConfig& config : configs) {
    const int64_t length = searched_length(config, preset);
    if (length == seq_len) return config;
    if (seq_len >= kUnscaledLength && length >= kUnscaledLength && length <= seq_len &&
        length > best_length) {
      best = config;
      best_length = length;
    }
  }
  return best;
}

}  // namespace mmsparse::cli
