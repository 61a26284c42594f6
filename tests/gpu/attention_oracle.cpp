#include "attention_oracle.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace mmsparse::test {
namespace {

constexpr double kNegativeInfinity = -std::numeric_limits<double>::infinity();

int64_t row_offset(const TensorView& view, int64_t batch, int64_t row, int64_t head) {
  return batch * view.strides[0] + row * view.strides[1] + head * view.strides[2];
}

// One query row against the keys its mask row keeps, at the requested precision.
struct RowInputs {
  const TensorView& q;
  const TensorView& k;
  const TensorView& v;
  int64_t batch;
  int64_t head;
  int64_t kv_head;
  int64_t position;
  const uint8_t* keep;  // [kv_len] mask row
  float scale;
};

double attend_row_fp64(const RowInputs& in, double* out /* [head_dim] */) {
  const int64_t dim = in.q.shape[3];
  const int64_t kv_len = in.k.shape[1];
  const int64_t q_row = row_offset(in.q, in.batch, in.position, in.head);
  std::vector<double> scores;
  std::vector<int64_t> keys;
  for (int64_t key = 0; key < kv_len; ++key) {
    if (in.keep[key] == 0) continue;
    const int64_t k_row = row_offset(in.k, in.batch, key, in.kv_head);
    double dot = 0.0;
    for (int64_t d = 0; d < dim; ++d) {
      dot += static_cast<double>(load_float(in.q, q_row + d * in.q.strides[3])) *
             static_cast<double>(load_float(in.k, k_row + d * in.k.strides[3]));
    }
    scores.push_back(dot * static_cast<double>(in.scale));
    keys.push_back(key);
  }
  std::fill(out, out + dim, 0.0);
  if (keys.empty()) return kNegativeInfinity;
  const double max_score = *std::max_element(scores.begin(), scores.end());
  double sum = 0.0;
  for (std::size_t n = 0; n < keys.size(); ++n) {
    const double weight = std::exp(scores[n] - max_score);
    sum += weight;
    const int64_t v_row = row_offset(in.v, in.batch, keys[n], in.kv_head);
    for (int64_t d = 0; d < dim; ++d)
      out[d] += weight * load_float(in.v, v_row + d * in.v.strides[3]);
  }
  for (int64_t d = 0; d < dim; ++d) out[d] /= sum;
  return max_score + std::log(sum);
}

double attend_row_naive(const RowInputs& in, double* out /* [head_dim] */) {
  const DType dtype = in.q.dtype;
  const int64_t dim = in.q.shape[3];
  const int64_t kv_len = in.k.shape[1];
  const int64_t q_row = row_offset(in.q, in.batch, in.position, in.head);
  std::vector<float> scores;
  std::vector<int64_t> keys;
  for (int64_t key = 0; key < kv_len; ++key) {
    if (in.keep[key] == 0) continue;
    const int64_t k_row = row_offset(in.k, in.batch, key, in.kv_head);
    float dot = 0.0f;
    for (int64_t d = 0; d < dim; ++d) {
      dot += load_float(in.q, q_row + d * in.q.strides[3]) *
             load_float(in.k, k_row + d * in.k.strides[3]);
    }
    scores.push_back(round_to_dtype(dtype, round_to_dtype(dtype, dot) * in.scale));
    keys.push_back(key);
  }
  std::fill(out, out + dim, 0.0);
  if (keys.empty()) return kNegativeInfinity;
  const float max_score = *std::max_element(scores.begin(), scores.end());
  float sum = 0.0f;
  for (float score : scores) sum += std::exp(score - max_score);
  std::vector<float> accumulator(static_cast<std::size_t>(dim), 0.0f);
  for (std::size_t n = 0; n < keys.size(); ++n) {
    const float probability = round_to_dtype(dtype, std::exp(scores[n] - max_score) / sum);
    const int64_t v_row = row_offset(in.v, in.batch, keys[n], in.kv_head);
    for (int64_t d = 0; d < dim; ++d) {
      accumulator[d] += probability * load_float(in.v, v_row + d * in.v.strides[3]);
    }
  }
  for (int64_t d = 0; d < dim; ++d) out[d] = round_to_dtype(dtype, accumulator[d]);
  return static_cast<double>(max_score + std::log(sum));
}

}  // namespace

OracleResult attention_oracle(const Plan& plan, const TensorView& q, const TensorView& k,
                              const TensorView& v, float scale, OraclePrecision precision) {
  const int64_t batch = q.shape[0];
  const int64_t q_len = q.shape[1];
  const int64_t heads = q.shape[2];
  const int64_t dim = q.shape[3];
  const int64_t kv_len = k.shape[1];
  const int64_t group = heads / k.shape[2];
  OracleResult result;
  result.out.assign(static_cast<std::size_t>(batch * q_len * heads * dim), 0.0);
  result.lse.assign(static_cast<std::size_t>(batch * heads * q_len), kNegativeInfinity);

  std::vector<std::vector<uint8_t>> masks;
  for (int64_t slot = 0; slot < plan.head_slots(); ++slot)
    masks.push_back(materialize_mask(plan, slot));

  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t h = 0; h < heads; ++h) {
      const int64_t slot = (plan.shape.batch == 1 ? 0 : b) * heads + h;
      for (int64_t i = 0; i < q_len; ++i) {
        const RowInputs row{q, k, v, b, h, h / group, i, masks[slot].data() + i * kv_len, scale};
        double* out = result.out.data() + ((b * q_len + i) * heads + h) * dim;
        result.lse[(b * heads + h) * q_len + i] = precision == OraclePrecision::kFloat64
                                                      ? attend_row_fp64(row, out)
                                                      : attend_row_naive(row, out);
      }
    }
  }
  return result;
}

}  // namespace mmsparse::test
