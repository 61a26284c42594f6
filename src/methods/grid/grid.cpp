// The grid pattern: stride and phase search, phase-major arrangement, tile keys, registration.

#include "methods/grid/grid.h"

#include <algorithm>
#include <limits>
#include <memory>
#include <span>
#include <utility>
#include <vector>

#include "methods/estimate/dynamic_head.h"
#include "mmsparse/status.h"

namespace mmsparse::detail {

namespace {

constexpr char kStrideParam[] = "stride";
constexpr char kMaxStrideParam[] = "max_stride";
constexpr char kHlineParam[] = "hline";
constexpr char kVlineParam[] = "vline";
constexpr char kSlashParam[] = "slash";
// MMInference Table 3: the grid search space's max stride.
constexpr int64_t kDefaultMaxStride = 1024;

// Estimated mass and entry count of a set of estimate entries.
struct Mass {
  double mass = 0.0;
  int64_t entries = 0;
  void add(const Mass& other) {
    mass += other.mass;
    entries += other.entries;
  }
};

// The estimate without its sink and local entries (always kept, so they say nothing about a
// stride): entry (row, key) is eligible when key >= sink and frontier - 1 - key >= local.
class GridEvidence {
 public:
  GridEvidence(const Estimate& estimate, const GridOptions& options)
      : estimate_(estimate), options_(options), columns_(estimate.max_frontier()) {
    for (int64_t r = 0; r < estimate.rows(); ++r) {
      const std::span<const float> p = estimate.probabilities(r);
      for (int64_t key = options.sink; key < last_eligible(r); ++key) {
        columns_[key].mass += p[key];
        ++columns_[key].entries;
      }
    }
  }

  int64_t keys() const { return static_cast<int64_t>(columns_.size()); }

  // Vertical lines of stride s: the eligible mass of each phase's keys.
  std::vector<Mass> vertical(int64_t stride) const {
    std::vector<Mass> phases(static_cast<std::size_t>(stride));
    for (int64_t key = 0; key < keys(); ++key) phases[key % stride].add(columns_[key]);
    return phases;
  }

  // Slash lines of stride s in estimate row r: eligible keys at distances that are multiples of s.
  Mass slash(int64_t r, int64_t stride) const {
    const std::span<const float> p = estimate_.probabilities(r);
    const int64_t diagonal = estimate_.frontier(r) - 1;
    Mass lines;
    const int64_t first = (options_.local + stride - 1) / stride * stride;
    for (int64_t distance = first; diagonal - distance >= options_.sink; distance += stride) {
      lines.mass += p[diagonal - distance];
      ++lines.entries;
    }
    return lines;
  }

  // Mean eligible mass per entry over the whole estimate: what lines score without structure.
  double background() const {
    Mass total;
    for (const Mass& column : columns_) total.add(column);
    return total.entries > 0 ? total.mass / total.entries : 0.0;
  }

  int64_t row_phase(int64_t r, int64_t stride) const {
    return (estimate_.frontier(r) - 1) % stride;
  }
  int64_t rows() const { return estimate_.rows(); }

