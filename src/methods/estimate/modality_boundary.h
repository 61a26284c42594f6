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
//   item boundary      one group per media item (each image, each video with all its frames) and
//                      one for the text rows. An item's rows read two key spaces: the item's own
//                      tokens (its frames back to back, so text between frames - Qwen3-VL
//                      timestamps, separators - drops out of the coordinates and a frame period
//                      stays constant) and every other key; each is estimated from the item's own
//                      last rows. Several videos of different frame sizes each get their own
//                      stride and phase. Text rows read all keys, as in Q-boundary.
// Key spaces of a group are disjoint, so the keys the pairs select never cover a pair twice; that
// also keeps every key of a pair inside its key modality without a modality-pair mask.

#include <cstdint>
#include <vector>

#include "methods/estimate/estimation.h"
#include "mmsparse/patterns.h"

namespace mmsparse::detail {

enum class BoundaryMode : int64_t { kNone = 0, kKey = 1, kQuery = 2, kTwoD = 3, kItem = 4 };
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

// The groups of a head slot for the spec's boundary mode. Q-, 2D- and item boundary need a layout
// of kv_len tokens and kv_len >= q_len (every query has a token); errors name the pattern.
std::vector<QueryGroup> query_groups(const PatternSpec& spec, const PlanShape& shape,
                                     const ModalityLayout* layout);

// Per-item sink keys, ascending: the first `count` tokens of every frame of every media item (an
// image is one frame), and the token before a frame's first token where that is text (its
// vision_start marker, or the separator or timestamp before it). Heads that attend to the start
// of every frame or item read these; they lie anywhere in the sequence, so no line pattern holds
// them.
std::vector<int64_t> item_sink_keys(const ModalityLayout& layout, int64_t count);

}  // namespace mmsparse::detail
