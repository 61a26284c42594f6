#pragma once
// Patterns as plan builders, and the textual pattern spec the CLI and JSON configs use.
//
// Static patterns depend only on the shape (and the layout):
//   "dense", "a-shape:sink=128,local=4096", "tri-shape:sink=128,local=4096,bottom=128",
//   "sf-fixed:segment=256,vline_stride=256", "sf-strided:local=256,stride=256".
// Defaults are the MMInference paper's Table 2 values; for the SF patterns, token_per_frame is taken
// from the layout's first video (or 256 without one). All are exact element-wise except
// sf-strided, whose window and stride-th diagonals become tile-wide key bands per query tile, as
// MInference converts slash lines to blocks: a superset of the exact lines.
//
// Dynamic patterns estimate their lines from the input (PatternInputs: q and k), one head slot at a
// time, from the softmax of the last `last_q` queries (MInference; MMInference Alg. 1, App. C.3):
//   "vertical-slash:vertical=1000,slash=6096"   top-k key columns and diagonals (MInference)
//   "grid:stride=0,hline=1,vline=1,slash=1,max_stride=1024"   MMInference's grid head (Alg. 1),
//       stride 0 = online stride search, computed through a phase-major query order
// Both take sink, local and last_q, and `boundary`, the inter-modality mode of MMInference §3.2:
//   boundary=0 none, 1 K-boundary (the same plan as none: the index is continuous along queries),
//   2 Q-boundary (Alg. 2: per query modality, estimated from that modality's last queries),
//   3 2D-boundary (Alg. 3: per (query modality, key modality) pair, each estimated and laid out in
//     the pair's own key order, so lines continue across interruptions by other modalities),
//   4 item boundary (per media item: its own tokens, frames back to back, estimated from its own
//     last rows, so each video gets its own grid whatever text lies between its frames).
// And `item_sinks` N: the first N tokens of every frame and media item as columns (0: none).
// Boundary modes and item sinks need the modality layout. docs/dynamic_patterns.md defines the
// exact coverage.

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "mmsparse/layout.h"
#include "mmsparse/plan.h"
#include "mmsparse/tensor.h"

namespace mmsparse {

struct PatternSpec {
  std::string name;
  std::map<std::string, int64_t> params;
  // List-valued parameters, written key=[a/b/c] ("[]" for none): BlindSight's Gemma 3 sink offsets
  // (docs/blindsight.md). A key is a parameter or a list, never both; patterns that declare no
  // list take none, so their specs and strings are what they were without lists.
  std::map<std::string, std::vector<int64_t>> lists = {};