 private:
  int64_t last_eligible(int64_t r) const { return estimate_.frontier(r) - options_.local; }
  const Estimate& estimate_;
  const GridOptions& options_;
  std::vector<Mass> columns_;  // [keys] eligible mass per key, over the estimate rows
};

struct Scored {
  GridLines lines;
  double score = -std::numeric_limits<double>::infinity();
};

// The best candidate seen so far (strict comparison in candidate order: ties go to the first) and
// the best score among the others.
struct Best {
  Scored best;
  double runner_up = -std::numeric_limits<double>::infinity();
  void offer(const Scored& candidate) {
    if (candidate.score > best.score) {
      runner_up = std::max(runner_up, best.score);
      best = candidate;
    } else {
      runner_up = std::max(runner_up, candidate.score);
    }
  }
};

// The phases of one stride offered in ascending order: the mass of the enabled lines less
// entry_cost per entry.
void score_stride(const GridEvidence& evidence, const GridOptions& options, int64_t stride,
                  double entry_cost, Best& best) {
  Mass slash_total;
  std::vector<Mass> slash_by_phase(static_cast<std::size_t>(stride));  // rows grouped by phase
  if (options.slash) {
    for (int64_t r = 0; r < evidence.rows(); ++r) {
      const Mass lines = evidence.slash(r, stride);
      slash_total.add(lines);
      slash_by_phase[evidence.row_phase(r, stride)].add(lines);
    }
  }
  const auto value = [&](const Mass& lines) { return lines.mass - entry_cost * lines.entries; };
  if (!options.vline && !options.hline) {
    best.offer({{stride, 0}, value(slash_total)});
    return;
  }
  const std::vector<Mass> vertical = evidence.vertical(stride);
  for (int64_t phase = 0; phase < stride; ++phase) {
    // A row's slash keys all have the row's phase: for rows of phase p they lie on vline p.
    Mass lines = vertical[phase];
    lines.mass += slash_total.mass - slash_by_phase[phase].mass;
    lines.entries += slash_total.entries - slash_by_phase[phase].entries;
    best.offer({{stride, phase}, value(lines)});
  }
}

class GridPattern final : public KeyPattern {
 public:
  GridPattern(GridLines lines, const GridOptions& options) : lines_(lines), options_(options) {}

  void add_tile_keys(std::span<const int64_t> frontiers, TileKeys& keys) const override {
    const int64_t stride = lines_.stride;
    const int64_t last = frontiers.back();
    keys.add_range(0, std::min(options_.sink, last));
    // Local windows, merged over runs of consecutive frontiers.
    const int64_t window = tile_window(options_);
    for (std::size_t run = 0; window > 0 && run < frontiers.size();) {
      std::size_t run_end = run + 1;
      while (run_end < frontiers.size() && frontiers[run_end] == frontiers[run_end - 1] + 1) {
        ++run_end;
      }
      keys.add_range(std::max<int64_t>(0, frontiers[run] - window), frontiers[run_end - 1]);
      run = run_end;
    }
    // The last frontier of each row phase present in the tile.
    std::vector<std::pair<int64_t, int64_t>> phases;  // (phase, last frontier)
    for (int64_t frontier : frontiers) {
      const int64_t phase = (frontier - 1) % stride;
      auto found = std::find_if(phases.begin(), phases.end(),
                                [&](const auto& entry) { return entry.first == phase; });
      if (found == phases.end()) {
        phases.emplace_back(phase, frontier);
      } else {
        found->second = frontier;  // frontiers ascend
      }
    }
    for (const auto& [phase, frontier] : phases) {
      if (options_.hline && phase == lines_.phase) keys.add_range(0, frontier);
      if (options_.slash) add_strided(phase, frontier, keys);
    }
    if (options_.vline) add_strided(lines_.phase, last, keys);
  }

  // Phase-major: the group's rows by coordinate mod stride, each phase a run per row range.
  void arrange(const GroupGeometry& geometry, RowOrder& order) const override {
    const int64_t stride = lines_.stride;
    struct Range {
      int64_t begin, end, coordinate;  // rows [begin, end); coordinate of row `begin`
    };
    std::vector<Range> ranges;
    for (const IndexRange& rows : geometry.group.rows) {
      // Rows that see no key (kv_len < q_len) have no coordinate: they keep their order.
      int64_t begin = rows.begin;
      while (begin < rows.end && geometry.primary.frontier(begin + geometry.causal_offset) == 0) {
        ++begin;
      }
      const auto first = static_cast<int64_t>(order.positions.size());
      order.append_run({rows.begin, begin - rows.begin, 1});
      order.tile_from(first, geometry.tile_rows);
      if (begin < rows.end) {
        ranges.push_back(
            {begin, rows.end, geometry.primary.frontier(begin + geometry.causal_offset) - 1});
      }
    }
    for (int64_t phase = 0; phase < stride; ++phase) {
      const auto first = static_cast<int64_t>(order.positions.size());
      for (const Range& range : ranges) {
        const int64_t start = range.begin + floor_mod(phase - range.coordinate, stride);
        if (start < range.end)
          order.append_run({start, (range.end - 1 - start) / stride + 1, stride});
      }
      order.tile_from(first, geometry.tile_rows);
    }
  }

