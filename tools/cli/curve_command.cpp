// `mmsparse curve`: recall against density for pattern families (vec alphas, vertical-slash
// counts, A-shape local widths) beside the token and tile oracles, per head and mean over heads,
// as JSON and a PNG (include/mmsparse/tools/recall_curve.h; docs/vec.md).

#include "curve_command.h"

#include <fmt/core.h>

#include <algorithm>
#include <charconv>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "layers.h"
#include "mmsparse/status.h"
#include "mmsparse/tools/recall_curve.h"
#include "mmsparse/tools/viz.h"
#include "report.h"

namespace mmsparse::cli {
namespace {

constexpr const char* kNone = "none";
constexpr const char* kDefaultVecAlphas =
    "1000,10000,50000,100000,200000,300000,500000,700000,900000,1000000";
// Vertical-slash budgets as multiples of the pattern's defaults scaled to the length (MInference's
// 1000 verticals and 6096 slashes at 128K), and A-shape windows as fractions of the length.
constexpr double kVerticalSlashScales[] = {0.125, 0.25, 0.5, 1.0, 2.0, 4.0};
constexpr int64_t kLocalDivisors[] = {128, 64, 32, 16, 8, 4, 2};
constexpr const char* kJsonName = "curve.json";
constexpr const char* kPngName = "curve.png";

struct CurveFlags {
  WorkloadFlags workload;
  ExecutionFlags exec;
  std::string input;
  int64_t layer = 0;
  std::string heads = "all";
  std::string vec_alphas = kDefaultVecAlphas;
  std::string vec_base = "vec";
  std::string vertical_slash;  // "V:S,V:S"; empty: scaled defaults
  std::string a_shape_locals;  // "W,W"; empty: fractions of the length
  std::string oracle_recalls = "0.5,0.6,0.7,0.8,0.85,0.9,0.95,0.98,0.99,0.995,0.999";
  RecallCurveOptions options;
  std::string output_dir = ".";
};

std::vector<std::string> split(const std::string& text) {
  std::vector<std::string> parts;
  std::size_t begin = 0;
  while (begin <= text.size()) {
    const std::size_t end = std::min(text.find(',', begin), text.size());
    parts.push_back(text.substr(begin, end - begin));
    begin = end + 1;
  }
  return parts;
}

int64_t parse_count(const std::string& text, const std::string& flag, const std::string& expected) {
  int64_t value = -1;
  const auto [next, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc() || next != text.data() + text.size() || value < 0) {
    throw_invalid_argument(flag, expected, "'" + text + "'");
  }
  return value;
}

// Where q and k come from, and the one-head tensors of a query head.
struct CurveSource {
  std::string label;
  int64_t q_len = 0, kv_len = 0, q_heads = 0, head_dim = 0;
  bool causal = true;
  std::optional<ModalityLayout> layout;
  std::optional<Workload> workload;
  std::optional<TensorFile> file;
  TensorView q, k;  // the file's
};

CurveSource load_source(const CurveFlags& flags) {
  CurveSource source;
  if (!flags.input.empty()) {
    source.file = read_input_file(flags.input);
    const std::string prefix = "layers." + std::to_string(flags.layer) + ".";
    const bool layered = source.file->tensors.contains(prefix + "q");
    const AttentionInputs tensors =
        checked_attention_inputs(*source.file, layered ? prefix : "", flags.input, false);
    source.q = tensors.q->view();
    source.k = tensors.k->view();
    source.label = flags.input + (layered ? " layer " + std::to_string(flags.layer) : "");
    if (source.file->has_layout()) source.layout = source.file->layout();
    source.causal = causal_from_metadata(*source.file);
  } else {
    WorkloadSpec spec = flags.workload.spec();
    if (spec.seq_len == 0) spec.seq_len = kCpuDefaultSeqLen;
    spec.seed = synthetic_layer_seed(spec.seed, flags.layer);
    source.workload = Workload::create(spec);
    source.causal = source.workload->causal();
    source.layout = source.workload->layout();
    source.label = fmt::format("SYNTHETIC {}, seed {} (layer {})", source.workload->spec().preset,
                               spec.seed, flags.layer);
    source.q_len = source.kv_len = source.workload->seq_len();
    source.q_heads = source.workload->spec().q_heads;
    source.head_dim = source.workload->spec().head_dim;
    return source;
  }
  source.q_len = source.q.shape[1];
  source.kv_len = source.k.shape[1];
  source.q_heads = source.q.shape[2];
  source.head_dim = source.q.shape[3];
  return source;
}

// One query head's q and its KV head's k, [1, len, 1, head_dim] (synthetic heads are generated
// alone and rounded to --dtype, as bench reads them); file heads are measured in place.
struct HeadInputs {
  Tensor q_rows, k_rows;
  TensorView q, k;
  int64_t head = 0;  // the head's index in q and k
};

HeadInputs head_inputs(const CurveSource& source, int64_t head, DType dtype) {
  HeadInputs inputs;
  if (source.file) {
    inputs.q = source.q;
    inputs.k = source.k;
    inputs.head = head;
    return inputs;
  }
  WorkloadHeadRows rows = workload_head_rows(*source.workload, head, dtype);
  inputs.q_rows = std::move(rows.q);
  inputs.k_rows = std::move(rows.k);
  inputs.q = inputs.q_rows.view();
  inputs.k = inputs.k_rows.view();
  return inputs;
}

// The families' spec texts, as the flags give them (or their defaults for the length).
std::vector<std::pair<std::string, std::vector<std::string>>> family_texts(const CurveFlags& flags,
                                                                           int64_t seq_len) {
  std::vector<std::pair<std::string, std::vector<std::string>>> families;
  if (flags.vec_alphas != kNone) {
    const PatternSpec base = PatternSpec::parse(flags.vec_base);
    if (base.name != "vec") throw_invalid_argument("--vec-base", "a vec spec", flags.vec_base);
    std::vector<std::string> texts;
    for (const std::string& alpha : split(flags.vec_alphas)) {
      PatternSpec spec = base;
      spec.params["alpha_ppm"] =
          parse_count(alpha, "--vec-alphas", "alpha_ppm values >= 0 separated by commas, or none");
      texts.push_back(spec.to_string());
    }
    families.push_back({"vec (" + flags.vec_base + ")", texts});
  }
  if (flags.vertical_slash != kNone) {
    std::vector<std::string> texts;
    if (flags.vertical_slash.empty()) {
      const PatternSpec scaled =
          resolve_pattern_flags({"vertical-slash"}, nullptr, seq_len, seq_len, true).front();
      // The always-kept lines (sinks, local diagonals) count toward the budgets: never below them.
      const int64_t min_vertical = std::max<int64_t>(1, scaled.param("sink", 1));
      const int64_t min_slash = std::max<int64_t>(1, scaled.param("local", 1));
      for (double scale : kVerticalSlashScales) {
        const std::string text = fmt::format(
            "vertical-slash:vertical={},slash={}",
            std::max<int64_t>(min_vertical, std::llround(scale * scaled.param("vertical", 1))),
            std::max<int64_t>(min_slash, std::llround(scale * scaled.param("slash", 1))));
        if (std::find(texts.begin(), texts.end(), text) == texts.end()) texts.push_back(text);
      }
    } else {
      const std::string expected = "vertical:slash pairs separated by commas, or none";
      for (const std::string& pair : split(flags.vertical_slash)) {
        const std::size_t colon = pair.find(':');
        if (colon == std::string::npos)
          throw_invalid_argument("--vertical-slash", expected, "'" + pair + "'");
        texts.push_back(
            fmt::format("vertical-slash:vertical={},slash={}",
                        parse_count(pair.substr(0, colon), "--vertical-slash", expected),
                        parse_count(pair.substr(colon + 1), "--vertical-slash", expected)));
      }
    }
    families.push_back({"vertical-slash", texts});
  }
  if (flags.a_shape_locals != kNone) {
    std::vector<std::string> texts;
    if (flags.a_shape_locals.empty()) {
      for (int64_t divisor : kLocalDivisors) {
        texts.push_back(fmt::format("a-shape:local={}", std::max<int64_t>(1, seq_len / divisor)));
      }
    } else {
      for (const std::string& local : split(flags.a_shape_locals)) {
        texts.push_back(fmt::format(
            "a-shape:local={}",
            parse_count(local, "--a-shape-locals", "window widths separated by commas, or none")));
      }
    }
    families.push_back({"a-shape", texts});
  }
  return families;
}

nlohmann::json points_json(const std::vector<CurvePoint>& points) {
  nlohmann::json list = nlohmann::json::array();
  for (const CurvePoint& point : points) {
    nlohmann::json entry = {{"density", point.density}, {"recall", point.recall}};
    if (!point.spec.empty()) {
      entry["spec"] = point.spec;
      entry["oracle_density"] = point.oracle_density;
    }
    list.push_back(entry);
  }
  return list;
}

nlohmann::json curves_json(const HeadCurves& curves) {
  nlohmann::json families = nlohmann::json::array();
  for (const FamilyCurve& family : curves.families) {
    families.push_back({{"name", family.name}, {"points", points_json(family.points)}});
  }
  return {{"families", families},
          {"token_oracle", points_json(curves.token_oracle)},
          {"tile_oracle", points_json(curves.tile_oracle)},
          {"rows_sampled", curves.rows_sampled},
          {"pairs_sampled", curves.pairs_sampled}};
}

void print_curves(const std::string& title, const HeadCurves& curves) {
  fmt::print("\n{}\n{:<16} {:<44} {:>8} {:>8} {:>10} {:>9}\n", title, "family", "spec", "density",
             "recall", "oracle d.", "x oracle");
  for (const FamilyCurve& family : curves.families) {
    for (const CurvePoint& point : family.points) {
      fmt::print("{:<16} {:<60} {:>7.2f}% {:>8.4f} {:>9.2f}% {:>8.1f}x\n",
                 family.name.substr(0, 16), point.spec, 100.0 * point.density, point.recall,
                 100.0 * point.oracle_density,
                 point.oracle_density > 0.0 ? point.density / point.oracle_density : 0.0);
    }
  }
  const auto oracle_line = [](const char* name, const std::vector<CurvePoint>& points) {
    if (points.empty()) return;
    fmt::print("{:<16}", name);
    for (const CurvePoint& point : points)
      fmt::print(" r{:.2f}:{:.2f}%", point.recall, 100.0 * point.density);
    fmt::print("\n");
  };
  oracle_line("token oracle", curves.token_oracle);
  oracle_line("tile oracle", curves.tile_oracle);
}

int run_curve(const CurveFlags& flags) {
  check_output_path(flags.exec.json_path, "--json");
  const bool text = flags.exec.json_path != "-";
  const bool progress = text && !flags.exec.quiet;
  RecallCurveOptions options = flags.options;
  options.oracle_recalls.clear();
  for (const std::string& part : split(flags.oracle_recalls)) {
    try {
      options.oracle_recalls.push_back(std::stod(part));
    } catch (const std::exception&) {
      throw_invalid_argument("--oracle-recalls", "recalls in (0, 1] separated by commas",
                             "'" + part + "'");
    }
  }
  const CurveSource source = load_source(flags);
  const std::vector<int64_t> heads = parse_head_list(flags.heads, source.q_heads);
  std::vector<CurveFamily> families;
  for (const auto& [name, texts] : family_texts(flags, source.kv_len)) {
    families.push_back(
        {name, resolve_pattern_flags(texts, source.layout ? &*source.layout : nullptr, source.q_len,
                                     source.kv_len, source.causal,
                                     "--vec-alphas/--vertical-slash/--a-shape-locals")});
  }
  std::error_code error;
  std::filesystem::create_directories(flags.output_dir, error);
  if (!std::filesystem::is_directory(flags.output_dir)) {
    throw Error(ErrorCode::kIoError,
                "--output-dir: cannot create directory '" + flags.output_dir + "'");
  }
  options.causal = source.causal;
  options.layout = source.layout ? &*source.layout : nullptr;
  options.num_threads = flags.exec.threads;

  std::vector<HeadCurves> measured;
  nlohmann::json head_reports = nlohmann::json::array();
  for (const int64_t head : heads) {
    const auto started = std::chrono::steady_clock::now();
    const HeadInputs inputs = head_inputs(source, head, flags.exec.data_type());
    HeadCurves curves = measure_recall_curves(inputs.q, inputs.k, inputs.head, families, options);
    curves.head = head;
    if (progress) fmt::print(stderr, "head {}: {:.1f} s\n", head, seconds_since(started));
    nlohmann::json entry = curves_json(curves);
    entry["head"] = head;
    if (source.workload) {
      entry["behaviour"] = std::string(head_behaviour_name(source.workload->behaviour(head)));
    }
    head_reports.push_back(entry);
    if (text && heads.size() > 1) print_curves(fmt::format("head {}", head), curves);
    measured.push_back(std::move(curves));
  }
  const HeadCurves mean = mean_recall_curves(measured);
  const std::string title =
      fmt::format("{}: {} tokens{}, {} head(s), {} sampled rows per head", source.label,
                  source.kv_len, source.causal ? "" : " (non-causal)", heads.size(),
                  mean.rows_sampled / static_cast<int64_t>(heads.size()));
  if (text) {
    fmt::print("mmsparse curve  {}\n", title);
    print_curves(fmt::format("mean over {} head(s)", heads.size()), mean);
  }
  nlohmann::json report = {{"synthetic", source.workload.has_value()},
                           {"source", source.label},
                           {"q_len", source.q_len},
                           {"kv_len", source.kv_len},
                           {"causal", source.causal},
                           {"dtype", dtype_name(flags.exec.data_type())},
                           {"sample_rows", options.sample_rows},
                           {"tile_samples", options.tile_samples},
                           {"tile_rows", options.tile_rows},
                           {"heads", head_reports},
                           {"mean", curves_json(mean)}};
  const std::filesystem::path dir = flags.output_dir;
  std::ofstream json_file(dir / kJsonName);
  if (!json_file)
    throw Error(ErrorCode::kIoError, "--output-dir: cannot write " + (dir / kJsonName).string());
  json_file << report.dump(2) << '\n';
  CurvePlotOptions plot;
  plot.title = "recall vs density, mean over heads: " + title;
  write_png((dir / kPngName).string(), render_recall_curves(mean, plot));
  if (text) fmt::print("wrote {} and {}\n", (dir / kJsonName).string(), (dir / kPngName).string());
  write_json_output(flags.exec.json_path, report.dump(2));
  return 0;
}

}  // namespace

Command add_curve_command(CLI::App& app) {
  auto flags = std::make_shared<CurveFlags>();
  CLI::App* command = app.add_subcommand(
      "curve",
      "recall against density: vec alphas, vertical-slash counts and A-shape windows beside the "
      "token and tile oracles, per head and mean (JSON and PNG; computed on the host)");
  flags->workload.add_to(*command);
  flags->exec.add_to(*command);
  command
      ->add_option("--input,-i", flags->input,
                   "safetensors file with q, k [batch, seq, heads, head_dim] (or layers.<L>.q, "
                   ".k) instead of a synthetic workload")
      ->check(CLI::ExistingFile);
  command
      ->add_option("--layer", flags->layer, "layer (synthetic: seed + layer; a file's layers.<L>.)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  command->add_option("--head", flags->heads, "query heads: all or a comma-separated list")
      ->capture_default_str();
  command->add_option("--vec-alphas", flags->vec_alphas, "vec alpha_ppm values, or none")
      ->capture_default_str();
  command
      ->add_option("--vec-base", flags->vec_base, "vec spec the alphas apply to (pooling, group)")
      ->capture_default_str();
  command->add_option("--vertical-slash", flags->vertical_slash,
                      "vertical:slash counts, or none (default: the scaled defaults x 1/8 .. 4)");
  command->add_option("--a-shape-locals", flags->a_shape_locals,
                      "A-shape local windows, or none (default: length / 128 .. length / 2)");
  command->add_option("--oracle-recalls", flags->oracle_recalls, "recalls of the oracles' points")
      ->capture_default_str();
  command
      ->add_option("--rows", flags->options.sample_rows,
                   "query rows sampled per head, the same for every method and the token "
                   "oracle (0: every row)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  command
      ->add_option("--tile-samples", flags->options.tile_samples,
                   "query tiles the tile oracle sums per head (0: all)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  command
      ->add_option("--tile-rows", flags->options.tile_rows,
                   "query rows per plan tile (the CUDA engine's at head_dim 64/128/256: 128)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  command->add_flag("!--no-tile-oracle", flags->options.tile_oracle, "leave the tile oracle out");
  command
      ->add_option("--output-dir,-o", flags->output_dir,
                   "directory for curve.json and curve.png (created if missing)")
      ->capture_default_str();
  return {command, [flags] { return run_curve(*flags); }};
}

}  // namespace mmsparse::cli
