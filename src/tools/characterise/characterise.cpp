// BlindSight's prompt-level characterisation (Alg. 1), dataset aggregation (Alg. 2), the config
// they make, and the FLOPs a config saves (Table 8).

#include "mmsparse/tools/characterise.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <numeric>
#include <string>
#include <utility>

#include "methods/blindsight/blindsight.h"
#include "mmsparse/attention.h"
#include "mmsparse/device.h"
#include "mmsparse/status.h"
#include "mmsparse/tools/metrics.h"

namespace mmsparse {

namespace {

constexpr std::array<std::string_view, kHeadTypes> kHeadTypeNames = {"dense", "sink", "intra",
                                                                     "intra-sink"};
constexpr std::string_view kTemplatePrefix = "blindsight-";

std::size_t index_of(HeadType type) { return static_cast<std::size_t>(type); }

// The attention output and LSE of q over a plan: [1, seq, heads, dim] in q's dtype and
// [1, heads, seq] fp32, host tensors.
struct Output {
  Tensor out;
  Tensor lse;
};

// q, k, v where the attention runs: the host views, or copies on a CUDA device.
class Operands {
 public:
  Operands(const TensorView& q, const TensorView& k, const TensorView& v, Device device)
      : device_(device) {
    if (device.type == DeviceType::kCPU) {
      views_ = {q, k, v};
      return;
    }
    for (const TensorView* host : {&q, &k, &v}) {
      copies_.push_back(DeviceTensor::from_host(*host, device));
      views_.push_back(copies_.back().view());
    }
  }
  const TensorView& q() const { return views_[0]; }
  const TensorView& k() const { return views_[1]; }
  const TensorView& v() const { return views_[2]; }
  Device device() const { return device_; }

