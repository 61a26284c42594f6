#include "cli_common.h"

#include <algorithm>
#include <cstdio>
#include <fstream>

#include <fmt/core.h>

#include "mmsparse/build_info.h"
#include "mmsparse/tools/search.h"
#include "mmsparse/status.h"

namespace mmsparse::cli {

namespace {
constexpr const char* kCudaBackend = "cuda-sm90a";
constexpr int kAttentionInputDims = 4;  // [batch, seq, heads, head_dim]
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
  command.add_option("--dtype", dtype, "input dtype: bf16, fp16 or fp32")
      ->check(CLI::IsMember({"bf16", "fp16", "fp32", "bfloat16", "float16", "float32"}))
      ->capture_default_str();
  command.add_option("--threads", threads, "CPU threads (0: all cores)");
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
  const Tensor& tensor = file.at(name);
  if (tensor.shape().size() != kAttentionInputDims) {
    throw_invalid_argument("--input " + path + " tensor '" + name + "'",
                           "4 dimensions [batch, seq, heads, head_dim]",
                           tensor.view().shape_string());
  }
  return tensor;
}

}  // namespace mmsparse::cli
