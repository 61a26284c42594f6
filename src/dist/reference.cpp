// The single-process reference of a split's approximation: the pairs each global row keeps, as an
// explicit mask, run by the CPU oracle's masked attention. It shares no code with the distributed
// path except the split and select_essential (checked on its own in the tests).

#include <cstdint>
#include <vector>

#include "dist/views.h"
#include "mmsparse/dist.h"
#include "mmsparse/patterns.h"
#include "mmsparse/plan.h"
#include "mmsparse/status.h"

namespace mmsparse::dist {
namespace {

// mask [1, q_heads, total, total]: 1 where (row, key) is kept.
class Mask {
 public:
  Mask(int64_t heads, int64_t total)
      : total_(total), tensor_(DType::kUInt8, {1, heads, total, total}) {}
  void keep(int64_t head, int64_t row, int64_t key) {
    tensor_.data_as<uint8_t>()[(head * total_ + row) * total_ + key] = 1;
  }
  TensorView view() const { return tensor_.view(); }

 private:
  int64_t total_;
  Tensor tensor_;
};

// The pairs the local pattern keeps among a block's own keys, per query head ([len * len] each,
// row-major), from the pattern's host plan over the block; empty without a local pattern (causal).
std::vector<std::vector<uint8_t>> own_block_pairs(const DistConfig& config, const TensorView& q,
                                                  const TensorView& k, const VirtualHost& host,
                                                  int64_t q_heads, float scale) {
  if (config.local_pattern.empty() || host.len == 0) return {};
  const PatternSpec spec = PatternSpec::parse(config.local_pattern);
  const PlanShape shape{1, q_heads, host.len, host.len, preferred_tile_rows(Device{}, q.shape[3])};
  const PatternInputs inputs{detail::rows(q, host.begin, host.len),
                             detail::rows(k, host.begin, host.len), scale};
  const Plan plan = build_plan(spec, shape, nullptr, is_dynamic(spec) ? &inputs : nullptr);
  std::vector<std::vector<uint8_t>> pairs;
  for (int64_t h = 0; h < q_heads; ++h) pairs.push_back(materialize_mask(plan, h));
  return pairs;
}

}  // namespace

void reference_attention(const DistConfig& config, const SequenceSplit& split, const TensorView& q,
                         const TensorView& k, const TensorView& v, const TensorView& out,
                         const TensorView& lse, const AttentionOptions& options) {
  const int64_t total = split.total_len();
  if (q.shape[1] != total || k.shape[1] != total) {
    throw_invalid_argument("q, k", "[1, " + std::to_string(total) + " (the split's length), ...]",
                           q.shape_string());
  }
  const int64_t q_heads = q.shape[2];
  const int64_t group = q_heads / k.shape[2];
  Mask mask(q_heads, total);
  const auto keep_causal = [&](int64_t row, int64_t key_begin) {
    for (int64_t h = 0; h < q_heads; ++h) {
      for (int64_t key = key_begin; key <= row; ++key) mask.keep(h, row, key);
    }
  };
  if (config.scheme == Scheme::kZigzagRing) {
    for (int64_t row = 0; row < total; ++row) keep_causal(row, 0);
  } else {
    for (int64_t row = 0; row < split.anchor_len; ++row) keep_causal(row, 0);
    for (int64_t row = split.context_len; row < total; ++row) keep_causal(row, 0);
    const TensorView query_q = detail::rows(q, split.context_len, split.query_len);
    // passing[h] = global positions every later host sees for KV head h.
    std::vector<std::vector<int64_t>> passing(static_cast<std::size_t>(k.shape[2]));
    for (const VirtualHost& host : split.hosts) {
      const std::vector<std::vector<uint8_t>> own =
          own_block_pairs(config, q, k, host, q_heads, options.scale);
      for (int64_t row = host.begin; row < host.begin + host.len; ++row) {
        for (int64_t h = 0; h < q_heads; ++h) {
          for (int64_t key = 0; key < split.anchor_len; ++key) mask.keep(h, row, key);
          for (int64_t key = host.begin; key <= row; ++key) {
            const std::size_t pair =
                static_cast<std::size_t>((row - host.begin) * host.len + key - host.begin);
            if (own.empty() || own[static_cast<std::size_t>(h)][pair]) mask.keep(h, row, key);
          }
          for (int64_t key : passing[static_cast<std::size_t>(h / group)]) mask.keep(h, row, key);
        }
      }
      if (host.passing == 0) continue;
      const std::vector<std::vector<int64_t>> selected = select_essential(
          query_q, detail::rows(k, host.begin, host.len), host.passing, config.pool_width);
      for (std::size_t h = 0; h < selected.size(); ++h) {
        for (int64_t position : selected[h]) passing[h].push_back(host.begin + position);
      }
    }
  }
  attention_masked(q, k, v, mask.view(), out, lse, options);
}

}  // namespace mmsparse::dist
