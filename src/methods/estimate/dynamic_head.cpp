#include "methods/estimate/dynamic_head.h"

#include <algorithm>
#include <string>

#include "mmsparse/status.h"

namespace mmsparse::detail {

Params dynamic_params() {
  return {{kLastQueriesParam, kDefaultLastQueries},
          {kSinkParam, kDefaultSinkKeys},
          {kLocalParam, kDefaultLocalDiagonals},
          {kItemSinksParam, 0},
          {kBoundaryParam, static_cast<int64_t>(BoundaryMode::kNone)}};
}

int64_t item_sinks_param(const PatternSpec& spec, const PlanShape& shape,
                         const ModalityLayout* layout) {
  const int64_t count = checked_param(spec, kItemSinksParam, 0);
  if (count == 0) return 0;
  const std::string parameter = spec.name + " parameter " + kItemSinksParam;
  if (layout == nullptr) {
    throw_invalid_argument(parameter, "0 without a modality layout (the items' frames)",
                           std::to_string(count));
  }
  if (layout->length() != shape.kv_len) {
    throw_invalid_argument(parameter + " layout",
                           "a layout of kv_len = " + std::to_string(shape.kv_len) + " tokens",
                           std::to_string(layout->length()));
  }
  return count;
}

void RowOrder::append_run(const QueryRun& run) {
  if (run.count == 0) return;
  runs.push_back(run);
  for (int64_t i = 0; i < run.count; ++i) positions.push_back(run.start + i * run.step);
}

void RowOrder::tile_from(int64_t first, int64_t tile_rows) {
  const auto last = static_cast<int64_t>(positions.size());
  for (int64_t begin = first; begin < last; begin += tile_rows) {
    tiles.push_back({begin, std::min(last, begin + tile_rows)});
  }
}

bool RowOrder::is_identity() const {
  for (std::size_t i = 0; i < positions.size(); ++i) {
    if (positions[i] != static_cast<int64_t>(i)) return false;
  }
  return true;
}

void KeyPattern::arrange(const GroupGeometry& geometry, RowOrder& order) const {
  for (const IndexRange& rows : geometry.group.rows) {
    const auto first = static_cast<int64_t>(order.positions.size());
    order.append_run({rows.begin, rows.end - rows.begin, 1});
    order.tile_from(first, geometry.tile_rows);
  }
}

namespace {

// The distinct frontiers >= 1 of the tile's rows in `space`, ascending.
void tile_frontiers(const KeySpace& space, std::span<const int64_t> positions,
                    int64_t causal_offset, std::vector<int64_t>& frontiers) {
  frontiers.clear();
  for (int64_t position : positions) {
    const int64_t frontier = space.frontier(position + causal_offset);
    if (frontier > 0) frontiers.push_back(frontier);
  }
  std::sort(frontiers.begin(), frontiers.end());
  frontiers.erase(std::unique(frontiers.begin(), frontiers.end()), frontiers.end());
}

}  // namespace

void build_dynamic_head(PlanBuilder& builder, const PatternSpec& spec, const HeadContext& context,
                        const PatternEstimator& estimator) {
  const PlanShape& shape = context.shape;
  const int64_t last_q = checked_param(spec, kLastQueriesParam, 1);
  const std::vector<QueryGroup> groups = query_groups(spec, shape, context.layout);
  const int64_t item_sinks = item_sinks_param(spec, shape, context.layout);
  check_pattern_inputs(spec.name, context.inputs, shape);
  if (context.validate_only) return;
  const std::vector<int64_t> sink_keys =
      item_sinks > 0 ? item_sink_keys(*context.layout, item_sinks) : std::vector<int64_t>{};
  const HeadOperands operands(*context.inputs, shape, context.head_slot, *context.keys);
  const int64_t offset = shape.causal_offset();

  std::vector<std::vector<std::unique_ptr<KeyPattern>>> patterns(groups.size());
  RowOrder order;
  std::vector<std::size_t> tile_group;
  for (std::size_t g = 0; g < groups.size(); ++g) {
    const QueryGroup& group = groups[g];
    const std::vector<int64_t> last_rows = group.last_rows(last_q);
    for (const KeySpace& space : group.key_spaces) {
      patterns[g].push_back(estimator(estimate_last_queries(operands, last_rows, space, offset)));
    }
    patterns[g][group.primary]->arrange(
        {group, group.key_spaces[group.primary], offset, shape.tile_rows}, order);
    tile_group.resize(order.tiles.size(), g);
  }

  builder.begin_head(order.is_identity() ? std::vector<QueryRun>{} : order.runs);
  const BoundaryMode boundary = boundary_mode(spec);
  // Q/2D/item-boundary lattices, and those of heads with item sinks, stay one per original range
  // of their key space, as the GPU grid builder cuts them (the grouped conversion serves them all:
  // docs/index_builders.md, "Grid with a Q or 2D boundary").
  TileKeys keys(boundary == BoundaryMode::kQuery || boundary == BoundaryMode::kTwoD ||
                        boundary == BoundaryMode::kItem || item_sinks > 0
                    ? LatticeKeys::kStridedSpansInRanges
                    : LatticeKeys::kStridedSpans);
  std::vector<int64_t> frontiers;
  for (std::size_t t = 0; t < order.tiles.size(); ++t) {
    const IndexRange& tile = order.tiles[t];
    const QueryGroup& group = groups[tile_group[t]];
    builder.begin_tile(tile.begin, tile.end);
    const std::span<const int64_t> positions(order.positions.data() + tile.begin,
                                             static_cast<std::size_t>(tile.end - tile.begin));
    for (std::size_t s = 0; s < group.key_spaces.size(); ++s) {
      tile_frontiers(group.key_spaces[s], positions, offset, frontiers);
      if (frontiers.empty()) continue;
      keys.use_space(group.key_spaces[s]);
      patterns[tile_group[t]][s]->add_tile_keys(frontiers, keys);
    }
    // The item sinks some row of the tile sees causally.
    const int64_t last_aligned = *std::max_element(positions.begin(), positions.end()) + offset;
    for (auto key = sink_keys.begin(); key != sink_keys.end() && *key <= last_aligned; ++key) {
      keys.add_original_column(*key);
    }
    keys.write(builder);
  }
}

}  // namespace mmsparse::detail
