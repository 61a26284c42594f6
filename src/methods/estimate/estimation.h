#pragma once
// The last-q estimate the dynamic patterns share (MInference; MMInference Alg. 1, App. C.3):
//   Â = softmax(Q[last rows] · Kᵀ · scale + causal mask)
// over the keys of a KeySpace, in its compact coordinates. With all keys, compact index =
// original position. The 2D-boundary mode estimates each (query modality, key modality) pair over
// the keys of one modality, so the keys of other modalities drop out of its coordinates
// (MMInference Alg. 3: K permuted by modality).

#include <algorithm>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "mmsparse/patterns.h"

namespace mmsparse::detail {

struct IndexRange {
  int64_t begin = 0;
  int64_t end = 0;
  bool operator==(const IndexRange&) const = default;
};

// The keys one pattern reads: ascending original positions, a union of disjoint ranges. Compact
// index c is the c-th key of the space.
class KeySpace {
 public:
  static KeySpace all_keys(int64_t kv_len);
  explicit KeySpace(std::vector<IndexRange> ranges);  // ascending, disjoint, non-empty

  int64_t size() const { return prefix_.back(); }
  const std::vector<IndexRange>& ranges() const { return ranges_; }
  // [ranges + 1]: the compact index of each range's first key, then size().
  const std::vector<int64_t>& prefix() const { return prefix_; }
  // Whether compact keys are original positions (one range from key 0, as all_keys makes).
  bool is_identity() const {
    return ranges_.empty() || (ranges_.size() == 1 && ranges_.front().begin == 0);
  }
  // Keys of the space at or before original position `aligned`: a query aligned there sees the
  // compact keys [0, frontier) causally.
  int64_t frontier(int64_t aligned) const;
  int64_t original(int64_t compact) const;
  // Calls emit(begin, end) for the original ranges compact [begin, end) maps to, ascending.
  template <class Emit>
  void for_each_original(int64_t begin, int64_t end, Emit&& emit) const {
    for (std::size_t r = range_of(begin); begin < end; ++r) {
      const int64_t piece_end = std::min(end, prefix_[r + 1]);
      emit(ranges_[r].begin + begin - prefix_[r], ranges_[r].begin + piece_end - prefix_[r]);
      begin = piece_end;
    }
  }

 private:
  std::size_t range_of(int64_t compact) const;
  std::vector<IndexRange> ranges_;
  std::vector<int64_t> prefix_;  // [ranges + 1]: compact index of each range's first key
};

// One (batch element, KV head) of k as contiguous fp32 [kv_len, head_dim], converted once and
// reused by the query heads of its GQA group, which build_plan visits one after another.
class KeyCache {
 public:
  const float* keys(const TensorView& k, int64_t batch, int64_t kv_head);  // [kv_len, head_dim]

 private:
  const void* data_ = nullptr;
  int64_t batch_ = -1;
  int64_t kv_head_ = -1;
  std::vector<float> keys_;
};

// Throws naming `pattern` unless inputs hold host q and k that match `shape` (see PatternInputs).
void check_pattern_inputs(const std::string& pattern, const PatternInputs* inputs,
                          const PlanShape& shape);

// The operands of one head slot, as fp32: its query rows on demand, its KV head's keys.
class HeadOperands {
 public:
  HeadOperands(const PatternInputs& inputs, const PlanShape& shape, int64_t head_slot,
               KeyCache& cache);
  int64_t head_dim() const { return head_dim_; }
  float scale() const { return scale_; }
  DType query_dtype() const { return q_.dtype; }
  void query(int64_t row, float* out) const;  // out [head_dim]
  const float* key(int64_t position) const { return keys_ + position * head_dim_; }  // [head_dim]

 private:
  TensorView q_;
  int64_t batch_, head_, head_dim_;
  float scale_;
  const float* keys_;  // [kv_len, head_dim]
};

// The estimate over one key space: for each estimate row that sees at least one key, its frontier
// and its softmax over compact keys [0, frontier).
class Estimate {
 public:
  int64_t rows() const { return static_cast<int64_t>(frontiers_.size()); }
  int64_t frontier(int64_t row) const { return frontiers_[row]; }
  std::span<const float> probabilities(int64_t row) const {
    return {probabilities_.data() + offsets_[row], static_cast<std::size_t>(frontiers_[row])};
  }
  int64_t max_frontier() const;               // compact keys some estimate row sees
  std::vector<double> column_sums() const;    // [max_frontier] vertical scores by compact key
  std::vector<double> diagonal_sums() const;  // [max_frontier] slash scores by diagonal offset
                                              // d = frontier - 1 - key

  void add_row(int64_t frontier, std::span<const float> probabilities);

 private:
  std::vector<int64_t> frontiers_;
  std::vector<int64_t> offsets_{0};
  std::vector<float> probabilities_;
};

// rows: original query positions (aligned to keys by + causal_offset).
Estimate estimate_last_queries(const HeadOperands& operands, std::span<const int64_t> rows,
                               const KeySpace& space, int64_t causal_offset);

// The `count` best indices of `scores`: indices [0, forced) first (always kept: sinks, local
// diagonals), then the others by descending score, ties to the lower index. Ascending order;
// everything when count >= scores.size().
std::vector<int64_t> top_k(const std::vector<double>& scores, int64_t count, int64_t forced);

}  // namespace mmsparse::detail
