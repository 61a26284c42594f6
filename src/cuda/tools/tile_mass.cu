// The tile oracle's block sums on the GPU: one CTA per (sampled query tile, key chunk), one pass
// over the causal tiles like the dense kernel, with the dense LSE given. CUDA cores in fp32: this
// is a measurement for reports, run once per layer, not a hot path.

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <string>
#include <vector>

#include "cuda/common/cuda_check.h"
#include "cuda/common/element_convert.cuh"
#include "cuda/common/device_pool.h"
#include "cuda/tools/tile_mass.h"
#include "mmsparse/status.h"

namespace mmsparse::cuda {
namespace {

// Rows a CTA sums at a time, one per thread; taller query tiles loop.
constexpr int kThreads = 128;
// Keys and dimensions staged in shared memory per step: each thread keeps kSliceKeys partial
// scores and kSliceDims query values in registers.
constexpr int kSliceKeys = 32;
constexpr int kSliceDims = 32;
constexpr int kDimsPerLoad = 4;  // one 16-byte shared-memory load

struct TileMassParams {
  int64_t q_len, kv_len, head_dim, tile_rows, chunk_keys, key_chunks;
  float scale;
  const void* q;  // the query head's rows: q + row * q_row_stride + d * q_dim_stride
  int64_t q_row_stride, q_dim_stride;
  const void* k;  // the KV head's keys: k + key * k_row_stride + d * k_dim_stride
  int64_t k_row_stride, k_dim_stride;
  const float* lse;  // the head's LSE: lse[row * lse_stride]
  int64_t lse_stride;
  const int64_t* tiles;  // [sampled] query tile indices
  double* mass;          // [sampled, key_chunks]
};

// The keys [0, visible) that row `row` sees (bottom-right aligned causal masking).
__device__ int64_t visible_keys(const TileMassParams& p, int64_t row) {
  const int64_t visible = row + p.kv_len - p.q_len + 1;
  return visible < 0 ? 0 : (visible > p.kv_len ? p.kv_len : visible);
}

template <typename T>
__global__ void __launch_bounds__(kThreads) tile_mass_kernel(TileMassParams p) {
  // Every thread reads the same key at a time (a broadcast), four dimensions per load.
  __shared__ __align__(16) float keys[kSliceKeys][kSliceDims];
  __shared__ double partial[kThreads];
  const int64_t chunk = blockIdx.x;
  const int64_t sample = blockIdx.y;
  const int64_t tile = p.tiles[sample];
  const int64_t row_begin = tile * p.tile_rows;
  const int64_t row_end = min(p.q_len, row_begin + p.tile_rows);
  const int64_t key_begin = chunk * p.chunk_keys;
  const int64_t key_end = min(p.kv_len, key_begin + p.chunk_keys);
  // No row of the tile sees the chunk: the engine computes no such tile (uniform exit).
  if (visible_keys(p, row_end - 1) <= key_begin) {
    if (threadIdx.x == 0) p.mass[sample * p.key_chunks + chunk] = 0.0;
    return;
  }
  const T* q = static_cast<const T*>(p.q);
  const T* k = static_cast<const T*>(p.k);
  double thread_sum = 0.0;
  for (int64_t row_base = row_begin; row_base < row_end; row_base += kThreads) {
    const int64_t row = row_base + threadIdx.x;
    const bool active = row < row_end;
    const float lse = active ? p.lse[row * p.lse_stride] : 0.0f;
    const int64_t visible = active && isfinite(lse) ? visible_keys(p, row) : 0;
    for (int64_t slice = key_begin; slice < key_end; slice += kSliceKeys) {
      float score[kSliceKeys] = {};
      for (int64_t d0 = 0; d0 < p.head_dim; d0 += kSliceDims) {
        __syncthreads();  // the previous step's keys are read
        for (int e = threadIdx.x; e < kSliceKeys * kSliceDims; e += kThreads) {
          const int64_t key = slice + e / kSliceDims;
          const int64_t d = d0 + e % kSliceDims;
          keys[e / kSliceDims][e % kSliceDims] =
              key < key_end && d < p.head_dim
                  ? to_float(k[key * p.k_row_stride + d * p.k_dim_stride])
                  : 0.0f;
        }
        float query[kSliceDims];
#pragma unroll
        for (int d = 0; d < kSliceDims; ++d) {
          query[d] = active && d0 + d < p.head_dim
                         ? to_float(q[row * p.q_row_stride + (d0 + d) * p.q_dim_stride])
                         : 0.0f;
        }
        __syncthreads();
#pragma unroll
        for (int j = 0; j < kSliceKeys; ++j) {
#pragma unroll
          for (int d = 0; d < kSliceDims; d += kDimsPerLoad) {
            const float4 key = *reinterpret_cast<const float4*>(&keys[j][d]);
            score[j] = fmaf(query[d], key.x, score[j]);
            score[j] = fmaf(query[d + 1], key.y, score[j]);
            score[j] = fmaf(query[d + 2], key.z, score[j]);
            score[j] = fmaf(query[d + 3], key.w, score[j]);
          }
        }
      }
#pragma unroll
      for (int j = 0; j < kSliceKeys; ++j) {
        if (slice + j < min(visible, key_end)) thread_sum += expf(fmaf(p.scale, score[j], -lse));
      }
    }
  }
  partial[threadIdx.x] = thread_sum;
  __syncthreads();
  for (int stride = kThreads / 2; stride > 0; stride /= 2) {
    if (threadIdx.x < stride) partial[threadIdx.x] += partial[threadIdx.x + stride];
    __syncthreads();
  }
  if (threadIdx.x == 0) p.mass[sample * p.key_chunks + chunk] = partial[0];
}

template <typename T>
void launch(const TileMassParams& params, int64_t sampled, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>(params.key_chunks), static_cast<unsigned>(sampled));
  tile_mass_kernel<T><<<grid, kThreads, 0, stream>>>(params);
  check_launch("tile_mass_kernel");
}

}  // namespace

