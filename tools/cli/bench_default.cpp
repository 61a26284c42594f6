#include "bench_default.h"

#include <fmt/core.h>

#include <cmath>

#include "shipped_configs.h"

namespace mmsparse::cli {
namespace {

constexpr double kPercent = 100.0;

// The shape a shipped config was searched on: the preset's own heads and head dim.
bool preset_shape(const WorkloadSpec& workload, int64_t seq_len) {
  WorkloadSpec preset;
  preset.preset = workload.preset;
  preset.seq_len = seq_len;
  const WorkloadSpec defaults = Workload::create(preset).spec();
  return defaults.q_heads == workload.q_heads && defaults.kv_heads == workload.kv_heads &&
         defaults.head_dim == workload.head_dim && !workload.head_behaviour;
}

// What one run reached on the layer.
struct RunFigures {
  double speedup = std::nan("");
  double bound_percent = std::nan("");
  RunSummary summary;
};

RunFigures run_figures(const LayerReport& layer, std::size_t index) {
  const RunReport& run = layer.runs[index];
  RunFigures figures;
  figures.summary = summarize(run);
  if (!layer.dense_seconds) return figures;
  figures.speedup = *layer.dense_seconds / (run.index_seconds + run.attention_seconds);
  if (index < layer.oracle_bounds.size() && std::isfinite(layer.oracle_bounds[index]) &&
      layer.oracle_bounds[index] > 0.0) {
    figures.bound_percent = kPercent * figures.speedup / layer.oracle_bounds[index];
  }
  return figures;
}

std::string percent_text(double value) {
  return std::isfinite(value) ? fmt::format("{:.1f}%", value) : std::string("-");
}

// The static run with the highest recall: the baseline the config must beat on accuracy.
std::optional<std::size_t> best_static_run(const LayerReport& layer,
                                           std::optional<std::size_t> config_run) {
  std::optional<std::size_t> best;
  double best_recall = -1.0;
  for (std::size_t index = 0; index < layer.runs.size(); ++index) {
    if (config_run && index == *config_run) continue;
    const RunSummary summary = summarize(layer.runs[index]);
    if (summary.compared && summary.recall_mean > best_recall) {
      best_recall = summary.recall_mean;
      best = index;
    }
  }
  return best;
}

}  // namespace

DefaultConfig default_bench_config(const WorkloadSpec& workload, int64_t seq_len) {
  DefaultConfig result;
  result.file = shipped_config_file(workload.preset, seq_len);
  const std::optional<ShippedConfig> shipped =
      select_shipped_config(shipped_configs(), workload.preset, seq_len);
  if (!shipped) {
    std::string have;
    for (const ShippedConfig& config : shipped_configs()) {
      have += (have.empty() ? "" : ", ") + config.file;
    }
    result.missing = fmt::format(
        "no MMInference config is shipped for '{}' at {} tokens ({} is "
        "missing; this build has {})",
        workload.preset, seq_len, result.file, have.empty() ? "none" : have);
    return result;
  }
  result.file = shipped->file;
  if (!preset_shape(workload, seq_len)) {
    result.missing = fmt::format(
        "{} was searched on the preset's own heads, head dim and head "
        "mix; this workload changes them",
        result.file);
    return result;
  }
  result.config = PatternConfig::from_json(shipped->json);
  if (result.config->search) {
    result.calibration = result.config->search->calibration;
    result.same_seed =
        result.calibration.find(fmt::format("seed {},", workload.seed)) != std::string::npos;
  }
  return result;
}

std::string default_config_search_command(const WorkloadSpec& workload, int64_t seq_len, bool gpu) {
  return fmt::format(
      "mmsparse search --preset {} --seq-len {} --seed {} --needles {} --boundary-modes 0 "
      "--target-mean-recall 0.96 --device {} --output {}",
      workload.preset, seq_len, workload.seed + 1, kDefaultBenchNeedles, gpu ? "cuda" : "cpu",
      shipped_config_file(workload.preset, seq_len));
}

std::string default_verdict_line(const LayerReport& layer, std::optional<std::size_t> config_run,
                                 const DefaultConfig& config, bool gpu) {
  const std::string device = gpu ? std::string("GPU")
                                 : std::string(
                                       "CPU reference backend: the oracle's host times, "
                                       "not GPU speed");
  const std::optional<std::size_t> baseline = best_static_run(layer, config_run);
  std::string baseline_text;
  if (baseline) {
    const RunFigures figures = run_figures(layer, *baseline);
    baseline_text =
        fmt::format("; most accurate static baseline {} {:.2f}x at recall {:.4f}",
                    layer.runs[*baseline].run.label, figures.speedup, figures.summary.recall_mean);
  }
  if (!config_run) {
    return fmt::format("verdict: {}; static baselines only{} ({})", config.missing, baseline_text,
                       device);
  }
  const RunFigures figures = run_figures(layer, *config_run);
  const std::string needles = figures.summary.needles > 0
                                  ? fmt::format("needles {} kept", needle_verdict(figures.summary))
                                  : std::string("no needles planted");
  return fmt::format(
      "verdict: MMInference config {} {:.2f}x dense (index included) at mean recall {:.4f}, "
      "{}, {} of the tile-oracle bound{}{} ({})",
      config.file, figures.speedup, figures.summary.recall_mean, needles,
      percent_text(figures.bound_percent),
      config.same_seed ? " (searched on this seed: not a held-out check)" : "", baseline_text,
      device);
}

nlohmann::json default_verdict_json(const LayerReport& layer, std::optional<std::size_t> config_run,
                                    const DefaultConfig& config) {
  nlohmann::json verdict = {{"config", config.file}};
  if (!config_run) {
    verdict["missing"] = config.missing;
    return verdict;
  }
  const RunFigures figures = run_figures(layer, *config_run);
  verdict["calibration"] = config.calibration;
  verdict["held_out_seed"] = !config.same_seed;
  verdict["recall_mean"] = figures.summary.recall_mean;
  if (std::isfinite(figures.speedup)) verdict["speedup"] = figures.speedup;
  if (std::isfinite(figures.bound_percent))
    verdict["tile_oracle_bound_percent"] = figures.bound_percent;
  if (figures.summary.needles > 0 && figures.summary.needle_mass_measured) {
    verdict["needles_kept"] = figures.summary.needles_kept;
    verdict["needles"] = figures.summary.needles;
  }
  return verdict;
}

}  // namespace mmsparse::cli
