#pragma once
// How a scope scores a candidate against dense: over a stratified sample of its query rows on the
// CPU reference (an estimate with a standard error), or over every query row on a device
// (AllRowsScorer: the candidate's plan built there by prepare_pattern and run by the engine, as
// `bench` runs it; no sampling error).

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "mmsparse/attention.h"
#include "mmsparse/device.h"
#include "mmsparse/layout.h"
#include "mmsparse/patterns.h"
#include "mmsparse/tensor.h"

namespace mmsparse::detail {

struct Accuracy {
  double recall = 0.0;
  // Standard error of `recall` as an estimate of the mean over every scored-for row; 0 when every
  // row was scored.
  double recall_se = 0.0;
  double output_error = 0.0;
};

// A scored row of a stratified sample: the query rows it stands for (its block's size; 1 for a
// row of a census stratum) and its variance group: consecutive blocks are paired (collapsed strata,
// one row per block), an odd last block joins the pair before it; -1: a census row, no variance.
struct RowWeight {
  double weight = 1.0;
  int64_t group = -1;
};

struct WeightedMean {
  double mean = 0.0;
  double standard_error = 0.0;
};
// The weighted mean of `values` [rows] over the rows they stand for, with the collapsed-strata
// standard error: per group of m blocks, m/(m-1) Σ (W_h y_h - mean of the group's W y)², summed
// and divided by (Σ W)².
WeightedMean weighted_mean(std::span<const double> values, std::span<const RowWeight> weights);

// One scope's q, k, v on a device, its dense reference over every scored row, and the
// candidates' outputs compared with it. On a CUDA device the tensors are bf16 copies (the engine
// runs 16-bit inputs, as `bench` does); on the CPU, fp32 (the reference backend).
//
// Restricted scopes (a cross-modality pair): only pairs with keys where `key_in_scope` is true
// count. Plans prepared on a device cannot be masked afterwards, so the scored run takes a V
// whose first column is the key indicator and whose other columns are V's, zero outside the
// scope's keys: its output's first column is then each row's share of softmax mass on the scope's
// keys, w = Σ_{j in scope} p_j, which turns the run's LSE into the restricted one (LSE + log w),
// and its other columns divided by w are the restricted output. The output error of a restricted
// scope is therefore measured over head_dim - 1 columns.
class AllRowsScorer {
 public:
  // q, k, v: the scope's tokens, [1, tokens, 1, head_dim] fp32 host tensors. query_rows: the rows
  // to score (ascending scope positions). key_in_scope: [tokens], empty for every key. Converts
  // on the host only: the device is first touched by set_reference().
  AllRowsScorer(Device device, const Tensor& q, const Tensor& k, const Tensor& v,
                std::vector<int64_t> query_rows, std::vector<bool> key_in_scope, float scale);

  // Copies the inputs to the device, runs dense there and keeps its outputs: the reference. Rows
  // whose restricted dense mass is 0 (no key of the scope) are dropped from the scored rows.
  void set_reference(const PlanShape& shape, const ModalityLayout& layout);
  // The candidate's plan built on the device (prepare_pattern from the device q and k); empty
  // when the pattern cannot be built on this scope.
  std::optional<PreparedPlan> prepare(const PatternSpec& spec, const PlanShape& shape,
                                      const ModalityLayout& layout) const;
  // Runs the candidate on the device and reads its outputs back (the device's part of a score).
  void run(const PreparedPlan& prepared);
  // The last run() compared with the reference over every scored row (host work only).
  Accuracy compare() const;
  bool has_rows() const { return !rows_.empty(); }
  // The inputs on the device (after set_reference), for a cost model to time plans on: V is the
  // scored V (restricted scopes: with the indicator column), which changes no timing.
  TensorView q() const { return q_.view(); }
  TensorView k() const { return k_.view(); }
  TensorView v() const { return v_.view(); }

 private:
  struct Buffer {
    Tensor host;                         // CPU device: the data; CUDA: its bf16 host copy
    std::optional<DeviceTensor> device;  // CUDA only
    TensorView view() const { return device ? device->view() : host.view(); }
  };
  // Row `i` of the scored rows from the last run: its restricted LSE, and its restricted output
  // columns into `columns` [head_dim - first_column()].
  float row_outputs(std::size_t i, float* columns) const;
  int64_t first_column() const { return restricted_ ? 1 : 0; }

  Device device_;
  float scale_;
  bool restricted_;
  int64_t tokens_, head_dim_;
  std::vector<int64_t> rows_;
  Buffer q_, k_, v_, out_, lse_;
  std::vector<float> dense_lse_;  // [rows]
  std::vector<float> dense_out_;  // [rows, head_dim - first_column()]
};

}  // namespace mmsparse::detail
