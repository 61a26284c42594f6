#pragma once
// The table of patterns build_plan knows. Each pattern family (static_patterns.cpp,
// vertical_slash.cpp, grid.cpp) contributes its entries; methods/registry.cpp resolves specs
// against the table and drives the builders head slot by head slot.

#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "mmsparse/patterns.h"

namespace mmsparse::detail {

class KeyCache;

// What a head builder may read besides its resolved spec.
struct HeadContext {
  const PlanShape& shape;
  const ModalityLayout* layout = nullptr;
  const PatternInputs* inputs = nullptr;  // dynamic patterns only
  int64_t head_slot = 0;                  // batch element × shape.heads + query head
  KeyCache* keys = nullptr;  // K converted to fp32, shared by the query heads of a GQA group
};

using HeadBuilder = void (*)(PlanBuilder&, const PatternSpec&, const HeadContext&);
// A pattern of several passes writes each head slot into every pass's builder (one per pass).
using PassesHeadBuilder = void (*)(std::span<PlanBuilder>, const PatternSpec&, const HeadContext&);
using Params = std::map<std::string, int64_t>;
// A pattern's default parameters; the SF patterns default to the layout's tokens per frame.
using DefaultParams = Params (*)(int64_t tokens_per_frame);

struct PatternEntry {
  PatternInfo info;
  HeadBuilder build;  // patterns of one pass
  DefaultParams defaults;
  int64_t passes = 1;
  PassesHeadBuilder build_passes = nullptr;  // patterns of more than one pass
};

// The families' entries, in the order known_patterns() lists them.
std::vector<PatternEntry> static_pattern_entries();
PatternEntry vertical_slash_entry();
PatternEntry grid_entry();
PatternEntry grid_mask_entry();

// Reads a parameter of a resolved spec (resolve_pattern filled every default in); throws naming
// "<pattern> parameter <key>" when it is below `minimum`.
int64_t checked_param(const PatternSpec& spec, const std::string& key, int64_t minimum);
// A 0/1 switch parameter.
bool checked_flag(const PatternSpec& spec, const std::string& key);

}  // namespace mmsparse::detail