 private:
  Device device_;
  std::vector<DeviceTensor> copies_;
  std::vector<TensorView> views_;
};

Output attend(const PatternSpec& spec, const PlanShape& shape, const ModalityLayout& layout,
              const Operands& operands, int num_threads) {
  const TensorView& q = operands.q();
  Output result{Tensor(q.dtype, {1, q.shape[1], q.shape[2], q.shape[3]}),
                Tensor(DType::kFloat32, {1, q.shape[2], q.shape[1]})};
  AttentionOptions options;
  options.num_threads = num_threads;
  if (operands.device().type == DeviceType::kCPU) {
    attention_planned(build_plan(spec, shape, &layout), q, operands.k(), operands.v(),
                      result.out.view(), result.lse.view(), options);
    return result;
  }
  const PreparedPlan prepared = prepare_pattern(spec, shape, &layout, operands.device());
  DeviceTensor out(result.out.dtype(), result.out.shape(), operands.device());
  DeviceTensor lse(DType::kFloat32, result.lse.shape(), operands.device());
  attention_planned(prepared, q, operands.k(), operands.v(), out.view(), lse.view(), options);
  out.copy_to_host(result.out.view());
  lse.copy_to_host(result.lse.view());
  return result;
}

}  // namespace

std::string_view head_type_name(HeadType type) { return kHeadTypeNames.at(index_of(type)); }

PatternSpec head_type_spec(HeadType type, const ImageStyle& style) {
  if (type == HeadType::kDense && !style.bidirectional) return PatternSpec{"dense", {}};
  PatternSpec spec{std::string(kTemplatePrefix) + std::string(head_type_name(type)),
                   {{"bidirectional", style.bidirectional ? 1 : 0}}};
  if (type == HeadType::kSink || type == HeadType::kIntraSink) {
    spec.params["sink_percent"] = style.sink_percent;
    spec.lists["sinks"] = style.sink_offsets;
  }
  return resolve_pattern(spec);
}

bool head_type_of(const PatternSpec& spec, HeadType& type) {
  if (spec.name == "dense") {
    type = HeadType::kDense;
    return true;
  }
  for (HeadType candidate : kAllHeadTypes) {
    if (spec.name == std::string(kTemplatePrefix) + std::string(head_type_name(candidate))) {
      type = candidate;
      return true;
    }
  }
  return false;
}

double AlphaSchedule::at(int64_t layer, int64_t layers) const {
  if (layers <= 0) return first;
  return first + (last - first) * static_cast<double>(layer) / static_cast<double>(layers);
}

AlphaSchedule parse_alpha_schedule(const std::string& text, const std::string& argument) {
  const auto number = [&](const std::string& part) {
    char* end = nullptr;
    const double value = std::strtod(part.c_str(), &end);
    if (part.empty() || end != part.c_str() + part.size() || !(value > 0.0) ||
        !std::isfinite(value)) {
      throw_invalid_argument(argument,
                             "an NMSE threshold > 0 such as 0.1, or first:last such as "
                             "0.005:0.195 (linear in the layer)",
                             "'" + text + "'");
    }
    return value;
  };
  const auto colon = text.find(':');
  if (colon == std::string::npos) {
    const double alpha = number(text);
    return {alpha, alpha};
  }
  return {number(text.substr(0, colon)), number(text.substr(colon + 1))};
}

std::vector<HeadCharacterisation> characterise_layer(const TensorView& q, const TensorView& k,
                                                     const TensorView& v,
                                                     const ModalityLayout& layout,
                                                     const ImageStyle& style, double alpha,
                                                     int num_threads, Device device) {
  if (q.ndim != 4 || q.shape[0] != 1) {
    throw_invalid_argument("q", "[1, seq, q_heads, head_dim] (one prompt)",
                           std::to_string(q.ndim) + " dimensions");
  }
  const int64_t seq = q.shape[1];
  const int64_t heads = q.shape[2];
  if (layout.length() != seq) {
    throw_invalid_argument("layout", "length " + std::to_string(seq) + " (q's sequence)",
                           std::to_string(layout.length()));
  }
  const PlanShape shape{.heads = heads, .q_len = seq, .kv_len = seq};
  const Operands operands(q, k, v, device);
  std::array<Output, kHeadTypes> outputs;
  std::array<int64_t, kHeadTypes> pairs{};
  for (HeadType type : kAllHeadTypes) {
    const PatternSpec spec = head_type_spec(type, style);
    outputs[index_of(type)] = attend(spec, shape, layout, operands, num_threads);
    // Every head slot has the same plan: count one.
    pairs[index_of(type)] =
        count_plan_pairs(build_plan(spec, {.q_len = seq, .kv_len = seq}, &layout), 0);
  }
  // Alg. 1 tries the templates cheapest first (the paper's order is by theoretical FLOPs).
  std::array<HeadType, kHeadTypes - 1> sparse = {HeadType::kSink, HeadType::kIntra,
                                                 HeadType::kIntraSink};
  std::stable_sort(sparse.begin(), sparse.end(),
                   [&](HeadType a, HeadType b) { return pairs[index_of(a)] < pairs[index_of(b)]; });
  const Output& dense = outputs[index_of(HeadType::kDense)];
  std::vector<HeadCharacterisation> result(static_cast<std::size_t>(heads));
  for (int64_t head = 0; head < heads; ++head) {
    HeadCharacterisation& head_result = result[head];
    head_result.pairs = pairs;
    for (HeadType type : sparse) {
      const Output& masked = outputs[index_of(type)];
      head_result.nmse[index_of(type)] = compare_head(masked.out.view(), masked.lse.view(),
                                                      dense.out.view(), dense.lse.view(), 0, head)
                                             .nmse;
    }
    for (HeadType type : sparse) {
      if (head_result.nmse[index_of(type)] < alpha) {
        head_result.type = type;
        break;
      }
    }
  }
  return result;
}

HeadType aggregate_head(const std::array<double, kHeadTypes>& fractions,
                        const AggregationThresholds& thresholds) {
  if (fractions[index_of(HeadType::kDense)] > thresholds.dense) return HeadType::kDense;
  if (fractions[index_of(HeadType::kSink)] > thresholds.sink) return HeadType::kSink;
  if (fractions[index_of(HeadType::kIntra)] > thresholds.intra) return HeadType::kIntra;
  return HeadType::kIntraSink;
}

void HeadTypeTally::add(int64_t layer, int64_t head, HeadType type) {
  ++counts_[layer][head][index_of(type)];
}

std::array<double, kHeadTypes> HeadTypeTally::fractions(int64_t layer, int64_t head) const {
  const std::array<int64_t, kHeadTypes>* counts = nullptr;
  if (const auto layer_counts = counts_.find(layer); layer_counts != counts_.end()) {
    const auto found = layer_counts->second.find(head);
    if (found != layer_counts->second.end()) counts = &found->second;
  }
  if (counts == nullptr) {
    throw_invalid_argument("head", "a (layer, head) with characterised prompts",
                           "layer " + std::to_string(layer) + " head " + std::to_string(head));
  }
  const int64_t total = std::accumulate(counts->begin(), counts->end(), int64_t{0});
  std::array<double, kHeadTypes> result{};
  for (std::size_t i = 0; i < result.size(); ++i) {
    result[i] = static_cast<double>((*counts)[i]) / static_cast<double>(total);
  }
  return result;
}

std::map<int64_t, std::map<int64_t, HeadType>> HeadTypeTally::aggregate(
    const AggregationThresholds& thresholds) const {
  std::map<int64_t, std::map<int64_t, HeadType>> types;
  for (const auto& [layer, heads] : counts_) {
    for (const auto& [head, counts] : heads) {
      types[layer][head] = aggregate_head(fractions(layer, head), thresholds);
    }
  }
  return types;
}

namespace {

// A config's head: its template, with permute set as `key_orders` asks (ConfigKeyOrders). On a
// 28-head layer (H200, docs/blindsight.md) a causal config's per-call build took 1.2-14 ms in place
// on the GPU against 9-90 ms through key orders built on the host, at 36K-300K tokens, for 1.5-4%
// of the attention; a bidirectional style's in-place image tiles run 4-5x slower than through the
// order.
PatternSpec config_head_spec(HeadType type, const ImageStyle& style, ConfigKeyOrders key_orders) {
  PatternSpec spec = head_type_spec(type, style);
  const auto permute = spec.params.find(detail::kPermuteParam);
  if (permute == spec.params.end()) return spec;
  const bool ordered = key_orders == ConfigKeyOrders::kAlways ||
                       (key_orders == ConfigKeyOrders::kAuto && style.bidirectional);
  permute->second = ordered ? detail::kPermuteDefault : detail::kKeepInPlace;
  return spec;
}

}  // namespace

PatternConfig blindsight_config(const std::map<int64_t, std::map<int64_t, HeadType>>& types,
                                const ImageStyle& style, ConfigKeyOrders key_orders) {
  PatternConfig config;
  config.default_spec = config_head_spec(HeadType::kDense, style, key_orders);
  for (const auto& [layer, heads] : types) {
    for (const auto& [head, type] : heads) {
      config.head_specs[layer][head] = config_head_spec(type, style, key_orders);
    }
  }
  return config;
}

double flops_reduction(const PatternConfig& config, const ModalityLayout& layout, int64_t layers,
                       int64_t heads, const ImageStyle& style) {
  const PlanShape shape{.q_len = layout.length(), .kv_len = layout.length()};
  std::map<std::string, int64_t> pairs_of;  // spec -> pairs of one head
  const auto pairs = [&](const PatternSpec& spec) {
    const std::string key = spec.to_string();
    const auto found = pairs_of.find(key);
    if (found != pairs_of.end()) return found->second;
    if (is_dynamic(spec)) {
      throw_invalid_argument("config", "static patterns (dynamic ones need q and k to count)", key);
    }
    return pairs_of[key] = count_plan_pairs(build_plan(spec, shape, &layout), 0);
  };
  const int64_t dense_pairs = pairs(head_type_spec(HeadType::kDense, style));
  int64_t computed = 0;
  for (int64_t layer = 0; layer < layers; ++layer) {
    for (const PatternSpec& spec : config.layer_specs(layer, heads)) computed += pairs(spec);
  }
  const double model = static_cast<double>(dense_pairs) * static_cast<double>(layers * heads);
  return model > 0.0 ? 1.0 - static_cast<double>(computed) / model : 0.0;
}

Quartiles quartiles(std::vector<double> values) {
  if (values.empty()) throw_invalid_argument("values", "at least one value", "none");
  std::sort(values.begin(), values.end());
  const auto at = [&](double fraction) {
    const double position = fraction * static_cast<double>(values.size() - 1);
    const auto below = static_cast<std::size_t>(std::floor(position));
    const std::size_t above = std::min(values.size() - 1, below + 1);
    return values[below] +
           (values[above] - values[below]) * (position - static_cast<double>(below));
  };
  constexpr double kFirst = 0.25;
  constexpr double kMedian = 0.5;
  constexpr double kThird = 0.75;
  return {at(kFirst), at(kMedian), at(kThird)};
}

}  // namespace mmsparse
