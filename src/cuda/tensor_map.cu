// Host encoding of tensor maps through the driver entry point (see tensor_map.h).

#include <cudaTypedefs.h>
#include <cuda_runtime.h>

#include "cuda/tensor_map.h"

namespace mmsparse::cuda {
namespace {

// The ABI of cuTensorMapEncodeTiled introduced with CUDA 12.0, the version asked of the driver.
constexpr unsigned kEncoderVersion = 12000;
constexpr int kRank = 4;

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

}  // namespace

bool encode_row_tensor_map(const RowTensorMapRequest& request, CUtensorMap& map) {
  const TensorMapEncoder encode = tensor_map_encoder();
  if (encode == nullptr) return false;
  const auto element_bytes = static_cast<cuuint64_t>(dtype_size(request.dtype));
  // Innermost first: head_dim, heads, rows, batch.
  const cuuint64_t dims[kRank] = {
      static_cast<cuuint64_t>(request.head_dim), static_cast<cuuint64_t>(request.heads),
      static_cast<cuuint64_t>(request.rows), static_cast<cuuint64_t>(request.batch)};
  // A batch of one never steps its batch stride, which may then be anything (even 0, which the
  // encoder refuses); any valid stride serves.
  const int64_t batch_stride = request.batch == 1 ? request.strides[1] : request.strides[0];
  const cuuint64_t strides[kRank - 1] = {
      static_cast<cuuint64_t>(request.strides[2]) * element_bytes,
      static_cast<cuuint64_t>(request.strides[1]) * element_bytes,
      static_cast<cuuint64_t>(batch_stride) * element_bytes};
  const cuuint32_t box[kRank] = {static_cast<cuuint32_t>(request.box_columns), 1,
                                 static_cast<cuuint32_t>(request.box_rows), 1};
  const cuuint32_t element_strides[kRank] = {1, 1, 1, 1};
  const CUtensorMapDataType type = request.dtype == DType::kBFloat16
                                       ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16
                                       : CU_TENSOR_MAP_DATA_TYPE_FLOAT16;
  const CUresult result =
      encode(&map, type, kRank, const_cast<void*>(request.data), dims, strides, box,
             element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
             CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  return result == CUDA_SUCCESS;
}

}  // namespace mmsparse::cuda
