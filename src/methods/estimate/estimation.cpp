// The last-q estimate: key spaces, fp32 operands of a head slot, softmax rows, score sums, top-k.

#include "methods/estimate/estimation.h"

#include <cmath>
#include <numeric>
#include <utility>

#include "core/parallel.h"
#include "cpu/dot.h"
#include "mmsparse/status.h"

namespace mmsparse::detail {

// --- KeySpace ----------------------------------------------------------------------------------

KeySpace KeySpace::all_keys(int64_t kv_len) {
  return KeySpace(kv_len > 0 ? std::vector<IndexRange>{{0, kv_len}} : std::vector<IndexRange>{});
}

KeySpace::KeySpace(std::vector<IndexRange> ranges) : ranges_(std::move(ranges)), prefix_{0} {
  for (const IndexRange& range : ranges_)
    prefix_.push_back(prefix_.back() + range.end - range.begin);
}

std::size_t KeySpace::range_of(int64_t compact) const {
  return static_cast<std::size_t>(std::upper_bound(prefix_.begin(), prefix_.end(), compact) -
                                  prefix_.begin() - 1);
}

int64_t KeySpace::frontier(int64_t aligned) const {
  const auto after =
      std::upper_bound(ranges_.begin(), ranges_.end(), aligned,
                       [](int64_t key, const IndexRange& r) { return key < r.begin; });
  if (after == ranges_.begin()) return 0;
  const auto r = static_cast<std::size_t>(after - ranges_.begin() - 1);
  return prefix_[r] + std::min(aligned + 1, ranges_[r].end) - ranges_[r].begin;
}

int64_t KeySpace::original(int64_t compact) const {
  const std::size_t r = range_of(compact);
  return ranges_[r].begin + compact - prefix_[r];
}

// --- Operands ----------------------------------------------------------------------------------

const float* KeyCache::keys(const TensorView& k, int64_t batch, int64_t kv_head) {
  if (k.data == data_ && batch == batch_ && kv_head == kv_head_) return keys_.data();
  const int64_t kv_len = k.shape[1];
  const int64_t head_dim = k.shape[3];
  keys_.resize(static_cast<std::size_t>(kv_len * head_dim));
  for (int64_t j = 0; j < kv_len; ++j) {
    const int64_t row = batch * k.strides[0] + j * k.strides[1] + kv_head * k.strides[2];
    for (int64_t d = 0; d < head_dim; ++d) {
      keys_[j * head_dim + d] = load_float(k, row + d * k.strides[3]);
    }
  }
  data_ = k.data;
  batch_ = batch;
  kv_head_ = kv_head;
  return keys_.data();
}

namespace {

constexpr int kOperandDims = 4;

void check_operand(const std::string& name, const TensorView& view, const char* dims) {
  if (view.device.type != DeviceType::kCPU) {
    throw_invalid_argument(name + " device", "cpu (plans are built on the host)",
                           device_name(view.device));
  }
  if (view.ndim != kOperandDims) {
    throw_invalid_argument(name, std::string("4 dimensions ") + dims,
                           std::to_string(view.ndim) + " (" + view.shape_string() + ")");
  }
  if (view.dtype != DType::kFloat32 && view.dtype != DType::kFloat16 &&
      view.dtype != DType::kBFloat16) {
    throw_invalid_argument(name + " dtype", "float32, float16 or bfloat16",
                           std::string(dtype_name(view.dtype)));
  }
  if (view.data == nullptr && view.numel() > 0) {
    throw_invalid_argument(name + " data", "a non-null pointer", "null");
  }
}

void check_extent(const std::string& name, int64_t value, int64_t expected,
                  const std::string& what) {
  if (value != expected) {
    throw_invalid_argument(name, std::to_string(expected) + " (" + what + ")",
                           std::to_string(value));
  }
}

}  // namespace

void check_pattern_inputs(const std::string& pattern, const PatternInputs* inputs,
                          const PlanShape& shape) {
  if (inputs == nullptr) {
    throw_invalid_argument(pattern + " inputs",
                           "PatternInputs with q and k (a dynamic pattern estimates from them)",
                           "none");
  }
  const std::string q = pattern + " input q";
  const std::string k = pattern + " input k";
  check_operand(q, inputs->q, "[batch, q_len, q_heads, head_dim]");
  check_operand(k, inputs->k, "[batch, kv_len, kv_heads, head_dim]");
  check_extent(q + " batch", inputs->q.shape[0], shape.batch,
               "shape.batch: a dynamic plan has a head slot per batch element");
  check_extent(q + " q_len", inputs->q.shape[1], shape.q_len, "shape.q_len");
  check_extent(q + " heads", inputs->q.shape[2], shape.heads, "shape.heads");
  check_extent(k + " batch", inputs->k.shape[0], inputs->q.shape[0], "q's batch");
  check_extent(k + " kv_len", inputs->k.shape[1], shape.kv_len, "shape.kv_len");
  check_extent(k + " head_dim", inputs->k.shape[3], inputs->q.shape[3], "q's head_dim");
  const int64_t kv_heads = inputs->k.shape[2];
  if (kv_heads < 1 || shape.heads % kv_heads != 0) {
    throw_invalid_argument(k + " heads",
                           "a divisor of q's " + std::to_string(shape.heads) + " heads (GQA)",
                           std::to_string(kv_heads));
  }
  if (inputs->q.shape[3] < 1) {
    throw_invalid_argument(q + " head_dim", ">= 1", std::to_string(inputs->q.shape[3]));
  }
}

HeadOperands::HeadOperands(const PatternInputs& inputs, const PlanShape& shape, int64_t head_slot,
                           KeyCache& cache)
    : q_(inputs.q),
      batch_(head_slot / shape.heads),
      head_(head_slot % shape.heads),
      head_dim_(inputs.q.shape[3]),
      scale_(inputs.scale != 0.0f ? inputs.scale : 1.0f / std::sqrt(static_cast<float>(head_dim_))),
      keys_(cache.keys(inputs.k, batch_, head_ / (shape.heads / inputs.k.shape[2]))) {}

void HeadOperands::query(int64_t row, float* out) const {
  const int64_t base = batch_ * q_.strides[0] + row * q_.strides[1] + head_ * q_.strides[2];
  for (int64_t d = 0; d < head_dim_; ++d) out[d] = load_float(q_, base + d * q_.strides[3]);
}

// --- Estimate ----------------------------------------------------------------------------------

int64_t Estimate::max_frontier() const {
  return frontiers_.empty() ? 0 : *std::max_element(frontiers_.begin(), frontiers_.end());
}

void Estimate::add_row(int64_t frontier, std::span<const float> probabilities) {
  frontiers_.push_back(frontier);
  probabilities_.insert(probabilities_.end(), probabilities.begin(), probabilities.end());
  offsets_.push_back(static_cast<int64_t>(probabilities_.size()));
}

std::vector<double> Estimate::column_sums() const {
  std::vector<double> sums(static_cast<std::size_t>(max_frontier()), 0.0);
  for (int64_t r = 0; r < rows(); ++r) {
    const std::span<const float> p = probabilities(r);
    for (std::size_t key = 0; key < p.size(); ++key) sums[key] += p[key];
  }
  return sums;
}

std::vector<double> Estimate::diagonal_sums() const {
  std::vector<double> sums(static_cast<std::size_t>(max_frontier()), 0.0);
  for (int64_t r = 0; r < rows(); ++r) {
    const std::span<const float> p = probabilities(r);
    const auto last = static_cast<int64_t>(p.size()) - 1;
    for (int64_t key = 0; key <= last; ++key) sums[last - key] += p[key];
  }
  return sums;
}

Estimate estimate_last_queries(const HeadOperands& operands, std::span<const int64_t> rows,
                               const KeySpace& space, int64_t causal_offset) {
  // Rows are independent: score them in parallel, then add them in order.
  std::vector<std::vector<float>> probabilities(rows.size());
  parallel_for(static_cast<int64_t>(rows.size()), 0, [&](int64_t r) {
    const int64_t frontier = space.frontier(rows[r] + causal_offset);
    if (frontier == 0) return;  // sees no key of this space: nothing to estimate
    std::vector<float> query(static_cast<std::size_t>(operands.head_dim()));
    operands.query(rows[r], query.data());
    std::vector<float>& scores = probabilities[r];
    scores.reserve(static_cast<std::size_t>(frontier));
    space.for_each_original(0, frontier, [&](int64_t begin, int64_t end) {
      for (int64_t key = begin; key < end; ++key) {
        scores.push_back(operands.scale() *
                         cpu::dot(query.data(), operands.key(key), operands.head_dim()));
      }
    });
    const float max_score = *std::max_element(scores.begin(), scores.end());
    double sum = 0.0;
    for (float& score : scores) {
      score = std::exp(score - max_score);
      sum += score;
    }
    for (float& score : scores) score = static_cast<float>(score / sum);
  });
  Estimate estimate;
  for (const std::vector<float>& row : probabilities) {
    if (!row.empty()) estimate.add_row(static_cast<int64_t>(row.size()), row);
  }
  return estimate;
}

std::vector<int64_t> top_k(const std::vector<double>& scores, int64_t count, int64_t forced) {
  const auto size = static_cast<int64_t>(scores.size());
  std::vector<int64_t> order(static_cast<std::size_t>(size));
  std::iota(order.begin(), order.end(), int64_t{0});
  const int64_t kept_forced = std::min(forced, size);
  const int64_t total = std::clamp<int64_t>(count, kept_forced, size);
  const auto better = [&](int64_t a, int64_t b) {
    return scores[a] != scores[b] ? scores[a] > scores[b] : a < b;
  };
  std::nth_element(order.begin() + kept_forced, order.begin() + total, order.end(), better);
  order.resize(static_cast<std::size_t>(total));
  std::sort(order.begin(), order.end());
  return order;
}

}  // namespace mmsparse::detail
