// The vertical-slash pattern: selection from the estimate, conversion to tile keys, registration.

#include "methods/vertical_slash/vertical_slash.h"

#include <memory>
#include <span>
#include <string>

#include "methods/estimate/dynamic_head.h"
#include "mmsparse/status.h"

namespace mmsparse::detail {

namespace {

constexpr char kVerticalParam[] = "vertical";
constexpr char kSlashParam[] = "slash";
// MInference's default budget per head ("vertical_and_slash", 1000, 6096).
constexpr int64_t kDefaultVerticals = 1000;
constexpr int64_t kDefaultSlashes = 6096;

class VerticalSlashPattern final : public KeyPattern {
 public:
  explicit VerticalSlashPattern(VerticalSlashLines lines) : lines_(std::move(lines)) {}

  // Each run of consecutive frontiers makes each slash a band as wide as the run. In the full key
  // space a tile's rows have frontiers of their own, so bands are as wide as the tile. In a
  // modality's compact space (2D boundary) rows share frontiers: a text segment's rows all see the
  // same video keys, so each slash is one key for all of them. There bands narrower than
  // kNarrowBandKeys are read as columns (gathered 128 to a key chunk), not as spans of a key chunk
  // each: a 2D tile read ~300 spans of 1-3 keys. (The full space keeps spans, as the GPU builder
  // writes them, also for a head's short last tile.)
  void add_tile_keys(std::span<const int64_t> frontiers, TileKeys& keys) const override {
    const bool narrow_as_columns = keys.compact_space();
    for (std::size_t run = 0; run < frontiers.size();) {
      std::size_t run_end = run + 1;
      while (run_end < frontiers.size() && frontiers[run_end] == frontiers[run_end - 1] + 1) {
        ++run_end;
      }
      const int64_t low = frontiers[run];
      const int64_t high = frontiers[run_end - 1];
      for (int64_t slash : lines_.slashes) {
        if (slash >= high) break;  // ascending: this and the rest lie before key 0
        const int64_t begin = std::max<int64_t>(0, low - 1 - slash);
        if (narrow_as_columns && high - slash - begin < kNarrowBandKeys) {
          for (int64_t key = begin; key < high - slash; ++key) keys.add_column(key);
        } else {
          keys.add_range(begin, high - slash);
        }
      }
      run = run_end;
    }
    for (int64_t vertical : lines_.verticals) {
      if (vertical >= frontiers.back()) break;  // ascending: the rest no row sees
      keys.add_column(vertical);
    }
  }

 private:
  VerticalSlashLines lines_;
};

// A budget that counts the always-kept lines must hold them.
int64_t checked_budget(const PatternSpec& spec, const std::string& key, const std::string& kept,
                       int64_t kept_count) {
  const int64_t value = spec.params.at(key);
  if (value < kept_count) {
    throw_invalid_argument(spec.name + " parameter " + key,
                           ">= " + kept + " = " + std::to_string(kept_count) +
                               " (the always-kept lines count toward it)",
                           std::to_string(value));
  }
  return value;
}

void build_vertical_slash(PlanBuilder& builder, const PatternSpec& spec,
                          const HeadContext& context) {
  const VerticalSlashBudgets budgets = vertical_slash_budgets(spec);
  build_dynamic_head(builder, spec, context, [&](const Estimate& estimate) {
    return std::make_unique<VerticalSlashPattern>(select_vertical_slash(
        estimate, budgets.vertical, budgets.slash, budgets.sink, budgets.local));
  });
}

Params vertical_slash_params(int64_t) {
  Params params = dynamic_params();
  params[kVerticalParam] = kDefaultVerticals;
  params[kSlashParam] = kDefaultSlashes;
  return params;
}

}  // namespace

VerticalSlashBudgets vertical_slash_budgets(const PatternSpec& resolved_spec) {
  VerticalSlashBudgets budgets;
  budgets.sink = checked_param(resolved_spec, kSinkParam, 0);
  budgets.local = checked_param(resolved_spec, kLocalParam, 0);
  budgets.vertical = checked_budget(resolved_spec, kVerticalParam, kSinkParam, budgets.sink);
  budgets.slash = checked_budget(resolved_spec, kSlashParam, kLocalParam, budgets.local);
  return budgets;
}

VerticalSlashLines select_vertical_slash(const Estimate& estimate, int64_t vertical, int64_t slash,
                                         int64_t sink, int64_t local) {
  return {top_k(estimate.column_sums(), vertical, sink),
          top_k(estimate.diagonal_sums(), slash, local)};
}

PatternEntry& vertical_slash_entry() {
  static PatternEntry entry{
      {"vertical-slash",
       "MInference: top `vertical` key columns and `slash` diagonals of the last-q estimate "
       "(first `sink` keys and `local` diagonals always kept); diagonals become tile-wide "
       "bands (a superset of the lines, as MInference converts them); `boundary` 0 none, "
       "1 K, 2 Q, 3 2D (MMInference §3.2), 4 per media item (each item's own tokens as a key "
       "space, estimated from its own last rows); `item_sinks` N: the first N tokens of every "
       "frame and media item (and the text token before each) as columns",
       "vertical-slash:vertical=1000,slash=6096",
       true,
       // The budgets count the lines always kept; they stay at least that large.
       {{"vertical", 0, "sink"}, {"slash", 0, "local"}}},
      build_vertical_slash,
      vertical_slash_params};
  return entry;
}

}  // namespace mmsparse::detail
