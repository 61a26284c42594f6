#pragma once
// safetensors files: Q, K, V, O, LSE and friends, with the modality layout (JSON) in the metadata
// under kLayoutMetadataKey. Real tensors dumped from a model run through every tool this way.

#include <map>
#include <string>

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

// Reads F32, F16, BF16, I32, I64, U8 tensors; other dtypes, truncated files, overlapping or
// out-of-range data offsets throw kParseError naming the file and tensor.
TensorFile read_safetensors(const std::string& path);
// Views must be host tensors; any strides (written contiguous).
void write_safetensors(const std::string& path, const std::map<std::string, TensorView>& tensors,
                       const std::map<std::string, std::string>& metadata = {});

}  // namespace mmsparse
