#pragma once
// Host interface of the tile oracle's device block sums (docs/tile_oracle.md). Plain C++: the CUDA
// backend calls it for mmsparse::tile_mass on CUDA tensors.

#include <array>
#include <cstdint>
#include <span>

#include "mmsparse/tensor.h"

namespace mmsparse::cuda {

struct TileMassArgs {
  int device_index = 0;            // the CUDA device holding q, k and lse
  DType dtype = DType::kBFloat16;  // of q and k: bfloat16, float16 or float32
  int64_t q_len = 0;
  int64_t kv_len = 0;
  int64_t q_heads = 0;
  int64_t kv_heads = 0;  // q_heads % kv_heads == 0
  int64_t head_dim = 0;
  float scale = 0.0f;  // resolved, never 0
  int64_t batch_index = 0;
  int64_t head = 0;  // the query head summed
  int64_t tile_rows = 0;
  int64_t chunk_keys = 0;
  const void* q = nullptr;  // [batch, q_len, q_heads, head_dim], strides in elements
  std::array<int64_t, 4> q_strides{};
  const void* k = nullptr;  // [batch, kv_len, kv_heads, head_dim]
  std::array<int64_t, 4> k_strides{};
  const float* lse = nullptr;  // [batch, q_heads, q_len] of dense attention at `scale`
  std::array<int64_t, 3> lse_strides{};
  void* stream = nullptr;  // cudaStream_t
};

// mass [tiles.size(), ceil(kv_len / chunk_keys)] (host) receives, per sampled query tile and key
// chunk, Σ exp(scale · q_i · k_j − lse_i) over the tile's rows and their causal keys of the chunk.
// Synchronises the stream (the sums are copied to the host).
void tile_mass(const TileMassArgs& args, std::span<const int64_t> tiles, std::span<double> mass);

}  // namespace mmsparse::cuda
