#include "report.h"

#include <fmt/core.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <map>
#include <numeric>
#include <optional>
#include <string>

#include "cli_common.h"
#include "mmsparse/attention.h"
#include "mmsparse/status.h"

namespace mmsparse::cli {
namespace {

constexpr double kMillisecondsPerSecond = 1000.0;
constexpr double kPercent = 100.0;
// Narrowest spec columns; they widen to the longest spec, which is never cut.
constexpr std::size_t kSpecColumnWidth = 42;
constexpr std::size_t kLabelColumnWidth = 14;
constexpr std::size_t kHeadSpecColumnWidth = 30;
constexpr std::size_t kSourceColumnWidth = 22;
constexpr double kTeraFlops = 1e12;

double milliseconds(double seconds) { return kMillisecondsPerSecond * seconds; }

// The index column: the per-call index, or for a static plan its one build per shape in
// parentheses (not a per-call cost: the footer says so).
std::string index_column(const RunReport& run) {
  if (run.plan_once_seconds) return fmt::format("({:.1f})", milliseconds(*run.plan_once_seconds));
  return fmt::format("{:.1f}", milliseconds(run.index_seconds));
}

// `text` cut to `width` characters, the last one "~" when it was cut.
std::string clipped(const std::string& text, std::size_t width) {
  return text.size() <= width ? text : text.substr(0, width - 1) + "~";
}

// The width of a column of `texts`: the longest, at least `minimum`.
template <typename Range, typename Text>
std::size_t column_width(const Range& rows, std::size_t minimum, Text text) {
  std::size_t width = minimum;
  for (const auto& row : rows) width = std::max(width, text(row).size());
  return width;
}

// "k/N", or "-" without a needle task.
std::string needles_text(int64_t covered, int64_t needles) {
  return needles > 0 ? fmt::format("{}/{}", covered, needles) : "-";
}

std::string optional_number(bool present, double value, const char* format) {
  return present ? fmt::format(fmt::runtime(format), value) : "-";
}

// Speedup against dense counts index building: a plan is built once per input, as in prefill.
double speedup(double dense_seconds, double index_seconds, double attention_seconds) {
  return dense_seconds / (index_seconds + attention_seconds);
}

nlohmann::json needle_json(const NeedleCoverage& coverage) {
  nlohmann::json covered_each = nlohmann::json::array();
  for (uint8_t covered : coverage.needle_covered) covered_each.push_back(covered != 0);
  return {{"count", coverage.needles},
          {"covered", coverage.covered},
          {"covered_each", covered_each},
          {"mass_kept", coverage.mass_kept},
          {"mass_kept_each", coverage.needle_mass_kept},
          {"dense_mass_each", coverage.needle_dense_mass}};
}

nlohmann::json head_json(const HeadReport& head) {
  nlohmann::json entry = {{"batch", head.batch},
                          {"head", head.head},
                          {"spec", head.spec},
                          {"density", head.density},
                          {"index_ms", milliseconds(head.index_seconds)},
                          {"index_built", head.index_built}};
  if (!head.behaviour.empty()) entry["behaviour"] = head.behaviour;
  if (head.accuracy) {
    entry["recall_mean"] = head.accuracy->recall_mean;
    entry["recall_min"] = head.accuracy->recall_min;
    entry["output_error"] = head.accuracy->output_error;
    entry["nmse"] = head.accuracy->nmse;
  }
  if (head.needles) entry["needles"] = needle_json(*head.needles);
  return entry;
}

// Attention throughput on the pairs a run computes: TFLOP/s (4 · pairs · head_dim FLOPs) and its
// share of dense attention's, the sparse kernel's efficiency on what it computes.
void add_throughput(nlohmann::json& entry, const RunReport& run, const LayerReport& layer,
                    int64_t head_dim) {
  if (run.attention_seconds <= 0.0) return;
  const double tflops =
      attention_flops(run.computed_pairs, head_dim) / run.attention_seconds / kTeraFlops;
  entry["tflops"] = tflops;
  if (layer.dense_seconds && *layer.dense_seconds > 0.0 && layer.dense_pairs > 0) {
    entry["throughput_vs_dense"] =
        tflops / (attention_flops(layer.dense_pairs, head_dim) / *layer.dense_seconds / kTeraFlops);
  }
}

nlohmann::json run_json(const RunReport& run, const LayerReport& layer, int64_t head_dim) {
  const RunSummary summary = summarize(run);
  nlohmann::json entry = {{"pattern", run.run.label},
                          {"spec", run.run.spec_text},
                          {"density", summary.density},
                          {"computed_pairs", run.computed_pairs},
                          {"index_ms", milliseconds(run.index_seconds)},
                          {"attention_ms", milliseconds(run.attention_seconds)}};
  if (run.assembly_seconds) entry["assembly_ms"] = milliseconds(*run.assembly_seconds);
  if (run.plan_once_seconds) {
    entry["plan_once_per_shape_ms"] = milliseconds(*run.plan_once_seconds);
    entry["plan_reused"] = run.plan_reused;
  }
  if (summary.compared) {
    entry["recall_mean"] = summary.recall_mean;
    entry["recall_min"] = summary.recall_min;
    entry["output_error"] = summary.output_error;
  }
  if (layer.dense_seconds) {
    entry["speedup"] = speedup(*layer.dense_seconds, run.index_seconds, run.attention_seconds);
  }
  add_throughput(entry, run, layer, head_dim);
  if (summary.needles > 0) {
    entry["needles"] = {{"count", summary.needles},
                        {"covered_min", summary.needles_covered},
                        {"kept", summary.needles_kept},
                        {"mass_kept", summary.needle_mass_kept}};
  }
  entry["heads"] = nlohmann::json::array();
  for (const HeadReport& head : run.heads) entry["heads"].push_back(head_json(head));
  return entry;
}

// Per run index (the same runs in every layer): index, attention and dense time summed.
struct ModelTotal {
  std::string label;
  double index_seconds = 0.0;
  double attention_seconds = 0.0;
};

std::vector<ModelTotal> model_totals(const std::vector<LayerReport>& layers) {
  std::vector<ModelTotal> totals;
  for (const LayerReport& layer : layers) {
    for (std::size_t r = 0; r < layer.runs.size(); ++r) {
      if (totals.size() <= r) totals.push_back({layer.runs[r].run.label});
      totals[r].index_seconds += layer.runs[r].index_seconds;
      totals[r].attention_seconds += layer.runs[r].attention_seconds;
    }
  }
  return totals;
}

std::optional<double> total_dense_seconds(const std::vector<LayerReport>& layers) {
  double total = 0.0;
  for (const LayerReport& layer : layers) {
    if (!layer.dense_seconds) return std::nullopt;
    total += *layer.dense_seconds;
  }
  return total;
}

}  // namespace

std::string needle_verdict(const RunSummary& summary) {
  if (summary.needles == 0 || !summary.needle_mass_measured) return "-";
  return needles_text(summary.needles_kept, summary.needles);
}

RunSummary summarize(const RunReport& run) {
  RunSummary summary;
  if (run.heads.empty()) return summary;
  const auto count = static_cast<double>(run.heads.size());
  summary.compared = run.heads.front().accuracy.has_value();
  summary.recall_min = 1.0;
  double kept = 0.0, dense = 0.0;
  // Per needle, over heads: Σ mass kept(n) · dense mass(n) and Σ dense mass(n) (the querying rows
  // are the same for every head, so their count cancels).
  std::vector<double> needle_kept, needle_dense;
  summary.needles_covered = std::numeric_limits<int64_t>::max();
  for (const HeadReport& head : run.heads) {
    summary.density += head.density / count;
    if (head.accuracy) {
      summary.recall_mean += head.accuracy->recall_mean / count;
      summary.recall_min = std::min(summary.recall_min, head.accuracy->recall_min);
      summary.output_error += head.accuracy->output_error / count;
    }
    if (head.needles) {
      summary.needles = head.needles->needles;
      summary.needles_covered = std::min(summary.needles_covered, head.needles->covered);
      kept += head.needles->kept_probability;
      dense += head.needles->dense_probability;
      const std::vector<double>& mass_kept = head.needles->needle_mass_kept;
      const std::vector<double>& dense_mass = head.needles->needle_dense_mass;
      needle_kept.resize(mass_kept.size());
      needle_dense.resize(mass_kept.size());
      for (std::size_t n = 0; n < mass_kept.size() && n < dense_mass.size(); ++n) {
        if (!std::isnan(dense_mass[n])) summary.needle_mass_measured = true;
        if (std::isnan(mass_kept[n]) || std::isnan(dense_mass[n])) continue;
        needle_kept[n] += mass_kept[n] * dense_mass[n];
        needle_dense[n] += dense_mass[n];
      }
    }
  }
  if (summary.needles == 0) summary.needles_covered = 0;
  for (std::size_t n = 0; n < needle_dense.size(); ++n) {
    if (needle_dense[n] > 0.0 && needle_kept[n] >= kNeedleKeptShare * needle_dense[n]) {
      ++summary.needles_kept;
    }
  }
  summary.needle_mass_kept = dense > 0.0 ? kept / dense : std::numeric_limits<double>::quiet_NaN();
  return summary;
}

// "% bound": the run's speedup over its tile-oracle bound; empty without the oracle.
std::string bound_column(const LayerReport& layer, std::size_t run_index, double run_speedup) {
  if (layer.oracle_bounds.empty()) return "";
  const double bound =
      run_index < layer.oracle_bounds.size() ? layer.oracle_bounds[run_index] : std::nan("");
  const bool known = layer.dense_seconds.has_value() && std::isfinite(bound) && bound > 0.0;
  return fmt::format(
      " {:>8}", known ? fmt::format("{:.1f}%", kPercent * run_speedup / bound) : std::string("-"));
}

void print_summary_table(const LayerReport& layer, int64_t needles) {
  const bool with_needles = needles > 0;
  const bool with_bound = !layer.oracle_bounds.empty();
  const std::size_t spec_width = column_width(
      layer.runs, kSpecColumnWidth, [](const RunReport& run) { return run.run.spec_text; });
  const std::size_t label_width = column_width(
      layer.runs, kLabelColumnWidth, [](const RunReport& run) { return run.run.label; });
  fmt::print("{:<{}} {:<{}} {:>8} {:>8} {:>8} {:>9} {:>9} {:>10} {:>8}{}{}\n", "pattern",
             label_width, "spec", spec_width, "density", "recall", "min rec", "out err", "index ms", "attn ms",
             "speedup", with_bound ? fmt::format(" {:>8}", "% bound") : "",
             with_needles ? fmt::format(" {:>8}", "needles") : "");
  if (layer.dense_seconds) {
    fmt::print("{:<{}} {:<{}} {:>7.2f}% {:>8.4f} {:>8.4f} {:>9.2e} {:>9} {:>10.1f} {:>7.2f}x{}{}\n",
               "dense", label_width, layer.dense_spec, spec_width, kPercent, 1.0, 1.0, 0.0, "-",
               milliseconds(*layer.dense_seconds), 1.0,
               with_bound ? fmt::format(" {:>8}", "-") : "",
               with_needles ? fmt::format(" {:>8}", needles_text(needles, needles)) : "");
  }
  for (std::size_t index = 0; index < layer.runs.size(); ++index) {
    const RunReport& run = layer.runs[index];
    const RunSummary summary = summarize(run);
    const double run_speedup =
        layer.dense_seconds
            ? speedup(*layer.dense_seconds, run.index_seconds, run.attention_seconds)
            : 0.0;
    const std::string speedup_text =
        layer.dense_seconds ? fmt::format("{:.2f}x", run_speedup) : "-";
    fmt::print("{:<{}} {:<{}} {:>7.2f}% {:>8} {:>8} {:>9} {:>9} {:>10.1f} {:>8}{}{}\n",
               run.run.label, label_width, run.run.spec_text, spec_width, kPercent * summary.density,
               optional_number(summary.compared, summary.recall_mean, "{:.4f}"),
               optional_number(summary.compared, summary.recall_min, "{:.4f}"),
               optional_number(summary.compared, summary.output_error, "{:.2e}"),
               index_column(run), milliseconds(run.attention_seconds), speedup_text,
               bound_column(layer, index, run_speedup),
               with_needles ? fmt::format(" {:>8}", needle_verdict(summary)) : "");
  }
}

void print_column_footer(int64_t needles, bool gpu, const TimingFlags& timing) {
  fmt::print(
      "\ndensity: computed / causal pairs (all pairs for non-causal attention); recall: "
      "exp(LSE_plan - LSE_dense), mean over rows and heads; min rec: the lowest recall of any "
      "row of any head; out err: ||O - O_dense|| / ||O_dense||, mean over heads; index: building "
      "the plan (the index of dynamic patterns; (x): a static plan, which depends on the shape "
      "only, built once per shape in x ms and reused by every layer and call, so no index per "
      "call); "
      "speedup: dense time / (index + attention time){}; per head: covered: needles whose pair "
      "with every querying row the head computes, ndl mass: the needles' share of the head's "
      "dense attention mass the plan keeps, built: where the head's index was built; {}.\n",
      needles > 0 ? fmt::format("; needles: kept / planted, a needle being kept when the question "
                                "rows' attention to it, summed over heads, keeps >= {:.0f}% of its "
                                "dense mass (- without a dense reference; per-head coverage with "
                                "--per-head)",
                                kPercent * kNeedleKeptShare)
                  : "",
      gpu ? fmt::format("GPU times: median of {} after {} warm-up runs, attention and index "
                        "alike; index time is the build on the GPU of static patterns and of "
                        "vertical-slash and grid heads whose query groups fit the estimate (a "
                        "config: those heads built by kernels, the others on the host and "
                        "uploaded, all concatenated on the GPU; the built column says which), "
                        "else host building plus upload",
                        timing.repeats, timing.warmup)
          : fmt::format("CPU times: the reference backend, every plan built on the host; {}",
                        timing.repeats == 1 && timing.warmup == 0
                            ? "one run each, so differences of a few tens of percent can be "
                              "noise (--warmup 1 --repeats 5 gives a median)"
                            : fmt::format("median of {} after {} warm-up runs", timing.repeats,
                                          timing.warmup)));
}

void print_per_head_tables(const LayerReport& layer) {
  for (const RunReport& run : layer.runs) {
    if (run.heads.empty()) continue;
    const RunSummary summary = summarize(run);
    const bool batched = std::any_of(run.heads.begin(), run.heads.end(),
                                     [](const HeadReport& head) { return head.batch > 0; });
    const bool behaviours = !run.heads.front().behaviour.empty();
    fmt::print("\nlayer {} ({}), {}: {}\n", layer.layer, layer.source, run.run.label,
               run.run.spec_text);
    const std::size_t spec_width = column_width(run.heads, kHeadSpecColumnWidth,
                                                [](const HeadReport& head) { return head.spec; });
    fmt::print("{}{:>5} {}{:<{}} {:>8} {:>8} {:>8} {:>9} {:>8} {:>9} {:>9} {:>5}\n",
               batched ? fmt::format("{:>5} ", "batch") : "", "head",
               behaviours ? fmt::format("{:<9} ", "behaviour") : "", "spec", spec_width, "density",
               "recall", "min rec", "out err", "covered", "ndl mass", "index ms", "built");
    for (const HeadReport& head : run.heads) {
      const bool compared = head.accuracy.has_value();
      const HeadAccuracy accuracy = head.accuracy.value_or(HeadAccuracy{});
      const bool mass = head.needles && !std::isnan(head.needles->mass_kept);
      fmt::print("{}{:>5} {}{:<{}} {:>7.2f}% {:>8} {:>8} {:>9} {:>8} {:>9} {:>9.2f} {:>5}\n",
                 batched ? fmt::format("{:>5} ", head.batch) : "", head.head,
                 behaviours ? fmt::format("{:<9} ", head.behaviour) : "", head.spec, spec_width,
                 kPercent * head.density, optional_number(compared, accuracy.recall_mean, "{:.4f}"),
                 optional_number(compared, accuracy.recall_min, "{:.4f}"),
                 optional_number(compared, accuracy.output_error, "{:.2e}"),
                 head.needles ? needles_text(head.needles->covered, head.needles->needles) : "-",
                 optional_number(mass, mass ? head.needles->mass_kept : 0.0, "{:.4f}"),
                 milliseconds(head.index_seconds), head.index_built);
    }
    std::string line = fmt::format("layer {}, all heads: density {:.2f}%", layer.layer,
                                   kPercent * summary.density);
    if (summary.compared) {
      line += fmt::format(", recall {:.4f} (min {:.4f}), out err {:.2e}", summary.recall_mean,
                          summary.recall_min, summary.output_error);
    }
    if (summary.needles > 0) {
      if (summary.needle_mass_measured) {
        line += fmt::format(
            ", needles kept {} (each >= {:.0f}% of its dense attention, summed over heads), "
            "needle mass kept {:.4f}",
            needle_verdict(summary), kPercent * kNeedleKeptShare, summary.needle_mass_kept);
      }
      line += fmt::format(", covered by every querying row of every head: {}/{}",
                          summary.needles_covered, summary.needles);
    }
    const bool any_gpu_built =
        std::any_of(run.heads.begin(), run.heads.end(),
                    [](const HeadReport& head) { return head.index_built == "gpu"; });
    if (run.plan_once_seconds) {
      line += fmt::format("; static plan built once per shape ({:.2f} ms{}), no index per call",
                          milliseconds(*run.plan_once_seconds),
                          run.plan_reused ? ", by an earlier layer" : "");
    } else {
      line += fmt::format(
          "; index {:.2f} ms (whole plan, host clock; {})", milliseconds(run.index_seconds),
          any_gpu_built ? "per head: built by gpu kernels, GPU-event time shared by the heads of "
                          "its builder, or on the host, host clock; one spec for every head: an "
                          "equal share of one build"
                        : "every head built on the host");
    }
    if (run.assembly_seconds) {
      line += fmt::format(", concatenation {:.2f} ms (GPU events)",
                          milliseconds(*run.assembly_seconds));
    }
    line += fmt::format(", attention {:.2f} ms (all heads)", milliseconds(run.attention_seconds));
    if (layer.dense_seconds) {
      line += fmt::format(", dense {:.2f} ms, speedup {:.2f}x", milliseconds(*layer.dense_seconds),
                          speedup(*layer.dense_seconds, run.index_seconds, run.attention_seconds));
    }
    fmt::print("{}\n", line);
  }
}

void print_layer_table(const std::vector<LayerReport>& layers) {
  fmt::print("\n{:>5}  {:<22} {:<14} {:>8} {:>8} {:>8} {:>9} {:>8} {:>10} {:>10} {:>10} {:>8}\n",
             "layer", "source", "pattern", "density", "recall", "min rec", "out err", "needles",
             "index ms", "attn ms", "dense ms", "speedup");
  for (const LayerReport& layer : layers) {
    for (const RunReport& run : layer.runs) {
      const RunSummary summary = summarize(run);
      fmt::print(
          "{:>5}  {:<22} {:<14} {:>7.2f}% {:>8} {:>8} {:>9} {:>8} {:>10.1f} {:>10.1f} {:>10} "
          "{:>8}\n",
          layer.layer, clipped(layer.source, kSourceColumnWidth), run.run.label,
          kPercent * summary.density,
          optional_number(summary.compared, summary.recall_mean, "{:.4f}"),
          optional_number(summary.compared, summary.recall_min, "{:.4f}"),
          optional_number(summary.compared, summary.output_error, "{:.2e}"),
          needle_verdict(summary), milliseconds(run.index_seconds),
          milliseconds(run.attention_seconds),
          optional_number(layer.dense_seconds.has_value(),
                          milliseconds(layer.dense_seconds.value_or(0.0)), "{:.1f}"),
          layer.dense_seconds
              ? fmt::format("{:.2f}x",
                            speedup(*layer.dense_seconds, run.index_seconds, run.attention_seconds))
              : "-");
    }
  }
  const std::optional<double> dense = total_dense_seconds(layers);
  for (const ModelTotal& total : model_totals(layers)) {
    fmt::print(
        "{:>5}  {:<22} {:<14} {:>8} {:>8} {:>8} {:>9} {:>8} {:>10.1f} {:>10.1f} {:>10} "
        "{:>8}\n",
        "total", fmt::format("{} layers", layers.size()), total.label, "", "", "", "", "",
        milliseconds(total.index_seconds), milliseconds(total.attention_seconds),
        optional_number(dense.has_value(), milliseconds(dense.value_or(0.0)), "{:.1f}"),
        dense
            ? fmt::format("{:.2f}x", speedup(*dense, total.index_seconds, total.attention_seconds))
            : "-");
  }
}

nlohmann::json layers_json(const std::vector<LayerReport>& layers, int64_t head_dim) {
  nlohmann::json report;
  report["layers"] = nlohmann::json::array();
  for (const LayerReport& layer : layers) {
    nlohmann::json entry = {{"layer", layer.layer}, {"source", layer.source}};
    if (layer.dense_seconds) {
      entry["dense"] = {{"attention_ms", milliseconds(*layer.dense_seconds)},
                        {"spec", layer.dense_spec},
                        {"pairs", layer.dense_pairs},
                        {"tflops", attention_flops(layer.dense_pairs, head_dim) /
                                       *layer.dense_seconds / kTeraFlops}};
    }
    entry["patterns"] = nlohmann::json::array();
    for (const RunReport& run : layer.runs) {
      entry["patterns"].push_back(run_json(run, layer, head_dim));
    }
    report["layers"].push_back(entry);
  }
  const std::optional<double> dense = total_dense_seconds(layers);
  nlohmann::json model = {{"layers", layers.size()}};
  if (dense) model["dense_ms"] = milliseconds(*dense);
  model["patterns"] = nlohmann::json::array();
  for (const ModelTotal& total : model_totals(layers)) {
    nlohmann::json entry = {{"pattern", total.label},
                            {"index_ms", milliseconds(total.index_seconds)},
                            {"attention_ms", milliseconds(total.attention_seconds)}};
    if (dense) entry["speedup"] = speedup(*dense, total.index_seconds, total.attention_seconds);
    model["patterns"].push_back(entry);
  }
  report["model"] = model;
  return report;
}

NeedleTask workload_needle_task(const Workload& workload) {
  NeedleTask task;
  for (const Needle& needle : workload.needles()) task.keys.push_back(needle.key);
  if (task.keys.empty()) return task;
  task.rows.resize(static_cast<std::size_t>(workload.seq_len() - workload.question_begin()));
  std::iota(task.rows.begin(), task.rows.end(), workload.question_begin());
  return task;
}

std::string needles_metadata(int64_t question_begin, const std::vector<int64_t>& keys,
                             const std::map<int64_t, std::vector<int64_t>>& layer_keys) {
  nlohmann::json task = {{"question_begin", question_begin}, {"keys", keys}};
  for (const auto& [layer, layer_needles] : layer_keys) {
    task["layers"][std::to_string(layer)] = layer_needles;
  }
  return task.dump();
}

NeedleTask needle_task_from_metadata(const TensorFile& file, int64_t layer, int64_t q_len) {
  NeedleTask task;
  const auto entry = file.metadata.find(kNeedlesMetadataKey);
  if (entry == file.metadata.end()) return task;
  const std::string what = std::string("input metadata ") + kNeedlesMetadataKey;
  const std::string expected_form =
      "JSON {\"question_begin\": n, \"keys\": [...], \"layers\": {\"L\": [...]}}";
  try {
    const nlohmann::json json = nlohmann::json::parse(entry->second);
    const int64_t question_begin = json.at("question_begin").get<int64_t>();
    if (question_begin < 0 || question_begin >= q_len) {
      throw_invalid_argument(what + " question_begin",
                             "in [0, q_len = " + std::to_string(q_len) + ")",
                             std::to_string(question_begin));
    }
    const std::string layer_name = std::to_string(layer);
    if (layer >= 0 && json.contains("layers") && json.at("layers").contains(layer_name)) {
      task.keys = json.at("layers").at(layer_name).get<std::vector<int64_t>>();
    } else {
      task.keys = json.value("keys", std::vector<int64_t>{});
    }
    task.rows.resize(static_cast<std::size_t>(q_len - question_begin));
    std::iota(task.rows.begin(), task.rows.end(), question_begin);
  } catch (const nlohmann::json::exception& error) {
    throw Error(ErrorCode::kParseError,
                what + ": expected " + expected_form + ", got " + error.what());
  }
  if (task.keys.empty()) task.rows.clear();
  return task;
}

bool causal_from_metadata(const TensorFile& file) {
  const auto entry = file.metadata.find(kCausalMetadataKey);
  if (entry == file.metadata.end()) return true;
  if (entry->second != "0" && entry->second != "1") {
    throw_invalid_argument(std::string("input metadata ") + kCausalMetadataKey,
                           "\"1\" (causal) or \"0\" (non-causal)", "\"" + entry->second + "\"");
  }
  return entry->second == "1";
}

std::string causal_metadata(bool causal) { return causal ? "1" : "0"; }

}  // namespace mmsparse::cli
