// BlindSight's geometry for the device builder (blindsight_geometry.h): the tiles of one head slot,
// in the host builder's order (blindsight.cpp), with their counts and offsets.

#include "methods/blindsight/blindsight_geometry.h"

#include <algorithm>
#include <numeric>

#include "methods/blindsight/blindsight.h"
#include "mmsparse/status.h"

namespace mmsparse::detail {
namespace {

// A run of query rows whose aligned positions hold one media item (-1: text).
struct RowRun {
  int64_t begin;
  int64_t end;
  int32_t media;
};

// The rows [0, q_len) as runs of one media item, from the layout's segments.
std::vector<RowRun> row_runs(const ModalityLayout& layout, const PlanShape& shape) {
  const int64_t offset = shape.causal_offset();
  std::vector<RowRun> runs;
  for (const Segment& segment : layout.segments()) {
    const int64_t begin = std::max<int64_t>(segment.begin - offset, 0);
    const int64_t end = std::min(segment.end - offset, shape.q_len);
    if (begin >= end) continue;
    if (!runs.empty() && runs.back().media == segment.media && runs.back().end == begin) {
      runs.back().end = end;
    } else {
      runs.push_back({begin, end, segment.media});
    }
  }
  return runs;
}

std::vector<BlindSightRun> as_runs(const std::vector<KeyRange>& ranges) {
  std::vector<BlindSightRun> runs;
  runs.reserve(ranges.size());
  for (const KeyRange& range : ranges) {
    runs.push_back({static_cast<int32_t>(range.begin), static_cast<int32_t>(range.end)});
  }
  return runs;
}

// Appends tiles, numbering masks by first use and counting each tile's records.
class TileList {
 public:
  TileList(BlindSightGeometry& geometry, const PlanShape& shape)
      : geometry_(geometry), shape_(shape) {}

  // A tile reading one span [0, keys_end).
  void add_prefix(int64_t begin, int64_t end, int64_t keys_end, const MaskPolicy& mask) {
    BlindSightTile tile = make(begin, end, mask);
    tile.image = -1;
    tile.keys_end = static_cast<int32_t>(keys_end);
    tile.keys = keys_end;
    geometry_.spans += keys_end > 0 ? 1 : 0;
    geometry_.tiles.push_back(tile);
  }
  // Causal tiles over rows [first, last).
  void add_causal(int64_t first, int64_t last) {
    for (int64_t begin = first; begin < last; begin += shape_.tile_rows) {
      const int64_t end = std::min(last, begin + shape_.tile_rows);
      add_prefix(begin, end, std::clamp<int64_t>(end + shape_.causal_offset(), 0, shape_.kv_len),
                 MaskPolicy{});
    }
  }
  // A tile of the image rows [begin, end) at order indices from `order_begin`; left out (its rows
  // in no tile) when no row has a key.
  void add_image(int64_t begin, int64_t end, int64_t order_begin, int32_t image,
                 bool bidirectional) {
    const int64_t offset = shape_.causal_offset();
    const MaskPolicy mask{.causal = true, .media_bidirectional = bidirectional};
    BlindSightTile tile{};
    tile.image = image;
    tile.last = static_cast<int32_t>(end - 1 + offset);
    tile.first = static_cast<int32_t>(begin + offset);
    tile.own_end = bidirectional ? static_cast<int32_t>(shape_.kv_len) : tile.last + 1;
    int64_t spans = 0, columns = 0, pieces = 0, keys = 0;
    const int32_t own_begin = geometry_.own_offsets[image];
    for_each_key_run(geometry_.shared.data(), static_cast<int64_t>(geometry_.shared.size()),
                     geometry_.own.data() + own_begin, geometry_.own_offsets[image + 1] - own_begin,
                     tile, [&](int32_t run_begin, int32_t run_end) {
                       const int32_t span_end = run_span_end(run_begin, run_end, tile.first);
                       spans += span_end > run_begin ? 1 : 0;
                       columns += run_end - span_end;
                       pieces += run_end > span_end ? 1 : 0;
                       keys += run_end - run_begin;
                     });
    if (keys == 0) {
      geometry_.covers_every_row = false;
      return;
    }
    const BlindSightTile counted = make(order_begin, order_begin + end - begin, mask);
    tile.begin = counted.begin;
    tile.end = counted.end;
    tile.mask = counted.mask;
    tile.span_at = counted.span_at;
    tile.column_at = counted.column_at;
    tile.piece_at = counted.piece_at;
    tile.keys = keys;
    geometry_.spans += spans;
    geometry_.columns += columns;
    geometry_.pieces += pieces;
    geometry_.tiles.push_back(tile);
  }

 private:
  BlindSightTile make(int64_t begin, int64_t end, const MaskPolicy& mask) {
    BlindSightTile tile{};
    tile.begin = static_cast<int32_t>(begin);
    tile.end = static_cast<int32_t>(end);
    std::vector<MaskPolicy>& masks = geometry_.masks;
    auto found = std::find(masks.begin(), masks.end(), mask);
    if (found == masks.end()) found = masks.insert(masks.end(), mask);
    tile.mask = static_cast<int32_t>(found - masks.begin());
    tile.span_at = geometry_.spans;
    tile.column_at = geometry_.columns;
    tile.piece_at = geometry_.pieces;
    return tile;
  }

