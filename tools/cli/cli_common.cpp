#include "cli_common.h"

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <optional>

#include <fmt/core.h>

#include "executor.h"
#include "mmsparse/build_info.h"
#include "mmsparse/tools/search.h"
#include "mmsparse/status.h"

namespace mmsparse::cli {

namespace {
constexpr const char* kCudaBackend = "cuda-sm90a";
constexpr int kAttentionInputDims = 4;  // [batch, seq, heads, head_dim]
// Dynamic patterns estimate from q and k; a check of their parameters needs only a narrow head.
constexpr int64_t kCheckHeadDim = 8;
// The parameter of patterns that attend causally or both ways (vec): it follows the workload
// unless the spec sets it.
constexpr const char* kCausalParam = "causal";

// Runs `body`, prefixing any mmsparse error with `context` (the flag or file the user typed).
template <typename Body>
auto with_context(const std::string& context, Body&& body) {
  try {
    return body();
  } catch (const Error& error) {
    throw Error(error.code(), context + ": " + error.what());
  }
}
// Checks `spec` for one head of the real shape (dynamic patterns against zero inputs of a narrow
// head, without estimating, so that a bad spec after them still fails at once) and, on a causal
// workload, that it attends causally. Errors get `context` in front.
void check_pattern_build(const PatternSpec& spec, const ModalityLayout* layout, int64_t q_len,
                         int64_t kv_len, bool causal, const std::string& context) {
  const PlanShape shape{1, 1, q_len, kv_len, kDefaultTileRows};
  const Tensor q(DType::kFloat32, {1, q_len, 1, kCheckHeadDim});
  const Tensor k(DType::kFloat32, {1, kv_len, 1, kCheckHeadDim});
  const PatternInputs inputs{q.view(), k.view()};
  // A static spec's attends_causally builds the head check_pattern would build (and throws what
  // it throws), so on a causal workload that one build checks both.
  if (is_dynamic(spec) || !causal) {
    with_context(context, [&] { check_pattern(spec, shape, layout, &inputs); });
  }
  // On a causal workload the densities, recalls and the dense reference are causal: a
  // bidirectional plan (vec's causal=0, for video DiTs) would read as more than dense.
  if (causal && !with_context(context, [&] { return attends_causally(spec, shape, layout); })) {
    throw_invalid_argument(context,
                           "a causal pattern (a causal workload compares with causal dense; "
                           "non-causal patterns run on non-causal presets such as the dit-*)",
                           "one with non-causal tiles");
  }
}

}  // namespace

void WorkloadFlags::add_to(CLI::App& command) {
  command.add_option("--preset", preset, "synthetic workload preset (see `mmsparse presets`)")
      ->capture_default_str();
  command.add_option("--seq-len", seq_len, "sequence length (0: preset default; CPU default 4096)");
  command.add_option("--heads", heads, "query heads (0: preset default)");
  command.add_option("--kv-heads", kv_heads, "key/value heads (0: preset default)");
  command.add_option("--head-dim", head_dim, "head dimension (0: preset default)");
  command.add_option("--seed", seed, "workload seed")->capture_default_str();
  std::string needle_presets;
  for (const PresetInfo& info : workload_presets()) {
    if (info.default_needles > 0) {
      needle_presets += fmt::format("{} for {}, ", info.default_needles, info.name);
    }
  }
  needles_option = command.add_option(
      "--needles", needles,
      "needle keys planted in the media, read by the final question (default: the preset's, " +
          needle_presets + "else 0)");
  command
      .add_option("--head-behaviour", head_behaviour,
                  "give every query head one behaviour: local, grid, vertical or dense "
                  "(default: the preset's mix)")
      ->check(CLI::IsMember({"local", "grid", "vertical", "dense"}));
}

WorkloadHeadRows workload_head_rows(const Workload& workload, int64_t head, DType dtype) {
  const WorkloadSpec& spec = workload.spec();
  const int64_t kv_head = head / (spec.q_heads / spec.kv_heads);
  const int64_t length = workload.seq_len();
  std::vector<int64_t> positions(static_cast<std::size_t>(length));
  std::iota(positions.begin(), positions.end(), int64_t{0});
  WorkloadHeadRows rows{Tensor(DType::kFloat32, {1, length, 1, spec.head_dim}),
                        Tensor(DType::kFloat32, {1, length, 1, spec.head_dim})};
  std::vector<float> values(static_cast<std::size_t>(length * spec.head_dim));
  workload.generate_q(head, positions, rows.q.data_as<float>());
  workload.generate_kv(kv_head, rows.k.data_as<float>(), values.data());
  if (dtype != DType::kFloat32) {
    rows.q = to_contiguous(rows.q.view(), dtype);
    rows.k = to_contiguous(rows.k.view(), dtype);
  }
  return rows;
}

std::string head_mix_note(const WorkloadSpec& spec) {
  return spec.head_behaviour
             ? fmt::format(" (every head {})", head_behaviour_name(*spec.head_behaviour))
             : std::string();
}

WorkloadSpec WorkloadFlags::spec() const {
  WorkloadSpec spec;
  spec.preset = preset;
  spec.seq_len = seq_len;
  spec.q_heads = heads;
  spec.kv_heads = kv_heads;
  spec.head_dim = head_dim;
  spec.seed = seed;
  spec.needles = needles;
  if (!head_behaviour.empty()) {
    spec.head_behaviour = head_behaviour_from_name(head_behaviour, "--head-behaviour");
  }
  if (needles_option == nullptr || needles_option->count() == 0) {
    const std::vector<PresetInfo>& presets = workload_presets();
    const auto preset_info = std::find_if(presets.begin(), presets.end(),
                                          [&](const PresetInfo& info) { return info.name == preset; });
    // An unknown preset keeps 0: Workload::create names it in its error.
    spec.needles = preset_info != presets.end() ? preset_info->default_needles : 0;
  }
  return spec;
}

void ExecutionFlags::add_to(CLI::App& command) {
  command.add_option("--device", device, "auto, cpu or cuda")
      ->check(CLI::IsMember({"auto", "cpu", "cuda"}))
      ->capture_default_str();
  dtype_option = command.add_option("--dtype", dtype, "input dtype: bf16, fp16 or fp32")
      ->check(CLI::IsMember({"bf16", "fp16", "fp32", "bfloat16", "float16", "float32"}))
      ->capture_default_str();
  add_threads_option(command, threads);
  command.add_option("--json", json_path, "write results as JSON to a file, or - for stdout");
  command.add_flag("--quiet", quiet, "no progress lines");
}

DeviceChoice ExecutionFlags::device_choice() const {
  if (device == "cpu") return DeviceChoice::kCpu;
  if (device == "cuda") return DeviceChoice::kCuda;
  return DeviceChoice::kAuto;
}

DType ExecutionFlags::data_type() const { return dtype_from_name(dtype); }

bool use_gpu(DeviceChoice choice) {
  const BuildInfo info = build_info();
  const bool engine = std::find(info.backends.begin(), info.backends.end(), kCudaBackend) !=
                      info.backends.end();
  const bool available = engine && !visible_gpus().empty();
  if (choice == DeviceChoice::kCuda && !available) {
    throw Error(ErrorCode::kUnsupported,
                "--device cuda: expected a build with the CUDA attention engine and a visible GPU, "
                "got " + std::string(engine ? "no visible GPU" : "no CUDA attention engine in this build"));
  }
  return choice != DeviceChoice::kCpu && available;
}

bool any_dynamic(const std::vector<PatternSpec>& specs) {
  return std::any_of(specs.begin(), specs.end(),
                     [](const PatternSpec& spec) { return is_dynamic(spec); });
}

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

void Progress::step(const std::string& what) {
  ++current_;
  if (enabled_) {
    fmt::print(stderr, "[{}/{}] {} ...\n", current_, total_, what);
    std::fflush(stderr);
  }
}

void Progress::done(const std::string& what) {
  if (enabled_) {
    fmt::print(stderr, "      {} ({:.1f} s elapsed)\n", what, seconds_since(started_));
    std::fflush(stderr);
  }
}

void write_json_output(const std::string& path, const std::string& json_text) {
  if (path.empty()) return;
  if (path == "-") {
    fmt::print("{}\n", json_text);
    return;
  }
  std::ofstream file(path);
  if (!file) throw Error(ErrorCode::kIoError, "--json: cannot open '" + path + "' for writing");
  file << json_text << '\n';
}

PatternSpec scaled_default_spec(const PatternInfo& info, int64_t seq_len) {
  return scale_spec_to_length(PatternSpec::parse(info.default_spec), seq_len);
}

const Tensor& attention_input(const TensorFile& file, const std::string& name,
                              const std::string& path) {
  const auto found = file.tensors.find(name);
  if (found == file.tensors.end()) {
    std::string names;
    for (const auto& entry : file.tensors) names += (names.empty() ? "" : ", ") + entry.first;
    throw_invalid_argument("--input " + path,
                           "a tensor '" + name + "' (the file has " + names + ")",
                           "no tensor '" + name + "'");
  }
  const Tensor& tensor = found->second;
  if (tensor.shape().size() != kAttentionInputDims) {
    throw_invalid_argument("--input " + path + " tensor '" + name + "'",
                           "4 dimensions [batch, seq, heads, head_dim]",
                           tensor.view().shape_string());
  }
  return tensor;
}

AttentionInputs checked_attention_inputs(const TensorFile& file, const std::string& prefix,
                                         const std::string& path, bool need_v) {
  AttentionInputs inputs;
  inputs.q = &attention_input(file, prefix + "q", path);
  inputs.k = &attention_input(file, prefix + "k", path);
  if (need_v) inputs.v = &attention_input(file, prefix + "v", path);
  const std::vector<int64_t>& q = inputs.q->shape();
  const std::vector<int64_t>& k = inputs.k->shape();
  const std::string k_name = "--input " + path + " tensor '" + prefix + "k'";
  if (k[0] != q[0] || k[3] != q[3] || k[2] < 1 || q[2] % k[2] != 0) {
    throw_invalid_argument(
        k_name,
        fmt::format("[{}, kv_len, heads dividing {} (GQA), {}] to match '{}q' {}", q[0], q[2], q[3],
                    prefix, inputs.q->view().shape_string()),
        inputs.k->view().shape_string());
  }
  if (need_v && inputs.v->shape() != k) {
    throw_invalid_argument("--input " + path + " tensor '" + prefix + "v'",
                           "the shape of '" + prefix + "k', " + inputs.k->view().shape_string(),
                           inputs.v->view().shape_string());
  }
  return inputs;
}

TensorFile read_input_file(const std::string& path, const std::string& flag) {
  TensorFile file = read_safetensors(path);
  if (file.has_layout()) {
    with_context(flag + " " + path, [&] { return file.layout(); });
  }
  return file;
}

std::vector<PatternSpec> resolve_pattern_flags(const std::vector<std::string>& texts,
                                               const ModalityLayout* layout, int64_t q_len,
                                               int64_t kv_len, bool causal,
                                               const std::string& flag) {
  std::vector<PatternSpec> resolved;
  for (const std::string& text : texts) {
    resolved.push_back(with_context(flag + " '" + text + "'", [&] {
      const PatternSpec given = PatternSpec::parse(text);
      PatternSpec merged = given;
      for (const PatternInfo& info : known_patterns()) {
        if (info.name != given.name) continue;
        merged = scaled_default_spec(info, kv_len);
        for (const auto& [key, value] : given.params) merged.params[key] = value;
        for (const auto& [key, list] : given.lists) merged.lists[key] = list;
      }
      // An unknown name or parameter throws here, naming the known ones.
      PatternSpec spec = resolve_pattern(merged, layout);
      // A pattern that can attend both ways follows the workload unless told otherwise.
      if (spec.params.contains(kCausalParam) && !given.params.contains(kCausalParam)) {
        spec.params[kCausalParam] = causal ? 1 : 0;
      }
      return spec;
    }));
  }
  for (const bool dynamic : {false, true}) {
    for (std::size_t i = 0; i < texts.size(); ++i) {
      if (is_dynamic(resolved[i]) != dynamic) continue;
      check_pattern_build(resolved[i], layout, q_len, kv_len, causal, flag + " '" + texts[i] + "'");
    }
  }
  return resolved;
}

void check_patterns_build(const std::vector<PatternSpec>& specs, const ModalityLayout* layout,
                          int64_t q_len, int64_t kv_len, bool causal, const std::string& what) {
  for (const PatternSpec& spec : specs) {
    check_pattern_build(spec, layout, q_len, kv_len, causal, what + " '" + spec.to_string() + "'");
  }
}

PatternSpec dense_reference_spec(bool causal) { return PatternSpec{causal ? "dense" : "full", {}}; }

void check_output_path(const std::string& path, const std::string& flag) {
  if (path.empty() || path == "-") return;
  const std::filesystem::path target(path);
  std::error_code error;
  if (std::filesystem::is_directory(target, error)) {
    throw_invalid_argument(flag, "a file path", "the directory '" + path + "'");
  }
  const std::filesystem::path parent =
      target.has_parent_path() ? target.parent_path() : std::filesystem::path(".");
  if (!std::filesystem::is_directory(parent, error)) {
    throw Error(ErrorCode::kIoError, flag + ": cannot write '" + path + "': directory '" +
                                         parent.string() + "' does not exist");
  }
  // Opened for appending (a new file is removed again): the one test that also holds for root
  // and for read-only mounts.
  const bool exists = std::filesystem::exists(target, error);
  const bool writable = static_cast<bool>(std::ofstream(path, std::ios::app));
  if (!exists) std::filesystem::remove(target, error);
  if (!writable) {
    throw Error(ErrorCode::kIoError,
                flag + ": cannot write '" + path + "' (" +
                    (exists ? "the file" : "directory '" + parent.string() + "'") +
                    " is not writable)");
  }
}

CLI::Option* add_threads_option(CLI::App& command, int& threads) {
  return command
      .add_option("--threads", threads,
                  "CPU threads (0: all cores; at most " + std::to_string(kMaxThreads) + ")")
      ->check(CLI::Range(0, kMaxThreads));
}

std::vector<int64_t> parse_head_list(const std::string& text, int64_t heads) {
  std::vector<int64_t> list;
  if (text == "all") {
    list.resize(static_cast<std::size_t>(heads));
    std::iota(list.begin(), list.end(), int64_t{0});
    return list;
  }
  const std::string expected =
      fmt::format("all, or head indices in [0, {}) separated by commas", heads);
  std::size_t begin = 0;
  while (begin <= text.size()) {
    const std::size_t end = std::min(text.find(',', begin), text.size());
    int64_t head = -1;
    const auto [next, error] = std::from_chars(text.data() + begin, text.data() + end, head);
    if (error != std::errc() || next != text.data() + end || head < 0 || head >= heads) {
      throw_invalid_argument("--head", expected, "'" + text + "'");
    }
    list.push_back(head);
    begin = end + 1;
  }
  return list;
}

void add_calibration_options(CLI::App& command, std::string& input, std::string& layers,
                             std::vector<int64_t>& heads) {
  command
      .add_option("--input,-i", input,
                  "calibration safetensors: layers.<L>.q/k/v (or q/k/v) and the layout "
                  "(default: a SYNTHETIC preset)")
      ->check(CLI::ExistingFile);
  command.add_option("--layers", layers,
                     "layers to search: all or a list such as 0,3 (default: all of --input; "
                     "synthetic: 0, layer L seeded seed + L)");
  command.add_option("--head", heads, "query heads to search, comma-separated (default: all)")
      ->delimiter(',');
}

void add_timing_options(CLI::App& command, TimingFlags& timing, const std::string& what) {
  command
      .add_option_function<int>(
          "--warmup",
          [&timing](int runs) {
            timing.warmup = runs;
            timing.warmup_given = true;
          },
          "warm-up runs " + what + " (default " + std::to_string(timing.warmup) +
              " on the GPU, " + std::to_string(TimingFlags::kCpuDefaultWarmup) + " on the CPU)")
      ->check(CLI::Range(0, kMaxTimingRuns));
  command
      .add_option_function<int>(
          "--repeats",
          [&timing](int runs) {
            timing.repeats = runs;
            timing.repeats_given = true;
          },
          "timed runs " + what + ", median (default " + std::to_string(timing.repeats) +
              " on the GPU, " + std::to_string(TimingFlags::kCpuDefaultRepeats) + " on the CPU)")
      ->check(CLI::Range(1, kMaxTimingRuns));
}

}  // namespace mmsparse::cli
