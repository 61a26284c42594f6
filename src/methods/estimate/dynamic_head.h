#pragma once
// The driver the dynamic patterns share. For one head slot:
//  1. the boundary mode splits the query rows into groups, each reading one or more key spaces
//     (modality_boundary.h);
//  2. each (group, key space) gets its own pattern, estimated from the group's last `last_q`
//     queries (estimation.h);
//  3. the pattern of the group's primary space arranges the group's rows into query runs and tiles
//     (contiguous rows by default; the grid groups rows by phase);
//  4. every tile reads, from each key space, the union of the keys its rows' patterns select
//     (TileKeys), under the causal mask.
// A tile's rows therefore share one key set, trimmed causally per row: each row computes its own
// pattern plus whatever the other rows of its tile select that it may see causally. Components
// that are the same for every row of a tile up to causality are exact; row-relative ones (slash
// bands, local windows of phase tiles) are supersets, documented by each pattern.

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "methods/estimate/estimation.h"
#include "methods/estimate/modality_boundary.h"
#include "methods/estimate/tile_keys.h"
#include "methods/registry.h"
#include "mmsparse/patterns.h"

namespace mmsparse::detail {

// Parameters every dynamic pattern takes, with MInference's estimation constants as defaults.
inline constexpr char kLastQueriesParam[] = "last_q";
inline constexpr char kSinkParam[] = "sink";
inline constexpr char kLocalParam[] = "local";
// Per-item sinks: every tile also reads item_sink_keys(layout, item_sinks) (the first tokens of
// every frame and media item) below its last row, as columns; 0 = none. Needs a layout when > 0.
inline constexpr char kItemSinksParam[] = "item_sinks";
// MMInference §4.1: "For the Vertical-Slash and Grid Head patterns, we set last_q = 64".
inline constexpr int64_t kDefaultLastQueries = 64;
// MInference's estimate forces the first 30 keys (sinks) and the last 100 diagonals (local window)
// into the selection.
inline constexpr int64_t kDefaultSinkKeys = 30;
inline constexpr int64_t kDefaultLocalDiagonals = 100;

Params dynamic_params();  // last_q, sink, local, item_sinks, boundary with their defaults

// The spec's item_sinks, checked (>= 0; a layout of kv_len tokens when > 0); errors name it.
int64_t item_sinks_param(const PatternSpec& spec, const PlanShape& shape,
                         const ModalityLayout* layout);

// The query order of a head slot under construction: runs, the positions they visit, and tiles as
// ranges of that order.
struct RowOrder {
  std::vector<QueryRun> runs;
  std::vector<int64_t> positions;
  std::vector<IndexRange> tiles;

  void append_run(const QueryRun& run);
  // Cuts the positions appended since `first` into tiles of at most tile_rows.
  void tile_from(int64_t first, int64_t tile_rows);
  bool is_identity() const;  // positions are 0, 1, 2, ...
};

// What a group's arrangement may read.
struct GroupGeometry {
  const QueryGroup& group;
  const KeySpace& primary;  // group.key_spaces[group.primary]
  int64_t causal_offset;
  int64_t tile_rows;
};

// A pattern estimated on one key space.
class KeyPattern {
 public:
  virtual ~KeyPattern() = default;
  // Adds the compact keys read by a tile whose rows have these frontiers in the space (ascending,
  // distinct, >= 1): the union of the rows' own selections.
  virtual void add_tile_keys(std::span<const int64_t> frontiers, TileKeys& keys) const = 0;
  // Appends the group's rows to the order (called on the primary space's pattern). Default: each
  // run of contiguous rows in order, cut into tiles, so a tile's rows are contiguous positions.
  virtual void arrange(const GroupGeometry& geometry, RowOrder& order) const;
};

using PatternEstimator = std::function<std::unique_ptr<KeyPattern>(const Estimate&)>;

// Builds the head slot of `context` from a resolved dynamic spec.
void build_dynamic_head(PlanBuilder& builder, const PatternSpec& spec, const HeadContext& context,
                        const PatternEstimator& estimator);

}  // namespace mmsparse::detail
