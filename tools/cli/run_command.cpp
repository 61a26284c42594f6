#include "run_command.h"

#include <algorithm>
#include <fstream>
#include <memory>
#include <sstream>

#include <fmt/core.h>
#include <nlohmann/json.hpp>

#include "executor.h"
#include "mmsparse/attention.h"
#include "mmsparse/build_info.h"
#include "mmsparse/io.h"
#include "mmsparse/metrics.h"
#include "mmsparse/patterns.h"
#include "mmsparse/status.h"

namespace mmsparse::cli {
namespace {

struct RunFlags {
  std::string input;
  std::string output;
  std::string pattern;
  std::string config_path;
  int64_t layer = 0;
  bool compare = false;
  ExecutionFlags exec;
  TimingFlags timing;
};

std::string read_text_file(const std::string& path, const std::string& flag) {
  std::ifstream file(path);
  if (!file) throw Error(ErrorCode::kIoError, flag + ": cannot open '" + path + "'");
  std::stringstream text;
  text << file.rdbuf();
  return text.str();
}

int run_attention(const RunFlags& flags) {
  if (!flags.pattern.empty() && !flags.config_path.empty()) {
    throw_invalid_argument("--pattern/--config", "one of them", "both");
  }
  const bool progress_enabled = !flags.exec.quiet && flags.exec.json_path != "-";
  Progress progress(flags.compare ? 4 : 3, progress_enabled);

  progress.step("reading " + flags.input);
  const TensorFile input = read_safetensors(flags.input);
  const Tensor& q = attention_input(input, "q", flags.input);
  const Tensor& k = attention_input(input, "k", flags.input);
  const Tensor& v = attention_input(input, "v", flags.input);
  const bool has_layout = input.has_layout();
  const ModalityLayout layout = has_layout ? input.layout() : ModalityLayout{};
  const int64_t batch = q.shape()[0], q_len = q.shape()[1], heads = q.shape()[2];
  const int64_t kv_len = k.shape()[1];
  progress.done(fmt::format("q {}, k {}, {}", q.view().shape_string(), k.view().shape_string(),
                            has_layout ? "with a modality layout" : "no layout"));

  std::vector<PatternSpec> specs;
  std::string pattern_text;
  if (!flags.config_path.empty()) {
    const PatternConfig config =
        PatternConfig::from_json(read_text_file(flags.config_path, "--config"));
    specs = config.layer_specs(flags.layer, heads);
    pattern_text = flags.config_path + " layer " + std::to_string(flags.layer);
  } else {
    specs = {PatternSpec::parse(flags.pattern.empty() ? "dense" : flags.pattern)};
    pattern_text = specs.front().to_string();
  }

  Executor executor(use_gpu(flags.exec.device_choice()), flags.exec.threads, flags.timing);
  executor.set_inputs(q.view(), k.view(), v.view());
  progress.step("attention with " + pattern_text + " on " + executor.device_label());
  // Dynamic patterns are estimated per batch element: their plan has a head slot per element.
  const int64_t plan_batch = any_dynamic(specs) ? batch : 1;
  const int64_t head_dim = q.shape()[3];
  const PlanShape shape{1, heads, q_len, kv_len, kDefaultTileRows};
  const PatternInputs inputs{q.view(), k.view()};
  const PreparedPlan plan =
      executor.prepare(executor.build(specs, {plan_batch, heads, q_len, kv_len, kDefaultTileRows},
                                      has_layout ? &layout : nullptr, &inputs, head_dim));
  Tensor out(q.dtype(), q.shape());
  Tensor lse(DType::kFloat32, {batch, heads, q_len});
  const double seconds = executor.run(plan, out.view(), lse.view());
  progress.done(fmt::format("{:.3f} ms", 1000.0 * seconds));

  nlohmann::json report = {{"input", flags.input}, {"pattern", pattern_text}, {"seconds", seconds}};
  if (flags.compare) {
    progress.step("dense attention for comparison");
    Tensor dense_out(q.dtype(), q.shape());
    Tensor dense_lse(DType::kFloat32, {batch, heads, q_len});
    const double dense_seconds = executor.run(
        executor.prepare(executor.build({PatternSpec{"dense", {}}}, shape, nullptr, nullptr, head_dim)),
        dense_out.view(),
        dense_lse.view());
    report["dense_seconds"] = dense_seconds;
    progress.done(fmt::format("{:.3f} ms", 1000.0 * dense_seconds));
    if (flags.exec.json_path != "-") {
      fmt::print("{:>6} {:>6} {:>9} {:>9} {:>9} {:>10}\n", "batch", "head", "density", "recall",
                 "min rec", "out err");
    }
    for (int64_t b = 0; b < batch; ++b) {
      for (int64_t head = 0; head < heads; ++head) {
        const HeadAccuracy accuracy =
            compare_head(out.view(), lse.view(), dense_out.view(), dense_lse.view(), b, head);
        const double density = plan_density(plan.plan(), (plan_batch == 1 ? 0 : b) * heads + head);
        if (flags.exec.json_path != "-") {
          fmt::print("{:>6} {:>6} {:>8.2f}% {:>9.4f} {:>9.4f} {:>10.2e}\n", b, head,
                     100.0 * density, accuracy.recall_mean, accuracy.recall_min,
                     accuracy.output_error);
        }
        report["heads"].push_back({{"batch", b},
                                   {"head", head},
                                   {"density", density},
                                   {"recall_mean", accuracy.recall_mean},
                                   {"recall_min", accuracy.recall_min},
                                   {"output_error", accuracy.output_error},
                                   {"nmse", accuracy.nmse}});
      }
    }
  }

  if (!flags.output.empty()) {
    progress.step("writing " + flags.output);
    std::map<std::string, std::string> metadata = {{"mmsparse.pattern", pattern_text},
                                                   {"mmsparse.version", build_info().version},
                                                   {"mmsparse.input", flags.input}};
    if (has_layout) metadata[kLayoutMetadataKey] = layout.to_json();
    write_safetensors(flags.output, {{"out", out.view()}, {"lse", lse.view()}}, metadata);
    progress.done("done");
  }
  write_json_output(flags.exec.json_path, report.dump(2));
  return 0;
}

struct GenerateFlags {
  WorkloadFlags workload;
  std::string dtype = "bf16";
  std::string output;
};

int run_generate(const GenerateFlags& flags) {
  const Workload workload = Workload::create(flags.workload.spec());
  const Workload::Tensors tensors = workload.materialize(dtype_from_name(flags.dtype));
  const WorkloadSpec& spec = workload.spec();
  const nlohmann::json description = {{"synthetic", true},       {"preset", spec.preset},
                                      {"seq_len", workload.seq_len()}, {"q_heads", spec.q_heads},
                                      {"kv_heads", spec.kv_heads}, {"head_dim", spec.head_dim},
                                      {"seed", spec.seed},         {"needles", spec.needles}};
  write_safetensors(flags.output,
                    {{"q", tensors.q.view()}, {"k", tensors.k.view()}, {"v", tensors.v.view()}},
                    {{kLayoutMetadataKey, workload.layout().to_json()},
                     {"mmsparse.workload", description.dump()},
                     {"mmsparse.version", build_info().version}});
  fmt::print("wrote SYNTHETIC workload '{}' ({} tokens, q {}) to {}\n", spec.preset,
             workload.seq_len(), tensors.q.view().shape_string(), flags.output);
  return 0;
}

}  // namespace

Command add_run_command(CLI::App& app) {
  auto flags = std::make_shared<RunFlags>();
  CLI::App* command = app.add_subcommand(
      "run", "attention on q, k, v [batch, seq, heads, head_dim] from a safetensors file");
  command->add_option("--input,-i", flags->input, "safetensors file with tensors q, k, v")
      ->required()
      ->check(CLI::ExistingFile);
  command->add_option("--output,-o", flags->output, "safetensors file to write out and lse to");
  command->add_option("--pattern", flags->pattern, "pattern spec for every head (default dense)");
  command->add_option("--config", flags->config_path, "per-model pattern config (JSON)");
  command->add_option("--layer", flags->layer, "layer of the config")->capture_default_str();
  command->add_flag("--compare", flags->compare,
                    "also run dense attention and report recall and output error per head");
  flags->exec.add_to(*command);
  command->add_option("--warmup", flags->timing.warmup, "GPU warm-up runs")->capture_default_str();
  command->add_option("--repeats", flags->timing.repeats, "GPU timed runs (median)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  return {command, [flags] { return run_attention(*flags); }};
}

Command add_generate_command(CLI::App& app) {
  auto flags = std::make_shared<GenerateFlags>();
  CLI::App* command = app.add_subcommand(
      "generate", "write a synthetic workload's q, k, v and layout to a safetensors file");
  flags->workload.add_to(*command);
  command->add_option("--dtype", flags->dtype, "bf16, fp16 or fp32")->capture_default_str();
  command->add_option("--output,-o", flags->output, "safetensors file to write")->required();
  return {command, [flags] { return run_generate(*flags); }};
}

}  // namespace mmsparse::cli
