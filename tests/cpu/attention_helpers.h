#pragma once
// Small helpers shared by the CPU attention tests: operands in contiguous or strided layouts,
// poisoned outputs, and the hand-built dense plan.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <utility>

#include "common/random.h"
#include "mmsparse/plan.h"
#include "mmsparse/tensor.h"

namespace mmsparse::test {

inline constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
inline constexpr double kNegativeInfinity = -std::numeric_limits<double>::infinity();

// A tensor and the [batch, seq, heads, dim] view the tests pass; move-only like StridedTensor.
struct Operand {
  Tensor storage;
  TensorView view;
};

// Random N(0, 1) operand [batch, seq, heads, dim]; `strided` lays it out as [batch, heads, seq,
// dim].
inline Operand random_operand(Random& random, DType dtype, int64_t batch, int64_t seq,
                              int64_t heads, int64_t dim, bool strided) {
  if (strided) {
    StridedTensor tensor = random.normal_strided(dtype, batch, seq, heads, dim);
    const TensorView view = tensor.view;
    return {std::move(tensor.storage), view};  // the byte buffer moves, the view stays valid
  }
  Tensor tensor = random.normal_tensor(dtype, {batch, seq, heads, dim});
  const TensorView view = tensor.view();
  return {std::move(tensor), view};
}

// An output [batch, seq, heads, dim] filled with NaN, so elements a kernel forgets to write show.
inline Operand poisoned_output(DType dtype, int64_t batch, int64_t seq, int64_t heads, int64_t dim,
                               bool strided) {
  Operand operand;
  if (strided) {
    StridedTensor tensor(dtype, batch, seq, heads, dim);
    operand.view = tensor.view;
    operand.storage = std::move(tensor.storage);
  } else {
    operand.storage = Tensor(dtype, {batch, seq, heads, dim});
    operand.view = operand.storage.view();
  }
  for_each_offset(operand.view,
                  [&](int64_t, int64_t offset) { store_float(operand.view, offset, kNaN); });
  return operand;
}

// LSE [batch, heads, q_len] fp32 filled with NaN.
inline Tensor poisoned_lse(int64_t batch, int64_t heads, int64_t q_len) {
  Tensor lse(DType::kFloat32, {batch, heads, q_len});
  std::fill(lse.data_as<float>(), lse.data_as<float>() + lse.numel(), kNaN);
  return lse;
}

// Sequence lengths for tests: random, never a multiple of the 64-row tiles kernels use.
inline int64_t random_length(Random& random, int64_t low, int64_t high) {
  constexpr int64_t kTileMultiple = 64;
  int64_t length = random.uniform_int(low, high);
  if (length % kTileMultiple == 0) ++length;
  return length;
}

// Dense attention as a plan: one span per query tile, up to the tile's last causal key (or every
// key without causal masking), with the causal policy masking inside the tile.
inline Plan dense_plan(int64_t heads, int64_t q_len, int64_t kv_len, bool causal,
                       int64_t tile_rows = kDefaultTileRows) {
  PlanShape shape;
  shape.heads = heads;
  shape.q_len = q_len;
  shape.kv_len = kv_len;
  shape.tile_rows = tile_rows;
  MaskPolicy mask;
  mask.causal = causal;
  PlanBuilder builder(shape);
  for (int64_t head = 0; head < heads; ++head) {
    builder.begin_head();
    for (int64_t begin = 0; begin < q_len; begin += tile_rows) {
      const int64_t end = std::min(q_len, begin + tile_rows);
      builder.begin_tile(begin, end, mask);
      const int64_t last_key =
          causal ? std::clamp<int64_t>(end + kv_len - q_len, 0, kv_len) : kv_len;
      builder.add_span(0, last_key);
    }
  }
  return builder.finish();
}

}  // namespace mmsparse::test
