#include "run_command.h"

#include <algorithm>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <sstream>
#include <string_view>

#include <fmt/core.h>
#include <nlohmann/json.hpp>

#include "executor.h"
#include "layers.h"
#include "mmsparse/attention.h"
#include "mmsparse/build_info.h"
#include "mmsparse/tools/io.h"
#include "mmsparse/tools/metrics.h"
#include "mmsparse/patterns.h"
#include "mmsparse/status.h"
#include "progress.h"
#include "report.h"
#include "warnings.h"

namespace mmsparse::cli {
namespace {

struct RunFlags {
  std::string input;
  std::string output;
  std::vector<std::string> patterns;
  std::string config_path;
  int64_t layer = 0;
  std::string layers;  // --layers: "all" or a list; empty: --layer alone
  bool compare = false;
  bool per_head = false;
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

// A layer to run and the prefix of its tensors in the input ("" for the single-layer q, k, v).
struct InputLayer {
  int64_t layer = 0;
  std::string prefix;
};

// --layers picks layers.<L>.q/k/v tensors; --layer alone takes layers.<L>.* when the file has them,
// else the single-layer q, k, v (which a config's layer L then applies to).
std::vector<InputLayer> input_layers(const RunFlags& flags, const TensorFile& input) {
  const std::vector<int64_t> in_file = tensor_file_layers(input);
  if (flags.layers.empty()) {
    const bool layered = std::find(in_file.begin(), in_file.end(), flags.layer) != in_file.end();
    return {{flags.layer, layered ? layer_tensor_prefix(flags.layer) : ""}};
  }
  const LayerSelection selection = parse_layer_selection(flags.layers);
  if (selection.all && in_file.empty()) {
    throw_invalid_argument("--layers all",
                           "tensors named layers.<L>.q, .k, .v in --input " + flags.input,
                           "none (single-layer files hold q, k, v: use --layer)");
  }
  std::vector<InputLayer> layers;
  for (int64_t layer : selection.all ? in_file : selection.layers) {
    if (std::find(in_file.begin(), in_file.end(), layer) == in_file.end()) {
      throw_invalid_argument("--layers", "layers present in --input " + flags.input + " (" +
                                             std::to_string(in_file.size()) + " with layers.<L>.q)",
                             "layer " + std::to_string(layer));
    }
    layers.push_back({layer, layer_tensor_prefix(layer)});
  }
  return layers;
}

// Attention output of one layer, kept until it is written.
struct LayerOutput {
  std::string prefix;
  Tensor out, lse;
};

// A layer's pattern runs, resolved and checked before any attention runs: the config's specs for
// its heads, or each --pattern (dense when none is given) resolved as bench resolves them.
std::vector<PatternRun> layer_runs(const RunFlags& flags,
                                   const std::optional<PatternConfig>& config, int64_t layer,
                                   const AttentionInputs& tensors, const ModalityLayout* layout,
                                   bool causal) {
  const int64_t heads = tensors.q->shape()[2];
  const int64_t q_len = tensors.q->shape()[1], kv_len = tensors.k->shape()[1];
  std::vector<PatternRun> runs;
  if (config) {
    const std::string source = flags.config_path + " layer " + std::to_string(layer);
    std::vector<PatternSpec> specs = config->layer_specs(layer, heads);
    std::vector<PatternSpec> distinct;
    for (const PatternSpec& spec : specs) {
      if (std::find_if(distinct.begin(), distinct.end(), [&](const PatternSpec& seen) {
            return seen.to_string() == spec.to_string();
          }) == distinct.end()) {
        distinct.push_back(spec);
      }
    }
    check_patterns_build(distinct, layout, q_len, kv_len, causal, "--config " + source);
    runs.push_back({"config", source, std::move(specs)});
    return runs;
  }
  const std::vector<std::string> texts =
      flags.patterns.empty() ? std::vector<std::string>{dense_reference_spec(causal).to_string()}
                             : flags.patterns;
  for (const PatternSpec& spec : resolve_pattern_flags(texts, layout, q_len, kv_len, causal)) {
    runs.push_back({spec.name, spec.to_string(), {spec}});
  }
  return runs;
}

// The human-readable report: each layer's summary (and per-head) tables, then the layer table.
void print_tables(const RunFlags& flags, const std::vector<LayerReport>& reports, int64_t needles,
                  const std::string& device_label, std::string_view dtype, bool gpu, bool causal) {
  fmt::print("mmsparse run  {}: {} layer{}, device {}, dtype {}, {} attention\n", flags.input,
             reports.size(), reports.size() == 1 ? "" : "s", device_label, dtype,
             causal ? "causal" : "non-causal (full)");
  for (const LayerReport& report : reports) {
    fmt::print("\nlayer {} ({})\n", report.layer, report.source);
    print_summary_table(report, needles);
    if (flags.per_head) print_per_head_tables(report);
  }
  if (reports.size() > 1 || !flags.layers.empty()) print_layer_table(reports);
  print_column_footer(needles, gpu, flags.timing.for_device(gpu));
  if (!flags.compare) fmt::print("(recall, min rec, output error and speedup need --compare)\n");
}

// --output: every layer's out and lse, with the version, the input, each layer's pattern and the
// layout (when the input has one) as metadata.
void write_outputs(const RunFlags& flags, const std::vector<LayerOutput>& outputs,
                   const std::vector<LayerReport>& reports, const ModalityLayout* layout) {
  std::map<std::string, std::string> metadata = {{"mmsparse.version", build_info().version},
                                                 {"mmsparse.input", flags.input}};
  std::map<std::string, TensorView> tensors;
  for (std::size_t l = 0; l < outputs.size(); ++l) {
    tensors[outputs[l].prefix + "out"] = outputs[l].out.view();
    tensors[outputs[l].prefix + "lse"] = outputs[l].lse.view();
    metadata[outputs[l].prefix + "mmsparse.pattern"] = reports[l].runs.front().run.spec_text;
  }
  if (layout != nullptr) metadata[kLayoutMetadataKey] = layout->to_json();
  write_safetensors(flags.output, tensors, metadata);
}

// One layer's inputs and pattern runs, all checked before the first attention runs.
struct PreparedLayer {
  InputLayer selected;
  AttentionInputs tensors;
  std::vector<PatternRun> runs;
};

LayerReport run_layer(const RunFlags& flags, const PreparedLayer& layer, const TensorFile& input,
                      const ModalityLayout* layout, Executor& executor, StepProgress& steps,
                      double dense_estimate, int64_t& needles, LayerOutput& output) {
  const Tensor& q = *layer.tensors.q;
  const Tensor& k = *layer.tensors.k;
  const int64_t batch = q.shape()[0], q_len = q.shape()[1], heads = q.shape()[2];
  const int64_t head_dim = q.shape()[3];
  const bool causal = causal_from_metadata(input);
  executor.set_inputs(q.view(), k.view(), layer.tensors.v->view());
  LayerReport report;
  report.layer = layer.selected.layer;
  report.source = layer.selected.prefix + "q/k/v";
  Tensor dense_out, dense_lse;
  TensorView dense_out_view, dense_lse_view;
  if (flags.compare) {
    dense_out = Tensor(q.dtype(), q.shape());
    dense_lse = Tensor(DType::kFloat32, {batch, heads, q_len});
    dense_out_view = dense_out.view();
    dense_lse_view = dense_lse.view();
    steps.begin(fmt::format("layer {}: dense reference", layer.selected.layer), dense_estimate);
    report.dense_seconds = executor.run(
        executor.prepare(executor.build({dense_reference_spec(causal)},
                                        {1, heads, q_len, k.shape()[1], kDefaultTileRows}, nullptr,
                                        nullptr, head_dim)),
        dense_out_view, dense_lse_view);
    steps.end();
    report.dense_pairs = causal_pair_count(q_len, k.shape()[1], causal) * heads * batch;
    report.dense_spec = dense_reference_spec(causal).to_string();
  }
  const NeedleTask task = needle_task_from_metadata(
      input, layer.selected.prefix.empty() ? -1 : layer.selected.layer, q_len);
  needles = std::max<int64_t>(needles, static_cast<int64_t>(task.keys.size()));
  for (const PatternRun& run : layer.runs) {
    // Dynamic patterns are estimated per batch element: their plan has a head slot per element.
    const LayerInputs inputs{q.view(),
                             k.view(),
                             layout,
                             any_dynamic(run.specs) ? batch : 1,
                             flags.compare ? &dense_out_view : nullptr,
                             flags.compare ? &dense_lse_view : nullptr,
                             &task,
                             {},
                             causal};
    // --output keeps the first run's out and lse.
    Tensor out(q.dtype(), q.shape()), lse(DType::kFloat32, {batch, heads, q_len});
    steps.begin(fmt::format("layer {}: {}", layer.selected.layer, run.spec_text));
    report.runs.push_back(measure_run(executor, run, inputs, out.view(), lse.view()));
    steps.end();
    if (report.runs.size() == 1) {
      output.out = std::move(out);
      output.lse = std::move(lse);
    }
  }
  return report;
}

// Warnings before the work: a config searched on another length or layout, a CPU run that takes
// long. Returns the estimated seconds of one layer's dense attention on the CPU (0 on a GPU).
double warn_before_run(const RunFlags& flags, const TensorFile& input, const std::string& prefix,
                       const std::optional<PatternConfig>& config, const ModalityLayout* layout,
                       bool gpu, int64_t layers) {
  const Tensor& q = attention_input(input, prefix + "q", flags.input);
  const Tensor& k = attention_input(input, prefix + "k", flags.input);
  const int64_t batch = q.shape()[0], q_len = q.shape()[1], heads = q.shape()[2];
  if (config) {
    print_config_mismatch_warnings(*config, "--config " + flags.config_path, q_len, layout);
  }
  if (gpu) return 0.0;
  // Without --compare the run is one sparse (or dense) pass: dense bounds it from above.
  return estimate_dense_on_cpu(
      flags.exec.threads,
      causal_pair_count(q_len, k.shape()[1], causal_from_metadata(input)) * heads * batch,
      q.shape()[3], layers, flags.compare ? 1 : 0, flags.compare);
}

int run_attention(const RunFlags& flags) {
  if (!flags.patterns.empty() && !flags.config_path.empty()) {
    throw_invalid_argument("--pattern/--config", "one of them", "both");
  }
  check_output_path(flags.output, "--output");
  check_output_path(flags.exec.json_path, "--json");
  const bool progress_enabled = !flags.exec.quiet && flags.exec.json_path != "-";

  const TensorFile input = read_input_file(flags.input);
  const bool has_layout = input.has_layout();
  const ModalityLayout layout = has_layout ? input.layout() : ModalityLayout{};
  const ModalityLayout* layout_ptr = has_layout ? &layout : nullptr;
  const std::optional<PatternConfig> config =
      flags.config_path.empty()
          ? std::nullopt
          : std::optional(PatternConfig::from_json(read_text_file(flags.config_path, "--config")));
  std::vector<PreparedLayer> layers;
  for (const InputLayer& selected : input_layers(flags, input)) {
    const AttentionInputs tensors = checked_attention_inputs(input, selected.prefix, flags.input);
    // run computes in the dtype of the file's tensors; --dtype may only confirm it.
    if (flags.exec.dtype_option->count() > 0 &&
        flags.exec.data_type() != tensors.q->dtype()) {
      throw_invalid_argument("--dtype", fmt::format("the dtype of --input {} ({}, or no --dtype)",
                                                    flags.input, dtype_name(tensors.q->dtype())),
                             flags.exec.dtype);
    }
    // --pattern runs depend only on the shapes: layers of the same shapes share one check.
    const bool same_shapes = !layers.empty() && !config &&
                             layers.back().tensors.q->shape() == tensors.q->shape() &&
                             layers.back().tensors.k->shape() == tensors.k->shape();
    layers.push_back({selected, tensors,
                      same_shapes ? layers.back().runs
                                  : layer_runs(flags, config, selected.layer, tensors, layout_ptr,
                                               causal_from_metadata(input))});
  }

  Executor executor(use_gpu(flags.exec.device_choice()), flags.exec.threads, flags.timing);
  Progress progress(static_cast<int>(layers.size()), progress_enabled);
  StepProgress steps(progress_mode(flags.exec.quiet, flags.exec.json_path));
  executor.set_attention_progress(steps.fraction_callback());
  const double dense_estimate = warn_before_run(flags, input, layers.front().selected.prefix, config,
                                                has_layout ? &layout : nullptr, executor.gpu(),
                                                static_cast<int64_t>(layers.size()));
  std::vector<LayerReport> reports;
  std::vector<LayerOutput> outputs;
  int64_t needles = 0;
  for (const PreparedLayer& layer : layers) {
    std::string specs;
    for (const PatternRun& run : layer.runs) specs += (specs.empty() ? "" : ", ") + run.spec_text;
    progress.step(fmt::format("layer {} ({}q/k/v, q {}): {} on {}", layer.selected.layer,
                              layer.selected.prefix, layer.tensors.q->view().shape_string(), specs,
                              executor.device_label()));
    LayerOutput output{layer.selected.prefix, Tensor(), Tensor()};
    LayerReport report = run_layer(flags, layer, input, layout_ptr, executor, steps,
                                     dense_estimate, needles, output);
    progress.done(fmt::format(
        "{:.3f} ms{}", 1000.0 * report.runs.front().attention_seconds,
        report.dense_seconds ? fmt::format(" (dense {:.3f} ms)", 1000.0 * *report.dense_seconds)
                             : ""));
    reports.push_back(std::move(report));
    outputs.push_back(std::move(output));
  }

  if (flags.exec.json_path != "-") {
    print_tables(flags, reports, needles, executor.device_label(),
                 dtype_name(layers.front().tensors.q->dtype()), executor.gpu(),
                 causal_from_metadata(input));
  }
  if (!flags.output.empty()) write_outputs(flags, outputs, reports, layout_ptr);
  nlohmann::json report = layers_json(reports, layers.front().tensors.q->shape()[3]);
  report["input"] = flags.input;
  report["causal"] = causal_from_metadata(input);
  report["device"] = executor.device_label();
  write_json_output(flags.exec.json_path, report.dump(2));
  return 0;
}

struct GenerateFlags {
  WorkloadFlags workload;
  std::string dtype = "bf16";
  std::string output;
  std::string layers;  // --layers 0,1,..: layers.<L>.q/k/v with seed + layer; empty: q, k, v
};

int run_generate(const GenerateFlags& flags) {
  check_output_path(flags.output, "--output");
  const WorkloadSpec base = flags.workload.spec();
  std::vector<int64_t> layers;
  if (!flags.layers.empty()) {
    const LayerSelection selection = parse_layer_selection(flags.layers);
    if (selection.all) throw_invalid_argument("--layers", "a list of layers (0,1,2)", "all");
    layers = selection.layers;
  }
  const bool layered = !layers.empty();
  if (!layered) layers = {0};

  std::vector<Workload::Tensors> generated;
  std::map<std::string, TensorView> views;
  std::map<int64_t, std::vector<int64_t>> layer_needles;
  std::vector<int64_t> needle_keys;
  std::optional<Workload> first;
  for (int64_t layer : layers) {
    WorkloadSpec spec = base;
    if (layered) spec.seed = synthetic_layer_seed(base.seed, layer);
    Workload workload = Workload::create(spec);
    generated.push_back(workload.materialize(dtype_from_name(flags.dtype)));
    const std::string prefix = layered ? layer_tensor_prefix(layer) : "";
    views[prefix + "q"] = generated.back().q.view();
    views[prefix + "k"] = generated.back().k.view();
    views[prefix + "v"] = generated.back().v.view();
    const NeedleTask task = workload_needle_task(workload);
    if (layered) {
      layer_needles[layer] = task.keys;
    } else {
      needle_keys = task.keys;
    }
    if (!first) first.emplace(std::move(workload));
  }
  const WorkloadSpec& spec = first->spec();
  const nlohmann::json description = {
      {"synthetic", true},
      {"preset", spec.preset},
      {"seq_len", first->seq_len()},
      {"q_heads", spec.q_heads},
      {"kv_heads", spec.kv_heads},
      {"head_dim", spec.head_dim},
      {"seed", base.seed},
      {"needles", spec.needles},
      {"causal", first->causal()},
      {"layers", layered ? nlohmann::json(layers) : nlohmann::json()},
      {"layer_seed", "seed + layer"}};
  std::map<std::string, std::string> metadata = {
      {kLayoutMetadataKey, first->layout().to_json()},
      {"mmsparse.workload", description.dump()},
      {"mmsparse.version", build_info().version},
      {kCausalMetadataKey, causal_metadata(first->causal())}};
  if (spec.needles > 0) {
    metadata[kNeedlesMetadataKey] =
        needles_metadata(first->question_begin(), needle_keys, layer_needles);
  }
  write_safetensors(flags.output, views, metadata);
  fmt::print("wrote SYNTHETIC workload '{}' ({} tokens, q {}{}) to {}\n", spec.preset,
             first->seq_len(), generated.front().q.view().shape_string(),
             layered ? fmt::format(", {} layers", layers.size()) : "", flags.output);
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
  command->add_option("--pattern", flags->patterns,
                      "pattern spec for every head, repeatable (default dense; --output keeps the "
                      "first); defaults scaled to the sequence length as in bench");
  command->add_option("--config", flags->config_path, "per-model pattern config (JSON)");
  CLI::Option* layer =
      command
          ->add_option("--layer", flags->layer,
                       "layer of the config; reads layers.<L>.q/k/v when the file has them, "
                       "else q, k, v")
          ->capture_default_str();
  command->add_option("--layers", flags->layers,
                      "layers to run: all (every layers.<L>.q in the file) or a list 0,3,5")
      ->excludes(layer);
  command->add_flag("--compare", flags->compare,
                    "also run dense attention: recall, output error and speedup");
  command->add_flag("--per-head", flags->per_head,
                    "print a table with one row per head (and batch element)");
  flags->exec.add_to(*command);
  add_timing_options(*command, flags->timing, "per measurement");
  return {command, [flags] { return run_attention(*flags); }};
}

Command add_generate_command(CLI::App& app) {
  auto flags = std::make_shared<GenerateFlags>();
  CLI::App* command = app.add_subcommand(
      "generate", "write a synthetic workload's q, k, v and layout to a safetensors file");
  flags->workload.add_to(*command);
  command->add_option("--dtype", flags->dtype, "bf16, fp16 or fp32")
      ->check(CLI::IsMember({"bf16", "fp16", "fp32", "bfloat16", "float16", "float32"}))
      ->capture_default_str();
  command->add_option("--output,-o", flags->output, "safetensors file to write")->required();
  command->add_option("--layers", flags->layers,
                      "write layers.<L>.q/k/v for these layers (0,1,2), each with seed + layer");
  return {command, [flags] { return run_generate(*flags); }};
}

}  // namespace mmsparse::cli
