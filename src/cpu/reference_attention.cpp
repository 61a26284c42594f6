#include "cpu/reference_attention.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "core/parallel.h"
#include "core/plan_coverage.h"
#include "cpu/dot.h"

namespace mmsparse::cpu {
namespace {

constexpr float kNegativeInfinity = -std::numeric_limits<float>::infinity();

// Query rows per parallel work item: enough to amortise the per-item scratch buffers, few enough
// that the interleaved schedule of parallel_for evens out causal rows of unequal length.
constexpr int64_t kRowsPerItem = 16;

// One KV head of one batch element, converted once to contiguous fp32 so that the inner loops run
// over contiguous floats whatever the input dtype and strides.
class KvHead {
 public:
  KvHead(const TensorView& k, const TensorView& v, int64_t batch, int64_t kv_head)
      : head_dim_(k.shape[3]),
        keys_(static_cast<std::size_t>(k.shape[1] * head_dim_)),
        values_(keys_.size()) {
    const int64_t kv_len = k.shape[1];
    for (int64_t j = 0; j < kv_len; ++j) {
      const int64_t k_row = batch * k.strides[0] + j * k.strides[1] + kv_head * k.strides[2];
      const int64_t v_row = batch * v.strides[0] + j * v.strides[1] + kv_head * v.strides[2];
      for (int64_t d = 0; d < head_dim_; ++d) {
        keys_[j * head_dim_ + d] = load_float(k, k_row + d * k.strides[3]);
        values_[j * head_dim_ + d] = load_float(v, v_row + d * v.strides[3]);
      }
    }
  }
  int64_t head_dim() const { return head_dim_; }
  const float* key(int64_t j) const { return keys_.data() + j * head_dim_; }      // [head_dim]
  const float* value(int64_t j) const { return values_.data() + j * head_dim_; }  // [head_dim]

 private:
  int64_t head_dim_;
  std::vector<float> keys_;    // [kv_len, head_dim]
  std::vector<float> values_;  // [kv_len, head_dim]
};

// The softmax-weighted average of V over the keys offered to one query row. Scores are kept until
// finish() so the softmax is two-pass: subtract the row maximum, then exponentiate.
class RowAttention {
 public:
  RowAttention(const KvHead& kv, float scale)
      : kv_(kv), scale_(scale), query_(kv.head_dim()), accumulator_(kv.head_dim()) {}

  float* query() { return query_.data(); }  // [head_dim]; the caller loads the row here

  void clear() {
    keys_.clear();
    scores_.clear();
  }

  void add_key(int64_t key) {
    keys_.push_back(key);
    scores_.push_back(scale_ * dot(query_.data(), kv_.key(key), kv_.head_dim()));
  }

  // Writes the row's output [head_dim] and returns its LSE (natural log); no keys: O = 0, -inf.
  float finish(float* out) {
    const int64_t head_dim = kv_.head_dim();
    std::fill(out, out + head_dim, 0.0f);
    if (keys_.empty()) return kNegativeInfinity;
    const float max_score = *std::max_element(scores_.begin(), scores_.end());
    std::fill(accumulator_.begin(), accumulator_.end(), 0.0f);
    float sum = 0.0f;
    for (std::size_t n = 0; n < keys_.size(); ++n) {
      const float weight = std::exp(scores_[n] - max_score);
      sum += weight;
      const float* value = kv_.value(keys_[n]);
      for (int64_t d = 0; d < head_dim; ++d) accumulator_[d] += weight * value[d];
    }
    for (int64_t d = 0; d < head_dim; ++d) out[d] = accumulator_[d] / sum;
    return max_score + std::log(sum);
  }

 private:
  const KvHead& kv_;
  float scale_;
  std::vector<float> query_;        // [head_dim]
  std::vector<float> accumulator_;  // [head_dim]
  std::vector<int64_t> keys_;
  std::vector<float> scores_;
};

// A call's progress for AttentionOptions::on_progress: the call runs `loops` parallel loops of
// `items_per_loop` items each, one after the other; reports go out at most every
// progress_interval_ms, then once with 1.0 from finish(). Inert when on_progress is unset.
class CallProgress {
 public:
  CallProgress(const AttentionOptions& options, int64_t loops, int64_t items_per_loop)
      : options_(options),
        interval_(options.progress_interval_ms),
        total_items_(loops * items_per_loop),
        items_per_loop_(items_per_loop) {}

  // The hook for loop number `index`; nullptr (nothing counted) without a callback.
  const detail::LoopProgress* loop(int64_t index) {
    if (!options_.on_progress) return nullptr;
    hook_.interval = interval_;
    hook_.report = [this, index](int64_t done_items) {
      const auto now = std::chrono::steady_clock::now();
      if (now - last_report_ < interval_ || total_items_ == 0) return;
      last_report_ = now;
      options_.on_progress(static_cast<double>(index * items_per_loop_ + done_items) /
                           static_cast<double>(total_items_));
    };
    return &hook_;
  }

  void finish() {
    if (options_.on_progress) options_.on_progress(1.0);
  }

