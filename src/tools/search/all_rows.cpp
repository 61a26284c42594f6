#include "tools/search/all_rows.h"

#include <algorithm>
#include <cmath>
#include <cstring>
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

namespace {

// Element `offset` of a contiguous fp32 or bf16 tensor, without load_float's per-call dispatch:
// the scorer reads every output of every candidate.
float element(const Tensor& tensor, int64_t offset) {
  if (tensor.dtype() == DType::kFloat32) return tensor.data_as<float>()[offset];
  constexpr int kBFloat16Shift = 16;  // bf16 is the top half of an fp32
  const uint32_t bits = static_cast<uint32_t>(tensor.data_as<uint16_t>()[offset]) << kBFloat16Shift;
  float value;
  std::memcpy(&value, &bits, sizeof value);
  return value;
}

}  // namespace

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
  // The engine runs 16-bit inputs (as `bench` does); the CPU reference fp32.
  const DType dtype = device_.type == DeviceType::kCPU ? DType::kFloat32 : DType::kBFloat16;
  q_.host = to_contiguous(q.view(), dtype);
  k_.host = to_contiguous(k.view(), dtype);
  if (restricted_) {
    // Column 0: the key indicator; the others: V on the scope's keys, 0 elsewhere.
    Tensor scored_v(DType::kFloat32, v.shape());
    const float* source = v.data_as<float>();
    float* target = scored_v.data_as<float>();
    for (int64_t key = 0; key < tokens_; ++key) {
      const float in_scope = key_in_scope[key] ? 1.0f : 0.0f;
      target[key * head_dim_] = in_scope;
      for (int64_t d = 1; d < head_dim_; ++d) {
        target[key * head_dim_ + d] = in_scope * source[key * head_dim_ + d];
      }
    }
    v_.host = to_contiguous(scored_v.view(), dtype);
  } else {
    v_.host = to_contiguous(v.view(), dtype);
  }
  out_.host = Tensor(dtype, q.shape());
  lse_.host = Tensor(DType::kFloat32, {1, 1, tokens_});  // fp32 on every device
}

std::optional<PreparedPlan> AllRowsScorer::prepare(const PatternSpec& spec, const PlanShape& shape,
                                                   const ModalityLayout& layout) const {
  const PatternInputs inputs{q_.view(), k_.view(), scale_};
  try {
    PreparedPlan prepared = prepare_pattern(spec, shape, &layout, device_, nullptr, &inputs);
    if (device_.type != DeviceType::kCPU) synchronize(device_);
    return prepared;
  } catch (const Error& error) {
    // As Scope::build: the pattern's parameters do not fit this scope. A failing device is no
    // property of the candidate.
    if (error.code() == ErrorCode::kBackendError) throw;
    return std::nullopt;
  }
}

void AllRowsScorer::run(const PreparedPlan& prepared) {
  AttentionOptions options;
  options.scale = scale_;
  attention_planned(prepared, q_.view(), k_.view(), v_.view(), out_.view(), lse_.view(), options);
  if (out_.device) {
    out_.device->copy_to_host(out_.host.view());
    lse_.device->copy_to_host(lse_.host.view());
  }
}

float AllRowsScorer::row_outputs(std::size_t i, float* columns) const {
  const int64_t row = rows_[i];
  const float lse = lse_.host.data_as<float>()[row];
  // The restricted share of the row's mass (1 without a restriction).
  const double share = restricted_ ? element(out_.host, row * head_dim_) : 1.0;
  const bool has_mass = std::isfinite(lse) && share > 0.0;
  for (int64_t c = 0; c < head_dim_ - first_column(); ++c) {
    const double value = element(out_.host, row * head_dim_ + first_column() + c);
    columns[c] = has_mass ? static_cast<float>(value / share) : 0.0f;
  }
  return has_mass ? static_cast<float>(lse + std::log(share))
                  : -std::numeric_limits<float>::infinity();
}

void AllRowsScorer::set_reference(const PlanShape& shape, const ModalityLayout& layout) {
  if (device_.type != DeviceType::kCPU) {
    for (Buffer* buffer : {&q_, &k_, &v_}) {
      buffer->device = DeviceTensor::from_host(buffer->host.view(), device_);
    }
    out_.device.emplace(out_.host.dtype(), out_.host.shape(), device_);
    lse_.device.emplace(DType::kFloat32, lse_.host.shape(), device_);
  }
  const std::optional<PreparedPlan> dense = prepare(PatternSpec{"dense", {}}, shape, layout);
  if (!dense) throw_invalid_argument("scope", "a scope dense attention can run on", "none");
  run(*dense);
  const int64_t columns = head_dim_ - first_column();
  std::vector<float> row(columns);
  std::vector<int64_t> kept_rows;
  for (std::size_t i = 0; i < rows_.size(); ++i) {
    const float lse = row_outputs(i, row.data());
    if (!std::isfinite(lse)) continue;  // no key of the scope: nothing to recall
    dense_lse_.push_back(lse);
    dense_out_.insert(dense_out_.end(), row.begin(), row.end());
    kept_rows.push_back(rows_[i]);
  }
  rows_ = std::move(kept_rows);
}

Accuracy AllRowsScorer::compare() const {
  const int64_t columns = head_dim_ - first_column();
  std::vector<float> row(columns);
  double recall_sum = 0.0, error_squares = 0.0, dense_squares = 0.0;
  for (std::size_t i = 0; i < rows_.size(); ++i) {
    const float lse = row_outputs(i, row.data());
    recall_sum += std::isfinite(lse) ? std::exp(static_cast<double>(lse) - dense_lse_[i]) : 0.0;
    const float* dense = dense_out_.data() + i * columns;
    for (int64_t c = 0; c < columns; ++c) {
      const double difference = static_cast<double>(row[c]) - dense[c];
      error_squares += difference * difference;
      dense_squares += static_cast<double>(dense[c]) * dense[c];
    }
  }
  const auto rows = static_cast<double>(std::max<std::size_t>(1, rows_.size()));
  return {recall_sum / rows, 0.0,
          dense_squares > 0.0 ? std::sqrt(error_squares / dense_squares) : 0.0};
}

}  // namespace mmsparse::detail
