#include "tools/search/scope.h"

#include <algorithm>
#include <cmath>
#include <random>
#include <utility>

#include "core/plan_coverage.h"
#include "mmsparse/attention.h"
#include "mmsparse/tools/metrics.h"
#include "mmsparse/status.h"

namespace mmsparse::detail {
namespace {

bool contains(ModalitySet set, Modality modality) { return (set & modality_bit(modality)) != 0; }

// Rows [seq_len, head_dim] of one head of a [1, seq_len, heads, head_dim] view, as fp32.
Tensor head_rows(const TensorView& view, int64_t head) {
  const int64_t seq_len = view.shape[1], head_dim = view.shape[3];
  Tensor rows(DType::kFloat32, {seq_len, head_dim});
  float* out = rows.data_as<float>();
  for (int64_t position = 0; position < seq_len; ++position) {
    const int64_t row = position * view.strides[1] + head * view.strides[2];
    for (int64_t d = 0; d < head_dim; ++d) {
      out[position * head_dim + d] = load_float(view, row + d * view.strides[3]);
    }
  }
  return rows;
}

// The rows `positions` of a [seq_len, head_dim] tensor as a [1, positions, 1, head_dim] problem.
Tensor gather_rows(const Tensor& rows, const std::vector<int64_t>& positions) {
  const int64_t head_dim = rows.shape()[1];
  Tensor gathered(DType::kFloat32, {1, static_cast<int64_t>(positions.size()), 1, head_dim});
  const float* source = rows.data_as<float>();
  float* target = gathered.data_as<float>();
  for (std::size_t i = 0; i < positions.size(); ++i) {
    std::copy_n(source + positions[i] * head_dim, head_dim, target + i * head_dim);
  }
  return gathered;
}

// The layout of the kept tokens, in order: their modalities and the grids of their media.
ModalityLayout kept_layout(const ModalityLayout& layout, const std::vector<uint8_t>& types,
                           const std::vector<int64_t>& kept) {
  std::vector<uint8_t> kept_types(kept.size());
  for (std::size_t i = 0; i < kept.size(); ++i) kept_types[i] = types[kept[i]];
  std::vector<Grid> image_grids, video_grids;
  std::vector<bool> media_kept(layout.media().size(), false);
  const std::vector<int32_t> token_media = layout.token_media();
  for (int64_t position : kept) {
    if (token_media[position] >= 0) media_kept[token_media[position]] = true;
  }
  for (std::size_t m = 0; m < layout.media().size(); ++m) {
    if (!media_kept[m]) continue;
    const Media& media = layout.media()[m];
    (media.modality == Modality::kImage ? image_grids : video_grids).push_back(media.grid);
  }
  return ModalityLayout::from_token_types(kept_types, image_grids, video_grids);
}

}  // namespace

HeadTensors head_tensors(const TensorView& q, const TensorView& k, const TensorView& v,
                         int64_t q_head) {
  const int64_t kv_head = q_head / (q.shape[2] / k.shape[2]);
  return {head_rows(q, q_head), head_rows(k, kv_head), head_rows(v, kv_head)};
}

TensorView as_one_head(const Tensor& rows) {  // rows [n, head_dim]
  TensorView view = rows.view();
  view.ndim = 4;
  view.shape = {1, rows.shape()[0], 1, rows.shape()[1]};
  view.strides = {rows.shape()[0] * rows.shape()[1], rows.shape()[1], rows.shape()[1], 1};
  return view;
}

Scope::Scope(std::string name, const HeadTensors& head, const ModalityLayout& layout,
             ModalitySet kept, ModalitySet query, ModalitySet keys, int64_t tile_rows,
             const SearchOptions& options, std::recursive_mutex* device_mutex)
    : name_(std::move(name)), tile_rows_(tile_rows), scale_(options.scale),
      num_threads_(options.num_threads), device_mutex_(device_mutex) {
  const std::vector<uint8_t> types = layout.token_types();
  std::vector<int64_t> kept_positions;
  std::vector<int64_t> scope_index(types.size(), -1);  // original position -> scope position
  for (std::size_t position = 0; position < types.size(); ++position) {
    if (!contains(kept, static_cast<Modality>(types[position]))) continue;
    scope_index[position] = static_cast<int64_t>(kept_positions.size());
    kept_positions.push_back(static_cast<int64_t>(position));
  }
  uint16_t pairs = 0;
  for (int query_code = 0; query_code < kNumModalities; ++query_code) {
    for (int key_code = 0; key_code < kNumModalities; ++key_code) {
      const auto query_modality = static_cast<Modality>(query_code);
      const auto key_modality = static_cast<Modality>(key_code);
      if (contains(query, query_modality) && contains(keys, key_modality)) {
        pairs |= modality_pair_bit(query_modality, key_modality);
      }
    }
  }
  ModalitySet present = 0;
  for (uint8_t type : types) present |= modality_bit(static_cast<Modality>(type));
  const bool all_tokens = kept_positions.size() == types.size();
  is_full_ = all_tokens && (query & present) == present && (keys & present) == present;
  modality_pairs_ = is_full_ ? kAllModalityPairs : pairs;
  layout_ = all_tokens ? layout : kept_layout(layout, types, kept_positions);
  q_ = gather_rows(head.q, kept_positions);
  k_ = gather_rows(head.k, kept_positions);
  v_ = gather_rows(head.v, kept_positions);
  const int64_t tokens = static_cast<int64_t>(kept_positions.size());
  const int64_t head_dim = head.q.shape()[1];
  out_ = Tensor(DType::kFloat32, {1, tokens, 1, head_dim});
  lse_ = Tensor(DType::kFloat32, {1, 1, tokens});

  // The query rows that see a key of the scored modalities (causally: one at or before them), and
  // which of them end a query segment.
  std::vector<bool> key_in_scope(tokens);
  int64_t first_key = tokens;
  for (int64_t i = 0; i < tokens; ++i) {
    key_in_scope[i] = contains(keys, static_cast<Modality>(types[kept_positions[i]]));
    if (key_in_scope[i]) first_key = std::min(first_key, i);
  }
  std::vector<bool> tail(tokens, false);
  for (const Segment& segment : layout.segments()) {
    if (!contains(query, segment.modality)) continue;
    for (int64_t position = std::max(segment.begin, segment.end - options.segment_tail_rows);
         position < segment.end; ++position) {
      if (scope_index[position] >= 0) tail[scope_index[position]] = true;
    }
  }
  std::vector<int64_t> query_rows;
  std::vector<bool> query_tail;
  for (int64_t i = first_key; i < tokens; ++i) {
    if (!contains(query, static_cast<Modality>(types[kept_positions[i]]))) continue;
    query_rows.push_back(i);
    query_tail.push_back(tail[i]);
  }
  if (query_rows.empty()) return;
  device_work_ = options.score_device && options.score_device->type != DeviceType::kCPU;
  if (options.score_device) {
    const bool restricted = std::find(key_in_scope.begin(), key_in_scope.end(), false) !=
                            key_in_scope.end();
    all_rows_ = std::make_unique<AllRowsScorer>(
        *options.score_device, q_, k_, v_, std::move(query_rows),
        restricted ? std::move(key_in_scope) : std::vector<bool>{}, scale_);
    const std::optional<std::lock_guard<std::recursive_mutex>> lock = hold();
    all_rows_->set_reference(shape(), layout_);
    return;
  }
  sample(query_rows, query_tail, options);

  // The dense reference; rows that see no key of the scored pairs have nothing to recall.
  attend(build_plan(PatternSpec{"dense", {}}, shape()));
  std::vector<int64_t> scored_rows;
  std::vector<RowWeight> scored_weights;
  for (std::size_t i = 0; i < rows_.size(); ++i) {
    const float lse = lse_.data_as<float>()[rows_[i]];
    if (!std::isfinite(lse)) continue;
    scored_rows.push_back(rows_[i]);
    scored_weights.push_back(weights_[i]);
    dense_lse_.push_back(lse);
    const float* out = out_.data_as<float>() + rows_[i] * head_dim;
    dense_out_.insert(dense_out_.end(), out, out + head_dim);
  }
  rows_ = std::move(scored_rows);
  weights_ = std::move(scored_weights);
}

void Scope::sample(const std::vector<int64_t>& query_rows, const std::vector<bool>& tail,
                   const SearchOptions& options) {
  std::vector<std::pair<int64_t, RowWeight>> scored;
  std::vector<int64_t> rest;
  for (std::size_t i = 0; i < query_rows.size(); ++i) {
    if (tail[i]) {
      scored.push_back({query_rows[i], RowWeight{}});  // a census stratum: every tail row
    } else {
      rest.push_back(query_rows[i]);
    }
  }
  const auto population = static_cast<int64_t>(rest.size());
  const int64_t blocks = std::min(options.sample_rows, population);
  const int64_t pairs = std::max<int64_t>(1, blocks / 2);
  std::mt19937_64 generator(options.sample_seed);
  for (int64_t b = 0; b < blocks; ++b) {
    const int64_t begin = b * population / blocks, end = (b + 1) * population / blocks;
    std::uniform_int_distribution<int64_t> draw(begin, end - 1);
    // A block of one row is a census of it; an odd last block joins the pair before it.
    const int64_t group = end - begin == 1 ? -1 : std::min(b / 2, pairs - 1);
    scored.push_back({rest[draw(generator)], RowWeight{static_cast<double>(end - begin), group}});
  }
  std::sort(scored.begin(), scored.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  for (const auto& [row, weight] : scored) {
    rows_.push_back(row);
    weights_.push_back(weight);
  }
}

std::optional<std::lock_guard<std::recursive_mutex>> Scope::hold() const {
  // Only a GPU's work can disturb a timing; the CPU reference scores heads in parallel.
  if (device_mutex_ == nullptr || !device_work_) return std::nullopt;
  return std::optional<std::lock_guard<std::recursive_mutex>>(std::in_place, *device_mutex_);
}

PlanShape Scope::shape() const {
  const int64_t tokens = layout_.length();
  return {1, 1, tokens, tokens, tile_rows_};
}

bool Scope::has_rows() const { return all_rows_ ? all_rows_->has_rows() : !rows_.empty(); }

std::optional<BuiltCandidate> Scope::build(const PatternSpec& spec) const {
  if (all_rows_) {
    const std::optional<std::lock_guard<std::recursive_mutex>> lock = hold();
    std::optional<PreparedPlan> prepared = all_rows_->prepare(spec, shape(), layout_);
    if (!prepared) return std::nullopt;
    return BuiltCandidate{std::nullopt, std::move(*prepared)};
  }
  const PatternInputs inputs{q_.view(), k_.view(), scale_};
  try {
    return BuiltCandidate{build_plan(spec, shape(), &layout_, &inputs), std::nullopt};
  } catch (const Error&) {
    // The pattern's parameters do not fit this scope (e.g. a grid stride longer than a short
    // text segment): the candidate is not applicable here, which the caller counts.
    return std::nullopt;
  }
}

double Scope::cost(const BuiltCandidate& candidate, CostModel& model, double limit) {
  if (candidate.prepared) {
    const std::optional<std::lock_guard<std::recursive_mutex>> lock = hold();
    return std::isfinite(limit)
               ? model.cost_prepared_within(*candidate.prepared, cost_inputs(model), limit)
               : model.cost_prepared(*candidate.prepared, cost_inputs(model));
  }
  return model.cost(*candidate.plan, cost_inputs(model));
}

double Scope::index_cost(const PatternSpec& spec, CostModel& model) {
  return model.index_cost(spec, shape(), layout_, scale_, cost_inputs(model));
}

const CostInputs& Scope::cost_inputs(CostModel& model) {
  // Scored on a device, the model times plans on the scorer's copies (no second upload).
  if (!cost_inputs_ && all_rows_) {
    cost_inputs_ = model.prepare(all_rows_->q(), all_rows_->k(), all_rows_->v());
  }
  if (!cost_inputs_) cost_inputs_ = model.prepare(q_.view(), k_.view(), v_.view());
  return *cost_inputs_;
}

Plan Scope::sampled_rows_plan(const Plan& plan) const {
  // Pass by pass: a row's keys in every pass stay in its one-row tile of that pass.
  std::vector<Plan> passes;
  for (int64_t p = 0; p < plan.num_passes(); ++p) {
    const Plan& pass = plan.pass(p);
    const std::vector<int64_t> tile_of = tile_of_rows(pass, 0);
    PlanBuilder builder(pass.shape);
    builder.begin_head();
    for (int64_t row : rows_) {
      const int64_t t = tile_of[row];
      if (t < 0) continue;  // the pass computes nothing for this row
      MaskPolicy mask = pass.masks[pass.tile_masks[t]];
      mask.modality_pairs &= modality_pairs_;
      builder.begin_tile(row, row + 1, mask);
      if (pass.tile_key_order(t) != kKeysInPlace) {
        // In place over the original runs: the same pairs, and a one-row tile may take any mask.
        detail::for_each_key_order_run(
            pass, t, [&](int64_t begin, int64_t end) { builder.add_span(begin, end); });
        continue;
      }
      for (int64_t s = pass.tile_span_offsets[t]; s < pass.tile_span_offsets[t + 1]; ++s) {
        builder.add_span(pass.spans[s].begin, pass.spans[s].end);
      }
      for (int64_t s = pass.tile_strided_offsets[t]; s < pass.tile_strided_offsets[t + 1]; ++s) {
        const StridedSpan& lattice = pass.strided_spans[s];
        builder.add_strided_span(lattice.begin, lattice.end, lattice.step);
      }
      for (int64_t c = pass.tile_column_offsets[t]; c < pass.tile_column_offsets[t + 1]; ++c) {
        builder.add_column(pass.columns[c]);
      }
    }
    builder.attach_layout(layout_);
    passes.push_back(builder.finish());
  }
  Plan sampled = std::move(passes.front());
  for (std::size_t p = 1; p < passes.size(); ++p) add_pass(sampled, std::move(passes[p]));
  return sampled;
}

void Scope::attend(const Plan& plan) {
  AttentionOptions options;
  options.scale = scale_;
  options.num_threads = num_threads_;
  attention_planned(sampled_rows_plan(plan), q_.view(), k_.view(), v_.view(), out_.view(),
                    lse_.view(), options);
}

Accuracy Scope::score(const BuiltCandidate& candidate) {
  if (all_rows_) {
    {
      const std::optional<std::lock_guard<std::recursive_mutex>> lock = hold();
      all_rows_->run(*candidate.prepared);
    }
    return all_rows_->compare();  // on the host, while other heads use the device
  }
  attend(*candidate.plan);
  const int64_t head_dim = q_.shape()[3];
  std::vector<double> recalls(rows_.size());
  double error_squares = 0.0, dense_squares = 0.0;
  for (std::size_t i = 0; i < rows_.size(); ++i) {
    const float lse = lse_.data_as<float>()[rows_[i]];
    recalls[i] = std::isfinite(lse) ? std::exp(static_cast<double>(lse) - dense_lse_[i]) : 0.0;
    const float* out = out_.data_as<float>() + rows_[i] * head_dim;
    const float* dense = dense_out_.data() + i * head_dim;
    for (int64_t d = 0; d < head_dim; ++d) {
      const double difference = static_cast<double>(out[d]) - dense[d];
      error_squares += weights_[i].weight * difference * difference;
      dense_squares += weights_[i].weight * static_cast<double>(dense[d]) * dense[d];
    }
  }
  const WeightedMean recall = weighted_mean(recalls, weights_);
  return {recall.mean, recall.standard_error,
          dense_squares > 0.0 ? std::sqrt(error_squares / dense_squares) : 0.0};
}

}  // namespace mmsparse::detail
