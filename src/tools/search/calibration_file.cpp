// Layers of a calibration file: "layers.<L>.{q,k,v}", or plain q, k, v as layer 0.

#include <string>
#include <vector>

#include "mmsparse/tools/io.h"
#include "mmsparse/tools/search.h"
#include "mmsparse/status.h"

namespace mmsparse {
namespace {

constexpr int kAttentionDims = 4;  // [batch, seq, heads, head_dim]
constexpr const char* kRoles[] = {"q", "k", "v"};

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
  const std::vector<int64_t> layers = tensor_file_layers(file);
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
      add(layer, layer_tensor_prefix(layer));
    }
  }
  return result;
}

}  // namespace mmsparse
