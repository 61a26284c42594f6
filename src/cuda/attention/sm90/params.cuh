#pragma once
// Parameters of the wgmma attention kernel: the mma.sync kernel's, plus the tensor maps through
// which the producer copies K/V chunks. Passed by value as a __grid_constant__, which is where
// tensor copies may read a tensor map from.

#include <cuda.h>

#include <cstdint>

#include "cuda/attention/params.cuh"

namespace mmsparse::cuda {

// Which key chunks a wgmma kernel instantiation loads: span chunks always, lattice boxes for plans
// with lattice records (DevicePlanLayout::lattice_step), row gathers for plans with columns or
// strided spans (DevicePlanLayout::gathers). Without gathers the producer is a single thread
// issuing tensor copies, and the gather and column paths are not compiled in: each path costs the
// others' mainloop when merely present (docs/perf-notes.md, v6 and v11).
enum class ChunkSources { kSpans, kGathers, kLattices, kLatticesAndGathers };

// Which mask terms a wgmma kernel instantiation evaluates: positional ones only (causal, window,
// minimum distance, band), or also those that read the plan's token array (same-media, modality
// pairs, bidirectional media: DevicePlanLayout::has_token_info). Plans without token masks run the
// positional instantiations, which compile no token path.
enum class MaskTerms { kPositional, kTokens };

// Keys per K/V chunk of the wgmma kernel at `head_dim`: the N of its score wgmma and the rows of
// its K/V tensor boxes (WgmmaTraits::kBlockN; the host encodes the boxes from this). 128 up to
// head_dim 128; 64 above, where a chunk's K and V rows take twice the bytes and the registers of
// O twice the room (the budget in cuda/attention/sm90/traits.cuh).
constexpr int wgmma_chunk_keys(int64_t head_dim) { return head_dim > 128 ? 64 : 128; }

struct WgmmaAttentionParams {
  AttentionParams attention;
  // 4-D views [batch][kv_len][kv_heads][head_dim] (innermost last), box [1][kBlockN][1][64]
  // (wgmma_chunk_keys) with 128-byte swizzle; rows past kv_len read as zeros.
  CUtensorMap keys;
  CUtensorMap values;
  // 5-D views of the same K/V cut into periods of DevicePlan::lattice_step rows, box of
  // kBlockN / kLatticeWidth periods × kLatticeWidth rows (tensor_map.h); unset when the plan has
  // no lattice records.
  CUtensorMap lattice_keys;
  CUtensorMap lattice_values;
  int32_t lattice_step;  // the views' period; 0 without lattice records
  // 4-D views like `keys` and `values` of K and V in key-order layout (key_order_copy.h), which
  // key-ordered spans' chunks copy from (KeyChunk::reads_copy); unset without key orders.
  CUtensorMap ordered_keys;
  CUtensorMap ordered_values;
};

}  // namespace mmsparse::cuda
