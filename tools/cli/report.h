#pragma once
// The runtime report of `bench` and `run`: per head, per pattern run, per layer and for
// the whole model. Measuring fills these records; printing and JSON read them, so the tables and
// the JSON always say the same thing. docs/report.md defines every column.

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "executor.h"
#include "mmsparse/patterns.h"
#include "mmsparse/tools/io.h"
#include "mmsparse/tools/metrics.h"
#include "mmsparse/tools/workload.h"

namespace mmsparse::cli {

// A pattern run: one spec for every head, or one per head (a config layer).
struct PatternRun {
  std::string label;      // pattern name, or "config"
  std::string spec_text;  // what the tables print
  std::vector<PatternSpec> specs;
};

// A retrieval question (V-NIAH / MM-NIAH style): needle keys and the query rows that must read
// them.
struct NeedleTask {
  std::vector<int64_t> keys;
  std::vector<int64_t> rows;
  bool empty() const { return keys.empty(); }
};

struct HeadReport {
  int64_t batch = 0;
  int64_t head = 0;
  std::string spec;       // resolved
  std::string behaviour;  // the synthetic head's behaviour; empty for real inputs
  double density = 0.0;
  // Building this head slot's part of the plan. Host builds: the host clock
  // (patterns.h: build_plan_timed). A per-head config on the GPU: GPU events around the kernels of
  // the head's builder, shared equally by the head slots it built (docs/report.md). A plan built
  // for every head at once (on the GPU, one spec for all heads) gives each head slot an equal
  // share of the whole build.
  double index_seconds = 0.0;
  std::string index_built;                // "gpu" (built by kernels) or "host" (built on the host)
  std::optional<HeadAccuracy> accuracy;   // with a dense reference
  std::optional<NeedleCoverage> needles;  // with a needle task
};

struct RunReport {
  PatternRun run;
  std::vector<HeadReport> heads;
  // The whole plan, host clock around the synchronised build: on a GPU, prepare_pattern's device
  // build (one spec for every head: static patterns, vertical-slash with boundary none/K, else
  // host build + upload; a per-head config: every builder on its heads, host-built heads
  // uploaded, concatenated on the device); otherwise host build and validation.
  double index_seconds = 0.0;
  // A per-head config on the GPU: concatenating the builders' parts into one plan (GPU events).
  std::optional<double> assembly_seconds;
  double attention_seconds = 0.0;  // every head in one call
  int64_t computed_pairs = 0;
  // A static plan (one static spec for every head): built once per shape and reused by every
  // layer and call, so its per-call index_seconds is 0 and this holds the one build (this run's,
  // or an earlier run's when `plan_reused`), reported beside the index, not in the speedup.
  std::optional<double> plan_once_seconds;
  bool plan_reused = false;
};

// One layer: its dense reference (when measured) and its pattern runs.
struct LayerReport {
  int64_t layer = 0;
  std::string source;  // "SYNTHETIC seed 3" or the input tensors' names
  std::optional<double> dense_seconds;
  int64_t dense_pairs = 0;
  std::string dense_spec = "dense";  // the reference: "dense" (causal) or "full" (non-causal)
  std::vector<RunReport> runs;
  // Per run, the tile-oracle bound on speedup at the recall the run reached on each head
  // (tile_oracle_report.h; NaN where unknown); empty when the oracle was not measured.
  std::vector<double> oracle_bounds;
};

// A run's figures pooled over heads (and batch elements).
struct RunSummary {
  double density = 0.0;           // mean over heads
  double recall_mean = 0.0;       // mean over heads of the per-head mean over rows
  double recall_min = 0.0;        // lowest row over all heads
  double output_error = 0.0;      // mean over heads
  bool compared = false;          // recall and output error exist (a dense reference ran)
  int64_t needles = 0;            // needles of the task; 0 without one
  int64_t needles_covered = 0;    // fewest covered by any head
  double needle_mass_kept = 0.0;  // Σ kept / Σ dense needle probability over heads (NaN without)
  // Needles whose own dense probability, pooled over every head and querying row, the plans keep
  // at least kNeedleKeptShare of: the heads that read a needle keep it, whatever heads that do not
  // read it compute (a local head never reaches the media). 0 without the mass measure.
  int64_t needles_kept = 0;
  bool needle_mass_measured = false;  // the mass measure ran (a dense reference was given)
};
inline constexpr double kNeedleKeptShare = 0.95;
RunSummary summarize(const RunReport& run);
// The run's one needle verdict, what the summary and layer tables print: "k/N" needles kept
// (needles_kept), or "-" without a needle task or without the mass measure (no dense reference).
// Per-head coverage is detail for --per-head.
std::string needle_verdict(const RunSummary& summary);

// What a layer's pattern runs read. Host views; the dense reference is optional (run without
// --compare), the needle task may be empty.
struct LayerInputs {
  TensorView q, k;  // [batch, q_len, heads, head_dim], [batch, kv_len, kv_heads, head_dim]
  const ModalityLayout* layout = nullptr;
  int64_t plan_batch = 1;  // dynamic patterns need a head slot per batch element
  const TensorView* dense_out = nullptr;
  const TensorView* dense_lse = nullptr;
  const NeedleTask* needles = nullptr;
  std::vector<std::string> behaviours;  // per query head (synthetic); empty for real inputs
  bool causal = true;  // density over causal pairs; false (video DiTs): over all pairs
};

// Builds the run's plan (timed per head and whole), runs attention into out/lse (host tensors of
// q's shape and [batch, heads, q_len]) and measures every head.
RunReport measure_run(Executor& executor, const PatternRun& run, const LayerInputs& inputs,
                      const TensorView& out, const TensorView& lse);

// The pairs each head slot of `shape` computes under static `resolved_specs` (one for every head,
// or one per head): each distinct spec's plan built for one head slot, since every head slot of a
// static spec is the same. What count_plan_pairs(build_plan(resolved_specs, shape, layout))
// gives, without a host plan of every head slot (at 300K tokens a BlindSight head's plan lists
// millions of columns). With `executor`, its counts are kept for the next layer and run.
std::vector<int64_t> static_slot_pairs(const std::vector<PatternSpec>& resolved_specs,
                                       const PlanShape& shape, const ModalityLayout* layout,
                                       Executor* executor = nullptr);

// Text tables (stdout).
// The summary table: dense, then a line per run; a needles column when `needles` > 0.
void print_summary_table(const LayerReport& layer, int64_t needles);
// One row per head of every run, then the layer's summary line for that run.
void print_per_head_tables(const LayerReport& layer);
// One line per layer and run, then the whole-model total per run (index + attention vs dense).
void print_layer_table(const std::vector<LayerReport>& layers);
// The footer that explains every column of the summary tables, and how times were taken.
void print_column_footer(int64_t needles, bool gpu, const TimingFlags& timing);

// JSON: "layers" (each with "dense" and "patterns", each pattern with "heads") and "model" (the
// totals per pattern over layers).
nlohmann::json layers_json(const std::vector<LayerReport>& layers, int64_t head_dim);

// The needle task of a synthetic workload: its needles and the final question's rows.
NeedleTask workload_needle_task(const Workload& workload);

// Needle tasks travel with input files as JSON in the safetensors metadata under this key:
//   {"question_begin": 917, "keys": [120, 480], "layers": {"3": [130, 470]}}
// The querying rows are [question_begin, q_len). "keys" serve every layer (needles are token
// positions, the same in every layer of a real model); "layers" overrides them for a layer
// (`generate --layers`: synthetic layers differ by seed, and so do their needles).
inline constexpr const char* kNeedlesMetadataKey = "mmsparse.needles";
std::string needles_metadata(int64_t question_begin, const std::vector<int64_t>& keys,
                             const std::map<int64_t, std::vector<int64_t>>& layer_keys);
// The task of `layer` (-1: the file's single-layer tensors), empty when the file has none.
NeedleTask needle_task_from_metadata(const TensorFile& file, int64_t layer, int64_t q_len);

// Whether an input's attention is causal: its metadata "mmsparse.causal" ("1" or "0", written by
// `generate`); files without it are causal. Other values are an error naming the key.
inline constexpr const char* kCausalMetadataKey = "mmsparse.causal";
bool causal_from_metadata(const TensorFile& file);
std::string causal_metadata(bool causal);

}  // namespace mmsparse::cli
