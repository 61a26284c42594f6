#pragma once
// Static patterns as plan builders, and the textual pattern spec the CLI and JSON configs use:
//   "dense", "a-shape:sink=128,local=4096", "tri-shape:sink=128,local=4096,bottom=128",
//   "sf-fixed:segment=256,vline_stride=256", "sf-strided:local=256,stride=256".
// Defaults are the MMInference paper's Table 2 values; for the SF patterns, token_per_frame is taken
// from the layout's first video (or 256 without one). All are exact element-wise except
// sf-strided, whose window and stride-th diagonals become tile-wide key bands per query tile, as
// MInference converts slash lines to blocks: a superset of the exact lines.

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "mmsparse/layout.h"
#include "mmsparse/plan.h"

namespace mmsparse {

struct PatternSpec {
  std::string name;
  std::map<std::string, int64_t> params;

  static PatternSpec parse(std::string_view text);  // throws kParseError naming the bad part
  std::string to_string() const;
  int64_t param(const std::string& key, int64_t fallback) const;
};

// Names of the patterns build_plan knows, with one line of description each.
struct PatternInfo {
  std::string name;
  std::string description;
  std::string default_spec;
};
const std::vector<PatternInfo>& static_patterns();

// The spec with every parameter the pattern takes, defaults filled in (from the layout where a
// default depends on it); unknown patterns or parameters throw naming them.
PatternSpec resolve_pattern(const PatternSpec& spec, const ModalityLayout* layout = nullptr);

// Appends one head slot built from `spec` to the builder (begin_head + tiles).
void append_pattern_head(PlanBuilder& builder, const PatternSpec& spec, const PlanShape& shape,
                         const ModalityLayout* layout);

// One spec for every head, or one per query head (specs.size() == shape.heads).
Plan build_plan(const std::vector<PatternSpec>& specs, const PlanShape& shape,
                const ModalityLayout* layout = nullptr);
Plan build_plan(const PatternSpec& spec, const PlanShape& shape,
                const ModalityLayout* layout = nullptr);

// Per-model pattern config (JSON), keyed by layer and global query head index:
//   {"schema_version": 1, "default": "a-shape",
//    "layers": {"0": {"default": "dense", "heads": {"3": "sf-strided:local=512,stride=512"}}}}
struct PatternConfig {
  static constexpr int kSchemaVersion = 1;
  PatternSpec default_spec{"dense", {}};
  std::map<int64_t, PatternSpec> layer_defaults;
  std::map<int64_t, std::map<int64_t, PatternSpec>> head_specs;  // layer -> head -> spec

  static PatternConfig from_json(const std::string& json_text);
  std::string to_json() const;
  std::vector<PatternSpec> layer_specs(int64_t layer, int64_t heads) const;
};

}  // namespace mmsparse