 private:
  const AttentionOptions& options_;
  std::chrono::milliseconds interval_;
  int64_t total_items_;
  int64_t items_per_loop_;
  std::chrono::steady_clock::time_point last_report_ = std::chrono::steady_clock::now();
  detail::LoopProgress hook_;
};

// Runs every query row of every (batch, query head) and stores its output and LSE. For each batch
// element and KV head, the KV head is converted once and the rows of its query heads run in
// parallel. offer_keys(batch, head, position, row) calls row.add_key() for each key the row sees.
template <class OfferKeys>
void attend_all_rows(const AttentionProblem& problem, const TensorView& q, const TensorView& k,
                     const TensorView& v, const TensorView& out, const TensorView& lse,
                     const AttentionOptions& options, const OfferKeys& offer_keys) {
  const int64_t group = problem.group_size();
  const int64_t row_blocks = (problem.q_len + kRowsPerItem - 1) / kRowsPerItem;
  CallProgress progress(options, problem.batch * problem.kv_heads, group * row_blocks);
  for (int64_t b = 0; b < problem.batch; ++b) {
    for (int64_t kv_head = 0; kv_head < problem.kv_heads; ++kv_head) {
      const KvHead kv(k, v, b, kv_head);
      const detail::LoopProgress* loop_progress = progress.loop(b * problem.kv_heads + kv_head);
      detail::parallel_for(group * row_blocks, options.num_threads, [&](int64_t item) {
        const int64_t head = kv_head * group + item / row_blocks;
        const int64_t row_begin = (item % row_blocks) * kRowsPerItem;
        const int64_t row_end = std::min(problem.q_len, row_begin + kRowsPerItem);
        RowAttention row(kv, problem.scale);
        std::vector<float> result(static_cast<std::size_t>(problem.head_dim));
        for (int64_t position = row_begin; position < row_end; ++position) {
          const int64_t q_row = b * q.strides[0] + position * q.strides[1] + head * q.strides[2];
          for (int64_t d = 0; d < problem.head_dim; ++d) {
            row.query()[d] = load_float(q, q_row + d * q.strides[3]);
          }
          row.clear();
          offer_keys(b, head, position, row);
          const float row_lse = row.finish(result.data());
          const int64_t out_row =
              b * out.strides[0] + position * out.strides[1] + head * out.strides[2];
          for (int64_t d = 0; d < problem.head_dim; ++d) {
            store_float(out, out_row + d * out.strides[3], result[d]);
          }
          lse.data_as<float>()[b * lse.strides[0] + head * lse.strides[1] +
                               position * lse.strides[2]] = row_lse;
        }
      }, loop_progress);
    }
  }
  progress.finish();
}

}  // namespace

void attention_dense(const AttentionProblem& problem, const TensorView& q, const TensorView& k,
                     const TensorView& v, const TensorView& out, const TensorView& lse,
                     const AttentionOptions& options) {
  const int64_t offset = problem.causal_offset();
  attend_all_rows(problem, q, k, v, out, lse, options,
                  [&](int64_t, int64_t, int64_t position, RowAttention& row) {
                    const int64_t visible =
                        problem.causal
                            ? std::clamp<int64_t>(position + offset + 1, 0, problem.kv_len)
                            : problem.kv_len;
                    for (int64_t key = 0; key < visible; ++key) row.add_key(key);
                  });
}

void attention_planned(const AttentionProblem& problem, const Plan& plan, const TensorView& q,
                       const TensorView& k, const TensorView& v, const TensorView& out,
                       const TensorView& lse, const AttentionOptions& options) {
  // Every pass's keys go into one softmax: the oracle computes the union exactly, without the
  // merge the engine uses. Each listed key is judged by the one mask rule (core/mask_rule.h), which
  // the kernels' element masks and materialize_mask apply too.
  std::vector<detail::RowCoverage> coverage;  // [head_slots]
  for (int64_t slot = 0; slot < plan.head_slots(); ++slot) coverage.emplace_back(plan, slot);
  const bool broadcast = plan.shape.batch == 1;
  attend_all_rows(problem, q, k, v, out, lse, options,
                  [&](int64_t b, int64_t head, int64_t position, RowAttention& row) {
                    const int64_t slot = (broadcast ? 0 : b) * plan.shape.heads + head;
                    coverage[slot].for_each_kept_key(position,
                                                     [&](int64_t key) { row.add_key(key); });
                  });
}

void attention_masked(const AttentionProblem& problem, const TensorView& q, const TensorView& k,
                      const TensorView& v, const TensorView& mask, const TensorView& out,
                      const TensorView& lse, const AttentionOptions& options) {
  const bool broadcast = mask.shape[0] == 1;
  const auto* keep = mask.data_as<const uint8_t>();
  attend_all_rows(problem, q, k, v, out, lse, options,
                  [&](int64_t b, int64_t head, int64_t position, RowAttention& row) {
                    const int64_t mask_row = (broadcast ? 0 : b) * mask.strides[0] +
                                             head * mask.strides[1] + position * mask.strides[2];
                    for (int64_t key = 0; key < problem.kv_len; ++key) {
                      if (keep[mask_row + key * mask.strides[3]] != 0) row.add_key(key);
                    }
                  });
}

}  // namespace mmsparse::cpu
