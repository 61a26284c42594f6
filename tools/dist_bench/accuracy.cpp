// The accuracy sweep of Spava's approximation (accuracy.h): W in-process ranks run dist::attention
// with the LSE kept; each row's recall is exp(LSE_approx - LSE_dense) against dense attention.

#include "accuracy.h"

#include <fmt/core.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <utility>

#include "mmsparse/attention.h"
#include "mmsparse/device.h"
#include "mmsparse/status.h"
#include "mmsparse/tools/metrics.h"

namespace mmsparse::dist_bench {
namespace {

// Passing lengths at least this long pass every block whole (the exactness mode).
constexpr int64_t kWholeBlocks = int64_t{1} << 40;

// Memory of a shape on the CPU or on a device: the sweep runs on either.
class Buffer {
 public:
  Buffer(DType dtype, const std::vector<int64_t>& shape, Device device) {
    if (device.type == DeviceType::kCPU) {
      host_ = Tensor(dtype, shape);
      view_ = host_.view();
    } else {
      device_.emplace(dtype, shape, device);
      view_ = device_->view();
    }
  }
  const TensorView& view() const { return view_; }
  Tensor to_host() const {
    Tensor copy(view_.dtype, view_.shape_vector());
    if (device_) {
      device_->copy_to_host(copy.view());
    } else {
      std::memcpy(copy.data(), host_.data(),
                  static_cast<std::size_t>(view_.numel()) * dtype_size(view_.dtype));
    }
    return copy;
  }

