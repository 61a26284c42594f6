// `mmsparse search-vec`: per-head alpha by bisection, then the DP over every searched (layer,
// head) for a mean density (include/mmsparse/tools/vec_search.h).

#include "vec_search_command.h"

#include <fmt/core.h>

#include <algorithm>
#include <fstream>
#include <iterator>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "layers.h"
#include "mmsparse/status.h"
#include "mmsparse/tools/search.h"
#include "mmsparse/tools/vec_search.h"
#include "mmsparse/tools/workload.h"
#include "report.h"

namespace mmsparse::cli {
namespace {

constexpr const char* kVecPattern = "vec";
constexpr const char* kVecCausalParam = "causal";
// The DP's density resolution (1/2000 = 0.05% per head): at 128K tokens vec heads keep a few
// percent of the pairs or less, which the library's default 1/200 would round away.
constexpr int64_t kDensitySteps = 2000;

struct SearchVecFlags {
  WorkloadFlags workload;
  ExecutionFlags exec;
  std::string input;   // calibration safetensors; empty: synthetic
  std::string layers;  // "0,3" (synthetic: layer L seeded seed + L); empty: 0 or all of the file
  std::vector<int64_t> heads;  // query heads to give vec heads; empty: all
  std::string base_spec = "vec";
  std::string base_config;  // a config whose other heads stay (MMInference heads)
  std::string out_path;
  double max_mean_density = 0.0;  // 0: the mean density of the heads' bisection choices (+ a step)
  VecSearchOptions options;
};

// One layer's q, k, v and where they live.
struct LayerInputs {
  int64_t layer = 0;
  TensorView q, k, v;
  std::optional<Workload::Tensors> storage;
};

// The layers searched; `causal` receives the source's attention (the preset's, or the file's
// metadata).
std::vector<LayerInputs> load_layers(const SearchVecFlags& flags, std::optional<TensorFile>& file,
                                     std::string& description, bool& causal) {
  std::vector<LayerInputs> result;
  const LayerSelection selection =
      flags.layers.empty() ? LayerSelection{} : parse_layer_selection(flags.layers);
  if (!flags.input.empty()) {
    file = read_input_file(flags.input);
    description = "file " + flags.input;
    causal = causal_from_metadata(*file);
    for (const CalibrationLayer& layer : calibration_layers(*file, "--input " + flags.input)) {
      const bool wanted = selection.all || selection.layers.empty() ||
                          std::find(selection.layers.begin(), selection.layers.end(),
                                    layer.layer) != selection.layers.end();
      if (wanted) result.push_back({layer.layer, layer.q, layer.k, layer.v, std::nullopt});
    }
    if (result.empty())
      throw_invalid_argument("--layers", "layers of " + flags.input, flags.layers);
    return result;
  }
  if (selection.all) {
    throw_invalid_argument("--layers all", "an --input file with layers.<L>.q, .k, .v",
                           "a synthetic workload (list its layers: --layers 0,1)");
  }
  WorkloadSpec spec = flags.workload.spec();
  if (spec.seq_len == 0) spec.seq_len = kCpuDefaultSeqLen;
  const std::vector<int64_t> layers =
      selection.layers.empty() ? std::vector<int64_t>{0} : selection.layers;
  for (const int64_t layer : layers) {
    WorkloadSpec layer_spec = spec;
    layer_spec.seed = synthetic_layer_seed(spec.seed, layer);
    const Workload workload = Workload::create(layer_spec);
    causal = workload.causal();
    LayerInputs inputs{layer, {}, {}, {}, workload.materialize(DType::kFloat32)};
    inputs.q = inputs.storage->q.view();
    inputs.k = inputs.storage->k.view();
    inputs.v = inputs.storage->v.view();
    result.push_back(std::move(inputs));
  }
  description = fmt::format(
      "SYNTHETIC preset {}, seq_len {}, seed {}{}{}", spec.preset, spec.seq_len, spec.seed,
      layers.size() > 1 ? " (layer L: seed + L)" : "", causal ? "" : ", non-causal");
  return result;
}

PatternConfig base_config(const std::string& path) {
  if (path.empty()) return {};
  std::ifstream file(path);
  if (!file) throw Error(ErrorCode::kIoError, "--config: cannot open '" + path + "'");
  const std::string text((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
  return PatternConfig::from_json(text);
}

int run_search_vec(const SearchVecFlags& flags) {
  check_output_path(flags.out_path, "--output");
  VecSearchOptions options = flags.options;
  options.base = PatternSpec::parse(flags.base_spec);
  std::optional<TensorFile> file;
  std::string description;
  bool causal = true;
  std::vector<LayerInputs> layers = load_layers(flags, file, description, causal);
  // The heads follow the source's attention unless --base says otherwise; a causal source is
  // measured against causal dense, which a non-causal head would exceed.
  // (A base that is no vec spec is left to search_vec_head, whose error names it.)
  const bool vec_base = options.base.name == kVecPattern;
  if (vec_base && !options.base.params.contains(kVecCausalParam)) {
    options.base.params[kVecCausalParam] = causal ? 1 : 0;
  } else if (vec_base && causal && options.base.params.at(kVecCausalParam) == 0) {
    throw_invalid_argument("--base", "causal=1 on a causal source (or a non-causal preset)",
                           "'" + flags.base_spec + "'");
  }
  PatternConfig config = base_config(flags.base_config);
  // Heads the search leaves out run the source's dense attention.
  if (flags.base_config.empty()) config.default_spec = dense_reference_spec(causal);

  struct Searched {
    int64_t layer, head;
    VecHeadSearch search;
  };
  std::vector<Searched> searched;
  for (const LayerInputs& layer : layers) {
    std::vector<int64_t> heads = flags.heads;
    if (heads.empty()) {
      for (int64_t h = 0; h < layer.q.shape[2]; ++h) heads.push_back(h);
    }
    for (const int64_t head : heads) {
      if (head < 0 || head >= layer.q.shape[2]) {
        throw_invalid_argument("--head", fmt::format("in [0, {})", layer.q.shape[2]),
                               std::to_string(head));
      }
      if (!flags.exec.quiet) fmt::print(stderr, "layer {} head {}: bisection\n", layer.layer, head);
      searched.push_back(
          {layer.layer, head, search_vec_head(layer.q, layer.k, layer.v, head, options)});
    }
  }
  double max_mean_density = flags.max_mean_density;
  if (max_mean_density <= 0.0) {
    for (const Searched& s : searched) {
      for (const VecSample& sample : s.search.samples) {
        if (sample.alpha_ppm == s.search.alpha_ppm) max_mean_density += sample.density;
      }
    }
    // The DP rounds each head's density up to a step, so the bound gets one step per head on
    // top: the bisection's own choices always fit it.
    max_mean_density = max_mean_density / static_cast<double>(searched.size()) +
                       1.0 / static_cast<double>(kDensitySteps);
  }
  std::vector<std::vector<VecSample>> samples;
  for (const Searched& s : searched) samples.push_back(s.search.samples);
  const std::vector<std::size_t> chosen =
      allocate_vec_heads(samples, max_mean_density, kDensitySteps);

  fmt::print(
      "mmsparse search-vec  {}; target recall {:.3f} per head (bisection), mean density "
      "<= {:.4f} (DP)\n",
      description, options.target_recall, max_mean_density);
  fmt::print("{:>5} {:>4} {:>10} {:>8} {:>8}   {}\n", "layer", "head", "alpha_ppm", "density",
             "recall", "bisection alpha");
  double density = 0.0, recall = 0.0;
  for (std::size_t i = 0; i < searched.size(); ++i) {
    const VecSample& sample = samples[i][chosen[i]];
    fmt::print("{:>5} {:>4} {:>10} {:>7.2f}% {:>8.4f}   {}\n", searched[i].layer, searched[i].head,
               sample.alpha_ppm, 100.0 * sample.density, sample.recall,
               searched[i].search.alpha_ppm);
    density += sample.density / static_cast<double>(searched.size());
    recall += sample.recall / static_cast<double>(searched.size());
    add_vec_heads(config, searched[i].layer, options, {samples[i]}, {chosen[i]},
                  std::vector<int64_t>{searched[i].head});
  }
  fmt::print(
      "mean density {:.2f}%, mean recall {:.4f} over {} head(s) (sampled rows, exact per "
      "row; {})\n",
      100.0 * density, recall, searched.size(),
      file ? description : std::string("SYNTHETIC workload"));
  if (!flags.out_path.empty()) {
    std::ofstream out(flags.out_path);
    if (!out) {
      throw Error(ErrorCode::kIoError,
                  "--output: cannot open '" + flags.out_path + "' for writing");
    }
    out << config.to_json() << '\n';
    fmt::print("wrote {}\n", flags.out_path);
  }
  return 0;
}

}  // namespace

Command add_search_vec_command(CLI::App& app) {
  auto flags = std::make_shared<SearchVecFlags>();
  CLI::App* command = app.add_subcommand(
      "search-vec",
      "VecAttention per-head alpha search (bisection to a recall target, then the DP over heads "
      "for a mean density) -> pattern config");
  flags->workload.add_to(*command);
  flags->exec.add_to(*command);
  add_calibration_options(*command, flags->input, flags->layers, flags->heads);
  command
      ->add_option("--base", flags->base_spec,
                   "vec spec the heads start from (pooling, group, causal); alpha is searched")
      ->capture_default_str();
  command
      ->add_option("--config", flags->base_config,
                   "a pattern config to add the vec heads to (its other heads stay)")
      ->check(CLI::ExistingFile);
  command
      ->add_option("--recall-target", flags->options.target_recall,
                   "per-head recall the bisection aims at")
      ->check(CLI::Range(0.0, 1.0))
      ->capture_default_str();
  command
      ->add_option("--max-mean-density", flags->max_mean_density,
                   "the DP's mean density bound (1 - the paper's target sparsity; 0: the mean "
                   "of the heads' bisection choices plus one DP step, 1/2000, per head)")
      ->check(CLI::Range(0.0, 1.0));
  command->add_option("--sample-rows", flags->options.sample_rows, "query rows scored per head")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  command->add_option("--output,-o", flags->out_path, "pattern config (JSON) to write");
  return {command, [flags] { return run_search_vec(*flags); }};
}

}  // namespace mmsparse::cli
