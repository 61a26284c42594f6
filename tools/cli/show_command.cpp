#include "show_command.h"

#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>

#include <fmt/core.h>
#include <nlohmann/json.hpp>

#include "mmsparse/patterns.h"
#include "mmsparse/status.h"
#include "mmsparse/tools/viz.h"
#include "report.h"

namespace mmsparse::cli {
namespace {

constexpr int64_t kDefaultPictureSize = 512;
// Five grids of 4096² cells in double are about 670 MB; larger pictures are not worth that.
constexpr int64_t kMaxPictureSize = 4096;
// Shorter maps take seconds; percentages would only clutter the progress.
constexpr int64_t kMapProgressMinSeqLen = 32768;
constexpr int kMapProgressSteps = 10;
constexpr const char* kDefaultPattern = "a-shape";
constexpr const char* kVecPattern = "vec";
constexpr const char* kSidecarName = "show.json";

struct ShowFlags {
  WorkloadFlags workload;
  std::string input;
  std::string heads = "0";
  std::string pattern;
  int64_t size = kDefaultPictureSize;
  std::string pool = "max";
  std::string output_dir = ".";
  ExecutionFlags exec;  // the maps are computed on the host, whatever the device
};

// Where q and k come from: a synthetic workload (generated one head at a time, so 128K tokens
// need only that head's rows) or a safetensors file (its first batch element).
struct Source {
  std::string label;  // first words of every picture's title
  int64_t q_len = 0, kv_len = 0, q_heads = 0, kv_heads = 0;
  std::optional<ModalityLayout> layout;
  std::optional<Workload> workload;
  std::optional<TensorFile> file;