  static PatternSpec parse(std::string_view text);  // throws kParseError naming the bad part
  std::string to_string() const;  // keys in order, lists among the parameters
  int64_t param(const std::string& key, int64_t fallback) const;
  bool operator==(const PatternSpec&) const = default;
};

// A parameter whose default is set for MMInference's 128K-token sequences: scale_spec_to_length
// (mmsparse/tools/search.h) scales it in proportion to shorter sequences, never below `minimum`
// nor below the value of the parameter `minimum_param` when one is named.
struct LengthScaledParam {
  std::string key;
  int64_t minimum = 0;
  std::string minimum_param = {};
};

// Names of the patterns build_plan knows, with one line of description each.
struct PatternInfo {
  std::string name;
  std::string description;
  std::string default_spec;
  bool dynamic = false;  // estimated from PatternInputs (build_plan needs them)
  // Parameters scaled to the sequence length; the pattern's defaults must not depend on a layout.
  std::vector<LengthScaledParam> length_scaled = {};
  // Masks that follow the layout's images (BlindSight's templates): `mmsparse bench` runs them by
  // default only on layouts with images.
  bool image_templates = false;
};
const std::vector<PatternInfo>& known_patterns();
// Whether the spec names a dynamic pattern (PatternInfo::dynamic: build_plan needs PatternInputs);
// false for unknown names.
bool is_dynamic(const PatternSpec& spec);
// Whether every tile the spec builds attends causally (the workload's causal dense is then its
// reference); causal with bidirectional media counts (a key past its query only inside the
// query's own media item, as MaskPolicy::media_bidirectional keeps it), so that a key-ordered
// bidirectional image tile, unmasked, answers as its in-place lifted mask does. Static patterns
// answer from one built head of `shape`; dynamic ones from their parameters. Throws naming the
// pattern or parameter for unknown names or bad values.
bool attends_causally(const PatternSpec& spec, const PlanShape& shape,
                      const ModalityLayout* layout = nullptr);

// What dynamic patterns estimate from: host views of any strides, bf16 / fp16 / fp32.
//   q [batch, q_len, q_heads, head_dim], k [batch, kv_len, kv_heads, head_dim],
//   q_heads % kv_heads == 0; query head h reads KV head h / (q_heads / kv_heads) (GQA).
// A plan built with dynamic patterns has a head slot per batch element: shape.batch must equal
// q's batch, and shape.heads, q_len, kv_len must match the views.
struct PatternInputs {
  TensorView q;
  TensorView k;
  float scale = 0.0f;  // softmax scale of the estimate; 0 means 1/sqrt(head_dim)
};

// The spec with every parameter the pattern takes, defaults filled in (from the layout where a
// default depends on it); unknown patterns or parameters throw naming them.
PatternSpec resolve_pattern(const PatternSpec& spec, const ModalityLayout* layout = nullptr);

// Appends head slot `head_slot` (batch element × heads + query head) built from `spec` to the
// builder (begin_head + tiles). Static patterns ignore inputs and head_slot; dynamic patterns throw
// naming the pattern when inputs are missing.
void append_pattern_head(PlanBuilder& builder, const PatternSpec& spec, const PlanShape& shape,
                         const ModalityLayout* layout, const PatternInputs* inputs = nullptr,
                         int64_t head_slot = 0);

// Throws what build_plan(spec, shape, layout, inputs) throws for the spec's parameters, the shape,
// the layout and the inputs' shapes, without the work: static patterns build one head slot,
// dynamic ones validate and return before estimating. For checking user input up front.
void check_pattern(const PatternSpec& spec, const PlanShape& shape,
                   const ModalityLayout* layout = nullptr, const PatternInputs* inputs = nullptr);

// One spec for every head, or one per query head (specs.size() == shape.heads). `inputs` is needed
// when a spec is dynamic and ignored otherwise.
Plan build_plan(const std::vector<PatternSpec>& specs, const PlanShape& shape,
                const ModalityLayout* layout = nullptr, const PatternInputs* inputs = nullptr);
Plan build_plan(const PatternSpec& spec, const PlanShape& shape,
                const ModalityLayout* layout = nullptr, const PatternInputs* inputs = nullptr);
// build_plan that also measures, on the host clock, how long each head slot took to build:
// head_seconds[slot] (resized to shape.head_slots()); for dynamic patterns, that is the index
// estimation. Head slots share a key cache, so the first query head of a GQA group also pays for
// converting the group's keys. Validation of the whole plan is in no head's time.
Plan build_plan_timed(const std::vector<PatternSpec>& specs, const PlanShape& shape,
                      const ModalityLayout* layout, const PatternInputs* inputs,
                      std::vector<double>& head_seconds);

// Per-model pattern config (JSON), keyed by layer and global query head index:
//   {"schema_version": 2, "default": "a-shape",
//    "layers": {"0": {"default": "dense", "heads": {"3": "sf-strided:local=512,stride=512"}}}}
// Version 2 adds what `mmsparse search` records (docs/search.md): a top-level "search" object
// (SearchProvenance) and per layer "scores": {"<head>": {"recall", "output_error", "cost"}}.
// from_json reads versions 1 and 2; to_json writes version 2.

// How a searched config was made.
struct SearchProvenance {
  std::string calibration;   // "SYNTHETIC preset video-qwen2.5vl-128k, seq_len 16384, seed 0"
                             // or "file calib.safetensors"
  std::string date_utc;      // ISO 8601, e.g. "2026-11-23T10:04:05Z"
  std::string tool_version;  // BuildInfo::version
  std::string cost_source;   // "measured" or "modelled"
  std::string cost_unit;     // "ms" (measured) or "key chunks" (modelled)
  std::string gpu;           // the GPU a measured cost ran on; empty when modelled
  std::string budget_spec;   // the pattern whose cost is the budget
  double budget_cost = 0.0;  // its cost, in cost_unit
  // The calibration input's shape, so that a run on another length or layout can say so:
  int64_t seq_len = 0;     // tokens; 0: not recorded (configs written before it was)
  std::string layout;      // ModalityLayout::to_json(); empty: not recorded
  bool operator==(const SearchProvenance&) const = default;
};

// The chosen spec's score on the calibration input (sampled rows; see docs/search.md).
struct HeadScore {
  double recall = 0.0;
  double output_error = 0.0;
  double cost = 0.0;  // in the provenance's cost_unit
  bool operator==(const HeadScore&) const = default;
};

struct PatternConfig {
  static constexpr int kSchemaVersion = 2;
  static constexpr int kOldestSchemaVersion = 1;
  PatternSpec default_spec{"dense", {}};
  std::map<int64_t, PatternSpec> layer_defaults;
  std::map<int64_t, std::map<int64_t, PatternSpec>> head_specs;  // layer -> head -> spec
  std::optional<SearchProvenance> search;                        // searched configs only
  std::map<int64_t, std::map<int64_t, HeadScore>> head_scores;   // layer -> head -> score

  static PatternConfig from_json(const std::string& json_text);
  std::string to_json() const;
  std::vector<PatternSpec> layer_specs(int64_t layer, int64_t heads) const;
};

}  // namespace mmsparse
