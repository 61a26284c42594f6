#pragma once
// Views into rows of [batch, seq, heads, dim] tensors and [batch, heads, seq] LSEs, on any device:
// the algorithm addresses its parts of a rank's buffers through these, never through copies.

#include <cstddef>
#include <cstdint>

#include "mmsparse/tensor.h"

namespace mmsparse::dist::detail {

// Rows [begin, begin + count) of a [batch, seq, heads, dim] view.
inline TensorView rows(const TensorView& view, int64_t begin, int64_t count) {
  TensorView slice = view;
  slice.data = static_cast<std::byte*>(view.data) +
               begin * view.strides[1] * static_cast<int64_t>(dtype_size(view.dtype));
  slice.shape[1] = count;
  return slice;
}

// Rows [begin, begin + count) of a [batch, heads, seq] LSE view.
inline TensorView lse_rows(const TensorView& view, int64_t begin, int64_t count) {
  TensorView slice = view;
  slice.data = static_cast<std::byte*>(view.data) +
               begin * view.strides[2] * static_cast<int64_t>(dtype_size(view.dtype));
  slice.shape[2] = count;
  return slice;
}

// A contiguous [1, seq, heads, dim] view at `data`.
inline TensorView sequence_view(void* data, DType dtype, int64_t seq, int64_t heads, int64_t dim,
                                Device device) {
  return TensorView::contiguous(data, dtype, {1, seq, heads, dim}, device);
}

// A contiguous [1, heads, seq] fp32 LSE view at `data`.
inline TensorView lse_view(void* data, int64_t heads, int64_t seq, Device device) {
  return TensorView::contiguous(data, DType::kFloat32, {1, heads, seq}, device);
}

}  // namespace mmsparse::dist::detail
