#include "shipped_configs.h"

#include <algorithm>

#include "shipped_configs_data.h"

namespace mmsparse::cli {

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

std::optional<ShippedConfig> find_shipped_config(const std::string& preset, int64_t seq_len) {
  const std::string file = shipped_config_file(preset, seq_len);
  const std::vector<ShippedConfig>& configs = shipped_configs();
  const auto found = std::find_if(configs.begin(), configs.end(),
                                  [&](const ShippedConfig& config) { return config.file == file; });
  if (found == configs.end()) return std::nullopt;
  return *found;
}

}  // namespace mmsparse::cli