 private:
  Tensor host_;
  std::optional<DeviceTensor> device_;
  TensorView view_;
};

// Rows [begin, begin + count) of a [1, seq, heads, dim] view.
TensorView row_range(const TensorView& view, int64_t begin, int64_t count) {
  TensorView slice = view;
  slice.data = static_cast<std::byte*>(view.data) +
               begin * view.strides[1] * static_cast<int64_t>(dtype_size(view.dtype));
  slice.shape[1] = count;
  return slice;
}

struct RecallStats {
  double mean = 0.0;
  double min = 0.0;
};

// Mean and minimum recall over query heads and rows [begin, end) (rows without keys skipped).
RecallStats recall_over(const Tensor& lse, const Tensor& dense_lse, int64_t begin, int64_t end) {
  const int64_t heads = lse.shape()[1];
  double sum = 0.0;
  double lowest = std::numeric_limits<double>::infinity();
  int64_t count = 0;
  for (int64_t head = 0; head < heads; ++head) {
    const std::vector<double> recall = row_recall(lse.view(), dense_lse.view(), 0, head);
    for (int64_t row = begin; row < end; ++row) {
      const double value = recall[static_cast<std::size_t>(row)];
      if (std::isnan(value)) continue;
      sum += value;
      lowest = std::min(lowest, value);
      ++count;
    }
  }
  if (count == 0) return {std::nan(""), std::nan("")};
  return {sum / static_cast<double>(count), lowest};
}

// The approximation's LSE over the global rows: each rank's rows of its blocks, rank 0's anchor
// and query rows (the same on every rank).
Tensor distributed_lse(const dist::DistConfig& config, const dist::SequenceSplit& split,
                       const AccuracyInputs& inputs, const RowCopy& copy, double timeout) {
  const int64_t total = split.total_len();
  const int64_t q_heads = inputs.q.shape[2];
  const int64_t kv_heads = inputs.k.shape[2];
  const int64_t dim = inputs.q.shape[3];
  const Device device = inputs.q.device;
  Tensor lse(DType::kFloat32, {1, q_heads, total});
  auto* global = lse.data_as<float>();
  dist::run_in_process(
      split.world,
      [&](dist::Communicator& communicator) {
        const int rank = communicator.rank();
        const int64_t local_len = dist::local_length(split, rank);
        const Buffer q(inputs.q.dtype, {1, local_len, q_heads, dim}, device);
        const Buffer k(inputs.k.dtype, {1, local_len, kv_heads, dim}, device);
        const Buffer v(inputs.v.dtype, {1, local_len, kv_heads, dim}, device);
        const Buffer out(inputs.q.dtype, {1, local_len, q_heads, dim}, device);
        const Buffer local_lse(DType::kFloat32, {1, q_heads, local_len}, device);
        const std::vector<dist::Segment> segments = dist::local_layout(split, rank);
        for (const dist::Segment& segment : segments) {
          if (segment.len == 0) continue;
          const std::pair<const TensorView*, const Buffer*> tensors[] = {
              {&inputs.q, &q}, {&inputs.k, &k}, {&inputs.v, &v}};
          for (const auto& [from, to] : tensors) {
            copy(row_range(*from, segment.global_begin, segment.len),
                 row_range(to->view(), segment.local_begin, segment.len));
          }
        }
        dist::attention(config, split, communicator, q.view(), k.view(), v.view(), out.view(), {},
                        nullptr, local_lse.view());
        const Tensor host = local_lse.to_host();
        const auto* local = host.data_as<float>();
        for (std::size_t i = 0; i < segments.size(); ++i) {
          const dist::Segment& segment = segments[i];
          const bool shared = i == 0 || i + 1 == segments.size();
          if (shared && rank != 0) continue;
          for (int64_t head = 0; head < q_heads; ++head) {
            std::memcpy(global + head * total + segment.global_begin,
                        local + head * local_len + segment.local_begin,
                        static_cast<std::size_t>(segment.len) * sizeof(float));
          }
        }
      },
      timeout, device);
  return lse;
}

Tensor dense_lse(const AccuracyInputs& inputs) {
  const int64_t total = inputs.q.shape[1];
  const Buffer out(inputs.q.dtype, inputs.q.shape_vector(), inputs.q.device);
  const Buffer lse(DType::kFloat32, {1, inputs.q.shape[2], total}, inputs.q.device);
  AttentionOptions options;
  options.causal = true;
  attention_dense(inputs.q, inputs.k, inputs.v, out.view(), lse.view(), options);
  return lse.to_host();
}

AccuracyRow run_one(const AccuracyInputs& inputs, const Tensor& dense, int world,
                    int64_t anchor_divisor, int64_t passing_divisor, const RowCopy& copy,
                    double timeout) {
  dist::DistConfig config;
  config.scheme = dist::Scheme::kSpava;
  config.anchor_len = std::max<int64_t>(1, inputs.context_len / anchor_divisor);
  config.passing_len = passing_divisor == 0
                           ? kWholeBlocks
                           : std::max<int64_t>(1, inputs.context_len / passing_divisor);
  const dist::SequenceSplit split =
      dist::split_sequence(config, inputs.context_len, inputs.query_len, world);
  const Tensor lse = distributed_lse(config, split, inputs, copy, timeout);
  AccuracyRow row;
  row.world = world;
  row.anchor_divisor = anchor_divisor;
  row.passing_divisor = passing_divisor;
  row.anchor_len = split.anchor_len;
  row.passing_len = split.hosts.front().passing;
  const RecallStats query = recall_over(lse, dense, split.context_len, split.total_len());
  const RecallStats context = recall_over(lse, dense, split.anchor_len, split.context_len);
  row.query_recall_mean = query.mean;
  row.query_recall_min = query.min;
  row.context_recall_mean = context.mean;
  row.context_recall_min = context.min;
  const NeedlesKept needles = count_needles_kept(config, split, inputs.host, inputs.needles);
  row.needles_kept = needles.kept;
  row.needle_pairs = needles.pairs;
  return row;
}

}  // namespace

RowCopy host_row_copy() {
  return [](const TensorView& from, const TensorView& to) {
    if (from.is_contiguous() && to.is_contiguous() && from.dtype == to.dtype &&
        from.shape_vector() == to.shape_vector()) {
      std::memcpy(to.data, from.data,
                  static_cast<std::size_t>(from.numel()) * dtype_size(from.dtype));
      return;
    }
    copy_tensor(from, to);
  };
}

std::vector<AccuracyRow> accuracy_sweep(const AccuracySweep& sweep, const AccuracyInputs& inputs,
                                        const RowCopy& copy) {
  const Tensor dense = dense_lse(inputs);
  std::vector<AccuracyRow> rows;
  for (const int world : sweep.worlds) {
    if (sweep.with_exact) {
      rows.push_back(
          run_one(inputs, dense, world,
                  sweep.anchor_divisors.empty() ? int64_t{64} : sweep.anchor_divisors.front(), 0,
                  copy, sweep.timeout_seconds));
    }
    for (const int64_t anchor : sweep.anchor_divisors) {
      for (const int64_t passing : sweep.passing_divisors) {
        rows.push_back(run_one(inputs, dense, world, anchor, passing, copy, sweep.timeout_seconds));
      }
    }
  }
  return rows;
}

NeedlesKept count_needles_kept(const dist::DistConfig& config, const dist::SequenceSplit& split,
                               const Workload::Tensors& host, const std::vector<Needle>& needles) {
  const TensorView query_q = row_range(host.q.view(), split.context_len, split.query_len);
  const int64_t kv_heads = host.k.shape()[2];
  NeedlesKept result;
  // The last host's passing rows have no reader.
  for (std::size_t h = 0; h + 1 < split.hosts.size(); ++h) {
    const dist::VirtualHost& block = split.hosts[h];
    std::vector<int64_t> inside;
    for (const Needle& needle : needles) {
      if (needle.key >= block.begin && needle.key < block.begin + block.len) {
        inside.push_back(needle.key - block.begin);
      }
    }
    if (inside.empty()) continue;
    result.pairs += static_cast<int64_t>(inside.size()) * kv_heads;
    if (block.passing == 0) continue;
    const auto selected =
        dist::select_essential(query_q, row_range(host.k.view(), block.begin, block.len),
                               block.passing, config.pool_width);
    for (const int64_t position : inside) {
      for (const std::vector<int64_t>& head : selected) {
        result.kept += std::binary_search(head.begin(), head.end(), position) ? 1 : 0;
      }
    }
  }
  return result;
}

void print_accuracy(const std::vector<AccuracyRow>& rows, const std::string& title) {
  fmt::print("{}\n", title);
  fmt::print("{:>5} {:>9} {:>9} {:>12} {:>12} {:>14} {:>14} {:>13}\n", "W", "l_a", "l_p",
             "query mean", "query min", "context mean", "context min", "needles kept");
  for (const AccuracyRow& row : rows) {
    const std::string anchor = fmt::format("n/{}={}", row.anchor_divisor, row.anchor_len);
    const std::string passing = row.passing_divisor == 0
                                    ? std::string("whole")
                                    : fmt::format("n/{}={}", row.passing_divisor, row.passing_len);
    fmt::print("{:>5} {:>9} {:>9} {:>12.6f} {:>12.6f} {:>14.6f} {:>14.6f} {:>8}/{:<4}\n", row.world,
               anchor, passing, row.query_recall_mean, row.query_recall_min,
               row.context_recall_mean, row.context_recall_min, row.needles_kept, row.needle_pairs);
  }
  fmt::print(
      "recall = exp(LSE_approx - LSE_dense) per query head and row (mean, min); query rows attend "
      "exactly in Spava, context rows = after the anchor; needles kept = (needle, KV head) pairs "
      "in passed blocks; 'whole': every block passed (must recall 1); n = context tokens\n");
}

std::string accuracy_json(const std::vector<AccuracyRow>& rows, const std::string& title) {
  nlohmann::json document;
  document["title"] = title;
  document["rows"] = nlohmann::json::array();
  for (const AccuracyRow& row : rows) {
    document["rows"].push_back({{"world", row.world},
                                {"anchor_divisor", row.anchor_divisor},
                                {"passing_divisor", row.passing_divisor},
                                {"anchor_len", row.anchor_len},
                                {"passing_len", row.passing_len},
                                {"query_recall_mean", row.query_recall_mean},
                                {"query_recall_min", row.query_recall_min},
                                {"context_recall_mean", row.context_recall_mean},
                                {"context_recall_min", row.context_recall_min},
                                {"needles_kept", row.needles_kept},
                                {"needle_pairs", row.needle_pairs}});
  }
  return document.dump(2);
}

}  // namespace mmsparse::dist_bench
