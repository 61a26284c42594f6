#pragma once
// The plan builders' oracle check: attention over a plan must equal the masked-dense oracle run on
// the plan's materialised mask (small sizes only: the mask is N × N per head slot).

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "mmsparse/attention.h"
#include "mmsparse/plan.h"
#include "mmsparse/tensor.h"

namespace mmsparse::test {

// q [batch, q_len, q_heads, d], k/v [batch, kv_len, kv_heads, d], fp32 host views. O and LSE must
// agree within `tolerance` relative to max(1, |oracle|); -inf LSE rows must stay -inf.
inline void expect_plan_equals_masked_oracle(const Plan& plan, const TensorView& q,
                                             const TensorView& k, const TensorView& v,
                                             double tolerance) {
  const PlanShape& shape = plan.shape;
  Tensor mask(DType::kUInt8, {shape.batch, shape.heads, shape.q_len, shape.kv_len});
  const int64_t slot_elements = shape.q_len * shape.kv_len;
  for (int64_t slot = 0; slot < plan.head_slots(); ++slot) {
    const std::vector<uint8_t> slot_mask = materialize_mask(plan, slot);
    std::copy(slot_mask.begin(), slot_mask.end(), mask.data_as<uint8_t>() + slot * slot_elements);
  }
  const std::vector<int64_t> out_shape = q.shape_vector();
  const std::vector<int64_t> lse_shape = {q.shape[0], q.shape[2], q.shape[1]};
  Tensor out_plan(DType::kFloat32, out_shape), out_mask(DType::kFloat32, out_shape);
  Tensor lse_plan(DType::kFloat32, lse_shape), lse_mask(DType::kFloat32, lse_shape);
  attention_planned(plan, q, k, v, out_plan.view(), lse_plan.view());
  attention_masked(q, k, v, mask.view(), out_mask.view(), lse_mask.view());

  const float* o_p = out_plan.data_as<float>();
  const float* o_m = out_mask.data_as<float>();
  for (int64_t i = 0; i < out_plan.numel(); ++i) {
    ASSERT_LE(std::abs(o_p[i] - o_m[i]), tolerance * std::max(1.0f, std::abs(o_m[i])))
        << "out element " << i;
  }
  const float* l_p = lse_plan.data_as<float>();
  const float* l_m = lse_mask.data_as<float>();
  for (int64_t i = 0; i < lse_plan.numel(); ++i) {
    if (std::isinf(l_m[i])) {
      ASSERT_TRUE(std::isinf(l_p[i]) && l_p[i] < 0) << "lse element " << i << " = " << l_p[i];
    } else {
      ASSERT_NEAR(l_p[i], l_m[i], tolerance * std::max(1.0f, std::abs(l_m[i])))
          << "lse element " << i;
    }
  }
}

}  // namespace mmsparse::test
