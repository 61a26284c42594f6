#pragma once
// safetensors files: Q, K, V, O, LSE and friends, with the modality layout (JSON) in the metadata
// under kLayoutMetadataKey. Real tensors dumped from a model run through every tool this way.

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "mmsparse/layout.h"
#include "mmsparse/tensor.h"

namespace mmsparse {

inline constexpr const char* kLayoutMetadataKey = "mmsparse.layout";

struct TensorFile {
  std::map<std::string, Tensor> tensors;
  std::map<std::string, std::string> metadata;

  const Tensor& at(const std::string& name) const;  // throws kInvalidArgument naming missing tensor
  bool has_layout() const { return metadata.count(kLayoutMetadataKey) != 0; }
  ModalityLayout layout() const;  // throws if absent
};

// Files of several layers name their tensors per layer: "layers.<L>.q", "layers.<L>.k",
// "layers.<L>.v" (and "layers.<L>.out", "layers.<L>.lse" for results); a file of plain "q", "k",
// "v" holds one layer.
inline constexpr const char* kLayerTensorPrefix = "layers.";
std::string layer_tensor_prefix(int64_t layer);  // "layers.<L>."
// The layers L with a "layers.<L>.q" tensor, ascending (empty for a plain single-layer file).
std::vector<int64_t> tensor_file_layers(const TensorFile& file);

// Reads F32, F16, BF16, I32, I64, U8 tensors; other dtypes, truncated files, overlapping or
// out-of-range data offsets throw kParseError naming the file and tensor.
TensorFile read_safetensors(const std::string& path);
// Views must be host tensors; any strides (written contiguous).
void write_safetensors(const std::string& path, const std::map<std::string, TensorView>& tensors,
                       const std::map<std::string, std::string>& metadata = {});

}  // namespace mmsparse
