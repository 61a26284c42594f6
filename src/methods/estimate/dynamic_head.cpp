#include "methods/estimate/dynamic_head.h"

#include <algorithm>

namespace mmsparse::detail {

Params dynamic_params() {
  return {{kLastQueriesParam, kDefaultLastQueries},
          {kSinkParam, kDefaultSinkKeys},
          {kLocalParam, kDefaultLocalDiagonals},
          {kBoundaryParam, static_cast<int64_t>(BoundaryMode::kNone)}};
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
  check_pattern_inputs(spec.name, context.inputs, shape);
  if (context.validate_only) return;
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
  TileKeys keys(boundary == BoundaryMode::kQuery || boundary == BoundaryMode::kTwoD
                    ? LatticeKeys::kColumns
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
    keys.write(builder);
  }
}

}  // namespace mmsparse::detail
