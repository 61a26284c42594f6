// The plan's accessors, PlanBuilder and the coverage functions (masks, pair counts, disjoint
// passes). Validation is plan_validation.cpp.

#include "mmsparse/plan.h"

#include <algorithm>
#include <numeric>
#include <sstream>
#include <utility>

#include "core/parallel.h"
#include "core/plan_checks.h"
#include "core/plan_coverage.h"
#include "mmsparse/status.h"

namespace mmsparse {

using detail::check_head_slot;
using detail::check_shape;
using detail::fail;
using detail::range_string;

const Plan& Plan::pass(int64_t p) const {
  if (p < 0 || p >= num_passes()) {
    throw_invalid_argument("pass", "a value in [0, " + std::to_string(num_passes()) + ")",
                           std::to_string(p));
  }
  return p == 0 ? *this : extra_passes[static_cast<size_t>(p - 1)];
}

int64_t Plan::query_position(int64_t head_slot, int64_t order_index) const {
  check_head_slot(*this, head_slot);
  if (order_index < 0 || order_index >= shape.q_len) {
    throw_invalid_argument("order_index",
                           "a value in [0, q_len = " + std::to_string(shape.q_len) + ")",
                           std::to_string(order_index));
  }
  const int64_t first = head_run_offsets[head_slot];
  const int64_t last = head_run_offsets[head_slot + 1];
  if (first == last) return order_index;
  int64_t remaining = order_index;
  for (int64_t r = first; r < last; ++r) {
    if (remaining < runs[r].count) return runs[r].start + remaining * runs[r].step;
    remaining -= runs[r].count;
  }
  fail("runs", "head slot " + std::to_string(head_slot) +
                   " has fewer than q_len = " + std::to_string(shape.q_len) + " positions");
}

std::vector<int64_t> Plan::query_order(int64_t head_slot) const {
  check_head_slot(*this, head_slot);
  std::vector<int64_t> order;
  order.reserve(shape.q_len);
  const int64_t first = head_run_offsets[head_slot];
  const int64_t last = head_run_offsets[head_slot + 1];
  if (first == last) {
    order.resize(shape.q_len);
    std::iota(order.begin(), order.end(), int64_t{0});
    return order;
  }
  for (int64_t r = first; r < last; ++r) {
    for (int64_t i = 0; i < runs[r].count; ++i) order.push_back(runs[r].start + i * runs[r].step);
  }
  if (static_cast<int64_t>(order.size()) != shape.q_len) {
    fail("runs", "head slot " + std::to_string(head_slot) + " has " + std::to_string(order.size()) +
                     " positions, expected q_len = " + std::to_string(shape.q_len));
  }
  return order;
}

void Plan::attach_layout(const ModalityLayout& layout) {
  if (layout.length() != shape.kv_len) {
    throw_invalid_argument("layout",
                           "length " + std::to_string(shape.kv_len) + " (the plan's kv_len)",
                           std::to_string(layout.length()));
  }
  token_modality = layout.token_types();
  token_media = layout.token_media();
  for (Plan& pass : extra_passes) pass.attach_layout(layout);
}

std::string Plan::summary() const {
  std::ostringstream out;
  out << "batch=" << shape.batch << " heads=" << shape.heads << " q_len=" << shape.q_len
      << " kv_len=" << shape.kv_len << " tile_rows=" << shape.tile_rows << " tiles=" << tiles.size()
      << " spans=" << spans.size() << " strided_spans=" << strided_spans.size()
      << " columns=" << columns.size() << " runs=" << runs.size() << " masks=" << masks.size();
  if (!key_orders.empty()) {
    const auto ordered = std::count_if(tile_key_orders.begin(), tile_key_orders.end(),
                                       [](int32_t order) { return order != kKeysInPlace; });
    out << " key_orders=" << key_orders.size() << " key_ordered_tiles=" << ordered;
  }
  if (!extra_passes.empty()) out << " passes=" << num_passes();
  return out.str();
}

bool Plan::has_key_orders() const {
  const auto ordered = [](const Plan& pass) {
    return std::any_of(pass.tile_key_orders.begin(), pass.tile_key_orders.end(),
                       [](int32_t order) { return order != kKeysInPlace; });
  };
  return ordered(*this) || std::any_of(extra_passes.begin(), extra_passes.end(), ordered);
}

// --- PlanBuilder ---------------------------------------------------------------------------------

PlanBuilder::PlanBuilder(PlanShape shape) {
  check_shape(shape);
  plan_.shape = shape;
  plan_.head_run_offsets = {0};
  plan_.head_tile_offsets = {0};
  plan_.tile_span_offsets = {0};
  plan_.tile_strided_offsets = {0};
  plan_.tile_column_offsets = {0};
}

void PlanBuilder::begin_head(const std::vector<QueryRun>& order) {
  const auto begun = static_cast<int64_t>(plan_.head_run_offsets.size()) - 1;
  if (begun == plan_.head_slots()) {
    throw_invalid_argument(
        "PlanBuilder::begin_head",
        "at most " + std::to_string(plan_.head_slots()) + " head slots (batch × heads)",
        "one more");
  }
  plan_.runs.insert(plan_.runs.end(), order.begin(), order.end());
  plan_.head_run_offsets.push_back(static_cast<int64_t>(plan_.runs.size()));
  plan_.head_tile_offsets.push_back(static_cast<int64_t>(plan_.tiles.size()));
  in_head_ = true;
}

int32_t PlanBuilder::add_key_order(std::vector<int32_t> order) {
  auto found = std::find(plan_.key_orders.begin(), plan_.key_orders.end(), order);
  if (found == plan_.key_orders.end()) {
    found = plan_.key_orders.insert(plan_.key_orders.end(), std::move(order));
  }
  return static_cast<int32_t>(found - plan_.key_orders.begin());
}

void PlanBuilder::begin_tile(int64_t begin, int64_t end, const MaskPolicy& mask,
                             int32_t key_order) {
  if (!in_head_) {
    throw_invalid_argument("PlanBuilder::begin_tile", "a head begun with begin_head()", "none");
  }
  if (key_order != kKeysInPlace &&
      (key_order < 0 || key_order >= static_cast<int64_t>(plan_.key_orders.size()))) {
    throw_invalid_argument("PlanBuilder::begin_tile key_order",
                           "kKeysInPlace or an index from add_key_order (< " +
                               std::to_string(plan_.key_orders.size()) + ")",
                           std::to_string(key_order));
  }
  auto found = std::find(plan_.masks.begin(), plan_.masks.end(), mask);
  if (found == plan_.masks.end()) found = plan_.masks.insert(plan_.masks.end(), mask);
  // Plans without key-ordered tiles keep tile_key_orders empty; the first such tile fills it.
  if (key_order != kKeysInPlace || !plan_.tile_key_orders.empty()) {
    plan_.tile_key_orders.resize(plan_.tiles.size(), kKeysInPlace);
    plan_.tile_key_orders.push_back(key_order);
  }
  plan_.tiles.push_back({begin, end});
  plan_.tile_masks.push_back(static_cast<int32_t>(found - plan_.masks.begin()));
  plan_.tile_span_offsets.push_back(static_cast<int64_t>(plan_.spans.size()));
  plan_.tile_strided_offsets.push_back(static_cast<int64_t>(plan_.strided_spans.size()));
  plan_.tile_column_offsets.push_back(static_cast<int64_t>(plan_.columns.size()));
  plan_.head_tile_offsets.back() = static_cast<int64_t>(plan_.tiles.size());
}

void PlanBuilder::require_tile(const char* caller) const {
  const int64_t head_first_tile = plan_.head_tile_offsets[plan_.head_tile_offsets.size() - 2];
  if (!in_head_ || static_cast<int64_t>(plan_.tiles.size()) == head_first_tile) {
    throw_invalid_argument(caller, "a tile begun with begin_tile()", "none");
  }
}

void PlanBuilder::add_span(int64_t begin, int64_t end) {
  if (begin >= end) return;
  require_tile("PlanBuilder::add_span");
  const int32_t order = plan_.tile_key_order(plan_.num_tiles() - 1);
  const int64_t slots = order == kKeysInPlace
                            ? plan_.shape.kv_len
                            : static_cast<int64_t>(plan_.key_orders[order].size());
  if (begin < 0 || end > slots) {
    throw_invalid_argument("PlanBuilder::add_span",
                           order == kKeysInPlace
                               ? "a range inside [0, kv_len = " + std::to_string(slots) + ")"
                               : "a range inside the slots [0, " + std::to_string(slots) +
                                     ") of key order " + std::to_string(order),
                           range_string(begin, end));
  }
  const int64_t tile_first_span = plan_.tile_span_offsets[plan_.tile_span_offsets.size() - 2];
  // A key-ordered tile's touching spans stay apart: each has its own shift (plan.h), and a caller
  // splits a range where one shift would not do.
  if (order == kKeysInPlace && static_cast<int64_t>(plan_.spans.size()) > tile_first_span &&
      plan_.spans.back().end == begin) {
    plan_.spans.back().end = static_cast<int32_t>(end);
  } else {
    plan_.spans.push_back({static_cast<int32_t>(begin), static_cast<int32_t>(end)});
  }
  plan_.tile_span_offsets.back() = static_cast<int64_t>(plan_.spans.size());
}

void PlanBuilder::add_strided_span(int64_t begin, int64_t end, int64_t step) {
  if (step < 1) {
    throw_invalid_argument("PlanBuilder::add_strided_span step", ">= 1", std::to_string(step));
  }
  if (begin >= end) return;
  if (step == 1) {
    add_span(begin, end);
    return;
  }
  const int64_t last = begin + (end - 1 - begin) / step * step;
  if (last == begin) {
    add_column(begin);
    return;
  }
  require_tile("PlanBuilder::add_strided_span");
  if (begin < 0 || last >= plan_.shape.kv_len) {
    throw_invalid_argument("PlanBuilder::add_strided_span",
                           "keys inside [0, kv_len = " + std::to_string(plan_.shape.kv_len) + ")",
                           range_string(begin, end) + " step " + std::to_string(step) +
                               " (last key " + std::to_string(last) + ")");
  }
  // Two keys below kv_len <= 2^31 - 1 (check_shape) keep the step inside int32 too.
  plan_.strided_spans.push_back(
      {static_cast<int32_t>(begin), static_cast<int32_t>(last + 1), static_cast<int32_t>(step)});
  plan_.tile_strided_offsets.back() = static_cast<int64_t>(plan_.strided_spans.size());
}

void PlanBuilder::add_column(int64_t key) {
  require_tile("PlanBuilder::add_column");
  if (key < 0 || key >= plan_.shape.kv_len) {
    throw_invalid_argument("PlanBuilder::add_column",
                           "a key in [0, kv_len = " + std::to_string(plan_.shape.kv_len) + ")",
                           std::to_string(key));
  }
  plan_.columns.push_back(static_cast<int32_t>(key));
  plan_.tile_column_offsets.back() = static_cast<int64_t>(plan_.columns.size());
}

void PlanBuilder::attach_layout(const ModalityLayout& layout) { plan_.attach_layout(layout); }

Plan PlanBuilder::finish() {
  const auto begun = static_cast<int64_t>(plan_.head_run_offsets.size()) - 1;
  if (begun != plan_.head_slots()) {
    throw_invalid_argument("PlanBuilder::finish",
                           std::to_string(plan_.head_slots()) + " head slots (batch × heads)",
                           std::to_string(begun));
  }
  plan_.validate();
  Plan plan = std::move(plan_);
  *this = PlanBuilder(plan.shape);
  return plan;
}

// --- Coverage ------------------------------------------------------------------------------------

std::vector<uint8_t> materialize_mask(const Plan& plan, int64_t head_slot) {
  plan.validate();
  check_head_slot(plan, head_slot);
  const int64_t kv_len = plan.shape.kv_len;
  std::vector<uint8_t> mask(static_cast<size_t>(plan.shape.q_len * kv_len), 0);
  // Key by key through the mask rule, as the CPU reference computes: count_plan_pairs, which
  // counts key ranges, is checked against it.
  const detail::RowCoverage coverage(plan, head_slot);
  for (int64_t query = 0; query < plan.shape.q_len; ++query) {
    coverage.for_each_kept_key(query, [&](int64_t key) { mask[query * kv_len + key] = 1; });
  }
  return mask;
}

namespace {

// count_plan_pairs of a head slot of a valid plan.
int64_t count_slot_pairs(const Plan& plan, int64_t head_slot) {
  int64_t pairs = 0;
  for (int64_t p = 0; p < plan.num_passes(); ++p) {
    const Plan& pass = plan.pass(p);
    const std::vector<int64_t> order = pass.query_order(head_slot);
    std::vector<KeySpan> runs;
    for (int64_t t = pass.head_tile_offsets[head_slot]; t < pass.head_tile_offsets[head_slot + 1];
         ++t) {
      if (pass.tile_key_order(t) == kKeysInPlace) {
        for (int64_t i = pass.tiles[t].begin; i < pass.tiles[t].end; ++i) {
          pairs += detail::count_tile_pairs(pass, t, order[i]);
        }
        continue;
      }
      // A key-ordered tile's runs of original positions, found once for all its rows (walking
      // them costs a step per slot).
      runs.clear();
      detail::for_each_key_order_run(pass, t, [&](int64_t begin, int64_t end) {
        runs.push_back({static_cast<int32_t>(begin), static_cast<int32_t>(end)});
      });
      const MaskPolicy& mask = pass.masks[pass.tile_masks[t]];
      for (int64_t i = pass.tiles[t].begin; i < pass.tiles[t].end; ++i) {
        for (const KeySpan& run : runs) {
          detail::for_each_kept_range(pass, mask, order[i], run.begin, run.end,
                                      [&](int64_t begin, int64_t end) { pairs += end - begin; });
        }
      }
    }
  }
  return pairs;
}

}  // namespace

int64_t count_plan_pairs(const Plan& plan, int64_t head_slot) {
  plan.validate();
  check_head_slot(plan, head_slot);
  return count_slot_pairs(plan, head_slot);
}

std::vector<int64_t> count_plan_pairs(const Plan& plan) {
  plan.validate();
  // Head slots count apart, on every core: the grid mask at 128K holds ~7e8 pairs per head, counted
  // key range by key range for each row (seconds per plan on one core).
  std::vector<int64_t> pairs(static_cast<std::size_t>(plan.head_slots()));
  detail::parallel_for(plan.head_slots(), 0, [&](int64_t slot) {
    pairs[static_cast<std::size_t>(slot)] = count_slot_pairs(plan, slot);
  });
  return pairs;
}

void check_passes_disjoint(const Plan& plan) {
  plan.validate();
  struct Range {
    int64_t begin, end, pass;
  };
  std::vector<std::vector<Range>> rows(static_cast<size_t>(plan.shape.q_len));
  for (int64_t slot = 0; slot < plan.head_slots(); ++slot) {
    for (auto& row : rows) row.clear();
    for (int64_t p = 0; p < plan.num_passes(); ++p) {
      detail::for_each_pass_range(plan.pass(p), slot,
                                  [&](int64_t query, int64_t begin, int64_t end) {
                                    rows[query].push_back({begin, end, p});
                                  });
    }
    for (int64_t query = 0; query < plan.shape.q_len; ++query) {
      std::vector<Range>& row = rows[query];
      std::sort(row.begin(), row.end(),
                [](const Range& a, const Range& b) { return a.begin < b.begin; });
      for (size_t i = 1; i < row.size(); ++i) {
        if (row[i].begin < row[i - 1].end) {
          fail("extra_passes", "passes " + std::to_string(row[i - 1].pass) + " and " +
                                   std::to_string(row[i].pass) + " both compute query " +
                                   std::to_string(query) + " and key " +
                                   std::to_string(row[i].begin) + " of head slot " +
                                   std::to_string(slot) + ", expected disjoint passes");
        }
      }
    }
  }
}

void add_pass(Plan& plan, Plan pass) {
  plan.extra_passes.push_back(std::move(pass));
  try {
    plan.validate();
  } catch (const Error&) {
    plan.extra_passes.pop_back();  // the plan stays as it was
    throw;
  }
}

}  // namespace mmsparse
