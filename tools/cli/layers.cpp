#include "layers.h"

#include <algorithm>
#include <charconv>
#include <set>

#include "mmsparse/status.h"

namespace mmsparse::cli {

namespace {
constexpr const char* kLayersFlag = "--layers";
}  // namespace

LayerSelection parse_layer_selection(const std::string& text) {
  LayerSelection selection;
  if (text == "all") {
    selection.all = true;
    return selection;
  }
  std::size_t begin = 0;
  while (begin <= text.size()) {
    const std::size_t comma = std::min(text.find(',', begin), text.size());
    const std::string item = text.substr(begin, comma - begin);
    int64_t layer = -1;
    const auto [end, error] = std::from_chars(item.data(), item.data() + item.size(), layer);
    if (item.empty() || error != std::errc{} || end != item.data() + item.size() || layer < 0) {
      throw_invalid_argument(kLayersFlag, "all, or layer indices >= 0 separated by commas",
                             "\"" + text + "\"");
    }
    if (std::find(selection.layers.begin(), selection.layers.end(), layer) !=
        selection.layers.end()) {
      throw_invalid_argument(kLayersFlag, "each layer once", "layer " + item + " twice");
    }
    selection.layers.push_back(layer);
    begin = comma + 1;
  }
  return selection;
}

std::vector<int64_t> config_layers(const PatternConfig& config) {
  std::set<int64_t> layers;
  for (const auto& entry : config.layer_defaults) layers.insert(entry.first);
  for (const auto& entry : config.head_specs) layers.insert(entry.first);
  return {layers.begin(), layers.end()};
}

uint64_t synthetic_layer_seed(uint64_t base_seed, int64_t layer) {
  return base_seed + static_cast<uint64_t>(layer);
}

}  // namespace mmsparse::cli
