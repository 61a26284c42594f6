#pragma once
// Inter-modality modes (MMInference §3.2): which query rows share one estimate, and which keys they
// read in which coordinates.
//   none, K-boundary   one group: every query row, all keys. The paper handles K-boundary heads
//                      with the intra-modality pattern applied globally (the index is continuous
//                      along queries), so both build the same plan.
//   Q-boundary         (Alg. 2) one group per query modality over all keys; the group's estimate
//                      comes from that modality's last queries and serves all of its rows.
//   2D-boundary        (Alg. 3) one group per query modality, one key space per key modality: each
//                      (query modality, key modality) pair is estimated and laid out in the compact
//                      coordinates of its own keys (K permuted by modality), so lines continue
//                      across tokens of other modalities.
// Key spaces of a group are disjoint, so the keys the pairs select never cover a pair twice; that
// also keeps every key of a pair inside its key modality without a modality-pair mask.

#include <cstdint>
#include <vector>

#include "methods/estimate/estimation.h"
#include "mmsparse/patterns.h"

namespace mmsparse::detail {

enum class BoundaryMode : int64_t { kNone = 0, kKey = 1, kQuery = 2, kTwoD = 3 };
inline constexpr char kBoundaryParam[] = "boundary";

// The spec's `boundary` parameter; throws naming it when out of range.
BoundaryMode boundary_mode(const PatternSpec& spec);

struct QueryGroup {
  std::vector<IndexRange> rows;      // maximal runs of contiguous query rows, ascending
  std::vector<KeySpace> key_spaces;  // disjoint
  // The space holding the rows' own tokens: along a run of rows its frontier advances by one per
  // row (with all keys, by one per row whose aligned position is a key).
  std::size_t primary = 0;

  int64_t row_count() const;
  std::vector<int64_t> last_rows(int64_t count) const;  // the last `count` rows, ascending
};

// The groups of a head slot for the spec's boundary mode. Q- and 2D-boundary need a layout of
// kv_len tokens and kv_len >= q_len (every query has a token); errors name the pattern.
std::vector<QueryGroup> query_groups(const PatternSpec& spec, const PlanShape& shape,
                                     const ModalityLayout* layout);

}  // namespace mmsparse::detail
