// Device plan records decoded into a host Plan (plan_decode.h).

#include "cuda/runtime/plan_decode.h"

#include <algorithm>
#include <cstddef>
#include <string>
#include <utility>
#include <vector>

#include "core/mask_rule.h"
#include "mmsparse/status.h"

namespace mmsparse::cuda {
namespace {

[[noreturn]] void fail(const std::string& what) {
  throw Error(ErrorCode::kBackendError, "device plan records: " + what);
}

std::string range_text(int64_t begin, int64_t end) {
  // Appended piece by piece: GCC 12 warns (-Wrestrict, a false positive) on "[" + std::string.
  std::string text(1, '[');
  text += std::to_string(begin);
  text += ", ";
  text += std::to_string(end);
  text += ')';
  return text;
}

bool is_empty_tile(const TileRecord& tile) {
  return tile.begin == 0 && tile.end == 0 && tile.head_slot == 0 && tile.mask == 0 &&
         tile.span_begin == 0 && tile.span_end == 0 && tile.column_begin == 0 &&
         tile.column_end == 0;
}

// The real tiles: those before the first with no rows, after which every record must be empty.
int64_t real_tile_count(const std::vector<TileRecord>& tiles) {
  const auto first_empty = std::find_if(
      tiles.begin(), tiles.end(), [](const TileRecord& tile) { return tile.begin >= tile.end; });
  const auto real = static_cast<int64_t>(first_empty - tiles.begin());
  for (auto tile = first_empty; tile != tiles.end(); ++tile) {
    if (!is_empty_tile(*tile)) {
      fail("tile " + std::to_string(tile - tiles.begin()) + " follows the empty tile " +
           std::to_string(real) + " but is not empty (rows " + range_text(tile->begin, tile->end) +
           ", head slot " + std::to_string(tile->head_slot) + ")");
    }
  }
  return real;
}

// Each head slot's runs as the plan's {start, count, step}: a run ends where the next begins, the
// last at q_len.
void decode_runs(const PlanRecords& records, Plan& plan) {
  const int64_t slots = plan.shape.head_slots();
  const std::vector<int64_t>& offsets = records.head_run_offsets;
  if (static_cast<int64_t>(offsets.size()) != slots + 1 || offsets.front() != 0) {
    fail("head run offsets: expected " + std::to_string(slots + 1) + " offsets from 0, got " +
         std::to_string(offsets.size()));
  }
  for (int64_t slot = 0; slot < slots; ++slot) {
    const int64_t first = offsets[slot];
    const int64_t last = offsets[slot + 1];
    if (last < first || last > static_cast<int64_t>(records.runs.size())) {
      fail("head slot " + std::to_string(slot) + "'s runs " + range_text(first, last) +
           " lie outside the " + std::to_string(records.runs.size()) + " run records");
    }
    for (int64_t r = first; r < last; ++r) {
      const RunRecord& run = records.runs[r];
      const int64_t next = r + 1 < last ? records.runs[r + 1].order_begin : plan.shape.q_len;
      if ((r == first && run.order_begin != 0) || next <= run.order_begin) {
        fail("run " + std::to_string(r - first) + " of head slot " + std::to_string(slot) +
             " begins at order index " + std::to_string(run.order_begin) + ", expected " +
             (r == first ? std::string("0") : "an index below " + std::to_string(next)));
      }
      plan.runs.push_back({run.start, next - run.order_begin, run.step});
    }
  }
  plan.head_run_offsets = offsets;
}

// A tile's key ranges (and, for a plan with key orders, their shifts) lie inside the records.
void check_key_range_bounds(const PlanRecords& records, const TileRecord& tile, int64_t t) {
  const auto ranges = static_cast<int64_t>(records.key_ranges.size());
  if (tile.span_begin < 0 || tile.span_end < tile.span_begin || tile.span_end > ranges) {
    fail("tile " + std::to_string(t) + "'s key ranges " +
         range_text(tile.span_begin, tile.span_end) + " lie outside the " + std::to_string(ranges) +
         " key range records");
  }
  if (records.key_order_slots > 0 &&
      tile.span_end > static_cast<int64_t>(records.span_shifts.size())) {
    fail("tile " + std::to_string(t) + "'s key ranges " +
         range_text(tile.span_begin, tile.span_end) + " lie outside the " +
         std::to_string(records.span_shifts.size()) + " span shifts");
  }
}

// The key orders of the records (PlanRecords::key_orders), each to its last key: a padding slot
// after it no span may cover (plan.h), so it reads nothing.
void decode_key_orders(const PlanRecords& records, Plan& plan) {
  const int64_t slots = records.key_order_slots;
  if (slots <= 0) return;  // a plan without key orders, or whose orders hold no slot
  const auto rows = static_cast<int64_t>(records.key_orders.size());
  if (rows % slots != 0) {
    fail("key orders: " + std::to_string(rows) + " rows, expected a multiple of the " +
         std::to_string(slots) + " slots of each order");
  }
  for (int64_t first = 0; first < rows; first += slots) {
    const auto begin = records.key_orders.begin() + first;
    auto end = begin + slots;
    while (end != begin && *(end - 1) == kPaddingKey) --end;
    plan.key_orders.emplace_back(begin, end);
  }
}

// The key order tile t reads through, from its key ranges' shifts (kKeysInPlace where it has none
// or they are read in place), each key-ordered range checked to be a span of that order's rows
// whose shift is the order's (plan_view.cuh's kSpanInPlace).
int32_t decode_tile_key_order(const PlanRecords& records, const TileRecord& tile, int64_t t) {
  if (records.key_order_slots <= 0) return kKeysInPlace;
  const int64_t slots = records.key_order_slots;
  int32_t tile_order = kKeysInPlace;
  for (int64_t s = tile.span_begin; s < tile.span_end; ++s) {
    const SpanRecord& range = records.key_ranges[s];
    const int32_t shift = records.span_shifts[s];
    // Formed only for a failure.
    const auto name = [&] {
      return "key range " + std::to_string(s) + " of tile " + std::to_string(t);
    };
    const int32_t order =
        shift == kSpanInPlace ? kKeysInPlace : static_cast<int32_t>(range.begin / slots);
    if (s > tile.span_begin && order != tile_order) {
      fail(name() + " reads key order " + std::to_string(order) +
           ", an earlier range of the tile " + std::to_string(tile_order) +
           " (-1: in place); a tile reads through one order");
    }
    tile_order = order;
    if (order == kKeysInPlace) continue;
    const int64_t first_row = order * slots;
    const int64_t last_row = static_cast<int64_t>(range.end) - 1;
    if (range.step != 1 || range.width != 1 || range.begin < 0 || range.end <= range.begin ||
        last_row >= first_row + slots ||
        last_row >= static_cast<int64_t>(records.key_orders.size())) {
      fail(name() + " " + range_text(range.begin, range.end) +
           " is key-ordered, expected a non-empty span of step 1 inside one order's rows " +
           range_text(first_row, first_row + slots) + " of " +
           std::to_string(records.key_orders.size()));
    }
    const int32_t last_key = records.key_orders[static_cast<std::size_t>(last_row)];
    if (last_key == kPaddingKey || shift != last_key - last_row) {
      fail(name() + " has shift " + std::to_string(shift) + ", expected " +
           std::to_string(int64_t{last_key} - last_row) + " (its last row's key " +
           std::to_string(last_key) + " - the row " + std::to_string(last_row) + ")");
    }
  }
  return tile_order;
}

// A tile's key ranges as spans, strided spans and (expanded) lattices; the spans of a key-ordered
// tile as slots of its order (rows from `first_row`).
void decode_key_ranges(const PlanRecords& records, const TileRecord& tile, int64_t t,
                       int64_t first_row, Plan& plan) {
  for (int64_t s = tile.span_begin; s < tile.span_end; ++s) {
    const SpanRecord& range = records.key_ranges[s];
    if (range.step < 1 || range.width < 1) {
      fail("key range " + std::to_string(s) + " of tile " + std::to_string(t) + " has step " +
           std::to_string(range.step) + " and width " + std::to_string(range.width) +
           ", expected both >= 1");
    }
    if (range.step == 1 && range.width == 1) {
      plan.spans.push_back({static_cast<int32_t>(range.begin - first_row),
                            static_cast<int32_t>(range.end - first_row)});
      continue;
    }
    if (range.width == 1) {
      plan.strided_spans.push_back({range.begin, range.end, range.step});
      continue;
    }
    // A lattice: `width` strided spans from begin + j, each of `periods` keys.
    const int64_t periods = range_keys(range) / range.width;
    if (range.step <= 1 || periods < 1) {
      fail("lattice " + std::to_string(s) + " of tile " + std::to_string(t) + " has step " +
           std::to_string(range.step) + " and " + std::to_string(periods) +
           " periods, expected step >= 2 and at least one period");
    }
    for (int32_t j = 0; j < range.width; ++j) {
      const int64_t last_key = int64_t{range.begin} + j + (periods - 1) * range.step;
      plan.strided_spans.push_back(
          {range.begin + j, static_cast<int32_t>(last_key + 1), range.step});
    }
  }
}

// Whether the real tiles' columns lie back to back from record 0 (as every builder and the upload
// write them), so that the records are the plan's columns as they stand; the offsets are checked
// against the records either way.
bool columns_in_order(const PlanRecords& records, int64_t tiles) {
  bool in_order = true;
  int64_t next = 0;
  for (int64_t t = 0; t < tiles; ++t) {
    const TileRecord& tile = records.tiles[t];
    if (tile.column_begin < 0 || tile.column_end < tile.column_begin ||
        tile.column_end > static_cast<int64_t>(records.columns.size())) {
      fail("tile " + std::to_string(t) + "'s columns " +
           range_text(tile.column_begin, tile.column_end) + " lie outside the " +
           std::to_string(records.columns.size()) + " column records");
    }
    in_order = in_order && tile.column_begin == next;
    next = tile.column_end;
  }
  return in_order;
}

// The columns: the records themselves, cut to the real ones, where they are in tile order (no
// copy of what is the plan's largest array), else gathered tile by tile.
void decode_columns(PlanRecords& records, int64_t tiles, Plan& plan) {
  if (columns_in_order(records, tiles)) {
    records.columns.resize(
        static_cast<std::size_t>(tiles > 0 ? records.tiles[tiles - 1].column_end : 0));
    plan.columns = std::move(records.columns);
    return;
  }
  for (int64_t t = 0; t < tiles; ++t) {
    const TileRecord& tile = records.tiles[t];
    plan.columns.insert(plan.columns.end(), records.columns.begin() + tile.column_begin,
                        records.columns.begin() + tile.column_end);
  }
  int64_t offset = 0;
  for (int64_t t = 0; t < tiles; ++t) {
    offset += records.tiles[t].column_end - records.tiles[t].column_begin;
    plan.tile_column_offsets[t + 1] = offset;
  }
}

// The real tiles, head slot by head slot, with their masks and key lists in CSR form.
void decode_tiles(PlanRecords& records, Plan& plan) {
  const int64_t slots = plan.shape.head_slots();
  const int64_t tiles = real_tile_count(records.tiles);
  plan.head_tile_offsets.assign(static_cast<std::size_t>(slots) + 1, 0);
  plan.tile_span_offsets = {0};
  plan.tile_strided_offsets = {0};
  plan.tile_column_offsets = {0};
  int32_t previous_slot = 0;
  for (int64_t t = 0; t < tiles; ++t) {
    const TileRecord& tile = records.tiles[t];
    if (tile.head_slot < previous_slot || tile.head_slot >= slots) {
      fail("tile " + std::to_string(t) + " belongs to head slot " + std::to_string(tile.head_slot) +
           ", expected one in [" + std::to_string(previous_slot) + ", " + std::to_string(slots) +
           ") (tiles are stored head slot by head slot)");
    }
    if (tile.mask < 0 || tile.mask >= static_cast<int32_t>(plan.masks.size())) {
      fail("tile " + std::to_string(t) + " refers to mask " + std::to_string(tile.mask) +
           ", expected one below the " + std::to_string(plan.masks.size()) + " policies");
    }
    previous_slot = tile.head_slot;
    ++plan.head_tile_offsets[static_cast<std::size_t>(tile.head_slot) + 1];
    plan.tiles.push_back({tile.begin, tile.end});
    plan.tile_masks.push_back(tile.mask);
    check_key_range_bounds(records, tile, t);
    const int32_t key_order = decode_tile_key_order(records, tile, t);
    if (records.key_order_slots > 0) plan.tile_key_orders.push_back(key_order);
    decode_key_ranges(records, tile, t,
                      key_order == kKeysInPlace ? 0 : key_order * records.key_order_slots, plan);
    plan.tile_span_offsets.push_back(static_cast<int64_t>(plan.spans.size()));
    plan.tile_strided_offsets.push_back(static_cast<int64_t>(plan.strided_spans.size()));
    plan.tile_column_offsets.push_back(tile.column_end);
  }
  for (int64_t slot = 0; slot < slots; ++slot) {
    plan.head_tile_offsets[slot + 1] += plan.head_tile_offsets[slot];
  }
  // As PlanBuilder keeps it: empty where every tile reads in place.
  if (std::all_of(plan.tile_key_orders.begin(), plan.tile_key_orders.end(),
                  [](int32_t order) { return order == kKeysInPlace; })) {
    plan.tile_key_orders.clear();
  }
  decode_columns(records, tiles, plan);
}

void decode_tokens(const PlanRecords& records, Plan& plan) {
  if (records.token_info.empty()) return;
  if (static_cast<int64_t>(records.token_info.size()) != plan.shape.kv_len) {
    fail("token info: expected " + std::to_string(plan.shape.kv_len) + " tokens (kv_len), got " +
         std::to_string(records.token_info.size()));
  }
  plan.token_modality.reserve(records.token_info.size());
  plan.token_media.reserve(records.token_info.size());
  for (const int32_t token : records.token_info) {
    plan.token_modality.push_back(static_cast<uint8_t>(mask_rule::token_modality(token)));
    plan.token_media.push_back(mask_rule::token_media(token));
  }
}

}  // namespace

RecordExtents real_record_extents(const std::vector<TileRecord>& tiles) {
  RecordExtents extents;
  for (const TileRecord& tile : tiles) {
    if (tile.begin >= tile.end) break;  // the empty tiles of a capacity section
    extents.key_ranges = std::max(extents.key_ranges, tile.span_end);
    extents.columns = std::max(extents.columns, tile.column_end);
  }
  return extents;
}

Plan decode_plan_records(PlanRecords records, std::vector<MaskPolicy> masks) {
  Plan plan;
  plan.shape = records.shape;
  plan.masks = std::move(masks);
  decode_runs(records, plan);
  decode_key_orders(records, plan);
  decode_tiles(records, plan);
  decode_tokens(records, plan);
  return plan;
}

}  // namespace mmsparse::cuda
