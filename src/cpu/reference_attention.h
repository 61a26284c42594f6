#pragma once
// The CPU reference backend: the oracle every other backend is checked against. Clarity over
// speed: each (batch, kv head) is converted once to contiguous fp32, every query row scores its
// keys with fp32 accumulation and takes a two-pass softmax (max first, so exp never overflows).
//
// Callers (src/core/attention_dispatch.cpp) validate the arguments first; these functions assume
// host tensors whose shapes match `problem`. They use options.num_threads and report to
// options.on_progress (attention.h).

#include <span>

#include "mmsparse/attention.h"
#include "mmsparse/plan.h"
#include "mmsparse/tensor.h"

namespace mmsparse::cpu {

// q [batch, q_len, q_heads, head_dim], k/v [batch, kv_len, kv_heads, head_dim],
// out [batch, q_len, q_heads, head_dim], lse [batch, q_heads, q_len] (fp32).
void attention_dense(const AttentionProblem& problem, const TensorView& q, const TensorView& k,
                     const TensorView& v, const TensorView& out, const TensorView& lse,
                     const AttentionOptions& options);

// Exactly the pairs the plan covers (its tiles, spans, columns and mask policies). A plan of
// batch 1 serves every batch element. Rows in no tile get O = 0 and LSE = -inf. The plan must be
// valid (Plan::validate).
void attention_planned(const AttentionProblem& problem, const Plan& plan, const TensorView& q,
                       const TensorView& k, const TensorView& v, const TensorView& out,
                       const TensorView& lse, const AttentionOptions& options);

// mask [batch or 1, q_heads, q_len, kv_len] uint8, nonzero = keep; nothing else masks.
void attention_masked(const AttentionProblem& problem, const TensorView& q, const TensorView& k,
                      const TensorView& v, const TensorView& mask, const TensorView& out,
                      const TensorView& lse, const AttentionOptions& options);

// outs[i] [batch, q_len, heads, head_dim], lses[i] [batch, heads, q_len] (fp32); out and lse
// likewise. Rows where every part has LSE = -inf get O = 0 and LSE = -inf.
void merge_partials(std::span<const TensorView> outs, std::span<const TensorView> lses,
                    const TensorView& out, const TensorView& lse, int num_threads);

}  // namespace mmsparse::cpu