void tile_mass(const TileMassArgs& args, std::span<const int64_t> tiles, std::span<double> mass) {
  const int64_t key_chunks = (args.kv_len + args.chunk_keys - 1) / args.chunk_keys;
  if (static_cast<int64_t>(mass.size()) != static_cast<int64_t>(tiles.size()) * key_chunks) {
    throw_invalid_argument("mass", "[tiles, key_chunks] values", std::to_string(mass.size()));
  }
  constexpr int64_t kMaxGridY = 65535;
  if (static_cast<int64_t>(tiles.size()) > kMaxGridY) {
    throw_invalid_argument("sample_tiles", "at most 65535 query tiles per call",
                           std::to_string(tiles.size()));
  }
  if (tiles.empty() || key_chunks == 0) return;
  check_cuda(cudaSetDevice(args.device_index), "tile_mass", "cudaSetDevice");
  auto stream = static_cast<cudaStream_t>(args.stream);
  const int64_t kv_head = args.head / (args.q_heads / args.kv_heads);
  TileMassParams params{};
  params.q_len = args.q_len;
  params.kv_len = args.kv_len;
  params.head_dim = args.head_dim;
  params.tile_rows = args.tile_rows;
  params.chunk_keys = args.chunk_keys;
  params.key_chunks = key_chunks;
  params.scale = args.scale;
  params.q_row_stride = args.q_strides[1];
  params.q_dim_stride = args.q_strides[3];
  params.k_row_stride = args.k_strides[1];
  params.k_dim_stride = args.k_strides[3];
  params.lse = args.lse + args.batch_index * args.lse_strides[0] + args.head * args.lse_strides[1];
  params.lse_stride = args.lse_strides[2];
  const int64_t element = dtype_size(args.dtype);
  params.q = static_cast<const char*>(args.q) +
             (args.batch_index * args.q_strides[0] + args.head * args.q_strides[2]) * element;
  params.k = static_cast<const char*>(args.k) +
             (args.batch_index * args.k_strides[0] + kv_head * args.k_strides[2]) * element;

  auto* device_tiles =
      static_cast<int64_t*>(allocate_async(tiles.size_bytes(), stream, "tile_mass: tiles"));
  double* device_mass = nullptr;
  try {
    device_mass = static_cast<double*>(allocate_async(mass.size_bytes(), stream, "tile_mass: sums"));
  } catch (...) {
    (void)cudaFreeAsync(device_tiles, stream);
    throw;
  }
  params.tiles = device_tiles;
  params.mass = device_mass;
  try {
    check_cuda(cudaMemcpyAsync(device_tiles, tiles.data(), tiles.size_bytes(),
                               cudaMemcpyHostToDevice, stream),
               "tile_mass", "copy tiles");
    switch (args.dtype) {
      case DType::kBFloat16:
        launch<__nv_bfloat16>(params, static_cast<int64_t>(tiles.size()), stream);
        break;
      case DType::kFloat16:
        launch<__half>(params, static_cast<int64_t>(tiles.size()), stream);
        break;
      case DType::kFloat32:
        launch<float>(params, static_cast<int64_t>(tiles.size()), stream);
        break;
      default:
        throw_invalid_argument("q dtype", "bfloat16, float16 or float32",
                               std::string(dtype_name(args.dtype)));
    }
    check_cuda(cudaMemcpyAsync(mass.data(), device_mass, mass.size_bytes(), cudaMemcpyDeviceToHost,
                               stream),
               "tile_mass", "copy sums");
    check_cuda(cudaStreamSynchronize(stream), "tile_mass", "synchronize");
  } catch (...) {
    (void)cudaFreeAsync(device_tiles, stream);
    (void)cudaFreeAsync(device_mass, stream);
    throw;
  }
  check_cuda(cudaFreeAsync(device_tiles, stream), "tile_mass", "free tiles");
  check_cuda(cudaFreeAsync(device_mass, stream), "tile_mass", "free sums");
}

}  // namespace mmsparse::cuda
