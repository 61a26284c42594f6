#pragma once
// Host oracles for the GPU kernel checks, both over the plan's materialised mask (an independent
// route to the plan semantics, cross-checked against the CPU reference in the tests):
//  * fp64: every product, softmax and sum in double precision;
//  * naive: a straightforward same-precision computation, rounding where a framework running the
//    input dtype rounds (scores, probabilities, output), with fp32 accumulation.
// The kernel check rule (FlashAttention-3's, GUIDE §6) bounds the kernel's error against fp64 by
// twice the naive error plus a small slack.

#include <cstdint>
#include <vector>

#include "mmsparse/plan.h"
#include "mmsparse/tensor.h"

namespace mmsparse::test {

struct OracleResult {
  std::vector<double> out;  // [batch, q_len, heads, head_dim] row-major
  std::vector<double> lse;  // [batch, heads, q_len] row-major; -inf for rows with no keys
};

enum class OraclePrecision { kFloat64, kNaive };

// q [batch, q_len, heads, dim], k/v [batch, kv_len, kv_heads, dim]: host views, any strides. The
// naive oracle rounds to q's dtype.
OracleResult attention_oracle(const Plan& plan, const TensorView& q, const TensorView& k,
                              const TensorView& v, float scale, OraclePrecision precision);

}  // namespace mmsparse::test