 private:
  void add_strided(int64_t phase, int64_t end, TileKeys& keys) const {
    keys.add_lattice(phase, end, lines_.stride);
  }

  GridLines lines_;
  GridOptions options_;
};

}  // namespace

GridOptions grid_options(const PatternSpec& spec) {
  GridOptions options;
  options.stride = checked_param(spec, kStrideParam, 0);
  if (options.stride != 0 && options.stride < kMinStride) {
    throw_invalid_argument(spec.name + " parameter " + kStrideParam,
                           "0 (search) or >= " + std::to_string(kMinStride),
                           std::to_string(options.stride));
  }
  options.max_stride = checked_param(spec, kMaxStrideParam, kMinStride);
  options.hline = checked_flag(spec, kHlineParam);
  options.vline = checked_flag(spec, kVlineParam);
  options.slash = checked_flag(spec, kSlashParam);
  if (!options.hline && !options.vline && !options.slash) {
    throw_invalid_argument(spec.name + " parameters hline, vline, slash",
                           "at least one set to 1 (without lines, use a-shape)", "all 0");
  }
  options.sink = checked_param(spec, kSinkParam, 0);
  options.local = checked_param(spec, kLocalParam, 0);
  return options;
}

std::unique_ptr<KeyPattern> make_grid_pattern(GridLines lines, const GridOptions& options) {
  return std::make_unique<GridPattern>(lines, options);
}

namespace {

void build_grid(PlanBuilder& builder, const PatternSpec& spec, const HeadContext& context) {
  const GridOptions options = grid_options(spec);
  build_dynamic_head(builder, spec, context, [&](const Estimate& estimate) {
    return std::make_unique<GridPattern>(search_grid(estimate, options), options);
  });
}

Params grid_params(int64_t) {
  Params params = dynamic_params();
  params[kLocalParam] = kDefaultGridLocal;
  params[kStrideParam] = 0;
  params[kHlineParam] = 1;
  params[kVlineParam] = 1;
  params[kSlashParam] = 1;
  params[kMaxStrideParam] = kDefaultMaxStride;
  return params;
}

}  // namespace

GridLines search_grid(const Estimate& estimate, const GridOptions& options, double* margin) {
  const GridEvidence evidence(estimate, options);
  const double entry_cost = kEntryCost * evidence.background();
  const int64_t first = options.stride != 0 ? options.stride : kMinStride;
  const int64_t last =
      options.stride != 0
          ? options.stride
          : std::max(kMinStride, std::min(options.max_stride, evidence.keys() / kMinGridLines));
  Best best;
  for (int64_t stride = first; stride <= last; ++stride) {
    score_stride(evidence, options, stride, entry_cost, best);
  }
  if (margin != nullptr) *margin = best.best.score - best.runner_up;
  return best.best.lines;
}

PatternEntry& grid_entry() {
  static PatternEntry entry{
      {"grid",
       "MMInference grid head (Alg. 1): vertical, horizontal and slash lines of stride `stride` "
       "(0: searched up to max_stride on the last-q estimate) plus sink keys and a local "
       "window (default the diagonal), computed in a phase-major query order; exact except "
       "local windows, which widen along the slash lines within a tile (a superset); "
       "`boundary` 0 none, 1 K, 2 Q, 3 2D, 4 per media item (the grid in each item's frame "
       "coordinates: text between frames drops out, each video its own stride and phase, "
       "estimated from its own last rows); `item_sinks` N: the first N tokens of every frame "
       "and media item (and the text token before each) as columns",
       "grid:stride=0,hline=1,vline=1,slash=1,max_stride=1024", true},
      build_grid,
      grid_params};
  return entry;
}

}  // namespace mmsparse::detail
