// Host encoding of tensor maps through the driver entry point (see tensor_map.h).

#include <cudaTypedefs.h>
#include <cuda_runtime.h>

#include "cuda/runtime/tensor_map.h"

namespace mmsparse::cuda {
namespace {

// The ABI of cuTensorMapEncodeTiled introduced with CUDA 12.0, the version asked of the driver.
constexpr unsigned kEncoderVersion = 12000;
constexpr int kRank = 4;
constexpr int kLatticeRank = 5;

using TensorMapEncoder = PFN_cuTensorMapEncodeTiled_v12000;

TensorMapEncoder tensor_map_encoder() {
  static const TensorMapEncoder encoder = [] {
    void* function = nullptr;
    cudaDriverEntryPointQueryResult status = cudaDriverEntryPointSymbolNotFound;
    const cudaError_t result = cudaGetDriverEntryPointByVersion(
        "cuTensorMapEncodeTiled", &function, kEncoderVersion, cudaEnableDefault, &status);
    if (result != cudaSuccess || status != cudaDriverEntryPointSuccess) {
      cudaGetLastError();  // the failure is answered by falling back, not left for the next check
      return TensorMapEncoder{nullptr};
    }
    return reinterpret_cast<TensorMapEncoder>(function);
  }();
  return encoder;
}

CUtensorMapDataType map_type(DType dtype) {
  return dtype == DType::kBFloat16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16
                                   : CU_TENSOR_MAP_DATA_TYPE_FLOAT16;
}

// A batch of one never steps its batch stride, which may then be anything (even 0, which the
// encoder refuses); any valid stride serves.
int64_t usable_batch_stride(const RowTensorMapRequest& request) {
  return request.batch == 1 ? request.strides[1] : request.strides[0];
}

}  // namespace

bool encode_row_tensor_map(const RowTensorMapRequest& request, CUtensorMap& map) {
  const TensorMapEncoder encode = tensor_map_encoder();
  if (encode == nullptr) return false;
  const auto element_bytes = static_cast<cuuint64_t>(dtype_size(request.dtype));
  // Innermost first: head_dim, heads, rows, batch.
  const cuuint64_t dims[kRank] = {
      static_cast<cuuint64_t>(request.head_dim), static_cast<cuuint64_t>(request.heads),
      static_cast<cuuint64_t>(request.rows), static_cast<cuuint64_t>(request.batch)};
  const int64_t batch_stride = usable_batch_stride(request);
  const cuuint64_t strides[kRank - 1] = {
      static_cast<cuuint64_t>(request.strides[2]) * element_bytes,
      static_cast<cuuint64_t>(request.strides[1]) * element_bytes,
      static_cast<cuuint64_t>(batch_stride) * element_bytes};
  const cuuint32_t box[kRank] = {static_cast<cuuint32_t>(request.box_columns), 1,
                                 static_cast<cuuint32_t>(request.box_rows), 1};
  const cuuint32_t element_strides[kRank] = {1, 1, 1, 1};
  const CUresult result =
      encode(&map, map_type(request.dtype), kRank, const_cast<void*>(request.data), dims, strides,
             box, element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
             CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  return result == CUDA_SUCCESS;
}

bool encode_lattice_tensor_map(const LatticeTensorMapRequest& request, CUtensorMap& map) {
  const TensorMapEncoder encode = tensor_map_encoder();
  if (encode == nullptr || request.period <= 0 || request.periods <= 0) return false;
  const RowTensorMapRequest& rows = request.rows;
  const auto element_bytes = static_cast<cuuint64_t>(dtype_size(rows.dtype));
  // Innermost first: head_dim, heads, rows of a period, periods, batch.
  const cuuint64_t dims[kLatticeRank] = {
      static_cast<cuuint64_t>(rows.head_dim), static_cast<cuuint64_t>(rows.heads),
      static_cast<cuuint64_t>(request.period), static_cast<cuuint64_t>(request.periods),
      static_cast<cuuint64_t>(rows.batch)};
  const cuuint64_t strides[kLatticeRank - 1] = {
      static_cast<cuuint64_t>(rows.strides[2]) * element_bytes,
      static_cast<cuuint64_t>(rows.strides[1]) * element_bytes,
      static_cast<cuuint64_t>(rows.strides[1] * request.period) * element_bytes,
      static_cast<cuuint64_t>(usable_batch_stride(rows)) * element_bytes};
  const cuuint32_t box[kLatticeRank] = {static_cast<cuuint32_t>(rows.box_columns), 1,
                                        static_cast<cuuint32_t>(rows.box_rows),
                                        static_cast<cuuint32_t>(request.box_periods), 1};
  const cuuint32_t element_strides[kLatticeRank] = {1, 1, 1, 1, 1};
  const CUresult result =
      encode(&map, map_type(rows.dtype), kLatticeRank, const_cast<void*>(rows.data), dims, strides,
             box, element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
             CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  return result == CUDA_SUCCESS;
}

}  // namespace mmsparse::cuda
