#pragma once
// The schemes' per-rank bodies behind dist::attention. `lse` [1, q_heads, local_len] fp32, or
// without data: not kept.

#include "dist/workspace.h"
#include "mmsparse/dist.h"

namespace mmsparse::dist::detail {

// Spava, APB-style and StarAttention (approximate.cpp).
void approximate_attention(const DistConfig& config, const SequenceSplit& split,
                           Communicator& communicator, const TensorView& q, const TensorView& k,
                           const TensorView& v, const TensorView& out, const TensorView& lse,
                           const AttentionOptions& options, Workspace::Impl& workspace);

// Exact ZigZag ring attention (ring.cpp).
void ring_attention(const SequenceSplit& split, Communicator& communicator, const TensorView& q,
                    const TensorView& k, const TensorView& v, const TensorView& out,
                    const TensorView& lse, const AttentionOptions& options,
                    Workspace::Impl& workspace);

}  // namespace mmsparse::dist::detail
