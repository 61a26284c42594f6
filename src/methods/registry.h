#pragma once
// The table of patterns build_plan knows. Each method folder contributes its entries (one
// function in the method's own header returns each: static_pattern_entry, grid_mask_entry,
// vertical_slash_entry, grid_entry); methods/registry.cpp lists them, resolves specs against them
// and drives the host builders head slot by head slot.
//
// Device builders. An entry's `device` slot holds the method's device builder
// (methods/device_builder.h), or null where the method builds on the host only. The host library
// never references device code: in CUDA builds the method's device file fills the slot during
// static initialisation (a RegisteredDeviceBuilder naming the entry through that function), and
// in a CPU-only build nothing fills it, so every head is built on the host. Entries live in
// function-local statics, so a registration may run before or after the table is first used.
// Adding a method: docs/adding-a-method.md.

#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "mmsparse/patterns.h"

namespace mmsparse::detail {

class KeyCache;
class DeviceBuilder;

// What a head builder may read besides its resolved spec.
struct HeadContext {
  const PlanShape& shape;
  const ModalityLayout* layout = nullptr;
  const PatternInputs* inputs = nullptr;  // dynamic patterns only
  int64_t head_slot = 0;                  // batch element × shape.heads + query head
  KeyCache* keys = nullptr;  // K converted to fp32, shared by the query heads of a GQA group
  // Validate only (check_pattern): a dynamic builder checks its parameters, the layout and the
  // inputs' shapes, then returns before estimating, adding nothing to the builder.
  bool validate_only = false;
};

using HeadBuilder = void (*)(PlanBuilder&, const PatternSpec&, const HeadContext&);
// A pattern of several passes writes each head slot into every pass's builder (one per pass).
using PassesHeadBuilder = void (*)(std::span<PlanBuilder>, const PatternSpec&, const HeadContext&);
using Params = std::map<std::string, int64_t>;
// A pattern's default parameters; the SF patterns default to the layout's tokens per frame.
using DefaultParams = Params (*)(int64_t tokens_per_frame);
using Lists = std::map<std::string, std::vector<int64_t>>;
// A pattern's list-valued parameters (PatternSpec::lists) with their defaults.
using DefaultLists = Lists (*)();
// Whether a dynamic pattern's tiles, for this resolved spec, attend causally.
using CausalQuery = bool (*)(const PatternSpec& resolved_spec);

struct PatternEntry {
  PatternInfo info;
  HeadBuilder build;  // patterns of one pass
  DefaultParams defaults;
  int64_t passes = 1;
  PassesHeadBuilder build_passes = nullptr;  // patterns of more than one pass
  // The method's device builder; filled by its device file in CUDA builds (see above).
  const DeviceBuilder* device = nullptr;
  DefaultLists list_defaults = nullptr;  // null: the pattern takes no list
  // Dynamic patterns that can attend both ways (vec for video DiTs) answer per spec; null: always
  // causal. Static patterns need none: their plans' masks say it.
  CausalQuery attends_causally = nullptr;
};

// Every entry, in the order known_patterns() lists them.
const std::vector<const PatternEntry*>& pattern_entries();
// The entry named `name`, or null.
const PatternEntry* find_pattern_entry(std::string_view name);
// Whether `spec` names `entry`'s pattern.
inline bool is_spec_of(const PatternSpec& spec, const PatternEntry& entry) {
  return spec.name == entry.info.name;
}

// Reads a parameter of a resolved spec (resolve_pattern filled every default in); throws naming
// "<pattern> parameter <key>" when it is below `minimum`.
int64_t checked_param(const PatternSpec& spec, const std::string& key, int64_t minimum);
// A 0/1 switch parameter.
bool checked_flag(const PatternSpec& spec, const std::string& key);

// Heads of static patterns for one plan being built, each spec built once and copied into later
// head slots. A static head depends on its spec, the plan's lengths and tile height and the
// layout, never on its head slot; rebuilding it per slot cost most of a plan's build where every
// slot computes the same BlindSight key order (~2 ms a slot at 300K tokens). Holds the mapping of
// each cached head's key orders into the builder it serves: one instance per builder.
class StaticHeads {
 public:
  // Whether heads of `resolved_spec` can come from the cache: static and of one pass.
  static bool serves(const PatternSpec& resolved_spec);
  // Appends a head of `resolved_spec` (serves() true) to `builder`, whose shape is `shape`.
  void append(PlanBuilder& builder, const PatternSpec& resolved_spec, const PlanShape& shape,
              const ModalityLayout* layout);

 private:
  struct Head {
    Plan plan;                          // one head slot, validated
    std::vector<int32_t> builder_orders;  // plan.key_orders[o]'s index in the builder
  };
  std::map<std::string, Head> heads_;  // by the resolved spec's text
};

}  // namespace mmsparse::detail
