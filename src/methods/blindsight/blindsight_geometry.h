#pragma once
// BlindSight's plans for the device builder (blindsight_device.h), split where the work lies.
//
// The host reads the layout into a geometry of one head slot (every head slot of a template is
// the same): its query order (image rows, then text rows: images_then_text_order), its tiles (rows
// as order indices, mask, and either one key span [0, keys_end) or an image and the positions its
// key runs are clipped at), the runs of keys every image query may read (text and sinks), each
// image's own runs (its tokens, or its sinks), the mask table in first-use order and each tile's
// offsets into the spans and columns sections. That costs O(tiles × images) integer steps, one
// walk over the rows for the order and no per-key work. The device then writes every record; the
// columns (the packed sinks and short text runs, the bulk of the plan at 300K tokens) never exist
// on the host.
//
// for_each_key_run is the one definition of a tile's key runs, called by the host to count and
// by the kernels to write; its result is the host builder's (blindsight.cpp: add_key_runs over
// image_key_ranges), which tests/cpu/test_blindsight_geometry.cpp checks record for record.
// Plain C++: the walk compiles for the host and the device.

#include <cstdint>
#include <vector>

#include "core/engine_chunks.h"
#include "cuda/common/math.h"
#include "mmsparse/layout.h"
#include "mmsparse/patterns.h"
#include "mmsparse/plan.h"

namespace mmsparse::detail {

// A run of keys [begin, end) in int32, as the kernels read it.
struct BlindSightRun {
  int32_t begin;
  int32_t end;
};

// One query tile of the head slot.
struct BlindSightTile {
  int32_t begin;  // rows [begin, end)
  int32_t end;
  int32_t mask;      // index into the geometry's masks
  int32_t image;     // -1: the tile reads one span [0, keys_end); else the image of its rows
  int32_t keys_end;  // tiles without an image
  int32_t last;      // image tiles: aligned position of the last row (shared runs end after it)
  int32_t first;     // image tiles: aligned position of the first row (runs left of it pack)
  int32_t own_end;   // image tiles: the image's own runs end here (past `last` when bidirectional)
  int64_t span_at;   // offsets of its records in one head slot's spans and columns
  int64_t column_at;
  int64_t piece_at;  // offset of its column pieces (runs with columns) in the device scratch
  int64_t keys;      // keys it reads (the schedule's weight)
};

struct BlindSightGeometry {
  std::vector<BlindSightTile> tiles;
  std::vector<BlindSightRun> shared;  // ascending, disjoint
  std::vector<int32_t> own_offsets;   // [images + 1] into own
  std::vector<BlindSightRun> own;     // per image, ascending
  std::vector<MaskPolicy> masks;      // first-use order (PlanBuilder's numbering)
  std::vector<int32_t> schedule;      // the tiles heaviest first, ties by position
  std::vector<QueryRun> order;        // the head slot's query order (empty: the identity)
  int64_t spans = 0;                  // one head slot's records
  int64_t columns = 0;
  int64_t pieces = 0;        // runs with columns, over the tiles
  bool token_masks = false;  // a mask reads token arrays (bidirectional images)
  bool covers_every_row = true;
};

// The geometry of `resolved_spec` (a blindsight-* spec) for one head slot of `shape`; throws what
// build_plan throws for the spec, shape and layout, and kUnsupported for a spec whose plan reads a
// key order (permutes_keys: the host builds those).
BlindSightGeometry blindsight_geometry(const PatternSpec& resolved_spec, const PlanShape& shape,
                                       const ModalityLayout* layout);

// Where a run of `length` keys from `begin` stops being a span: runs of at least one key chunk
// left of every row of the tile (end <= first) keep whole chunks as a span and the rest as
// columns; shorter runs are all columns; a run reaching the rows stays a span.
MMSPARSE_HOST_DEVICE inline int32_t run_span_end(int32_t begin, int32_t end, int32_t first) {
  const int32_t length = end - begin;
  constexpr auto kChunk = static_cast<int32_t>(kGatherChunkKeys);
  if (length < kChunk) return begin;
  return end <= first ? begin + length / kChunk * kChunk : end;
}

// Calls visit(begin, end) for each maximal key run of an image tile, ascending: the union of the
// shared runs that begin at or before `last` (cut after it) and the image's own runs (cut at
// own_end), touching runs merged. Both lists are ascending and disjoint.
template <class Visit>
MMSPARSE_HOST_DEVICE void for_each_key_run(const BlindSightRun* shared, int64_t shared_count,
                                           const BlindSightRun* own, int64_t own_count,
                                           const BlindSightTile& tile, Visit&& visit) {
  int64_t s = 0, o = 0;
  bool open = false;
  BlindSightRun run{0, 0};
  for (;;) {
    const bool shared_left = s < shared_count && shared[s].begin <= tile.last;
    const bool own_left = o < own_count && own[o].begin < tile.own_end;
    if (!shared_left && !own_left) break;
    BlindSightRun next;
    if (shared_left && (!own_left || shared[s].begin <= own[o].begin)) {
      next = {shared[s].begin, shared[s].end < tile.last + 1 ? shared[s].end : tile.last + 1};
      ++s;
    } else {
      next = {own[o].begin, own[o].end < tile.own_end ? own[o].end : tile.own_end};
      ++o;
    }
    if (open && next.begin <= run.end) {
      run.end = next.end > run.end ? next.end : run.end;
      continue;
    }
    if (open) visit(run.begin, run.end);
    run = next;
    open = true;
  }
  if (open) visit(run.begin, run.end);
}

}  // namespace mmsparse::detail
