// The per-layer tensor names of multi-layer files ("layers.<L>.q" and friends).

#include <algorithm>
#include <cctype>
#include <charconv>
#include <set>
#include <string>

#include "mmsparse/tools/io.h"

namespace mmsparse {
namespace {

// The layer index of "layers.<L>.q", or -1 for any other name.
int64_t layer_of_query_tensor(const std::string& name) {
  const std::string prefix = kLayerTensorPrefix;
  const std::string suffix = ".q";
  if (name.size() <= prefix.size() + suffix.size() || name.rfind(prefix, 0) != 0 ||
      name.compare(name.size() - suffix.size(), suffix.size(), suffix) != 0) {
    return -1;
  }
  const std::string digits = name.substr(prefix.size(), name.size() - prefix.size() - suffix.size());
  if (!std::all_of(digits.begin(), digits.end(),
                   [](char c) { return std::isdigit(static_cast<unsigned char>(c)) != 0; })) {
    return -1;
  }
  int64_t layer = -1;
  const auto [end, error] = std::from_chars(digits.data(), digits.data() + digits.size(), layer);
  return error == std::errc() && end == digits.data() + digits.size() ? layer : -1;
}

}  // namespace

std::string layer_tensor_prefix(int64_t layer) {
  return kLayerTensorPrefix + std::to_string(layer) + ".";
}

std::vector<int64_t> tensor_file_layers(const TensorFile& file) {
  std::set<int64_t> layers;
  for (const auto& entry : file.tensors) {
    if (const int64_t layer = layer_of_query_tensor(entry.first); layer >= 0) layers.insert(layer);
  }
  return {layers.begin(), layers.end()};
}

}  // namespace mmsparse
