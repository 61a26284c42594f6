// Layers of a calibration file: "layers.<L>.{q,k,v}", or plain q, k, v as layer 0.

#include <algorithm>
#include <cctype>
#include <charconv>
#include <set>
#include <string>

#include "mmsparse/search.h"
#include "mmsparse/status.h"

namespace mmsparse {
namespace {

constexpr int kAttentionDims = 4;  // [batch, seq, heads, head_dim]
constexpr const char* kRoles[] = {"q", "k", "v"};

// The layer index of "layers.<L>.q", or -1 for any other name.
int64_t layer_of_query_tensor(const std::string& name) {
  const std::string prefix = kCalibrationLayerPrefix;
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

TensorView checked_tensor(const TensorFile& file, const std::string& path, const std::string& name,
                          int64_t seq_len) {
  const auto found = file.tensors.find(name);
  if (found == file.tensors.end()) {
    throw_invalid_argument(path + " tensor '" + name + "'", "present (q, k and v per layer)",
                           "missing");
  }
  const TensorView view = found->second.view();
  if (view.ndim != kAttentionDims || view.shape[0] != 1 || view.shape[1] != seq_len) {
    throw_invalid_argument(path + " tensor '" + name + "'",
                           "[1, " + std::to_string(seq_len) +
                               " (the layout's length), heads, head_dim]",
                           view.shape_string());
  }
  return view;
}

}  // namespace

std::vector<CalibrationLayer> calibration_layers(const TensorFile& file, const std::string& path) {
  if (!file.has_layout()) {
    throw_invalid_argument(path + " metadata '" + std::string(kLayoutMetadataKey) + "'",
                           "the modality layout (JSON)", "none");
  }
  const int64_t seq_len = file.layout().length();
  std::set<int64_t> layers;
  for (const auto& [name, tensor] : file.tensors) {
    if (const int64_t layer = layer_of_query_tensor(name); layer >= 0) layers.insert(layer);
  }
  const bool single = layers.empty() && file.tensors.count("q") != 0;
  if (layers.empty() && !single) {
    throw_invalid_argument(path, "tensors layers.<L>.q, .k, .v (or q, k, v for one layer)",
                           "none");
  }
  std::vector<CalibrationLayer> result;
  const auto add = [&](int64_t layer, const std::string& prefix) {
    CalibrationLayer entry{layer, {}, {}, {}};
    TensorView* views[] = {&entry.q, &entry.k, &entry.v};
    for (std::size_t role = 0; role < std::size(kRoles); ++role) {
      *views[role] = checked_tensor(file, path, prefix + kRoles[role], seq_len);
    }
    result.push_back(entry);
  };
  if (single) {
    add(0, "");
  } else {
    for (int64_t layer : layers) {
      add(layer, kCalibrationLayerPrefix + std::to_string(layer) + ".");
    }
  }
  return result;
}

}  // namespace mmsparse
