#pragma once
// Host encoding of the tensor maps the wgmma kernel copies K/V chunks through. The encoder is the
// driver's cuTensorMapEncodeTiled, reached through the runtime's driver entry point, so the library
// needs no link against libcuda.

#include <cuda.h>

#include <cstdint>

#include "cuda/runtime/engine.h"

namespace mmsparse::cuda {

// A 4-D view of rows [batch][rows][heads][head_dim] (strides in elements, head_dim contiguous)
// whose box is [1][box_rows][1][box_columns], 128-byte swizzled, rows past `rows` read as zeros.
struct RowTensorMapRequest {
  DType dtype = DType::kBFloat16;  // float16 or bfloat16
  const void* data = nullptr;
  Strides4 strides{};
  int64_t batch = 0;
  int64_t rows = 0;
  int64_t heads = 0;
  int64_t head_dim = 0;
  int box_rows = 0;
  int box_columns = 0;  // box_columns × element size must be 128 bytes (the swizzle span)
};

// False when the driver offers no encoder or refuses the view (the caller falls back to a kernel
// without tensor copies).
bool encode_row_tensor_map(const RowTensorMapRequest& request, CUtensorMap& map);

// The same rows cut into periods of `period` rows: a 5-D view [batch][periods][period][heads]
// [head_dim] over the first periods × period rows (only whole periods: a box never reads past
// them), box [1][box_periods][box_rows][1][box_columns], 128-byte swizzled. Its box lands in
// shared memory as box_periods × box_rows consecutive rows, exactly as a 2-D box of that many
// rows would, so a lattice chunk (plan_view.cuh) and a span chunk share one layout.
struct LatticeTensorMapRequest {
  RowTensorMapRequest rows;  // rows.box_rows is the box's rows per period
  int64_t period = 0;
  int64_t periods = 0;
  int box_periods = 0;
};

bool encode_lattice_tensor_map(const LatticeTensorMapRequest& request, CUtensorMap& map);

}  // namespace mmsparse::cuda
