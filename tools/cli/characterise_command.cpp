// `mmsparse characterise`: BlindSight's characterisation (Alg. 1) and aggregation (Alg. 2) over
// several prompts (safetensors dumps, or a SYNTHETIC BlindSight preset), written as a per-model
// pattern config, with the attention FLOPs the config saves per prompt (Table 8) and, on a
// preset, the confusion table against the planted head types. The masked attention runs on the
// GPU when --device says so (auto: when there is one), else on the CPU reference.
// docs/blindsight.md.

#include "characterise_command.h"

#include <fmt/core.h>

#include <algorithm>
#include <array>
#include <fstream>
#include <functional>
#include <iterator>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "mmsparse/status.h"
#include "mmsparse/tools/blindsight_workload.h"
#include "mmsparse/tools/characterise.h"
#include "progress.h"

namespace mmsparse::cli {

namespace {

constexpr int64_t kDefaultPrompts = 20;

struct CharacteriseFlags {
  ExecutionFlags exec;
  std::vector<std::string> inputs;
  std::string preset = "blindsight-qwen";
  int64_t prompts = kDefaultPrompts;
  BlindSightModelSpec model;
  std::string alpha = "0.1";
  AggregationThresholds gammas;
  ImageStyle style;           // for --input files
  std::string config_path;    // --config: evaluate this config instead of characterising
  std::string layout_preset;  // FLOPs reduction also on this workload preset's layouts
  std::vector<int64_t> layout_lengths;
  bool find_sinks = false;
  std::string key_orders = "auto";  // --key-orders: auto, on or off (ConfigKeyOrders)
  std::string out_path;
};

// A prompt: its layout and, per layer, q, k, v.
struct Prompt {
  std::string name;
  ModalityLayout layout;
  int64_t layers = 0;
  std::function<std::array<Tensor, 3>(int64_t layer)> layer;
};

Tensor converted(const Tensor& tensor, DType dtype) {
  if (tensor.dtype() == dtype) return tensor;
  Tensor result(dtype, tensor.shape());
  const TensorView from = tensor.view();
  const TensorView to = result.view();
  for (int64_t i = 0; i < tensor.numel(); ++i) store_float(to, i, load_float(from, i));
  return result;
}

std::vector<Prompt> file_prompts(const CharacteriseFlags& flags) {
  std::vector<Prompt> prompts;
  for (const std::string& path : flags.inputs) {
    auto file = std::make_shared<TensorFile>(read_input_file(path, "--input"));
    if (!file->has_layout()) {
      throw_invalid_argument("--input " + path, "a file with its modality layout in the metadata",
                             "no layout");
    }
    std::vector<int64_t> layers = tensor_file_layers(*file);
    const bool plain = layers.empty();
    const DType dtype = flags.exec.data_type();
    Prompt prompt{path, file->layout(), plain ? 1 : static_cast<int64_t>(layers.size()), {}};
    prompt.layer = [file, layers, plain, path, dtype](int64_t layer) {
      const std::string prefix = plain ? "" : layer_tensor_prefix(layers[layer]);
      const AttentionInputs inputs = checked_attention_inputs(*file, prefix, path);
      return std::array<Tensor, 3>{converted(*inputs.q, dtype), converted(*inputs.k, dtype),
                                   converted(*inputs.v, dtype)};
    };
    prompts.push_back(std::move(prompt));
  }
  return prompts;
}

std::vector<Prompt> preset_prompts(const CharacteriseFlags& flags,
                                   std::shared_ptr<const BlindSightModel> model) {
  std::vector<Prompt> prompts;
  const DType dtype = flags.exec.data_type();
  for (int64_t i = 0; i < flags.prompts; ++i) {
    const auto seed = static_cast<uint64_t>(i);
    Prompt prompt{"SYNTHETIC " + flags.preset + " prompt " + std::to_string(i),
                  model->prompt_layout(seed),
                  model->spec().layers,
                  {}};
    prompt.layer = [model, seed, dtype](int64_t layer) {
      BlindSightModel::LayerTensors tensors = model->layer(seed, layer);
      return std::array<Tensor, 3>{converted(tensors.q, dtype), converted(tensors.k, dtype),
                                   converted(tensors.v, dtype)};
    };
    prompts.push_back(std::move(prompt));
  }
  return prompts;
}

void print_confusion(const BlindSightModel& model,
                     const std::map<int64_t, std::map<int64_t, HeadType>>& types) {
  std::array<std::array<int, kHeadTypes>, kHeadTypes> confusion{};
  int matched = 0;
  for (const auto& [layer, heads] : types) {
    for (const auto& [head, type] : heads) {
      const HeadType planted = model.planted(layer, head);
      ++confusion[static_cast<std::size_t>(planted)][static_cast<std::size_t>(type)];
      matched += planted == type;
    }
  }
  fmt::print("confusion (SYNTHETIC; rows planted, columns recovered):\n{:>12}", "");
  for (HeadType type : kAllHeadTypes) fmt::print("{:>12}", head_type_name(type));
  fmt::print("\n");
  for (HeadType planted : kAllHeadTypes) {
    fmt::print("{:>12}", head_type_name(planted));
    for (HeadType type : kAllHeadTypes) {
      fmt::print("{:>12}",
                 confusion[static_cast<std::size_t>(planted)][static_cast<std::size_t>(type)]);
    }
    fmt::print("\n");
  }
  const int64_t total = model.spec().layers * model.spec().heads;
  fmt::print("recovered {}/{} heads\n", matched, total);
}

// Alg. 1 on every layer of every prompt, with a progress step per prompt; layers and heads
// receive the most layers of a prompt and the heads of a layer.
HeadTypeTally characterise_prompts(const std::vector<Prompt>& prompts, const ImageStyle& style,
                                   const AlphaSchedule& alpha, int threads, Device device,
                                   StepProgress& steps, int64_t& layers, int64_t& heads) {
  HeadTypeTally tally;
  for (std::size_t p = 0; p < prompts.size(); ++p) {
    const Prompt& prompt = prompts[p];
    steps.begin(fmt::format("[{}/{}] {}", p + 1, prompts.size(), prompt.name));
    for (int64_t layer = 0; layer < prompt.layers; ++layer) {
      const std::array<Tensor, 3> qkv = prompt.layer(layer);
      const std::vector<HeadCharacterisation> result =
          characterise_layer(qkv[0].view(), qkv[1].view(), qkv[2].view(), prompt.layout, style,
                             alpha.at(layer, prompt.layers), threads, device);
      for (std::size_t head = 0; head < result.size(); ++head) {
        tally.add(layer, static_cast<int64_t>(head), result[head].type);
      }
      heads = static_cast<int64_t>(result.size());
      steps.update(static_cast<double>(layer + 1) / static_cast<double>(prompt.layers));
    }
    layers = std::max(layers, prompt.layers);
    steps.end();
  }
  return tally;
}

std::string offsets_text(const std::vector<int64_t>& offsets) {
  std::string text;
  for (int64_t offset : offsets) text += (text.empty() ? "" : "/") + std::to_string(offset);
  return "[" + text + "]";
}

// App. C over every layer of every prompt: the offsets the style's sinks then use.
std::vector<int64_t> find_sink_offsets(const std::vector<Prompt>& prompts, bool bidirectional,
                                       StepProgress& steps) {
  SinkOffsetTally tally;
  steps.begin("sink offsets (App. C)");
  for (std::size_t p = 0; p < prompts.size(); ++p) {
    for (int64_t layer = 0; layer < prompts[p].layers; ++layer) {
      const std::array<Tensor, 3> qkv = prompts[p].layer(layer);
      tally.add_layer(qkv[0].view(), qkv[1].view(), prompts[p].layout, bidirectional);
    }
    steps.update(static_cast<double>(p + 1) / static_cast<double>(prompts.size()));
  }
  steps.end();
  const std::vector<int64_t> offsets = tally.offsets();
  if (offsets.empty()) {
    throw_invalid_argument("--find-sinks", "prompts with at least two images", "none");
  }
  return offsets;
}

// Counting pairs under bidirectional masks reads every key of every row (plan_coverage.h): refused
// beyond this length rather than left running for minutes.
constexpr int64_t kMaxBidirectionalCountLength = 32768;

// Table 8's measure for the config on a workload preset's layout at each length (one layout per
// length: a preset's layout depends on its length only).
void print_preset_flops(const CharacteriseFlags& flags, const PatternConfig& config, int64_t layers,
                        int64_t heads, const ImageStyle& style, bool quiet,
                        nlohmann::json& report) {
  const std::vector<int64_t> lengths =
      flags.layout_lengths.empty() ? std::vector<int64_t>{0} : flags.layout_lengths;
  for (const int64_t length : lengths) {
    WorkloadSpec spec;
    spec.preset = flags.layout_preset;
    spec.seq_len = length;
    const ModalityLayout layout = Workload::create(spec).layout();
    if (style.bidirectional && layout.length() > kMaxBidirectionalCountLength) {
      throw_invalid_argument("--seq-len",
                             "at most " + std::to_string(kMaxBidirectionalCountLength) +
                                 " tokens for a bidirectional style",
                             std::to_string(layout.length()));
    }
    const double saved = flops_reduction(config, layout, layers, heads, style);
    report["preset_flops_reduction"][std::to_string(layout.length())] = saved;
    if (quiet) continue;
    fmt::print(
        "attention FLOPs reduction on {} (SYNTHETIC layout, {} images), {} tokens: {:.2f}%\n",
        flags.layout_preset, layout.media().size(), layout.length(), 100 * saved);
  }
}

int run_characterise(const CharacteriseFlags& flags) {
  const Device device =
      use_gpu(flags.exec.device_choice()) ? Device{DeviceType::kCUDA, 0} : Device{};
  check_output_path(flags.out_path, "--output");
  check_output_path(flags.exec.json_path, "--json");
  const AlphaSchedule alpha = parse_alpha_schedule(flags.alpha, "--alpha");
  std::shared_ptr<const BlindSightModel> model;
  ImageStyle style = flags.style;
  std::vector<Prompt> prompts;
  if (flags.inputs.empty()) {
    BlindSightModelSpec spec = flags.model;
    spec.style = blindsight_preset_style(flags.preset, "--preset");
    model = std::make_shared<const BlindSightModel>(spec);
    style = model->image_style();
    prompts = preset_prompts(flags, model);
  } else {
    prompts = file_prompts(flags);
  }
  const bool quiet = flags.exec.quiet || flags.exec.json_path == "-";
  StepProgress steps(progress_mode(flags.exec.quiet, flags.exec.json_path));
  if (flags.find_sinks) {
    style.sink_offsets = find_sink_offsets(prompts, style.bidirectional, steps);
    if (!quiet) {
      fmt::print("sink offsets (App. C, the top 10% most frequent): {}{}\n",
                 offsets_text(style.sink_offsets),
                 model ? " (planted " + offsets_text(model->image_style().sink_offsets) + ")" : "");
    }
  }
  PatternConfig config;
  std::map<int64_t, std::map<int64_t, HeadType>> types;
  int64_t heads = 0;
  int64_t layers = 0;
  if (!flags.config_path.empty()) {
    std::ifstream file(flags.config_path);
    if (!file)
      throw Error(ErrorCode::kIoError, "--config: cannot read '" + flags.config_path + "'");
    config = PatternConfig::from_json(std::string(std::istreambuf_iterator<char>(file), {}));
  } else {
    const HeadTypeTally tally = characterise_prompts(prompts, style, alpha, flags.exec.threads,
                                                     device, steps, layers, heads);
    types = tally.aggregate(flags.gammas);
    const ConfigKeyOrders key_orders = flags.key_orders == "on"    ? ConfigKeyOrders::kAlways
                                       : flags.key_orders == "off" ? ConfigKeyOrders::kNever
                                                                   : ConfigKeyOrders::kAuto;
    config = blindsight_config(types, style, key_orders);
  }
  if (heads == 0) heads = model ? model->spec().heads : 1;
  if (layers == 0) layers = prompts.empty() ? 0 : prompts.front().layers;
  nlohmann::json report = {{"prompts", prompts.size()}, {"layers", layers}, {"heads", heads}};
  if (flags.find_sinks) report["sink_offsets"] = style.sink_offsets;
  for (const auto& [layer, layer_types] : types) {
    std::string line;
    for (const auto& [head, type] : layer_types) {
      line += fmt::format("{}{}", line.empty() ? "" : " ", head_type_name(type));
      report["types"][std::to_string(layer)][std::to_string(head)] = head_type_name(type);
    }
    if (!quiet) fmt::print("layer {:>3}: {}\n", layer, line);
  }
  std::vector<double> savings;
  for (const Prompt& prompt : prompts) {
    savings.push_back(flops_reduction(config, prompt.layout, layers, heads, style));
  }
  if (!savings.empty()) {
    const Quartiles q = quartiles(savings);
    report["flops_reduction"] = {{"q1", q.q1}, {"median", q.median}, {"q3", q.q3}};
    if (!quiet) {
      fmt::print(
          "attention FLOPs reduction over {} prompts{}: Q1 {:.2f}%  median {:.2f}%  Q3 "
          "{:.2f}%\n",
          savings.size(), model ? " (SYNTHETIC)" : "", 100 * q.q1, 100 * q.median, 100 * q.q3);
    }
  }
  if (model && !types.empty() && !quiet) print_confusion(*model, types);
  if (!flags.layout_preset.empty())
    print_preset_flops(flags, config, layers, heads, style, quiet, report);
  if (!flags.out_path.empty()) {
    std::ofstream file(flags.out_path);
    if (!file) throw Error(ErrorCode::kIoError, "--output: cannot open '" + flags.out_path + "'");
    file << config.to_json() << '\n';
    if (!quiet) fmt::print("wrote {}\n", flags.out_path);
  }
  write_json_output(flags.exec.json_path, report.dump(2));
  return 0;
}

}  // namespace

Command add_characterise_command(CLI::App& app) {
  auto flags = std::make_shared<CharacteriseFlags>();
  CLI::App* command = app.add_subcommand(
      "characterise",
      "BlindSight head types per layer (Alg. 1 + Alg. 2) -> pattern config, FLOPs saved");
  flags->exec.add_to(*command);
  command
      ->add_option("--input,-i", flags->inputs,
                   "prompts: safetensors with layers.<L>.q/k/v (or q/k/v) and the layout; "
                   "several (default: a SYNTHETIC preset)")
      ->check(CLI::ExistingFile);
  command->add_option("--preset", flags->preset, "SYNTHETIC BlindSight preset")
      ->capture_default_str();
  command->add_option("--prompts", flags->prompts, "synthetic prompts (layouts differ)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  command->add_option("--layers", flags->model.layers, "synthetic layers")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  command->add_option("--heads", flags->model.heads, "synthetic query heads")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  command->add_option("--head-dim", flags->model.head_dim, "synthetic head dimension")
      ->check(CLI::Range(2, 1024))
      ->capture_default_str();
  command->add_option("--seed", flags->model.seed, "synthetic model seed")->capture_default_str();
  command
      ->add_option("--flip-rate", flags->model.flip_rate,
                   "synthetic share of prompts on which a head reads densely")
      ->check(CLI::Range(0.0, 1.0))
      ->capture_default_str();
  command
      ->add_option("--alpha", flags->alpha,
                   "NMSE threshold: fixed (0.1) or linear first:last (0.005:0.195)")
      ->capture_default_str();
  command->add_option("--gamma-dense", flags->gammas.dense, "Alg. 2 dense fraction threshold")
      ->check(CLI::Range(0.0, 1.0))
      ->capture_default_str();
  command->add_option("--gamma-sink", flags->gammas.sink, "Alg. 2 sink fraction threshold")
      ->check(CLI::Range(0.0, 1.0))
      ->capture_default_str();
  command->add_option("--gamma-intra", flags->gammas.intra, "Alg. 2 intra fraction threshold")
      ->check(CLI::Range(0.0, 1.0))
      ->capture_default_str();
  command
      ->add_option("--sink-percent", flags->style.sink_percent,
                   "--input: sinks are this % of each image's first tokens")
      ->check(CLI::Range(1, 100))
      ->capture_default_str();
  command
      ->add_option("--sinks", flags->style.sink_offsets,
                   "--input: sink offsets inside each image instead (Gemma 3), e.g. 3,17,40")
      ->delimiter(',');
  command->add_flag("--find-sinks", flags->find_sinks,
                    "find the sink offsets from the prompts first (App. C; images of one size)");
  command->add_flag("--bidirectional", flags->style.bidirectional,
                    "--input: the model attends bidirectionally inside images (Gemma 3)");
  command
      ->add_option("--config", flags->config_path,
                   "evaluate this pattern config's FLOPs reduction instead of characterising")
      ->check(CLI::ExistingFile);
  command->add_option("--layout-preset", flags->layout_preset,
                      "also the FLOPs reduction on this workload preset's layout (e.g. "
                      "multi-image)");
  command
      ->add_option("--seq-len", flags->layout_lengths,
                   "--layout-preset lengths, e.g. 36864,131072,307200 (default: its own)")
      ->delimiter(',')
      ->check(CLI::PositiveNumber);
  command
      ->add_option("--key-orders", flags->key_orders,
                   "the config's templates read K and V through key orders: auto (in place for "
                   "causal styles, whose per-call host build costs more than it saves; key orders "
                   "for bidirectional ones), on (permute=-1) or off (permute=0)")
      ->check(CLI::IsMember({"auto", "on", "off"}))
      ->capture_default_str();
  command->add_option("--output,-o", flags->out_path, "pattern config (JSON) to write");
  return {command, [flags] { return run_characterise(*flags); }};
}

}  // namespace mmsparse::cli
