#include "tools/search/all_rows.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <utility>

#include "mmsparse/status.h"

namespace mmsparse::detail {

WeightedMean weighted_mean(std::span<const double> values, std::span<const RowWeight> weights) {
  double total = 0.0, weight_sum = 0.0;
  std::map<int64_t, std::vector<double>> groups;  // group -> W_h y_h of its blocks
  for (std::size_t i = 0; i < values.size(); ++i) {
    total += weights[i].weight * values[i];
    weight_sum += weights[i].weight;
    if (weights[i].group >= 0) groups[weights[i].group].push_back(weights[i].weight * values[i]);
  }
  if (!(weight_sum > 0.0)) return {};
  double variance = 0.0;  // of the estimated total
  for (const auto& [group, totals] : groups) {
    const auto blocks = static_cast<double>(totals.size());
    if (totals.size() < 2) continue;  // a lone block has no partner to compare with
    double group_mean = 0.0;
    for (double block_total : totals) group_mean += block_total / blocks;
    double squares = 0.0;
    for (double block_total : totals)
      squares += (block_total - group_mean) * (block_total - group_mean);
    variance += blocks / (blocks - 1.0) * squares;
  }
  return {total / weight_sum, std::sqrt(variance) / weight_sum};
}

AllRowsScorer::AllRowsScorer(Device device, const Tensor& q, const Tensor& k, const Tensor& v,
                             std::vector<int64_t> query_rows, std::vector<bool> key_in_scope,
                             float scale)
    : device_(device),
      scale_(scale),
      restricted_(!key_in_scope.empty()),
      tokens_(q.shape()[1]),
      head_dim_(q.shape()[3]),
      rows_(std::move(query_rows)) {
  if (restricted_ && head_dim_ < 2) {
    throw_invalid_argument("head_dim", ">= 2 for a restricted scope scored on a device",
                           std::to_string(head_dim_));
  }
  Tensor scored_v = v;
  if (restricted_) {
    // Column 0: the key indicator; the others: V on the scope's keys, 0 elsewhere.
    scored_v = Tensor(DType::kFloat32, v.shape());
    const float* source = v.data_as<float>();
    float* target = scored_v.data_as<float>();
    for (int64_t key = 0; key < tokens_; ++key) {
      const float in_scope = key_in_scope[key] ? 1.0f : 0.0f;
      target[key * head_dim_] = in_scope;
      for (int64_t d = 1; d < head_dim_; ++d) {
        target[key * head_dim_ + d] = in_scope * source[key * head_dim_ + d];
      }
    }
  }
  q_ = upload(q);
  k_ = upload(k);
  v_ = upload(scored_v);
  out_ = upload(Tensor(DType::kFloat32, q.shape()));
  lse_.host = Tensor(DType::kFloat32, {1, 1, tokens_});  // fp32 on every device
  if (device_.type != DeviceType::kCPU) {
    lse_.device.emplace(DType::kFloat32, std::vector<int64_t>{1, 1, tokens_}, device_);
  }
}

AllRowsScorer::Buffer AllRowsScorer::upload(const Tensor& host) const {
  Buffer buffer;
  if (device_.type == DeviceType::kCPU) {
    buffer.host = to_contiguous(host.view(), DType::kFloat32);
    return buffer;
  }
  // The engine runs 16-bit inputs; `host` then receives read-backs in the same dtype.
  buffer.host = to_contiguous(host.view(), DType::kBFloat16);
  buffer.device = DeviceTensor::from_host(buffer.host.view(), device_);
  return buffer;
}

std::optional<PreparedPlan> AllRowsScorer::prepare(const PatternSpec& spec, const PlanShape& shape,
                                                   const ModalityLayout& layout) const {
  try {
    return build(spec, shape, layout);
  } catch (const Error& error) {
    // As Scope::build: the pattern's parameters do not fit this scope. A failing device is no
    // property of the candidate.
    if (error.code() == ErrorCode::kBackendError) throw;
    return std::nullopt;
  }
}

PreparedPlan AllRowsScorer::build(const PatternSpec& spec, const PlanShape& shape,
                                  const ModalityLayout& layout) const {
  const PatternInputs inputs{q_.view(), k_.view(), scale_};
  PreparedPlan prepared = prepare_pattern(spec, shape, &layout, device_, nullptr, &inputs);
  if (device_.type != DeviceType::kCPU) synchronize(device_);
  return prepared;
}

AllRowsScorer::RowOutputs AllRowsScorer::run(const PreparedPlan& prepared) {
  AttentionOptions options;
  options.scale = scale_;
  attention_planned(prepared, q_.view(), k_.view(), v_.view(), out_.view(), lse_.view(), options);
  if (out_.device) {
    out_.device->copy_to_host(out_.host.view());
    lse_.device->copy_to_host(lse_.host.view());
  }
  const TensorView out = out_.host.view();
  const float* lse = lse_.host.data_as<float>();
  const int64_t first_column = restricted_ ? 1 : 0;
  const int64_t columns = head_dim_ - first_column;
  RowOutputs outputs;
  outputs.lse.resize(rows_.size());
  outputs.out.resize(rows_.size() * columns);
  for (std::size_t i = 0; i < rows_.size(); ++i) {
    const int64_t row = rows_[i];
    // The restricted share of the row's mass (1 without a restriction).
    const double share = restricted_ ? load_float(out, row * head_dim_) : 1.0;
    const bool has_mass = std::isfinite(lse[row]) && share > 0.0;
    outputs.lse[i] = has_mass ? static_cast<float>(lse[row] + std::log(share))
                              : -std::numeric_limits<float>::infinity();
    for (int64_t c = 0; c < columns; ++c) {
      const double value = load_float(out, row * head_dim_ + first_column + c);
      outputs.out[i * columns + c] = has_mass ? static_cast<float>(value / share) : 0.0f;
    }
  }
  return outputs;
}

void AllRowsScorer::set_reference(const PlanShape& shape, const ModalityLayout& layout) {
  RowOutputs outputs = run(build(PatternSpec{"dense", {}}, shape, layout));
  const int64_t columns = head_dim_ - (restricted_ ? 1 : 0);
  std::vector<int64_t> kept_rows;
  for (std::size_t i = 0; i < rows_.size(); ++i) {
    if (!std::isfinite(outputs.lse[i])) continue;  // no key of the scope: nothing to recall
    dense_.lse.push_back(outputs.lse[i]);
    dense_.out.insert(dense_.out.end(), outputs.out.begin() + i * columns,
                      outputs.out.begin() + (i + 1) * columns);
    kept_rows.push_back(rows_[i]);
  }
  rows_ = std::move(kept_rows);
}

Accuracy AllRowsScorer::score(const PreparedPlan& prepared) {
  const RowOutputs outputs = run(prepared);
  const int64_t columns = head_dim_ - (restricted_ ? 1 : 0);
  double recall_sum = 0.0, error_squares = 0.0, dense_squares = 0.0;
  for (std::size_t i = 0; i < rows_.size(); ++i) {
    const float lse = outputs.lse[i];
    recall_sum += std::isfinite(lse) ? std::exp(static_cast<double>(lse) - dense_.lse[i]) : 0.0;
    for (int64_t c = 0; c < columns; ++c) {
      const double got = outputs.out[i * columns + c], want = dense_.out[i * columns + c];
      error_squares += (got - want) * (got - want);
      dense_squares += want * want;
    }
  }
  const auto rows = static_cast<double>(std::max<std::size_t>(1, rows_.size()));
  return {recall_sum / rows, 0.0,
          dense_squares > 0.0 ? std::sqrt(error_squares / dense_squares) : 0.0};
}

}  // namespace mmsparse::detail
