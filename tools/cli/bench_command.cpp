#include "bench_command.h"

#include <fmt/core.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>

#include "bench_default.h"
#include "cli_common.h"
#include "executor.h"
#include "layers.h"
#include "mmsparse/attention.h"
#include "mmsparse/patterns.h"
#include "mmsparse/status.h"
#include "mmsparse/tools/metrics.h"
#include "progress.h"
#include "report.h"
#include "tile_oracle_report.h"
#include "warnings.h"

namespace mmsparse::cli {
namespace {

struct BenchFlags {
  WorkloadFlags workload;
  ExecutionFlags exec;
  std::vector<std::string> patterns;
  std::string config_path;
  int64_t layer = 0;
  std::string layers;  // --layers: "all" or a list; empty: --layer alone
  bool per_head = false;
  int64_t oracle_rows = 64;
  double recall_target = 0.95;
  TileOracleFlags tile_oracle;
  TimingFlags timing;
};

std::optional<PatternConfig> read_config(const std::string& path) {
  if (path.empty()) return std::nullopt;
  std::ifstream file(path);
  if (!file) throw Error(ErrorCode::kIoError, "--config: cannot open '" + path + "'");
  std::stringstream text;
  text << file.rdbuf();
  return PatternConfig::from_json(text.str());
}

// Distinct specs of a run, each checked once.
std::vector<PatternSpec> distinct_specs(const std::vector<PatternSpec>& specs) {
  std::vector<PatternSpec> distinct;
  for (const PatternSpec& spec : specs) {
    const bool seen = std::any_of(distinct.begin(), distinct.end(), [&](const PatternSpec& other) {
      return other.to_string() == spec.to_string();
    });
    if (!seen) distinct.push_back(spec);
  }
  return distinct;
}

// The --pattern runs (every static pattern when neither --pattern nor --config is given),
// resolved and checked once: layers differ only by seed, so they share the layout.
std::vector<PatternRun> flag_runs(const BenchFlags& flags, bool with_config,
                                  const ModalityLayout& layout, bool causal) {
  std::vector<std::string> texts = flags.patterns;
  if (texts.empty() && !with_config) {
    // Dynamic patterns stay out of the default runs: their metrics read a host-built plan (even
    // where kernels estimate the timed one), which takes seconds per head at 128K. Image templates
    // run by default only where the layout has images. Both run when named with --pattern. The
    // dense references (causal and full) are the baseline every run is compared with.
    const bool has_images =
        std::any_of(layout.media().begin(), layout.media().end(),
                    [](const Media& media) { return media.modality == Modality::kImage; });
    for (const PatternInfo& info : known_patterns()) {
      const bool reference = info.name == dense_reference_spec(true).name ||
                             info.name == dense_reference_spec(false).name;
      if (reference || info.dynamic) continue;
      if (info.image_templates && !has_images) continue;
      texts.push_back(info.name);
    }
  }
  const int64_t seq_len = layout.length();
  std::vector<PatternRun> runs;
  for (const PatternSpec& spec : resolve_pattern_flags(texts, &layout, seq_len, seq_len, causal)) {
    runs.push_back({spec.name, spec.to_string(), {spec}});
  }
  return runs;
}

// The config a run reads: --config's, or in a default run the shipped one.
struct BenchConfig {
  PatternConfig config;
  std::string name;   // its path
  std::string label;  // the pattern column: "config", or "mminference" for the shipped one
  std::string what;   // where it came from, in messages: "--config <path>" or "shipped config ..."
};

// A layer's pattern runs: the --pattern runs, then the config's layer, checked (distinct specs
// built once for one head) before any attention runs.
std::vector<PatternRun> pattern_runs(std::vector<PatternRun> runs,
                                     const std::optional<BenchConfig>& config, int64_t layer,
                                     const ModalityLayout& layout, int64_t heads, bool causal) {
  if (config) {
    const int64_t seq_len = layout.length();
    const std::string source = config->name + " layer " + std::to_string(layer);
    std::vector<PatternSpec> specs = config->config.layer_specs(layer, heads);
    check_patterns_build(distinct_specs(specs), &layout, seq_len, seq_len, causal,
                         config->what + " layer " + std::to_string(layer));
    runs.push_back({config->label, source, std::move(specs)});
  }
  return runs;
}

// The layers to run: --layers (all = the ones the config names), else --layer.
std::vector<int64_t> selected_layers(const BenchFlags& flags,
                                     const std::optional<PatternConfig>& config) {
  if (flags.layers.empty()) return {flags.layer};
  const LayerSelection selection = parse_layer_selection(flags.layers);
  if (!selection.all) return selection.layers;
  if (!config) throw_invalid_argument("--layers all", "a --config that names the layers", "none");
  std::vector<int64_t> layers = config_layers(*config);
  if (layers.empty()) {
    throw_invalid_argument("--layers all", "a config that names layers (or a list: --layers 0,1)",
                           "'" + flags.config_path + "' with a default only");
  }
  return layers;
}

// Query tiles per head the tile oracle sums by default: at 128K (1024 tiles of 128 rows) a
// quarter; every tile at the CPU's default length.
constexpr int64_t kDefaultOracleTiles = 256;

// The synthetic behaviour of each head, from any run's per-head reports.
std::vector<std::string> layer_behaviours(const LayerReport& layer) {
  std::vector<std::string> behaviours;
  if (layer.runs.empty()) return behaviours;
  for (const HeadReport& head : layer.runs.front().heads) {
    if (head.batch == 0) behaviours.push_back(head.behaviour);
  }
  return behaviours;
}

double mean_of(const std::vector<double>& values) {
  double sum = 0.0;
  for (double value : values) sum += value;
  return values.empty() ? 0.0 : sum / static_cast<double>(values.size());
}

// Everything measured on one layer's synthetic workload.
struct BenchLayer {
  LayerReport report;
  std::vector<double> oracle;  // oracle density per head
  LayerTileOracle tile_oracle;
  NeedleTask needles;  // needle keys depend on the seed, so on the layer
};

// The tile oracle of the layer's heads, with each run's bound at the recalls it reached.
void measure_layer_tile_oracle(const BenchFlags& flags, const Executor& executor,
                               const TensorView& dense_lse, int64_t head_dim, StepProgress& steps,
                               BenchLayer& layer) {
  std::vector<std::vector<double>> head_recalls;
  for (const RunReport& run : layer.report.runs) {
    std::vector<double> recalls;
    for (const HeadReport& head : run.heads) {
      if (head.batch != 0) continue;
      recalls.push_back(head.accuracy ? head.accuracy->recall_mean : std::nan(""));
    }
    head_recalls.push_back(std::move(recalls));
  }
  steps.begin(fmt::format("layer {}: tile oracle", layer.report.layer));
  layer.tile_oracle = measure_tile_oracle(executor.run_q(), executor.run_k(), dense_lse,
                                          preferred_tile_rows(executor.device(), head_dim),
                                          flags.tile_oracle, flags.exec.threads, head_recalls);
  steps.end();
  for (std::size_t run = 0; run < head_recalls.size(); ++run) {
    layer.report.oracle_bounds.push_back(layer.tile_oracle.run_bound(run));
  }
}

BenchLayer bench_layer(const BenchFlags& flags, const std::vector<PatternRun>& runs, int64_t layer,
                       WorkloadSpec spec, Executor& executor, Progress& progress,
                       StepProgress& steps, double dense_estimate) {
  spec.seed = synthetic_layer_seed(spec.seed, layer);
  const DType dtype = flags.exec.data_type();
  progress.step(
      fmt::format("layer {}: synthetic workload '{}', seed {}", layer, spec.preset, spec.seed));
  const Workload workload = Workload::create(spec);
  const WorkloadSpec& resolved = workload.spec();
  const Workload::Tensors tensors = workload.materialize(dtype);
  executor.set_inputs(tensors.q.view(), tensors.k.view(), tensors.v.view());
  const int64_t seq_len = workload.seq_len();
  const int64_t heads = resolved.q_heads;

  BenchLayer result;
  result.report.layer = layer;
  result.report.source = fmt::format("SYNTHETIC seed {}", spec.seed);
  Tensor dense_out(dtype, {1, seq_len, heads, resolved.head_dim});
  Tensor dense_lse(DType::kFloat32, {1, heads, seq_len});
  const bool causal = workload.causal();
  const PreparedPlan dense_plan = executor.prepare(
      executor.build({dense_reference_spec(causal)}, {1, heads, seq_len, seq_len, kDefaultTileRows},
                     nullptr, nullptr, resolved.head_dim));
  steps.begin(fmt::format("layer {}: dense reference", layer), dense_estimate);
  result.report.dense_seconds = executor.run(dense_plan, dense_out.view(), dense_lse.view());
  steps.end();
  result.report.dense_pairs = causal_pair_count(seq_len, seq_len, causal) * heads;
  result.report.dense_spec = dense_reference_spec(causal).to_string();

  const std::vector<int64_t> rows = sample_rows(seq_len, flags.oracle_rows);
  steps.begin(fmt::format("layer {}: oracle density", layer));
  for (int64_t head = 0; head < heads; ++head) {
    result.oracle.push_back(oracle_density(tensors.q.view(), tensors.k.view(), 0, head,
                                           flags.recall_target, rows, 0.0f, flags.exec.threads,
                                           causal)
                                .density);
    steps.update(static_cast<double>(head + 1) / static_cast<double>(heads));
  }
  steps.end();

  result.needles = workload_needle_task(workload);
  const TensorView dense_out_view = dense_out.view(), dense_lse_view = dense_lse.view();
  LayerInputs inputs{tensors.q.view(), tensors.k.view(), &workload.layout(), 1,
                     &dense_out_view,  &dense_lse_view,  &result.needles,    {}};
  for (int64_t head = 0; head < heads; ++head) {
    inputs.behaviours.emplace_back(head_behaviour_name(workload.behaviour(head)));
  }
  inputs.causal = causal;
  for (const PatternRun& run : runs) {
    Tensor out(dtype, {1, seq_len, heads, resolved.head_dim});
    Tensor lse(DType::kFloat32, {1, heads, seq_len});
    steps.begin(fmt::format("layer {}: {}", layer, run.spec_text));
    result.report.runs.push_back(measure_run(executor, run, inputs, out.view(), lse.view()));
    steps.end();
  }
  // The tile oracle sums causal tiles (metrics.h); a non-causal layer has none of its own yet.
  if (causal) {
    measure_layer_tile_oracle(flags, executor, dense_lse_view, resolved.head_dim, steps, result);
  }
  progress.done(fmt::format("dense {:.2f} ms, {} pattern runs, oracle density {:.2f}%",
                            1000.0 * *result.report.dense_seconds, result.report.runs.size(),
                            100.0 * mean_of(result.oracle)));
  return result;
}

// The shipped config's run in a default run's layer (its last run), if one ran.
std::optional<std::size_t> shipped_run(const BenchLayer& layer, const DefaultConfig& shipped) {
  if (!shipped.config || layer.report.runs.empty()) return std::nullopt;
  return layer.report.runs.size() - 1;
}

// What a default run compares, and on a CPU that its times are the reference backend's.
void print_default_run_header(const DefaultConfig& shipped, const WorkloadSpec& workload,
                              int64_t seq_len, bool gpu) {
  if (shipped.config) {
    fmt::print("MMInference per-head config {} (configs/README.md), searched on: {}\n",
               shipped.file,
               shipped.calibration.empty() ? "(no search record)" : shipped.calibration);
  } else {
    fmt::print("MMInference config: {}; to add it: {}\n", shipped.missing,
               default_config_search_command(workload, seq_len, gpu));
  }
  if (!gpu) {
    fmt::print(
        "CPU reference backend: the oracle every kernel is tested against; its times show "
        "each pattern's work on this host, not GPU speed (--device cuda on a GPU machine)\n");
  }
}

int run_bench(const BenchFlags& flags) {
  const bool gpu = use_gpu(flags.exec.device_choice());
  const bool progress_enabled = !flags.exec.quiet && flags.exec.json_path != "-";
  WorkloadSpec spec = flags.workload.spec();
  if (!gpu && spec.seq_len == 0) spec.seq_len = kCpuDefaultSeqLen;
  const bool default_run = flags.patterns.empty() && flags.config_path.empty();
  const bool needles_given =
      flags.workload.needles_option != nullptr && flags.workload.needles_option->count() > 0;
  if (default_run && !needles_given && spec.needles == 0) spec.needles = kDefaultBenchNeedles;
  const DType dtype = flags.exec.data_type();
  check_output_path(flags.exec.json_path, "--json");
  const std::optional<PatternConfig> flag_config = read_config(flags.config_path);
  const std::vector<int64_t> layers = selected_layers(flags, flag_config);
  // Layers differ only by seed: the shape, the layout and the needle count are the first layer's.
  // Creating the workload generates no tensors, so bad specs fail here in milliseconds.
  const Workload reference = Workload::create(spec);
  const WorkloadSpec& resolved = reference.spec();
  std::optional<BenchConfig> config;
  if (flag_config) {
    config =
        BenchConfig{*flag_config, flags.config_path, "config", "--config " + flags.config_path};
  }
  DefaultConfig shipped;
  if (default_run) {
    shipped = default_bench_config(resolved, reference.seq_len());
    if (shipped.config) {
      config = BenchConfig{*shipped.config, shipped.file, "mminference",
                           "shipped config " + shipped.file};
    }
  }
  const std::vector<PatternRun> common_runs =
      flag_runs(flags, flag_config.has_value(), reference.layout(), reference.causal());
  std::vector<std::vector<PatternRun>> layer_runs;
  for (int64_t layer : layers) {
    layer_runs.push_back(pattern_runs(common_runs, config, layer, reference.layout(),
                                      resolved.q_heads, reference.causal()));
  }

  if (config) {
    print_config_mismatch_warnings(config->config, config->what, reference.seq_len(),
                                   &reference.layout());
  }
  const double dense_estimate =
      gpu ? 0.0
          : estimate_dense_on_cpu(
                flags.exec.threads,
                causal_pair_count(reference.seq_len(), reference.seq_len(), reference.causal()) *
                    resolved.q_heads,
                resolved.head_dim, static_cast<int64_t>(layers.size()),
                static_cast<int64_t>(layer_runs.empty() ? 0 : layer_runs.front().size()));

  Executor executor(gpu, flags.exec.threads, flags.timing);
  Progress progress(static_cast<int>(layers.size()), progress_enabled);
  StepProgress steps(progress_mode(flags.exec.quiet, flags.exec.json_path));
  executor.set_attention_progress(steps.fraction_callback());
  std::vector<BenchLayer> measured;
  for (std::size_t l = 0; l < layers.size(); ++l) {
    measured.push_back(bench_layer(flags, layer_runs[l], layers[l], spec, executor, progress, steps,
                                   dense_estimate));
  }
  const int64_t needles = resolved.needles;
  std::vector<LayerReport> reports;
  for (const BenchLayer& layer : measured) reports.push_back(layer.report);

  const std::string device = executor.device_label();
  const bool several_layers = layers.size() > 1 || !flags.layers.empty();
  if (flags.exec.json_path != "-") {
    fmt::print(
        "mmsparse bench  SYNTHETIC workload '{}': {} tokens, {} query heads{}, {} KV heads, "
        "head dim {}, seed {}{}\n",
        resolved.preset, reference.seq_len(), resolved.q_heads, head_mix_note(resolved),
        resolved.kv_heads, resolved.head_dim, resolved.seed,
        several_layers ? " + layer (one synthetic workload per layer)" : "");
    if (!reference.causal()) {
      fmt::print(
          "non-causal (full) attention: dense is the full reference, density counts all "
          "query x key pairs; the tile oracle is causal only and is left out\n");
    }
    if (needles > 0) {
      fmt::print("needles: {} planted in the media; the final question (rows {}..{}) reads them\n",
                 needles, reference.question_begin(), reference.seq_len() - 1);
    }
    fmt::print("device {}, dtype {}\n", device, dtype_name(dtype));
    if (default_run) print_default_run_header(shipped, resolved, reference.seq_len(), gpu);
    for (const BenchLayer& layer : measured) {
      fmt::print(
          "\nlayer {} ({}): oracle density at recall {:.2f}: mean {:.2f}% over heads ({} "
          "sampled rows per head)\n",
          layer.report.layer, layer.report.source, flags.recall_target,
          100.0 * mean_of(layer.oracle), flags.oracle_rows);
      print_summary_table(layer.report, needles);
      if (reference.causal()) print_tile_oracle_line(layer.tile_oracle);
      if (flags.per_head) {
        if (reference.causal()) {
          print_tile_oracle_heads(layer.tile_oracle, layer_behaviours(layer.report));
        }
        print_per_head_tables(layer.report);
      }
    }
    if (several_layers) print_layer_table(reports);
    print_column_footer(needles, gpu, flags.timing.for_device(gpu));
    if (!measured.empty() && reference.causal()) {
      fmt::print("{}.\n", tile_oracle_footer(measured.front().tile_oracle));
    }
    if (default_run && !measured.empty()) {
      fmt::print("\n{}\n",
                 default_verdict_line(measured.front().report,
                                      shipped_run(measured.front(), shipped), shipped, gpu));
    }
  }

  nlohmann::json report = layers_json(reports, resolved.head_dim);
  report["workload"] = {{"synthetic", true},
                        {"preset", resolved.preset},
                        {"seq_len", reference.seq_len()},
                        {"q_heads", resolved.q_heads},
                        {"kv_heads", resolved.kv_heads},
                        {"head_dim", resolved.head_dim},
                        {"seed", resolved.seed},
                        {"causal", reference.causal()},
                        {"layer_seed", "seed + layer"},
                        {"needles", needles},
                        {"recall_target", flags.recall_target},
                        {"oracle_rows_per_head", flags.oracle_rows}};
  if (needles > 0) {
    report["workload"]["question_rows"] = {reference.question_begin(), reference.seq_len()};
  }
  for (std::size_t l = 0; l < measured.size(); ++l) {
    report["layers"][l]["oracle_density"] = measured[l].oracle;
    if (reference.causal()) {
      report["layers"][l]["tile_oracle"] = tile_oracle_json(measured[l].tile_oracle);
    }
    for (std::size_t run = 0; run < measured[l].report.oracle_bounds.size(); ++run) {
      report["layers"][l]["patterns"][run]["tile_oracle_bound"] =
          measured[l].report.oracle_bounds[run];
    }
    if (needles > 0) report["layers"][l]["needle_keys"] = measured[l].needles.keys;
  }
  if (default_run && !measured.empty()) {
    report["verdict"] = default_verdict_json(measured.front().report,
                                             shipped_run(measured.front(), shipped), shipped);
  }
  report["device"] = device;
  report["dtype"] = dtype_name(dtype);
  write_json_output(flags.exec.json_path, report.dump(2));
  return 0;
}

}  // namespace

Command add_bench_command(CLI::App& app) {
  auto flags = std::make_shared<BenchFlags>();
  CLI::App* command = app.add_subcommand(
      "bench",
      "dense vs sparse patterns on a synthetic VLM workload (CPU: 4096 tokens by default)");
  flags->workload.add_to(*command);
  flags->exec.add_to(*command);
  command->add_option("--pattern", flags->patterns,
                      "pattern spec to run, repeatable (default: every static pattern)");
  command->add_option("--config", flags->config_path, "per-model pattern config (JSON)");
  CLI::Option* layer = command
                           ->add_option("--layer", flags->layer,
                                        "layer of the config to use (synthetic seed + layer)")
                           ->capture_default_str();
  command
      ->add_option("--layers", flags->layers,
                   "layers to run: all (those the config names) or a list 0,3,5; each layer's "
                   "synthetic workload uses seed + layer")
      ->excludes(layer);
  command->add_flag("--per-head", flags->per_head,
                    "print a table per pattern run with one row per head");
  command
      ->add_option("--oracle-rows", flags->oracle_rows,
                   "query rows per head sampled for the oracle density")
      ->capture_default_str();
  command->add_option("--recall-target", flags->recall_target, "recall for the oracle density")
      ->check(CLI::Range(0.0, 1.0))
      ->capture_default_str();
  flags->tile_oracle.add_to(*command, kDefaultOracleTiles, kDefaultOracleTiles);
  add_timing_options(*command, flags->timing, "per measurement");
  return {command, [flags] { return run_bench(*flags); }};
}

}  // namespace mmsparse::cli
