#pragma once
// Checks and error helpers that plan validation (plan_validation.cpp) shares with the plan's
// accessors, the builder and the coverage functions (plan.cpp), so that every plan error reads the
// same way. Ranges in messages are layout_internal.h's range_string, as in the layout's errors.

#include <cstdint>
#include <string>
#include <vector>

#include "core/layout_internal.h"
#include "mmsparse/plan.h"

namespace mmsparse::detail {

// Throws kInvalidArgument "plan.<field>: <message>".
[[noreturn]] void fail(const std::string& field, const std::string& message);

// The shape's fields in range (positive sizes, lengths that fit the int32 records).
void check_shape(const PlanShape& shape);

// head_slot inside [0, head_slots()) and a head_run_offsets array of the right size to index.
void check_head_slot(const Plan& plan, int64_t head_slot);

// "tile <local_tile> of head slot <head_slot>", the name plan errors give a tile.
std::string tile_name(int64_t local_tile, int64_t head_slot);

// A tile's name for an error message, formed only when a check fails (validation visits every
// tile; forming the names up front cost a quarter of a large plan's build).
struct TileName {
  int64_t local_tile;
  int64_t head_slot;
  std::string operator()() const { return tile_name(local_tile, head_slot); }
};

// Sorts a tile's spans (scratch) by begin and throws naming the tile, and the key order it reads
// unless kKeysInPlace, where two of them share a key.
void check_spans_disjoint(std::vector<KeySpan>& spans, const TileName& name, int32_t key_order);

// Per key order, what lets a span be checked in O(1): for each slot, the first slot of the run of
// consecutive original positions and of the strictly increasing run that hold it. A padding slot
// holds no run: its entries are slot + 1, past any span that covers it.
struct KeyOrderRuns {
  std::vector<int32_t> consecutive_start;
  std::vector<int32_t> increasing_start;
  std::vector<int32_t> key_start;  // first slot of the slot's run of non-padding slots
};

// Key orders' entries (kPaddingKey or keys in [0, kv_len), none twice) and tile_key_orders (empty,
// or per tile kKeysInPlace or an index into key_orders); returns each order's runs.
std::vector<KeyOrderRuns> check_key_orders(const Plan& plan);

// Tile t of a head slot, which reads through a key order: spans only, inside the order, disjoint,
// over no padding; a plain causal mask, whose spans strictly increase in original positions with
// the keys before their last consecutive run visible to every row, or the unmasked policy, whose
// positions nothing reads (plan.h). `query_order` is the
// head slot's (Plan::query_order); `spans` is scratch.
void check_key_ordered_tile(const Plan& plan, int64_t slot, int64_t t,
                            const std::vector<KeyOrderRuns>& order_runs,
                            const std::vector<int64_t>& query_order, std::vector<KeySpan>& spans);

}  // namespace mmsparse::detail
