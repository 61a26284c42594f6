#include "warnings.h"

#include <fmt/core.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <regex>
#include <thread>

#include "mmsparse/attention.h"
#include "mmsparse/status.h"
#include "mmsparse/tensor.h"
#include "mmsparse/tools/metrics.h"
#include "progress.h"

namespace mmsparse::cli {

namespace {

// The calibration problem: long enough to time reliably (tens of ms), short enough to go unnoticed.
constexpr int64_t kCalibrationTokens = 1024;

int threads_or_cores(int threads) {
  if (threads > 0) return threads;
  return std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
}

CpuRate measured_cpu_rate(int threads, int64_t head_dim) {
  // One query head per thread, so that every thread works as in a real run.
  const int64_t heads = threads_or_cores(threads);
  Tensor q(DType::kFloat32, {1, kCalibrationTokens, heads, head_dim});
  Tensor kv(DType::kFloat32, {1, kCalibrationTokens, 1, head_dim});
  Tensor out(DType::kFloat32, {1, kCalibrationTokens, heads, head_dim});
  Tensor lse(DType::kFloat32, {1, heads, kCalibrationTokens});
  AttentionOptions options;
  options.num_threads = threads;
  const auto start = std::chrono::steady_clock::now();
  attention_dense(q.view(), kv.view(), kv.view(), out.view(), lse.view(), options);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const double pair_dims =
      static_cast<double>(causal_pair_count(kCalibrationTokens, kCalibrationTokens) * heads) *
      static_cast<double>(head_dim);
  return {pair_dims / std::max(seconds, 1e-9),
          fmt::format("measured on a {}-token dense problem", kCalibrationTokens)};
}

// The order of modalities along the sequence, runs merged, with each media item's frame size (what
// grid strides follow): "text video[12x20] text". Layouts of one kind at two lengths differ in
// every position but keep this.
std::string modality_order(const ModalityLayout& layout) {
  std::string order;
  std::string last;
  for (const Segment& segment : layout.segments()) {
    std::string name(modality_name(segment.modality));
    if (segment.media >= 0) {
      const Grid& grid = layout.media()[static_cast<std::size_t>(segment.media)].grid;
      name += fmt::format("[{}x{}]", grid.h, grid.w);
    }
    if (name == last) continue;
    order += (order.empty() ? "" : " ") + name;
    last = name;
  }
  return order;
}

}  // namespace

CpuRate cpu_rate(int threads, int64_t head_dim) {
  const char* variable = std::getenv(kCpuRateVariable);
  if (variable == nullptr || *variable == '\0') return measured_cpu_rate(threads, head_dim);
  char* end = nullptr;
  const double rate = std::strtod(variable, &end);
  if (end == variable || *end != '\0' || !(rate > 0.0)) {
    throw_invalid_argument(kCpuRateVariable,
                           "a positive number (attention pairs x head_dim per second)",
                           fmt::format("'{}'", variable));
  }
  return {rate, fmt::format("set by {}", kCpuRateVariable)};
}

double cpu_seconds(const CpuRate& rate, int64_t pairs, int64_t head_dim) {
  return static_cast<double>(pairs) * static_cast<double>(head_dim) / rate.pair_dims_per_second;
}

bool warn_if_slow_on_cpu(const std::string& what, double seconds, const CpuRate& rate,
                         const std::string& advice, std::FILE* stream) {
  if (seconds <= kSlowCpuRunSeconds) return false;
  fmt::print(stream,
             "warning: on the CPU {} will take about {} ({:.2e} pair x head_dim per second, {}); "
             "{}\n",
             what, format_duration(seconds), rate.pair_dims_per_second, rate.source, advice);
  std::fflush(stream);
  return true;
}

double estimate_dense_on_cpu(int threads, int64_t dense_pairs, int64_t head_dim, int64_t layers,
                             int64_t sparse_runs, bool dense_reference, std::FILE* stream) {
  const CpuRate rate = cpu_rate(threads, head_dim);
  const double layer_seconds = cpu_seconds(rate, dense_pairs, head_dim);
  warn_if_slow_on_cpu(
      fmt::format("{} ({} layer(s) of {:.3g} pairs, head_dim {})",
                  dense_reference ? "the dense reference" : "this run, up to dense attention",
                  layers, static_cast<double>(dense_pairs), head_dim),
      layer_seconds * static_cast<double>(layers), rate,
      fmt::format("{}a shorter --seq-len or a GPU (--device cuda) runs sooner",
                  sparse_runs > 0 ? fmt::format("each of the {} pattern run(s) per layer adds up "
                                                "to as much; ",
                                                sparse_runs)
                                  : ""),
      stream);
  return layer_seconds;
}

std::optional<int64_t> config_calibration_length(const PatternConfig& config) {
  if (!config.search) return std::nullopt;
  if (config.search->seq_len > 0) return config.search->seq_len;
  static const std::regex kSeqLen("seq_len ([0-9]+)");
  std::smatch match;
  if (!std::regex_search(config.search->calibration, match, kSeqLen)) return std::nullopt;
  return std::stoll(match[1].str());
}

std::vector<std::string> config_mismatch_warnings(const PatternConfig& config,
                                                  const std::string& flag, int64_t input_length,
                                                  const ModalityLayout* input_layout) {
  std::vector<std::string> warnings;
  const std::optional<int64_t> length = config_calibration_length(config);
  if (length && *length != input_length) {
    warnings.push_back(fmt::format(
        "warning: {} was searched on {} tokens ({}), the input has {}: its windows and line "
        "budgets were chosen for that length, so recall and density here may differ from the "
        "search's (search again at this length: mmsparse search --seq-len {})",
        flag, *length, config.search->calibration, input_length, input_length));
  }
  if (!config.search || config.search->layout.empty() || input_layout == nullptr) return warnings;
  // At another length the positions differ anyway: then only another order of modalities counts.
  const ModalityLayout searched = ModalityLayout::from_json(config.search->layout);
  const bool same_length = searched.length() == input_layout->length();
  const std::string searched_order = modality_order(searched);
  const std::string input_order = modality_order(*input_layout);
  if (same_length ? searched != *input_layout : searched_order != input_order) {
    warnings.push_back(fmt::format(
        "warning: {} was searched on another modality layout than the input's (calibration: {}; "
        "input: {}): grid strides and boundary modes follow the calibration input's frames and "
        "segments",
        flag, searched_order, input_order));
  }
  return warnings;
}

void print_config_mismatch_warnings(const PatternConfig& config, const std::string& flag,
                                    int64_t input_length, const ModalityLayout* input_layout,
                                    std::FILE* stream) {
  for (const std::string& line :
       config_mismatch_warnings(config, flag, input_length, input_layout)) {
    fmt::print(stream, "{}\n", line);
  }
  std::fflush(stream);
}

double low_recall_threshold(double target_mean_recall) {
  const double target = target_mean_recall > 0.0 ? target_mean_recall : kDefaultSearchRecallTarget;
  return std::max(0.0, target - kLowRecallMargin);
}

std::vector<LowRecallHead> low_recall_heads(const LayerSearchResult& result, int64_t layer,
                                            double threshold) {
  std::vector<LowRecallHead> heads;
  for (const HeadSearchResult& head : result.heads) {
    const auto inter =
        std::find_if(head.scopes.begin(), head.scopes.end(),
                     [](const ScopeSearch& search) { return search.stage == "inter"; });
    const double best = inter != head.scopes.end() && inter->winner ? inter->winner->recall : 0.0;
    if (best < threshold) heads.push_back({layer, head.q_head, "", best, head.dense_fallback});
  }
  return heads;
}

std::string low_recall_warning(const std::vector<LowRecallHead>& heads, double threshold,
                               double target) {
  if (heads.empty()) return "";
  std::string list;
  bool any_kept = false;
  for (const LowRecallHead& head : heads) {
    list += fmt::format("{}layer {} head {} ({}{:.2f})", list.empty() ? "" : ", ", head.layer,
                        head.q_head, head.behaviour.empty() ? "" : head.behaviour + ", ",
                        head.best_sparse_recall);
    any_kept |= !head.raised_to_dense;
  }
  return fmt::format(
      "warning: {} head(s) recall far below the target {:.2f} with their best sparse pattern "
      "(< {:.2f}): {}; {}",
      heads.size(), target, threshold, list,
      any_kept
          ? "kept sparse (by default, without --keep-low-recall-sparse or --dense-below-recall, "
            "they would be dense)"
          : "raised to dense (--keep-low-recall-sparse keeps them sparse)");
}

}  // namespace mmsparse::cli
