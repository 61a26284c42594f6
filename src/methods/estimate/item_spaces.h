#pragma once
// What the GPU index builders need for the item boundary (boundary 4) and per-item sinks
// (item_sinks > 0), on the host from the spec, the shape and the layout
// (methods/estimate/modality_boundary.h says what they are).
//
// Item boundary: unlike the 2D boundary, where every group reads the same key spaces (one per key
// modality), each group reads its own: the text rows all keys, each media item's rows its own
// tokens and every other key. The builders number the (group, space) pairs group by group
// (PairTable) and give the kernels one view per pair; a group's pair s is first_pair[g] + s.
//
// Per-item sinks: every tile reads, as columns, the sink keys up to its last row's aligned
// position (build_dynamic_head's rule); they only add column keys to the tile's bitmaps, so the
// records stay TileKeys's.

#include <cstdint>
#include <vector>

#include "methods/estimate/index_kernels.h"
#include "methods/estimate/modality_boundary.h"
#include "mmsparse/layout.h"
#include "mmsparse/patterns.h"

namespace mmsparse::cuda::index::items {

// The (group, space) pairs of query groups that read spaces of their own.
struct PairTable {
  std::vector<detail::KeySpace> spaces;  // [pairs] group by group
  std::vector<int32_t> first_pair;       // [groups + 1] the first pair of each group, then pairs
  int64_t width = 0;                     // the most spaces one group reads
};
PairTable pair_table(const std::vector<detail::QueryGroup>& groups);

// The spec's per-item sink keys (detail::item_sink_keys), ascending; none when item_sinks is 0.
// Throws like the host builder on a bad count or layout (naming "<pattern> parameter item_sinks").
std::vector<int64_t> spec_sink_keys(const PatternSpec& resolved_spec, const PlanShape& shape,
                                    const ModalityLayout* layout);

// How many of the ascending `sinks` lie at or before original position `last_aligned`.
int32_t visible_sinks(const std::vector<int64_t>& sinks, int64_t last_aligned);

// The spaces' views over their device range arrays: `begins` [all ranges, space by space] and
// `prefixes` [all ranges + spaces] as the builders copy them (each space's range begins, then
// each space's prefix array). An identity space gets the all-keys view (no ranges).
std::vector<KeySpaceView> space_views(const std::vector<detail::KeySpace>& spaces,
                                      const int64_t* begins, const int64_t* prefixes);

}  // namespace mmsparse::cuda::index::items