  BlindSightGeometry& geometry_;
  const PlanShape& shape_;
};

// blindsight-dense with bidirectional images: tiles of tile_rows, each reading to the end of the
// last image its rows touch, lifted where it has image rows.
void add_bidirectional_dense(TileList& tiles, const ModalityLayout& layout,
                             const PlanShape& shape) {
  std::vector<int64_t> image_end(layout.media().size(), 0);
  for (const Segment& segment : layout.segments()) {
    if (segment.media >= 0) image_end[segment.media] = segment.end;
  }
  const std::vector<RowRun> runs = row_runs(layout, shape);
  const MaskPolicy lifted{.causal = true, .media_bidirectional = true};
  std::size_t run = 0;
  for (int64_t begin = 0; begin < shape.q_len; begin += shape.tile_rows) {
    const int64_t end = std::min(shape.q_len, begin + shape.tile_rows);
    while (runs[run].end <= begin) ++run;
    int64_t keys_end = end + shape.causal_offset();
    bool has_image = false;
    for (std::size_t r = run; r < runs.size() && runs[r].begin < end; ++r) {
      if (runs[r].media < 0) continue;
      has_image = true;
      keys_end = std::max(keys_end, image_end[runs[r].media]);
    }
    tiles.add_prefix(begin, end, keys_end, has_image ? lifted : MaskPolicy{});
  }
}

// The sparse templates: image runs as image tiles in the query order of images_then_text_order,
// then the text rows in tiles of tile_rows, each reading every key up to its last row.
void add_sparse(TileList& tiles, BlindSightGeometry& geometry, const ModalityLayout& layout,
                const PatternSpec& spec, const PlanShape& shape, bool bidirectional) {
  const BlindSightMask mask = blindsight_mask_of(spec);
  const ImageLayout images = read_layout(layout, spec, mask);
  geometry.order = images_then_text_order(images.token_media, shape);
  geometry.shared = as_runs(images.shared);
  geometry.own_offsets.push_back(0);
  for (std::size_t image = 0; image < images.segments.size(); ++image) {
    const std::vector<BlindSightRun> own =
        as_runs(uses_intra(mask) ? images.segments[image] : images.sinks[image]);
    geometry.own.insert(geometry.own.end(), own.begin(), own.end());
    geometry.own_offsets.push_back(static_cast<int32_t>(geometry.own.size()));
  }
  std::vector<RowRun> text;
  int64_t image_rows = 0;  // order index of the next image row
  for (const RowRun& run : row_runs(layout, shape)) {
    if (run.media < 0) {
      text.push_back(run);
      continue;
    }
    for (int64_t begin = run.begin; begin < run.end; begin += shape.tile_rows) {
      tiles.add_image(begin, std::min(run.end, begin + shape.tile_rows),
                      image_rows + begin - run.begin, run.media, bidirectional);
    }
    image_rows += run.end - run.begin;
  }
  // Text tiles over the text runs in turn: each holds tile_rows rows (the last fewer).
  int64_t order_begin = image_rows;
  std::size_t run = 0;
  int64_t row = text.empty() ? 0 : text.front().begin;
  while (run < text.size()) {
    int64_t rows = 0;
    int64_t last = row;
    while (run < text.size() && rows < shape.tile_rows) {
      const int64_t taken = std::min(shape.tile_rows - rows, text[run].end - row);
      rows += taken;
      last = row + taken - 1;
      row += taken;
      if (row == text[run].end && ++run < text.size()) row = text[run].begin;
    }
    tiles.add_prefix(order_begin, order_begin + rows,
                     std::clamp<int64_t>(last + 1 + shape.causal_offset(), 0, shape.kv_len),
                     MaskPolicy{});
    order_begin += rows;
  }
}

// Tile indices by decreasing keys, ties by position: the upload's order for one head slot.
std::vector<int32_t> heaviest_first(const std::vector<BlindSightTile>& tiles) {
  std::vector<int32_t> order(tiles.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](int32_t a, int32_t b) { return tiles[a].keys > tiles[b].keys; });
  return order;
}

}  // namespace

BlindSightGeometry blindsight_geometry(const PatternSpec& resolved_spec, const PlanShape& shape,
                                       const ModalityLayout* layout) {
  const PlanBuilder shape_check(shape);  // throws on a bad shape as build_plan does
  const bool bidirectional = check_blindsight_head(resolved_spec, {shape, layout});
  if (permutes_keys(resolved_spec, layout)) {
    throw Error(ErrorCode::kUnsupported,
                "blindsight_geometry: " + resolved_spec.to_string() +
                    " reads its image tiles' keys through a key order, which the host builder "
                    "writes (the device builder writes in-place plans: permute=0)");
  }
  BlindSightGeometry geometry;
  TileList tiles(geometry, shape);
  const bool images = layout != nullptr && !layout->media().empty();
  if (!images) {
    tiles.add_causal(0, shape.q_len);  // text only: every query is a text query
  } else if (blindsight_mask_of(resolved_spec) != BlindSightMask::kDense) {
    add_sparse(tiles, geometry, *layout, resolved_spec, shape, bidirectional);
  } else if (bidirectional) {
    add_bidirectional_dense(tiles, *layout, shape);
  } else {
    tiles.add_causal(0, shape.q_len);
  }
  geometry.schedule = heaviest_first(geometry.tiles);
  geometry.token_masks =
      std::any_of(geometry.masks.begin(), geometry.masks.end(),
                  [](const MaskPolicy& mask) { return mask.needs_token_arrays(); });
  return geometry;
}

}  // namespace mmsparse::detail