  const ModalityLayout* layout_or_null() const { return layout ? &*layout : nullptr; }
  std::string behaviour(int64_t head) const {
    return workload ? std::string(head_behaviour_name(workload->behaviour(head))) : "";
  }
};

// One query head's q and its KV head's k as [1, len, 1, head_dim] views: what the maps and the
// head's one-head plan read (dynamic patterns estimate from them). Synthetic heads own their rows;
// file heads are views into the file's tensors.
struct HeadTensors {
  Tensor q_rows, k_rows;
  TensorView q, k;
};

// The pictures are of causal attention (the map, the plan's cells and the densities): a
// non-causal source (a video DiT) would be drawn and measured wrongly.
void refuse_non_causal(bool causal, const std::string& source) {
  if (!causal) {
    throw_invalid_argument(source, "a causal workload (show draws causal attention maps)",
                           "non-causal attention");
  }
}

Source load_source(const ShowFlags& flags) {
  Source source;
  if (!flags.input.empty()) {
    source.file = read_input_file(flags.input);
    const AttentionInputs tensors = checked_attention_inputs(*source.file, "", flags.input, false);
    source.label = flags.input;
    source.q_len = tensors.q->shape()[1];
    source.kv_len = tensors.k->shape()[1];
    source.q_heads = tensors.q->shape()[2];
    source.kv_heads = tensors.k->shape()[2];
    if (source.file->has_layout()) source.layout = source.file->layout();
    refuse_non_causal(causal_from_metadata(*source.file), "--input " + flags.input);
    return source;
  }
  WorkloadSpec spec = flags.workload.spec();
  if (spec.seq_len == 0) spec.seq_len = kCpuDefaultSeqLen;
  source.workload = Workload::create(spec);
  refuse_non_causal(source.workload->causal(), "--preset " + spec.preset);
  source.label = "SYNTHETIC " + source.workload->spec().preset;
  source.q_len = source.kv_len = source.workload->seq_len();
  source.q_heads = source.workload->spec().q_heads;
  source.kv_heads = source.workload->spec().kv_heads;
  source.layout = source.workload->layout();
  return source;
}

// Batch element 0, head `head` of a [batch, len, heads, head_dim] view.
TensorView head_slice(const TensorView& x, int64_t head) {
  TensorView slice = x;
  slice.data = static_cast<std::byte*>(x.data) +
               head * x.strides[2] * static_cast<int64_t>(dtype_size(x.dtype));
  slice.shape[0] = 1;
  slice.shape[2] = 1;
  return slice;
}

HeadTensors head_tensors(const Source& source, int64_t head, DType dtype) {
  HeadTensors tensors;
  const int64_t kv_head = head / (source.q_heads / source.kv_heads);
  if (source.file) {
    tensors.q = head_slice(source.file->at("q").view(), head);
    tensors.k = head_slice(source.file->at("k").view(), kv_head);
    return tensors;
  }
  WorkloadHeadRows rows = workload_head_rows(*source.workload, head, dtype);
  tensors.q_rows = std::move(rows.q);
  tensors.k_rows = std::move(rows.k);
  tensors.q = tensors.q_rows.view();
  tensors.k = tensors.k_rows.view();
  return tensors;
}

PatternSpec chosen_pattern(const ShowFlags& flags, const Source& source) {
  return resolve_pattern_flags({flags.pattern.empty() ? kDefaultPattern : flags.pattern},
                               source.layout_or_null(), source.q_len, source.kv_len,
                               /*causal=*/true)
      .front();
}

std::filesystem::path prepare_output_dir(const std::string& dir) {
  std::error_code error;
  std::filesystem::create_directories(dir, error);
  if (!std::filesystem::is_directory(dir)) {
    throw Error(ErrorCode::kIoError, "--output-dir: cannot create directory '" + dir + "'" +
                                         (error ? " (" + error.message() + ")" : ""));
  }
  return dir;
}

int run_show(const ShowFlags& flags) {
  if (flags.exec.device_choice() == DeviceChoice::kCuda) {
    throw_invalid_argument("--device", "auto or cpu (show computes its maps on the host)", "cuda");
  }
  check_output_path(flags.exec.json_path, "--json");
  const bool progress_enabled = !flags.exec.quiet && flags.exec.json_path != "-";
  const PoolMode pool = pool_mode_from_name(flags.pool);
  const std::filesystem::path output_dir = prepare_output_dir(flags.output_dir);

  const Source source = load_source(flags);
  const std::vector<int64_t> heads = parse_head_list(flags.heads, source.q_heads);
  const PatternSpec spec = chosen_pattern(flags, source);
  if (progress_enabled) {
    fmt::print(stderr, "{}: {} tokens, {} heads; pattern {}\n", source.label, source.kv_len,
               source.q_heads, spec.to_string());
  }

  nlohmann::json report = {{"synthetic", source.workload.has_value()},
                           {"source", source.label},
                           {"q_len", source.q_len},
                           {"kv_len", source.kv_len},
                           {"pattern", spec.to_string()},
                           {"pool", pool_mode_name(pool)},
                           {"dtype", dtype_name(flags.exec.data_type())},
                           {"size", flags.size},
                           {"heads", nlohmann::json::array()}};
  Progress progress(static_cast<int>(heads.size()), progress_enabled);
  for (const int64_t head : heads) {
    const std::string behaviour = source.behaviour(head);
    const std::string head_label =
        fmt::format("head {}{}", head, behaviour.empty() ? "" : " (" + behaviour + ")");
    progress.step(head_label + ": plan, attention map, mask and picture");
    const auto started = std::chrono::steady_clock::now();
    const HeadTensors tensors = head_tensors(source, head, flags.exec.data_type());
    // A one-head plan per head: dynamic patterns estimate it from this head's q and k alone.
    const PatternInputs inputs{tensors.q, tensors.k};
    const Plan plan = build_plan(spec, {1, 1, source.q_len, source.kv_len, kDefaultTileRows},
                                 source.layout_or_null(), &inputs);

    AttentionMapOptions options;
    options.cells = flags.size;
    options.pool = pool;
    options.num_threads = flags.exec.threads;
    // VecAttention's selected vectors (the keys each pooled query block kept) get a panel of
    // their own beside the map, apart from its sinks and diagonal.
    options.gathered_columns = spec.name == kVecPattern;
    int reported_step = 0;
    if (progress_enabled && source.q_len >= kMapProgressMinSeqLen) {
      options.progress = [&](int64_t done, int64_t total) {
        const int step = static_cast<int>(done * kMapProgressSteps / total);
        if (step <= reported_step) return;
        reported_step = step;
        fmt::print(stderr, "      {}% of the map ({:.1f} s)\n", step * 100 / kMapProgressSteps,
                   seconds_since(started));
        std::fflush(stderr);
      };
    }
    const HeadAttentionMaps maps =
        pool_attention_maps(tensors.q, tensors.k, 0, 0, plan, 0, options);

    PictureOptions picture;
    picture.panel_size = flags.size;
    picture.layout = source.layout_or_null();
    picture.title = fmt::format("{}: {} tokens, {} of {}, pattern {}", source.label, source.kv_len,
                                head_label, source.q_heads, spec.to_string());
    const std::string name =
        fmt::format("head{:02}{}-{}-recall{:.4f}.png", head,
                    behaviour.empty() ? "" : "-" + behaviour, spec.name, maps.recall_mean);
    const std::filesystem::path path = output_dir / name;
    write_png(path.string(), render_attention_picture(maps, picture));
    progress.done(fmt::format("{:.2f} s", seconds_since(started)));

    if (flags.exec.json_path != "-") {
      fmt::print("{}: recall {:.4f} (min {:.4f}), density {:.2f}% -> {}\n", head_label,
                 maps.recall_mean, maps.recall_min, 100.0 * maps.density, path.string());
    }
    nlohmann::json entry = {{"head", head},
                            {"recall_mean", maps.recall_mean},
                            {"recall_min", maps.recall_min},
                            {"density", maps.density},
                            {"permuted", !maps.query_order.empty()},
                            {"file", name}};
    if (!behaviour.empty()) entry["behaviour"] = behaviour;
    report["heads"].push_back(entry);
  }
  const std::filesystem::path sidecar = output_dir / kSidecarName;
  std::ofstream file(sidecar);
  if (!file)
    throw Error(ErrorCode::kIoError, "--output-dir: cannot write '" + sidecar.string() + "'");
  file << report.dump(2) << '\n';
  write_json_output(flags.exec.json_path, report.dump(2));
  return 0;
}

}  // namespace

Command add_show_command(CLI::App& app) {
  auto flags = std::make_shared<ShowFlags>();
  CLI::App* command = app.add_subcommand(
      "show", "PNG pictures of heads' attention maps beside a pattern's mask (MMInference Fig. 3)");
  flags->workload.add_to(*command);
  command
      ->add_option("--input,-i", flags->input,
                   "safetensors file with q, k [batch, seq, heads, head_dim] (first batch "
                   "element) instead of a synthetic workload")
      ->check(CLI::ExistingFile);
  command->add_option("--head", flags->heads, "query head, a comma-separated list, or all")
      ->capture_default_str();
  command->add_option("--pattern", flags->pattern,
                      "pattern spec whose mask is shown; dynamic patterns are estimated from each "
                      "head's q and k (default: a-shape, windows scaled to the sequence as in "
                      "bench)");
  command->add_option("--size", flags->size, "panel side in pixels (the map is pooled to it)")
      ->check(CLI::Range(int64_t{1}, kMaxPictureSize))
      ->capture_default_str();
  command->add_option("--pool", flags->pool, "max or mean pooling of probabilities per pixel")
      ->check(CLI::IsMember({"max", "mean"}))
      ->capture_default_str();
  command
      ->add_option("--output-dir,-o", flags->output_dir,
                   "directory for the PNGs and show.json (created if missing)")
      ->capture_default_str();
  flags->exec.add_to(*command);
  return {command, [flags] { return run_show(*flags); }};
}

}  // namespace mmsparse::cli
