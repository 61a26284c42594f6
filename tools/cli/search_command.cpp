#include "search_command.h"

#include <fmt/core.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <ctime>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "executor.h"
#include "layers.h"
#include "mmsparse/build_info.h"
#include "mmsparse/status.h"
#include "mmsparse/tools/search.h"
#include "progress.h"
#include "report.h"
#include "tile_oracle_report.h"
#include "warnings.h"

namespace mmsparse::cli {
namespace {

constexpr double kPercent = 100.0;

struct SearchFlags {
  WorkloadFlags workload;
  ExecutionFlags exec;
  TimingFlags timing;
  std::string input;
  std::string layers;                 // --layers: "all" or a list; empty: all (file) or 0
  std::vector<int64_t> search_heads;  // empty: every head
  std::string out_path;
  SearchOptions options;
  bool unscaled = false;
  bool host_index = false;  // --host-index: a GPU search may choose heads built on the host
  bool keep_low_recall_sparse = false;  // --keep-low-recall-sparse: no dense_below_recall default
  std::string score_rows;  // --score-rows: "all" or "sample"; empty: all on the GPU, else sample
  TileOracleFlags tile_oracle;
};

// Query tiles per head the search's tile oracle sums by default: a quarter of 128K's on the GPU;
// on the CPU each summed row costs a dense row, so a small sample (its error is printed).
constexpr int64_t kGpuOracleTiles = 256;
constexpr int64_t kCpuOracleTiles = 16;

// What the search calibrates on: a file's layers, or one synthetic workload per layer (layer L
// seeded seed + L, as `bench --layers` generates them).
struct CalibrationInput {
  std::string description;  // provenance
  ModalityLayout layout;
  std::vector<int64_t> layers;  // to search, in order
  std::optional<TensorFile> file;
  std::vector<CalibrationLayer> file_layers;
  std::optional<WorkloadSpec> synthetic;
  std::optional<Workload> workload;  // layer 0's: head behaviours do not depend on the seed
};

std::vector<int64_t> chosen_layers(const SearchFlags& flags,
                                   const std::vector<int64_t>& available) {
  if (flags.layers.empty()) return available;
  const LayerSelection selection = parse_layer_selection(flags.layers);
  if (selection.all) return available;
  for (int64_t layer : selection.layers) {
    if (std::find(available.begin(), available.end(), layer) == available.end()) {
      std::string known;
      for (int64_t entry : available) known += (known.empty() ? "" : ", ") + std::to_string(entry);
      throw_invalid_argument("--layers", "layers of --input " + flags.input + " (" + known + ")",
                             std::to_string(layer));
    }
  }
  return selection.layers;
}

// The search scores its candidates against causal dense attention (MMInference's patterns are
// causal); a non-causal source (a video DiT) is searched with search-vec instead.
void refuse_non_causal(bool causal, const std::string& source) {
  if (!causal) {
    throw_invalid_argument(source, "a causal workload (for non-causal ones, use search-vec)",
                           "non-causal attention");
  }
}

CalibrationInput load_input(const SearchFlags& flags) {
  CalibrationInput input;
  if (!flags.input.empty()) {
    input.file = read_input_file(flags.input);
    refuse_non_causal(causal_from_metadata(*input.file), "--input " + flags.input);
    input.layout = input.file->layout();
    input.file_layers = calibration_layers(*input.file, "--input " + flags.input);
    std::vector<int64_t> available;
    for (const CalibrationLayer& layer : input.file_layers) available.push_back(layer.layer);
    input.layers = chosen_layers(flags, available);
    input.description = "file " + flags.input;
    return input;
  }
  WorkloadSpec spec = flags.workload.spec();
  if (spec.seq_len == 0) spec.seq_len = kCpuDefaultSeqLen;
  input.workload = Workload::create(spec);
  refuse_non_causal(input.workload->causal(), "--preset " + spec.preset);
  input.synthetic = input.workload->spec();
  input.layout = input.workload->layout();
  input.layers = {0};
  if (!flags.layers.empty()) {
    const LayerSelection selection = parse_layer_selection(flags.layers);
    if (selection.all) {
      throw_invalid_argument("--layers all", "an --input file with layers.<L>.q, .k, .v",
                             "a synthetic workload (list its layers: --layers 0,1)");
    }
    input.layers = selection.layers;
  }
  const WorkloadSpec& resolved = *input.synthetic;
  const bool layer_seeds = input.layers != std::vector<int64_t>{0};
  input.description = fmt::format(
      "SYNTHETIC preset {}, seq_len {}, seed {}{}, {} query heads{}, {} KV heads, head_dim {}",
      resolved.preset, input.workload->seq_len(), resolved.seed,
      layer_seeds ? " (layer L: seed + L)" : "", resolved.q_heads, head_mix_note(resolved),
      resolved.kv_heads, resolved.head_dim);
  return input;
}

// --budget-spec, checked once the layout is known and before any head is searched.
void check_budget_spec(const std::string& text, const ModalityLayout& layout) {
  const std::string flag = "--budget-spec";
  if (is_dynamic(PatternSpec::parse(text))) {
    throw_invalid_argument(flag, "a static pattern spec such as a-shape:sink=128,local=4096",
                           "'" + text + "' (estimated from the inputs)");
  }
  (void)resolve_pattern_flags({text}, &layout, layout.length(), layout.length(), /*causal=*/true,
                              flag);
}

// Layer `layer`'s q, k, v; `storage` keeps a synthetic layer's tensors alive.
CalibrationLayer layer_views(const CalibrationInput& input, int64_t layer, DType dtype,
                             std::optional<Workload::Tensors>& storage) {
  if (input.file) {
    return *std::find_if(input.file_layers.begin(), input.file_layers.end(),
                         [&](const CalibrationLayer& entry) { return entry.layer == layer; });
  }
  WorkloadSpec spec = *input.synthetic;
  spec.seed = synthetic_layer_seed(spec.seed, layer);
  storage = Workload::create(spec).materialize(dtype);
  return {layer, storage->q.view(), storage->k.view(), storage->v.view()};
}

std::string utc_now() {
  const std::time_t now = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  std::tm utc{};
  gmtime_r(&now, &utc);
  char text[sizeof "2026-01-01T00:00:00Z"];
  std::strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%SZ", &utc);
  return text;
}

nlohmann::json score_json(const CandidateScore& score) {
  return {{"spec", score.spec.to_string()},
          {"recall", score.recall},
          {"recall_se", score.recall_se},
          {"output_error", score.output_error},
          {"cost", score.cost},
          {"index_cost", score.index_cost}};
}

// Measured costs are milliseconds of a single layer, often well below one at calibration lengths;
// modelled costs are whole chunk counts.
std::string format_cost(double cost, const CostModel& cost_model) {
  return cost_model.measured() ? fmt::format("{:.4f}", cost) : fmt::format("{:.0f}", cost);
}

// One query head of a [batch, seq, heads, dim] view.
TensorView head_view(const TensorView& view, int64_t head) {
  TensorView one = view;
  one.data = static_cast<char*>(view.data) +
             head * view.strides[2] * static_cast<int64_t>(dtype_size(view.dtype));
  one.shape[2] = 1;
  return one;
}

// A head's dense attention in the cost model's unit (the layer's heads share one shape).
double dense_head_cost(CostModel& cost_model, const CalibrationLayer& layer) {
  const int64_t seq_len = layer.q.shape[1];
  const std::unique_ptr<CostInputs> inputs =
      cost_model.prepare(head_view(layer.q, 0), head_view(layer.k, 0), head_view(layer.v, 0));
  const PlanShape shape{1, 1, seq_len, layer.k.shape[1], cost_model.tile_rows(layer.q.shape[3])};
  return cost_model.cost(build_plan(PatternSpec{"dense", {}}, shape), *inputs);
}

// The tile oracle beside the chosen specs: per head (in the order of result.heads) and the layer.
struct SearchOracle {
  LayerTileOracle oracle;
  double dense_cost = 0.0;  // per head, the cost model's unit
};

SearchOracle search_oracle(const SearchFlags& flags, bool gpu, CostModel& cost_model,
                           const CalibrationLayer& layer, const LayerSearchResult& result) {
  std::vector<int64_t> heads;
  std::vector<double> recalls;
  for (const HeadSearchResult& head : result.heads) {
    heads.push_back(head.q_head);
    recalls.push_back(head.chosen.recall);
  }
  SearchOracle searched;
  searched.dense_cost = dense_head_cost(cost_model, layer);
  searched.oracle =
      search_tile_oracle(layer.q, layer.k, layer.v, gpu, cost_model.tile_rows(layer.q.shape[3]),
                         flags.tile_oracle, flags.exec.threads, heads, recalls);
  return searched;
}

// "% bound" of a chosen cost against the oracle's bound at the recall it reached.
std::string percent_of_bound(double dense_cost, double chosen_cost, double bound) {
  if (!(chosen_cost > 0.0) || !std::isfinite(bound) || !(bound > 0.0)) return "-";
  return fmt::format("{:.1f}%", kPercent * dense_cost / chosen_cost / bound);
}

void print_summary(const LayerSearchResult& result, int64_t layer, const CostModel& cost_model,
                   const CalibrationInput& input, int64_t head_dim, const SearchOracle& searched) {
  const LayerTileOracle& oracle = searched.oracle;
  const ModalityLayout& layout = input.layout;
  fmt::print("\nlayer {}: budget {} = {} {} ({}); {} candidates in the search space\n", layer,
             result.budget_spec.to_string(), format_cost(result.budget_cost, cost_model),
             cost_model.unit(), cost_model.measured() ? "measured" : "modelled",
             result.space.size());
  std::size_t spec_width = 0;
  for (const HeadSearchResult& head : result.heads) {
    spec_width = std::max(spec_width, head.chosen.spec.to_string().size());
  }
  fmt::print("{:>5} {:<10} {:<{}} {:>8} {:>7} {:>9} {:>10} {:>7} {:>8} {:>7} {:>7} {:>7} {:>8}\n",
             "head", "behaviour", "chosen spec", spec_width, "recall", "+- se", "out err", "cost",
             "budget", "dropped", "or@.90", "or@.95", "or@.98", "% bound");
  double chosen_total = 0.0;
  for (std::size_t index = 0; index < result.heads.size(); ++index) {
    const HeadSearchResult& head = result.heads[index];
    const std::vector<TileOracleLevel>& levels = oracle.heads[index].levels;
    const double head_bound =
        tile_oracle_speedup_bound(oracle.run_cost_shares[0][index], oracle.sparse_throughput);
    chosen_total += head.chosen.cost;
    const std::string behaviour =
        input.workload ? std::string(head_behaviour_name(input.workload->behaviour(head.q_head)))
                       : "-";
    fmt::print(
        "{:>5} {:<10} {:<{}} {:>8.4f} {:>7.4f} {:>9.2e} {:>10} {:>6.1f}% {:>8} {:>6.2f}% "
        "{:>6.2f}% {:>6.2f}% {:>8}{}\n",
        head.q_head, behaviour, head.chosen.spec.to_string(), spec_width, head.chosen.recall,
        head.chosen.recall_se, head.chosen.output_error, format_cost(head.chosen.cost, cost_model),
        kPercent * head.chosen.cost / head.budget_cost, head.over_budget,
        kPercent * levels[0].cost_share, kPercent * levels[1].cost_share,
        kPercent * levels[2].cost_share,
        percent_of_bound(searched.dense_cost, head.chosen.cost, head_bound),
        head.dense_fallback ? "  dense fallback: " + head.fallback_reason
        : head.within_budget
            ? fmt::format("  raised for the layer's recall target from {} "
                          "(recall {:.4f}); index {} {}",
                          head.within_budget->spec.to_string(), head.within_budget->recall,
                          format_cost(head.chosen.index_cost, cost_model), cost_model.unit())
            : "");
  }
  fmt::print(
      "mean recall of the chosen specs: {:.4f} +- {:.4f} ({}); {:.1f}% of the tile-oracle bound "
      "at the recalls they reach (cost {:.2f}x below dense, bound {:.2f}x)\n",
      mean_recall(result.heads), mean_recall_se(result.heads),
      mean_recall_se(result.heads) > 0.0 ? "sampled rows, +- one standard error" : "every row",
      kPercent * searched.dense_cost * static_cast<double>(result.heads.size()) / chosen_total /
          oracle.run_bound(0),
      searched.dense_cost * static_cast<double>(result.heads.size()) / chosen_total,
      oracle.run_bound(0));
  print_tile_oracle_line(oracle);
  int64_t host_index = 0;
  for (const HeadSearchResult& head : result.heads) {
    for (const ScopeSearch& search : head.scopes) host_index += search.host_index;
  }
  if (host_index > 0) {
    fmt::print(
        "note: {} candidate scoring(s) skipped: their index would be built on the host at every "
        "run (boundary heads whose groups the GPU builders do not take; "
        "docs/index_builders.md); --host-index "
        "allows them\n",
        host_index);
  }
  // With --host-index (or a modelled search, for the CPU), heads may choose such specs.
  const Device gpu{DeviceType::kCUDA, 0};
  const PlanShape shape{1, 1, layout.length(), layout.length(), cost_model.tile_rows(head_dim)};
  const auto host_built =
      std::count_if(result.heads.begin(), result.heads.end(), [&](const HeadSearchResult& head) {
        return !builds_plan_on_device(head.chosen.spec, shape, &layout, gpu);
      });
  if (cost_model.measured() && host_built > 0) {
    fmt::print(
        "note: {} head(s) chose a spec whose index is built on the host at every run (hundreds "
        "of ms per head at 128K)\n",
        host_built);
  }
}

// The search options of the flags: a GPU search makes configs to run on the GPU (no head whose
// index the host would build, unless --host-index); heads whose best sparse candidate recalls far
// below the target get dense unless --keep-low-recall-sparse (low_recall_threshold); `progress`
// counts the heads done.
SearchOptions search_options(const SearchFlags& flags, bool gpu, SearchProgress& progress) {
  SearchOptions options = flags.options;
  options.scale_to_length = !flags.unscaled;
  if (gpu && !flags.host_index) options.index_device = Device{DeviceType::kCUDA, 0};
  options.num_threads = flags.exec.threads;
  if (options.dense_below_recall < 0.0) {
    options.dense_below_recall =
        flags.keep_low_recall_sparse ? 0.0 : low_recall_threshold(options.target_mean_recall);
  }
  options.on_scope_done = progress.scope_callback();
  // On the GPU every row is scored by the engine; the CPU reference scores a sample.
  // (--host-index candidates are built on the host: they are scored on a sample.)
  const bool all_rows =
      flags.score_rows.empty() ? gpu && !flags.host_index : flags.score_rows == "all";
  if (all_rows) options.score_device = gpu ? Device{DeviceType::kCUDA, 0} : Device{};
  return options;
}

// Scopes searched per head before the raise stage: intra per modality present, cross per ordered
// pair, then inter (a single-modality input has no cross scope; the progress bar counts them).
int64_t scopes_per_head(const ModalityLayout& layout) {
  std::vector<bool> present(kNumModalities, false);
  for (uint8_t type : layout.token_types()) present[type] = true;
  const auto modalities = std::count(present.begin(), present.end(), true);
  return modalities + modalities * (modalities - 1) + 1;
}

// One scope's search in the JSON report: its budget, counts, winner and every scored candidate.
nlohmann::json scope_json(const ScopeSearch& search) {
  nlohmann::json json = {{"stage", search.stage},
                         {"scope", search.scope},
                         {"budget_cost", search.budget_cost},
                         {"over_budget", search.over_budget},
                         {"not_applicable", search.not_applicable},
                         {"host_index", search.host_index}};
  if (search.winner) json["winner"] = score_json(*search.winner);
  for (const CandidateScore& score : search.scored) json["scored"].push_back(score_json(score));
  return json;
}

// One layer's search in the JSON report: its budget, search space and every head's choice.
nlohmann::json layer_json(const LayerSearchResult& result, int64_t layer,
                          const CalibrationInput& input) {
  nlohmann::json json = {{"layer", layer},
                         {"budget_spec", result.budget_spec.to_string()},
                         {"budget_cost", result.budget_cost}};
  for (const PatternSpec& spec : result.space) json["search_space"].push_back(spec.to_string());
  for (const HeadSearchResult& head : result.heads) {
    nlohmann::json head_json = {{"head", head.q_head},
                                {"chosen", score_json(head.chosen)},
                                {"budget_cost", head.budget_cost},
                                {"dense_fallback", head.dense_fallback},
                                {"fallback_reason", head.fallback_reason},
                                {"over_budget", head.over_budget}};
    if (head.within_budget) head_json["within_budget"] = score_json(*head.within_budget);
    if (input.workload) {
      head_json["behaviour"] = head_behaviour_name(input.workload->behaviour(head.q_head));
    }
    for (const ScopeSearch& search : head.scopes) head_json["scopes"].push_back(scope_json(search));
    json["heads"].push_back(head_json);
  }
  return json;
}

int run_search(const SearchFlags& flags) {
  const bool progress_enabled = !flags.exec.quiet && flags.exec.json_path != "-";
  check_output_path(flags.out_path, "--output");
  check_output_path(flags.exec.json_path, "--json");
  const bool gpu = use_gpu(flags.exec.device_choice());
  const auto started = std::chrono::steady_clock::now();
  Progress progress(2, progress_enabled);

  progress.step(flags.input.empty() ? "SYNTHETIC calibration workload '" + flags.workload.preset +
                                          "' (generated layer by layer)"
                                    : "reading " + flags.input);
  const CalibrationInput input = load_input(flags);
  check_budget_spec(flags.options.budget_spec, input.layout);
  progress.done(fmt::format("{}; {} tokens, {} layer(s)", input.description, input.layout.length(),
                            input.layers.size()));

  StepProgress steps(progress_mode(flags.exec.quiet, flags.exec.json_path));
  SearchProgress search_progress(steps);
  const SearchOptions options = search_options(flags, gpu, search_progress);
  const double low_recall = low_recall_threshold(options.target_mean_recall);
  std::vector<LowRecallHead> low_recall_found;

  if (flags.exec.json_path != "-") {
    fmt::print("mmsparse search  {}; {} tokens, {} layer(s)\n", input.description,
               input.layout.length(), input.layers.size());
  }
  PatternConfig config;
  std::string tile_oracle_note;
  nlohmann::json report;
  report["calibration"] = input.description;
  report["synthetic"] = input.workload.has_value();
  progress.step(fmt::format("searching {} layer(s), stages intra / cross / inter{}",
                            input.layers.size(),
                            options.target_mean_recall > 0.0 ? " / raise (recall target)" : ""));
  const std::unique_ptr<CostModel> cost_model =
      gpu ? make_measured_cost(Device{DeviceType::kCUDA, 0}, flags.timing.warmup,
                               flags.timing.repeats)
          : make_modelled_cost();
  for (int64_t layer_index : input.layers) {
    std::optional<Workload::Tensors> synthetic_tensors;
    const CalibrationLayer layer =
        layer_views(input, layer_index, flags.exec.data_type(), synthetic_tensors);
    search_progress.begin_layer(fmt::format("layer {}: search", layer.layer),
                                flags.search_heads.empty()
                                    ? layer.q.shape[2]
                                    : static_cast<int64_t>(flags.search_heads.size()),
                                scopes_per_head(input.layout));
    const LayerSearchResult result = search_layer(layer.q, layer.k, layer.v, input.layout,
                                                  *cost_model, options, flags.search_heads);
    search_progress.end_layer(fmt::format("mean recall {:.4f} +- {:.4f}", mean_recall(result.heads),
                                          mean_recall_se(result.heads)));
    for (LowRecallHead& head : low_recall_heads(result, layer.layer, low_recall)) {
      if (input.workload) {
        head.behaviour = head_behaviour_name(input.workload->behaviour(head.q_head));
      }
      low_recall_found.push_back(head);
    }
    for (const HeadSearchResult& head : result.heads) {
      config.head_specs[layer.layer][head.q_head] = head.chosen.spec;
      config.head_scores[layer.layer][head.q_head] = {head.chosen.recall, head.chosen.output_error,
                                                      head.chosen.cost};
    }
    report["layers"].push_back(layer_json(result, layer.layer, input));
    if (!config.search) {
      config.search = SearchProvenance{input.description,
                                       utc_now(),
                                       build_info().version,
                                       cost_model->measured() ? "measured" : "modelled",
                                       cost_model->unit(),
                                       cost_model->gpu(),
                                       result.budget_spec.to_string(),
                                       result.budget_cost,
                                       input.layout.length(),
                                       input.layout.to_json()};
    }
    steps.begin(fmt::format("layer {}: tile oracle", layer.layer));
    const SearchOracle searched = search_oracle(flags, gpu, *cost_model, layer, result);
    steps.end();
    report["layers"].back()["tile_oracle"] = tile_oracle_json(searched.oracle);
    report["layers"].back()["tile_oracle"]["dense_head_cost"] = searched.dense_cost;
    report["layers"].back()["tile_oracle"]["bound_at_chosen_recalls"] =
        searched.oracle.run_bound(0);
    if (flags.exec.json_path != "-") {
      print_summary(result, layer.layer, *cost_model, input, layer.q.shape[3], searched);
      tile_oracle_note = tile_oracle_footer(searched.oracle);
    }
  }
  progress.done("done");

  const SearchProvenance& provenance = *config.search;
  report["cost_source"] = provenance.cost_source;
  report["cost_unit"] = provenance.cost_unit;
  report["gpu"] = provenance.gpu;
  report["seconds"] = seconds_since(started);
  const std::string low_recall_text = low_recall_warning(
      low_recall_found, low_recall,
      options.target_mean_recall > 0.0 ? options.target_mean_recall : kDefaultSearchRecallTarget);
  for (const LowRecallHead& head : low_recall_found) {
    report["low_recall_heads"].push_back({{"layer", head.layer},
                                          {"head", head.q_head},
                                          {"best_sparse_recall", head.best_sparse_recall},
                                          {"dense", head.raised_to_dense}});
  }
  if (!low_recall_text.empty()) {
    fmt::print(flags.exec.json_path == "-" ? stderr : stdout, "\n{}\n", low_recall_text);
  }
  if (flags.exec.json_path != "-") {
    fmt::print(
        "\ncost: {} ({}{}); recall: mean exp(LSE_plan - LSE_dense) over {}; "
        "out err: ||O - O_dense|| / ||O_dense|| over the same rows; dropped: candidates "
        "over the budget; {}; {:.1f} s\n",
        provenance.cost_source, provenance.cost_unit,
        provenance.gpu.empty() ? "" : " on " + provenance.gpu,
        options.score_device ? "every row (scored by the engine)"
                             : "a stratified row sample (+- se: its standard error; a recall "
                               "counts toward a threshold at recall - " +
                                   fmt::format("{:g}", options.recall_margin_se) + " se)",
        input.workload ? "SYNTHETIC workload" : input.description, seconds_since(started));
    fmt::print(
        "{}; or@r: the oracle's cost at recall r; % bound: (dense cost / chosen cost) "
        "over the bound at the head's chosen recall.\n",
        tile_oracle_note);
  }
  if (!flags.out_path.empty()) {
    std::ofstream file(flags.out_path);
    if (!file) {
      throw Error(ErrorCode::kIoError,
                  "--output: cannot open '" + flags.out_path + "' for writing");
    }
    file << config.to_json() << '\n';
    if (flags.exec.json_path != "-") fmt::print("wrote {}\n", flags.out_path);
  }
  write_json_output(flags.exec.json_path, report.dump(2));
  return 0;
}

}  // namespace

Command add_search_command(CLI::App& app) {
  auto flags = std::make_shared<SearchFlags>();
  CLI::App* command = app.add_subcommand(
      "search", "offline modality-aware pattern search (MMInference Alg. 4) -> pattern config");
  flags->workload.add_to(*command);
  flags->exec.add_to(*command);
  add_calibration_options(*command, flags->input, flags->layers, flags->search_heads);
  CLI::Option* output =
      command->add_option("--output,-o", flags->out_path, "pattern config (JSON) to write");
  // The former spelling, kept out of the help.
  command->add_option("--out", flags->out_path)->group("")->excludes(output);
  command
      ->add_option("--sample-rows", flags->options.sample_rows,
                   "query rows scored per stage scope, spread evenly")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  command
      ->add_option("--score-rows", flags->score_rows,
                   "all: every query row, candidates built and run on the search's device "
                   "(default on the GPU); sample: a stratified sample on the CPU reference "
                   "(default on the CPU)")
      ->check(CLI::IsMember({"all", "sample"}));
  command
      ->add_option("--sample-seed", flags->options.sample_seed, "seed of the stratified row sample")
      ->capture_default_str();
  command
      ->add_option("--recall-margin-se", flags->options.recall_margin_se,
                   "a sampled recall counts toward --dense-below-recall and --target-mean-recall "
                   "at recall - this many standard errors")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  command
      ->add_option("--segment-tail-rows", flags->options.segment_tail_rows,
                   "last rows of each segment also scored")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  command
      ->add_option("--budget-spec", flags->options.budget_spec,
                   "static pattern whose cost is the budget")
      ->capture_default_str();
  command->add_flag("--unscaled", flags->unscaled,
                    "Table 3's 128K values as they are (default: scaled to the sequence length)");
  flags->options.dense_below_recall = -1.0;  // not given: low_recall_threshold
  CLI::Option* dense_below =
      command
          ->add_option("--dense-below-recall", flags->options.dense_below_recall,
                       "choose dense when the best candidate recalls less (0: never; default: "
                       "the recall target (--target-mean-recall, else 0.95) - 0.2)")
          ->check(CLI::Range(0.0, 1.0));
  command
      ->add_flag("--keep-low-recall-sparse", flags->keep_low_recall_sparse,
                 "keep the best sparse pattern for heads that recall far below the target "
                 "(default: dense for them; they are reported either way)")
      ->excludes(dense_below);
  command
      ->add_option("--boundary-modes", flags->options.boundary_modes,
                   "inter-modality modes stage 3 tries, comma-separated: 0 none, 2 Q-boundary, "
                   "3 2D-boundary, 4 item boundary (each media item its own grid)")
      ->delimiter(',')
      ->check(CLI::IsMember({0, 2, 3, 4}))
      ->capture_default_str();
  command
      ->add_option("--item-sinks", flags->options.item_sinks,
                   "per-item sink counts stage 3 tries with each mode, comma-separated (the "
                   "first N tokens of every frame and media item; 0: none)")
      ->delimiter(',')
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  command
      ->add_option("--vec-alphas", flags->options.vec_alphas,
                   "VecAttention candidates beside Table 3's, comma-separated alpha_ppm values "
                   "(docs/vec.md; default: none)")
      ->delimiter(',')
      ->check(CLI::NonNegativeNumber);
  command->add_flag("--host-index", flags->host_index,
                    "a GPU search may choose heads whose index is built on the host at every run "
                    "(default: such candidates are skipped)");
  command
      ->add_option("--target-mean-recall", flags->options.target_mean_recall,
                   "raise heads beyond the budget (wider vertical-slash, then dense) until the "
                   "layer's mean recall reaches this (0: off)")
      ->check(CLI::Range(0.0, 1.0))
      ->capture_default_str();
  flags->tile_oracle.add_to(*command, kGpuOracleTiles, kCpuOracleTiles);
  add_timing_options(*command, flags->timing, "per measured cost");
  return {command, [flags] { return run_search(*flags); }};
}

}  // namespace mmsparse::cli
