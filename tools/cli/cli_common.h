#pragma once
// Shared pieces of the mmsparse CLI: the one flag vocabulary, device choice, timing and progress.

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "mmsparse/tools/io.h"
#include "mmsparse/patterns.h"
#include "mmsparse/tensor.h"
#include "mmsparse/tools/workload.h"

namespace mmsparse::cli {

struct TimingFlags;  // executor.h

// Sizes that keep the CPU reference backend well under a minute for the default bench.
inline constexpr int64_t kCpuDefaultSeqLen = 4096;

// A subcommand and what runs when it was chosen (returns the exit code).
struct Command {
  CLI::App* app = nullptr;
  std::function<int()> run;
};

enum class DeviceChoice { kAuto, kCpu, kCuda };

struct WorkloadFlags {
  std::string preset = "video-qwen2.5vl-128k";
  int64_t seq_len = 0;
  int64_t heads = 0;
  int64_t kv_heads = 0;
  int64_t head_dim = 0;
  uint64_t seed = 0;
  int64_t needles = 0;
  CLI::Option* needles_option = nullptr;  // not given: the preset's default_needles
  std::string head_behaviour;             // empty: the preset's mix
  void add_to(CLI::App& command);
  WorkloadSpec spec() const;
};

// One query head's q rows and its KV head's k rows of a synthetic workload, each
// [1, seq_len, 1, head_dim], generated alone and rounded to `dtype` (the rounding of the inputs
// bench and run read). The maps and curves that read them need no V.
struct WorkloadHeadRows {
  Tensor q, k;
};
WorkloadHeadRows workload_head_rows(const Workload& workload, int64_t head, DType dtype);

// " (every head grid)" for a workload whose query heads all have one behaviour, else "".
std::string head_mix_note(const WorkloadSpec& spec);

struct ExecutionFlags {
  std::string device = "auto";
  std::string dtype = "bf16";
  CLI::Option* dtype_option = nullptr;  // count() 0: --dtype not given
  int threads = 0;
  std::string json_path;  // "" none, "-" stdout
  bool quiet = false;
  void add_to(CLI::App& command);
  DeviceChoice device_choice() const;
  DType data_type() const;
};

// Resolves "auto" to the CUDA engine when the build has it and a GPU is visible.
bool use_gpu(DeviceChoice choice);

// Progress lines on stderr ("[2/6] a-shape: attention ... 1.3 s"), silent with --quiet or when
// JSON goes to stdout.
class Progress {
 public:
  Progress(int total_steps, bool enabled) : total_(total_steps), enabled_(enabled) {}
  void step(const std::string& what);
  void done(const std::string& what);

 private:
  int total_;
  int current_ = 0;
  bool enabled_;
  std::chrono::steady_clock::time_point started_ = std::chrono::steady_clock::now();
};

// Whether any spec names a pattern estimated from the inputs (vertical-slash, grid).
bool any_dynamic(const std::vector<PatternSpec>& specs);

double seconds_since(std::chrono::steady_clock::time_point start);

void write_json_output(const std::string& path, const std::string& json_text);

// A pattern's default spec with A-shape/Tri-shape windows and vertical-slash line budgets scaled to
// `seq_len` (scale_spec_to_length, search.h): the paper's values (Table 2; MInference's 1000
// verticals and 6096 slashes) are set for 128K tokens, and shorter runs keep the same fraction of
// the sequence so that the patterns stay sparse at CPU sizes.
PatternSpec scaled_default_spec(const PatternInfo& info, int64_t seq_len);

// The dense reference every sparse run is compared with: causal dense ("dense") for a causal
// workload, non-causal dense ("full") for a video DiT's full attention.
PatternSpec dense_reference_spec(bool causal);

// The one resolution of --pattern values that run, bench, search and show share: each parsed, the
// defaults of the parameters not given scaled to the sequence length (scaled_default_spec), a
// `causal` parameter not given set to the workload's `causal`, the rest from the layout
// (resolve_pattern); then all checked by a build for one head (static patterns first, as they
// check in milliseconds; dynamic ones take up to ~2 s at 128K on the CPU), so that no error waits
// for another spec's check. A causal workload refuses patterns with non-causal tiles (their
// pairs lie outside the causal reference). Errors name `flag` and the text the user typed.
std::vector<PatternSpec> resolve_pattern_flags(const std::vector<std::string>& texts,
                                               const ModalityLayout* layout, int64_t q_len,
                                               int64_t kv_len, bool causal,
                                               const std::string& flag = "--pattern");

// Builds each spec once for one head of the real shape (dynamic patterns estimate from zero
// inputs of a narrow head) so that parameters out of range, and non-causal patterns on a causal
// workload, fail before any attention runs, with `what` (the flag or file the spec came from) in
// the message. Costs milliseconds, even at 128K.
void check_patterns_build(const std::vector<PatternSpec>& specs, const ModalityLayout* layout,
                          int64_t q_len, int64_t kv_len, bool causal, const std::string& what);

// Fails unless `path` can be written: its directory exists and is writable. Checked before the
// computation whose result goes there; "" and "-" (stdout) always pass.
void check_output_path(const std::string& path, const std::string& flag);

// --threads: 0 (all cores) up to kMaxThreads.
inline constexpr int kMaxThreads = 4096;
CLI::Option* add_threads_option(CLI::App& command, int& threads);

// The query heads of --head: "all" (every head in order) or indices in [0, heads) separated by
// commas, as given. Throws Error(kInvalidArgument) naming --head and quoting `text` otherwise.
std::vector<int64_t> parse_head_list(const std::string& text, int64_t heads);

// The calibration input of the searches: --input/-i (a safetensors file of layers.<L>.q/k/v or
// q/k/v and the layout; empty: a SYNTHETIC preset), --layers ("all" or a list) and --head (query
// heads, comma-separated; empty: all).
void add_calibration_options(CLI::App& command, std::string& input, std::string& layers,
                             std::vector<int64_t>& heads);

// --warmup and --repeats into `timing` (recording that the user gave them), each at most
// kMaxTimingRuns; `what` ends their help text.
inline constexpr int kMaxTimingRuns = 10000;
void add_timing_options(CLI::App& command, TimingFlags& timing, const std::string& what);

// The q, k, v tensors of one layer (`prefix` "" or "layers.<L>."), each checked for presence and
// [batch, seq, heads, head_dim], k against q (batch, head_dim, GQA heads) and v against k. Errors
// name the file and the tensor.
struct AttentionInputs {
  const Tensor* q = nullptr;
  const Tensor* k = nullptr;
  const Tensor* v = nullptr;
};
AttentionInputs checked_attention_inputs(const TensorFile& file, const std::string& prefix,
                                         const std::string& path, bool need_v = true);

// read_safetensors with its layout (when it has one) parsed at once: errors name the file and the
// metadata key.
TensorFile read_input_file(const std::string& path, const std::string& flag = "--input");

// Tensor `name` of an input file, checked to be [batch, seq, heads, head_dim] (errors name the file).
const Tensor& attention_input(const TensorFile& file, const std::string& name,
                              const std::string& path);

}  // namespace mmsparse::cli
