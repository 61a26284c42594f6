#pragma once
// Argument checks shared by the metrics (metrics.cpp, needle_coverage.cpp): they read host views,
// so every check names the argument as the caller spelled it.

#include <cstdint>
#include <string>

#include "mmsparse/status.h"
#include "mmsparse/tensor.h"

namespace mmsparse::detail {

inline void check_host(const std::string& name, const TensorView& view) {
  if (view.device.type != DeviceType::kCPU) {
    throw_invalid_argument(name + " device", "cpu (metrics read host memory)",
                           device_name(view.device));
  }
  if (view.data == nullptr && view.numel() > 0) {
    throw_invalid_argument(name + " data", "a non-null pointer", "null");
  }
}

inline void check_rank(const std::string& name, const TensorView& view, int ndim,
                       const std::string& dims_description) {
  if (view.ndim != ndim) {
    throw_invalid_argument(name, std::to_string(ndim) + " dimensions " + dims_description,
                           std::to_string(view.ndim) + " (" + view.shape_string() + ")");
  }
}

inline void check_lse(const std::string& name, const TensorView& lse) {
  check_rank(name, lse, 3, "[batch, q_heads, q_len]");
  if (lse.dtype != DType::kFloat32) {
    throw_invalid_argument(name + " dtype", "float32", std::string(dtype_name(lse.dtype)));
  }
  check_host(name, lse);
}

inline void check_index(const std::string& name, int64_t index, int64_t extent) {
  if (index < 0 || index >= extent) {
    throw_invalid_argument(name, "in [0, " + std::to_string(extent) + ")", std::to_string(index));
  }
}

inline float lse_at(const TensorView& lse, int64_t b, int64_t h, int64_t i) {
  return lse.data_as<const float>()[b * lse.strides[0] + h * lse.strides[1] + i * lse.strides[2]];
}

}  // namespace mmsparse::detail
