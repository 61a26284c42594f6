#include "bench_command.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <memory>
#include <sstream>

#include <fmt/core.h>
#include <nlohmann/json.hpp>

#include "cli_common.h"
#include "executor.h"
#include "mmsparse/attention.h"
#include "mmsparse/metrics.h"
#include "mmsparse/patterns.h"
#include "mmsparse/status.h"

namespace mmsparse::cli {
namespace {

struct BenchFlags {
  WorkloadFlags workload;
  ExecutionFlags exec;
  std::vector<std::string> patterns;
  std::string config_path;
  int64_t layer = 0;
  int64_t oracle_rows = 64;
  double recall_target = 0.95;
  TimingFlags timing;
};

struct PatternRun {
  std::string label;
  std::string spec_text;
  std::vector<PatternSpec> specs;  // one for all heads, or one per head
};

struct PatternResult {
  PatternRun run;
  std::vector<HeadAccuracy> heads;
  std::vector<double> head_density;
  double plan_seconds = 0.0;
  double attention_seconds = 0.0;
  int64_t computed_pairs = 0;
};

std::vector<PatternRun> pattern_runs(const BenchFlags& flags, const ModalityLayout& layout,
                                     int64_t heads) {
  std::vector<PatternRun> runs;
  for (const std::string& text : flags.patterns) {
    const PatternSpec spec = resolve_pattern(PatternSpec::parse(text), &layout);
    runs.push_back({spec.name, spec.to_string(), {spec}});
  }
  if (!flags.config_path.empty()) {
    std::ifstream file(flags.config_path);
    if (!file) throw Error(ErrorCode::kIoError, "--config: cannot open '" + flags.config_path + "'");
    std::stringstream text;
    text << file.rdbuf();
    const PatternConfig config = PatternConfig::from_json(text.str());
    runs.push_back({"config", flags.config_path + " layer " + std::to_string(flags.layer),
                    config.layer_specs(flags.layer, heads)});
  }
  if (runs.empty()) {
    // Dynamic patterns are built on the host for now (their GPU index builders are issue 4's), which
    // takes seconds per head at 128K: they run when named with --pattern.
    for (const PatternInfo& info : known_patterns()) {
      if (info.name == "dense" || info.dynamic) continue;
      const PatternSpec spec = resolve_pattern(scaled_default_spec(info, layout.length()), &layout);
      runs.push_back({spec.name, spec.to_string(), {spec}});
    }
  }
  return runs;
}

template <class Field>
double mean_over(const std::vector<HeadAccuracy>& heads, Field field) {
  double sum = 0.0;
  for (const HeadAccuracy& head : heads) sum += field(head);
  return heads.empty() ? 0.0 : sum / static_cast<double>(heads.size());
}

double mean_of(const std::vector<double>& values) {
  double sum = 0.0;
  for (double value : values) sum += value;
  return values.empty() ? 0.0 : sum / static_cast<double>(values.size());
}

double min_recall(const std::vector<HeadAccuracy>& heads) {
  double lowest = 1.0;
  for (const HeadAccuracy& head : heads) lowest = std::min(lowest, head.recall_min);
  return lowest;
}

int run_bench(const BenchFlags& flags) {
  const bool gpu = use_gpu(flags.exec.device_choice());
  const bool progress_enabled = !flags.exec.quiet && flags.exec.json_path != "-";
  WorkloadSpec spec = flags.workload.spec();
  if (!gpu && spec.seq_len == 0) spec.seq_len = kCpuDefaultSeqLen;
  const DType dtype = flags.exec.data_type();

  Executor executor(gpu, flags.exec.threads, flags.timing);

  Progress progress(4, progress_enabled);
  progress.step("generating synthetic workload '" + spec.preset + "'");
  const Workload workload = Workload::create(spec);
  const WorkloadSpec& resolved = workload.spec();
  const Workload::Tensors tensors = workload.materialize(dtype);
  executor.set_inputs(tensors.q.view(), tensors.k.view(), tensors.v.view());
  const int64_t seq_len = workload.seq_len();
  const int64_t heads = resolved.q_heads;
  const PlanShape shape{1, heads, seq_len, seq_len, kDefaultTileRows};
  progress.done(fmt::format("{} tokens, {} heads, on {}", seq_len, heads, executor.device_label()));

  progress.step("dense attention (the reference every pattern is compared with)");
  Tensor dense_out(dtype, {1, seq_len, heads, resolved.head_dim});
  Tensor dense_lse(DType::kFloat32, {1, heads, seq_len});
  const PreparedPlan dense_plan = executor.prepare(
      executor.build({PatternSpec{"dense", {}}}, shape, nullptr, nullptr, resolved.head_dim));
  const double dense_seconds = executor.run(dense_plan, dense_out.view(), dense_lse.view());
  const int64_t dense_pairs = causal_pair_count(seq_len, seq_len) * heads;
  progress.done(fmt::format("{:.2f} ms", 1000.0 * dense_seconds));

  progress.step(fmt::format("oracle density at recall {:.2f} ({} sampled rows per head)",
                            flags.recall_target, flags.oracle_rows));
  const std::vector<int64_t> rows = sample_rows(seq_len, flags.oracle_rows);
  std::vector<double> oracle(heads);
  for (int64_t head = 0; head < heads; ++head) {
    oracle[head] = oracle_density(tensors.q.view(), tensors.k.view(), 0, head, flags.recall_target,
                                  rows, 0.0f, flags.exec.threads)
                       .density;
  }
  progress.done(fmt::format("mean {:.2f}%", 100.0 * mean_of(oracle)));

  const std::vector<PatternRun> runs = pattern_runs(flags, workload.layout(), heads);
  const PatternInputs inputs{tensors.q.view(), tensors.k.view()};  // for dynamic patterns
  progress.step(fmt::format("{} sparse patterns", runs.size()));
  std::vector<PatternResult> results;
  for (const PatternRun& run : runs) {
    PatternResult result{run, {}, {}, 0.0, 0.0, 0};
    const auto plan_start = std::chrono::steady_clock::now();
    const PreparedPlan plan =
        executor.prepare(executor.build(run.specs, shape, &workload.layout(), &inputs,
                                        resolved.head_dim));
    result.plan_seconds = seconds_since(plan_start);

    Tensor out(dtype, {1, seq_len, heads, resolved.head_dim});
    Tensor lse(DType::kFloat32, {1, heads, seq_len});
    result.attention_seconds = executor.run(plan, out.view(), lse.view());

    for (int64_t head = 0; head < heads; ++head) {
      result.heads.push_back(
          compare_head(out.view(), lse.view(), dense_out.view(), dense_lse.view(), 0, head));
      result.head_density.push_back(plan_density(plan.plan(), head));
      result.computed_pairs += count_plan_pairs(plan.plan(), head);
    }
    progress.done(fmt::format("{}: {:.2f} ms", run.label, 1000.0 * result.attention_seconds));
    results.push_back(std::move(result));
  }

  const std::string device = executor.device_label();
  if (flags.exec.json_path != "-") {
    fmt::print("mmsparse bench  SYNTHETIC workload '{}': {} tokens, {} query heads, {} KV heads, "
               "head dim {}, seed {}\n",
               resolved.preset, seq_len, heads, resolved.kv_heads, resolved.head_dim,
               resolved.seed);
    fmt::print("device {}, dtype {}; oracle density at recall {:.2f}: mean {:.2f}% over heads "
               "({} sampled rows per head)\n\n",
               device, dtype_name(dtype), flags.recall_target, 100.0 * mean_of(oracle),
               flags.oracle_rows);
    fmt::print("{:<14} {:<42} {:>8} {:>8} {:>8} {:>9} {:>9} {:>10} {:>8}\n", "pattern", "spec",
               "density", "recall", "min rec", "out err", "plan ms", "attn ms", "speedup");
    fmt::print("{:<14} {:<42} {:>7.2f}% {:>8.4f} {:>8.4f} {:>9.2e} {:>9} {:>10.1f} {:>7.2f}x\n",
               "dense", "dense", 100.0, 1.0, 1.0, 0.0, "-", 1000.0 * dense_seconds, 1.0);
    for (const PatternResult& result : results) {
      const double total = result.plan_seconds + result.attention_seconds;
      fmt::print("{:<14} {:<42} {:>7.2f}% {:>8.4f} {:>8.4f} {:>9.2e} {:>9.1f} {:>10.1f} {:>7.2f}x\n",
                 result.run.label, result.run.spec_text.substr(0, 42),
                 100.0 * mean_of(result.head_density),
                 mean_over(result.heads, [](const HeadAccuracy& h) { return h.recall_mean; }),
                 min_recall(result.heads),
                 mean_over(result.heads, [](const HeadAccuracy& h) { return h.output_error; }),
                 1000.0 * result.plan_seconds, 1000.0 * result.attention_seconds,
                 dense_seconds / total);
    }
    fmt::print("\ndensity: computed / causal pairs; recall: exp(LSE_plan - LSE_dense), mean over "
               "rows and heads; out err: ||O - O_dense|| / ||O_dense||, mean over heads; "
               "speedup: dense time / (plan + attention time); {}.\n",
               gpu ? fmt::format("GPU times: median of {} after {} warm-up runs; plan time is "
                                 "host building plus upload",
                                 flags.timing.repeats, flags.timing.warmup)
                   : "CPU times: one run of the reference backend");
  }

  nlohmann::json report;
  report["workload"] = {{"synthetic", true},
                        {"preset", resolved.preset},
                        {"seq_len", seq_len},
                        {"q_heads", heads},
                        {"kv_heads", resolved.kv_heads},
                        {"head_dim", resolved.head_dim},
                        {"seed", resolved.seed},
                        {"recall_target", flags.recall_target},
                        {"oracle_rows_per_head", flags.oracle_rows},
                        {"oracle_density", oracle}};
  report["device"] = device;
  report["dtype"] = dtype_name(dtype);
  report["dense"] = {{"seconds", dense_seconds},
                     {"pairs", dense_pairs},
                     {"tflops", attention_flops(dense_pairs, resolved.head_dim) / dense_seconds / 1e12}};
  for (const PatternResult& result : results) {
    nlohmann::json entry = {{"pattern", result.run.label},
                            {"spec", result.run.spec_text},
                            {"density", mean_of(result.head_density)},
                            {"recall_mean", mean_over(result.heads, [](const HeadAccuracy& h) {
                               return h.recall_mean;
                             })},
                            {"recall_min", min_recall(result.heads)},
                            {"plan_seconds", result.plan_seconds},
                            {"attention_seconds", result.attention_seconds},
                            {"computed_pairs", result.computed_pairs},
                            {"speedup", dense_seconds / (result.plan_seconds + result.attention_seconds)}};
    for (size_t head = 0; head < result.heads.size(); ++head) {
      const HeadAccuracy& accuracy = result.heads[head];
      entry["heads"].push_back({{"head", head},
                                {"behaviour", head_behaviour_name(workload.behaviour(head))},
                                {"density", result.head_density[head]},
                                {"recall_mean", accuracy.recall_mean},
                                {"recall_min", accuracy.recall_min},
                                {"output_error", accuracy.output_error},
                                {"nmse", accuracy.nmse}});
    }
    report["patterns"].push_back(entry);
  }
  write_json_output(flags.exec.json_path, report.dump(2));
  return 0;
}

}  // namespace

Command add_bench_command(CLI::App& app) {
  auto flags = std::make_shared<BenchFlags>();
  CLI::App* command = app.add_subcommand(
      "bench", "dense vs sparse patterns on a synthetic VLM workload (CPU: 4096 tokens by default)");
  flags->workload.add_to(*command);
  flags->exec.add_to(*command);
  command->add_option("--pattern", flags->patterns,
                      "pattern spec to run, repeatable (default: every static pattern)");
  command->add_option("--config", flags->config_path, "per-model pattern config (JSON)");
  command->add_option("--layer", flags->layer, "layer of the config to use")->capture_default_str();
  command->add_option("--oracle-rows", flags->oracle_rows,
                      "query rows per head sampled for the oracle density")
      ->capture_default_str();
  command->add_option("--recall-target", flags->recall_target, "recall for the oracle density")
      ->check(CLI::Range(0.0, 1.0))
      ->capture_default_str();
  command->add_option("--warmup", flags->timing.warmup, "GPU warm-up runs per measurement")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  command->add_option("--repeats", flags->timing.repeats, "GPU timed runs per measurement (median)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  return {command, [flags] { return run_bench(*flags); }};
}

}  // namespace mmsparse::cli
