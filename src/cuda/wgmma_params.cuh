#pragma once
// Parameters of the wgmma attention kernel: the mma.sync kernel's, plus the tensor maps through
// which the producer copies K/V chunks. Passed by value as a __grid_constant__, which is where
// tensor copies may read a tensor map from.

#include <cuda.h>

#include "cuda/attention_params.cuh"

namespace mmsparse::cuda {

// Gathered columns that come in runs of this many consecutive keys, aligned to it in their chunk
// (the grid mask's bands), are loaded as tensor copies of one run each instead of row by row.
// Eight rows of 128 bytes are one 1024-byte swizzle atom, so a run lands where a whole-chunk copy
// would put those rows.
inline constexpr int kColumnRunKeys = 8;

struct WgmmaAttentionParams {
  AttentionParams attention;
  // 4-D views [batch][kv_len][kv_heads][head_dim] (innermost last), box [1][kBlockN][1][64]
  // with 128-byte swizzle; rows past kv_len read as zeros.
  CUtensorMap keys;
  CUtensorMap values;
  // The same views with boxes of kColumnRunKeys rows, for column runs.
  CUtensorMap key_runs;
  CUtensorMap value_runs;
};

}  // namespace mmsparse::cuda
