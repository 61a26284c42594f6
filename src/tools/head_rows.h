// One head of a [batch, len, heads, head_dim] tensor view as contiguous fp32, for the tools' host
// loops (tile oracle, attention maps): they then run over contiguous floats whatever the view's
// dtype and strides.
#pragma once

#include <cstdint>
#include <vector>

#include "mmsparse/tensor.h"

namespace mmsparse::tools {

// Rows of head `head` in batch `batch_index`: [len, head_dim], row-major.
inline std::vector<float> head_rows_fp32(const TensorView& x, int64_t batch_index, int64_t head) {
  const int64_t length = x.shape[1];
  const int64_t head_dim = x.shape[3];
  std::vector<float> rows(static_cast<std::size_t>(length * head_dim));
  for (int64_t i = 0; i < length; ++i) {
    const int64_t base = batch_index * x.strides[0] + i * x.strides[1] + head * x.strides[2];
    for (int64_t d = 0; d < head_dim; ++d) {
      rows[i * head_dim + d] = load_float(x, base + d * x.strides[3]);
    }
  }
  return rows;
}

}  // namespace mmsparse::tools
