// Plan validation: the structural checks (shape, CSR offsets, masks, token arrays, query runs,
// tiles, keys) that every plan passes before a backend reads it, and the strided-span arithmetic
// they need.

#include <algorithm>
#include <limits>
#include <numeric>
#include <span>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "core/plan_checks.h"
#include "mmsparse/plan.h"
#include "mmsparse/status.h"

namespace mmsparse {

namespace detail {

[[noreturn]] void fail(const std::string& field, const std::string& message) {
  throw Error(ErrorCode::kInvalidArgument, "plan." + field + ": " + message);
}

void check_shape(const PlanShape& shape) {
  auto require = [](const char* field, int64_t value, int64_t minimum) {
    if (value < minimum) {
      throw_invalid_argument(std::string("plan.shape.") + field, ">= " + std::to_string(minimum),
                             std::to_string(value));
    }
  };
  require("batch", shape.batch, 1);
  require("heads", shape.heads, 1);
  require("q_len", shape.q_len, 0);
  require("kv_len", shape.kv_len, 0);
  require("tile_rows", shape.tile_rows, 1);
  // Spans and columns store keys as int32 (the width kernels index with).
  if (shape.kv_len > std::numeric_limits<int32_t>::max()) {
    throw_invalid_argument("plan.shape.kv_len", "<= 2^31 - 1 (keys are int32)",
                           std::to_string(shape.kv_len));
  }
}

void check_head_slot(const Plan& plan, int64_t head_slot) {
  if (head_slot < 0 || head_slot >= plan.head_slots()) {
    throw_invalid_argument("head_slot", "a value in [0, " + std::to_string(plan.head_slots()) + ")",
                           std::to_string(head_slot));
  }
  if (static_cast<int64_t>(plan.head_run_offsets.size()) != plan.head_slots() + 1) {
    throw_invalid_argument("plan.head_run_offsets",
                           std::to_string(plan.head_slots() + 1) + " entries",
                           std::to_string(plan.head_run_offsets.size()));
  }
}

}  // namespace detail

using detail::check_shape;
using detail::fail;
using detail::range_string;

namespace detail {

std::string tile_name(int64_t local_tile, int64_t head_slot) {
  return "tile " + std::to_string(local_tile) + " of head slot " + std::to_string(head_slot);
}

void check_spans_disjoint(std::vector<KeySpan>& spans, const TileName& name, int32_t key_order) {
  std::sort(spans.begin(), spans.end(),
            [](const KeySpan& a, const KeySpan& b) { return a.begin < b.begin; });
  for (size_t i = 1; i < spans.size(); ++i) {
    if (spans[i].begin < spans[i - 1].end) {
      fail("spans", name() + " has overlapping spans " +
                        range_string(spans[i - 1].begin, spans[i - 1].end) + " and " +
                        range_string(spans[i].begin, spans[i].end) +
                        (key_order == kKeysInPlace
                             ? std::string()
                             : " of key order " + std::to_string(key_order)));
    }
  }
}

}  // namespace detail

using detail::check_spans_disjoint;
using detail::tile_name;
using detail::TileName;

namespace {

// CSR offsets: `expected_size` entries, starting at 0, non-decreasing, ending at `total`.
void check_offsets(const std::string& field, const std::vector<int64_t>& offsets,
                   int64_t expected_size, int64_t total, const std::string& target) {
  if (static_cast<int64_t>(offsets.size()) != expected_size) {
    throw_invalid_argument("plan." + field, std::to_string(expected_size) + " entries",
                           std::to_string(offsets.size()));
  }
  if (offsets.front() != 0) {
    fail(field, "entry 0 is " + std::to_string(offsets.front()) + ", expected 0");
  }
  for (size_t i = 1; i < offsets.size(); ++i) {
    if (offsets[i] < offsets[i - 1]) {
      fail(field, "not monotone: entry " + std::to_string(i) + " (" + std::to_string(offsets[i]) +
                      ") < entry " + std::to_string(i - 1) + " (" + std::to_string(offsets[i - 1]) +
                      ")");
    }
  }
  if (offsets.back() != total) {
    fail(field, "last entry is " + std::to_string(offsets.back()) + ", expected " +
                    std::to_string(total) + " (the size of plan." + target + ")");
  }
}

void check_masks(const Plan& plan) {
  for (size_t m = 0; m < plan.masks.size(); ++m) {
    const MaskPolicy& mask = plan.masks[m];
    const std::string name = "mask " + std::to_string(m);
    if (mask.window < 0 || mask.window_sink < 0) {
      fail("masks", name + " has window " + std::to_string(mask.window) + " and window_sink " +
                        std::to_string(mask.window_sink) + ", expected both >= 0");
    }
    if (mask.min_distance < 0) {
      fail("masks",
           name + " has min_distance " + std::to_string(mask.min_distance) + ", expected >= 0");
    }
    if (mask.period < 0 || (mask.period == 0 && mask.band != 0) ||
        (mask.period > 0 && (mask.band <= 0 || mask.band > mask.period))) {
      fail("masks", name + " has period " + std::to_string(mask.period) + " and band " +
                        std::to_string(mask.band) +
                        ", expected period > 0 with 0 < band <= period, or both 0");
    }
    if (mask.period > 0 && !mask.causal) {
      fail("masks", name + " has a periodic band (period " + std::to_string(mask.period) +
                        ") without causal, expected causal = true (the band is defined on "
                        "non-negative distances)");
    }
    if (mask.media_bidirectional && (mask.min_distance > 0 || mask.period > 0)) {
      fail("masks", name + " has media_bidirectional with min_distance " +
                        std::to_string(mask.min_distance) + " and period " +
                        std::to_string(mask.period) +
                        ", expected both 0 (lifted pairs would cross the passes' boundaries)");
    }
  }
}

void check_token_arrays(const Plan& plan) {
  const auto needing = std::find_if(plan.masks.begin(), plan.masks.end(),
                                    [](const MaskPolicy& m) { return m.needs_token_arrays(); });
  const bool needed = needing != plan.masks.end();
  const std::string why = needed
                              ? " (kv_len; mask " + std::to_string(needing - plan.masks.begin()) +
                                    " needs token arrays)"
                              : " (kv_len) or none";
  const int64_t kv_len = plan.shape.kv_len;
  const auto modality_size = static_cast<int64_t>(plan.token_modality.size());
  const auto media_size = static_cast<int64_t>(plan.token_media.size());
  if ((needed || modality_size != 0) && modality_size != kv_len) {
    throw_invalid_argument("plan.token_modality", std::to_string(kv_len) + " entries" + why,
                           std::to_string(modality_size));
  }
  if ((needed || media_size != 0) && media_size != kv_len) {
    throw_invalid_argument("plan.token_media", std::to_string(kv_len) + " entries" + why,
                           std::to_string(media_size));
  }
  for (int64_t k = 0; k < modality_size; ++k) {
    if (plan.token_modality[k] >= kNumModalities) {
      fail("token_modality", "entry " + std::to_string(k) + " is " +
                                 std::to_string(plan.token_modality[k]) + ", expected < " +
                                 std::to_string(kNumModalities));
    }
  }
  for (int64_t k = 0; k < media_size; ++k) {
    if (plan.token_media[k] < -1) {
      fail("token_media", "entry " + std::to_string(k) + " is " +
                              std::to_string(plan.token_media[k]) + ", expected >= -1");
    }
  }
}

// The runs of a head slot must visit every query position exactly once.
void check_runs(const Plan& plan, int64_t slot, std::vector<uint8_t>& seen) {
  const int64_t q_len = plan.shape.q_len;
  const int64_t first = plan.head_run_offsets[slot];
  const int64_t last = plan.head_run_offsets[slot + 1];
  if (first == last) return;  // identity order
  seen.assign(q_len, 0);
  int64_t visited = 0;
  for (int64_t r = first; r < last; ++r) {
    const QueryRun& run = plan.runs[r];
    // Formed only for a failure: validation visits every run.
    const auto name = [&] {
      return "run " + std::to_string(r - first) + " of head slot " + std::to_string(slot) +
             " (start " + std::to_string(run.start) + ", count " + std::to_string(run.count) +
             ", step " + std::to_string(run.step) + ")";
    };
    if (run.count < 0 || run.step <= 0) fail("runs", name() + " needs count >= 0 and step > 0");
    if (run.count == 0) continue;
    if (run.start < 0 || run.start + (run.count - 1) * run.step >= q_len) {
      fail("runs", name() + " leaves [0, q_len = " + std::to_string(q_len) + ")");
    }
    for (int64_t i = 0; i < run.count; ++i) {
      const int64_t position = run.start + i * run.step;
      if (seen[position]) {
        fail("runs", "head slot " + std::to_string(slot) + " visits query " +
                         std::to_string(position) + " twice (again in " + name() + ")");
      }
      seen[position] = 1;
    }
    visited += run.count;
  }
  if (visited != q_len) {
    fail("runs", "head slot " + std::to_string(slot) + " visits " + std::to_string(visited) +
                     " queries, expected q_len = " + std::to_string(q_len));
  }
}

// Tiles inside the order, at most tile_rows long, not overlapping each other, with a valid mask.
void check_tiles(const Plan& plan, int64_t slot) {
  const int64_t first = plan.head_tile_offsets[slot];
  const int64_t last = plan.head_tile_offsets[slot + 1];
  std::vector<int64_t> by_begin;
  for (int64_t t = first; t < last; ++t) {
    const QueryTile& tile = plan.tiles[t];
    const TileName name{t - first, slot};
    if (tile.begin < 0 || tile.end > plan.shape.q_len || tile.begin >= tile.end) {
      fail("tiles", name() + " is " + range_string(tile.begin, tile.end) +
                        ", expected a non-empty range inside [0, q_len = " +
                        std::to_string(plan.shape.q_len) + ")");
    }
    if (tile.end - tile.begin > plan.shape.tile_rows) {
      fail("tiles", name() + " has " + std::to_string(tile.end - tile.begin) +
                        " rows, more than tile_rows = " + std::to_string(plan.shape.tile_rows));
    }
    const int32_t mask = plan.tile_masks[t];
    if (mask < 0 || mask >= static_cast<int64_t>(plan.masks.size())) {
      fail("tile_masks", name() + " refers to mask " + std::to_string(mask) + ", expected < " +
                             std::to_string(plan.masks.size()) + " (the size of plan.masks)");
    }
    by_begin.push_back(t);
  }
  // A query in two tiles would have its output written twice.
  std::sort(by_begin.begin(), by_begin.end(),
            [&](int64_t a, int64_t b) { return plan.tiles[a].begin < plan.tiles[b].begin; });
  for (size_t i = 1; i < by_begin.size(); ++i) {
    const QueryTile& previous = plan.tiles[by_begin[i - 1]];
    const QueryTile& current = plan.tiles[by_begin[i]];
    if (current.begin < previous.end) {
      fail("tiles", tile_name(by_begin[i] - first, slot) + " " +
                        range_string(current.begin, current.end) + " overlaps " +
                        tile_name(by_begin[i - 1] - first, slot) + " " +
                        range_string(previous.begin, previous.end));
    }
  }
}

std::string strided_string(const StridedSpan& strided) {
  return range_string(strided.begin, strided.end) + " step " + std::to_string(strided.step);
}

// The first key >= lo of the lattice x ≡ residue (mod step).
int64_t first_on_lattice(int64_t lo, int64_t residue, int64_t step) {
  return lo + ((residue - lo) % step + step) % step;
}

// Strided spans well formed and inside [0, kv_len), disjoint from each other and from the tile's
// spans (sorted by begin). Leaves `strided` in lattice order: by step, residue, begin.
void check_tile_strided_spans(const Plan& plan, const TileName& name,
                              const std::vector<KeySpan>& spans,
                              std::vector<StridedSpan>& strided) {
  const int64_t kv_len = plan.shape.kv_len;
  for (const StridedSpan& lattice : strided) {
    if (lattice.step < 2) {
      fail("strided_spans", name() + " has strided span " + strided_string(lattice) +
                                ", expected step >= 2 (a step of 1 is a span)");
    }
    if (lattice.begin < 0 || lattice.end > kv_len || lattice.begin >= lattice.end) {
      fail("strided_spans",
           name() + " has strided span " + strided_string(lattice) +
               ", expected a non-empty range inside [0, kv_len = " + std::to_string(kv_len) + ")");
    }
    if ((static_cast<int64_t>(lattice.end) - 1 - lattice.begin) % lattice.step != 0) {
      fail("strided_spans", name() + " has strided span " + strided_string(lattice) +
                                ", expected end = its last key + 1");
    }
    // The spans that can hold one of its keys: those starting before its end.
    auto span = std::upper_bound(spans.begin(), spans.end(), lattice.begin,
                                 [](int32_t key, const KeySpan& s) { return key < s.begin; });
    if (span != spans.begin()) --span;
    for (; span != spans.end() && span->begin < lattice.end; ++span) {
      const int64_t lo = std::max(span->begin, lattice.begin);
      const int64_t hi = std::min(span->end, lattice.end);
      if (lo < hi && first_on_lattice(lo, lattice.begin, lattice.step) < hi) {
        fail("strided_spans", name() + " has strided span " + strided_string(lattice) +
                                  " sharing keys with span " +
                                  range_string(span->begin, span->end));
      }
    }
  }
  const auto report_shared = [&](const StridedSpan& a, const StridedSpan& b) {
    const bool a_first = std::tuple(a.begin, a.step) <= std::tuple(b.begin, b.step);
    fail("strided_spans", name() + " has strided spans " + strided_string(a_first ? a : b) +
                              " and " + strided_string(a_first ? b : a) + " sharing keys");
  };
  // Spans of one step share keys only within one residue, where they are ranges of one lattice:
  // sorted by (step, residue, begin), the first overlap on a lattice is between neighbours, so each
  // span is checked against the one before it. A tile of lattices holds dozens of them; pairwise
  // checks made validation quadratic in them.
  const auto lattice_order = [](const StridedSpan& s) {
    return std::tuple(s.step, s.begin % s.step, s.begin);  // begins are >= 0 (checked above)
  };
  const auto before = [&](const StridedSpan& a, const StridedSpan& b) {
    return lattice_order(a) < lattice_order(b);
  };
  // Builders mostly write them so already (a grid tile's residues in order): check, sort if not.
  if (!std::is_sorted(strided.begin(), strided.end(), before)) {
    std::sort(strided.begin(), strided.end(), before);
  }
  const auto same_lattice = [](const StridedSpan& a, const StridedSpan& b) {
    return a.step == b.step && a.begin % a.step == b.begin % b.step;
  };
  for (size_t i = 1; i < strided.size(); ++i) {
    if (same_lattice(strided[i - 1], strided[i]) && strided[i].begin < strided[i - 1].end) {
      report_shared(strided[i - 1], strided[i]);
    }
  }
  // Spans of different steps: pairwise, by the Chinese remainder theorem
  // (strided_spans_share_keys).
  const bool one_step = std::all_of(strided.begin(), strided.end(), [&](const StridedSpan& s) {
    return s.step == strided.front().step;
  });
  if (one_step) return;
  for (size_t i = 0; i < strided.size(); ++i) {
    for (size_t j = i + 1; j < strided.size(); ++j) {
      if (strided[i].step != strided[j].step && strided_spans_share_keys(strided[i], strided[j])) {
        report_shared(strided[i], strided[j]);
      }
    }
  }
}

// Spans disjoint and inside [0, kv_len); strided spans likewise and disjoint from the spans;
// columns unique, inside [0, kv_len), outside every span and strided span.
void check_tile_keys(const Plan& plan, int64_t slot, int64_t t, std::vector<KeySpan>& spans,
                     std::vector<StridedSpan>& strided, std::vector<int32_t>& columns) {
  const TileName name{t - plan.head_tile_offsets[slot], slot};
  const int64_t kv_len = plan.shape.kv_len;
  spans.assign(plan.spans.begin() + plan.tile_span_offsets[t],
               plan.spans.begin() + plan.tile_span_offsets[t + 1]);
  for (const KeySpan& span : spans) {
    if (span.begin < 0 || span.end > kv_len || span.begin >= span.end) {
      fail("spans",
           name() + " has span " + range_string(span.begin, span.end) +
               ", expected a non-empty range inside [0, kv_len = " + std::to_string(kv_len) + ")");
    }
  }
  check_spans_disjoint(spans, name, kKeysInPlace);
  strided.assign(plan.strided_spans.begin() + plan.tile_strided_offsets[t],
                 plan.strided_spans.begin() + plan.tile_strided_offsets[t + 1]);
  check_tile_strided_spans(plan, name, spans, strided);
  columns.assign(plan.columns.begin() + plan.tile_column_offsets[t],
                 plan.columns.begin() + plan.tile_column_offsets[t + 1]);
  for (int32_t column : columns) {
    if (column < 0 || column >= kv_len) {
      fail("columns", name() + " has column " + std::to_string(column) +
                          " outside [0, kv_len = " + std::to_string(kv_len) + ")");
    }
    // The last span starting at or before the column is the only one that can contain it.
    auto after = std::upper_bound(spans.begin(), spans.end(), column,
                                  [](int32_t key, const KeySpan& s) { return key < s.begin; });
    if (after != spans.begin() && std::prev(after)->end > column) {
      fail("columns", name() + " has column " + std::to_string(column) + " inside span " +
                          range_string(std::prev(after)->begin, std::prev(after)->end));
    }
    // Per step (tiles hold one or a few), the only strided span that can hold the column: the
    // last on the column's residue starting at or before it (`strided` is in lattice order).
    for (auto step_begin = strided.begin(); step_begin != strided.end();) {
      const int32_t step = step_begin->step;
      const auto step_end = std::partition_point(
          step_begin, strided.end(), [&](const StridedSpan& s) { return s.step == step; });
      const auto key = std::tuple(column % step, column);
      const auto after =
          std::upper_bound(step_begin, step_end, key,
                           [&](const std::tuple<int32_t, int32_t>& k, const StridedSpan& s) {
                             return k < std::tuple(s.begin % step, s.begin);
                           });
      if (after != step_begin) {
        const StridedSpan& lattice = *std::prev(after);
        if (lattice.begin % step == column % step && column < lattice.end) {
          fail("columns", name() + " has column " + std::to_string(column) +
                              " inside strided span " + strided_string(lattice));
        }
      }
      step_begin = step_end;
    }
  }
  std::sort(columns.begin(), columns.end());
  const auto duplicate = std::adjacent_find(columns.begin(), columns.end());
  if (duplicate != columns.end()) {
    fail("columns", name() + " has duplicate column " + std::to_string(*duplicate));
  }
}

}  // namespace

// x ≡ a.begin (mod a.step), x ≡ b.begin (mod b.step) in
// the overlap of their ranges, solved by the Chinese remainder theorem over gcd(a.step, b.step).
bool strided_spans_share_keys(const StridedSpan& a, const StridedSpan& b) {
  const int64_t lo = std::max(a.begin, b.begin);
  const int64_t hi = std::min(a.end, b.end);
  if (lo >= hi) return false;
  // One step: one lattice (then lo, a begin, is a shared key) or two that never meet.
  if (a.step == b.step) return (static_cast<int64_t>(b.begin) - a.begin) % a.step == 0;
  const int64_t g = std::gcd<int64_t>(a.step, b.step);
  const int64_t difference = static_cast<int64_t>(b.begin) - a.begin;
  if (difference % g != 0) return false;
  // a.begin + a.step·k ≡ b.begin (mod b.step)  <=>  (a.step/g)·k ≡ difference/g (mod b.step/g).
  const int64_t modulus = b.step / g;
  int64_t k = 0;
  if (modulus > 1) {
    // The inverse of a.step/g modulo `modulus` by the extended Euclidean algorithm.
    int64_t r0 = (a.step / g) % modulus, r1 = modulus, s0 = 1, s1 = 0;
    while (r1 != 0) {
      const int64_t q = r0 / r1;
      r0 = std::exchange(r1, r0 - q * r1);
      s0 = std::exchange(s1, s0 - q * s1);
    }
    const int64_t target = ((difference / g) % modulus + modulus) % modulus;
    k = ((s0 % modulus + modulus) % modulus) * target % modulus;
  }
  const int64_t common_step = a.step / g * b.step;  // lcm
  const int64_t common_residue = (a.begin + a.step * k) % common_step;
  return first_on_lattice(lo, common_residue, common_step) < hi;
}

void Plan::validate() const {
  check_shape(shape);
  check_masks(*this);
  const int64_t slots = head_slots();
  const auto tile_count = static_cast<int64_t>(tiles.size());
  check_offsets("head_run_offsets", head_run_offsets, slots + 1, runs.size(), "runs");
  check_offsets("head_tile_offsets", head_tile_offsets, slots + 1, tile_count, "tiles");
  if (static_cast<int64_t>(tile_masks.size()) != tile_count) {
    throw_invalid_argument("plan.tile_masks",
                           std::to_string(tile_count) + " entries (one per tile)",
                           std::to_string(tile_masks.size()));
  }
  check_offsets("tile_span_offsets", tile_span_offsets, tile_count + 1, spans.size(), "spans");
  check_offsets("tile_strided_offsets", tile_strided_offsets, tile_count + 1, strided_spans.size(),
                "strided_spans");
  check_offsets("tile_column_offsets", tile_column_offsets, tile_count + 1, columns.size(),
                "columns");
  check_token_arrays(*this);
  const std::vector<detail::KeyOrderRuns> order_runs = detail::check_key_orders(*this);

  std::vector<uint8_t> seen;
  std::vector<KeySpan> span_buffer;
  std::vector<StridedSpan> strided_buffer;
  std::vector<int32_t> column_buffer;
  std::vector<int64_t> slot_query_order;
  bool have_query_order = false;  // slot_query_order holds the current slot's order
  for (int64_t slot = 0; slot < slots; ++slot) {
    // Head slots of one pattern share their query order: checked (O(q_len)) and materialised
    // once for a run of slots with equal runs.
    const auto slot_runs = [&](int64_t s) {
      return std::span(runs).subspan(static_cast<std::size_t>(head_run_offsets[s]),
                                     static_cast<std::size_t>(head_run_offsets[s + 1] -
                                                              head_run_offsets[s]));
    };
    if (slot == 0 || !std::ranges::equal(slot_runs(slot), slot_runs(slot - 1))) {
      check_runs(*this, slot, seen);
      have_query_order = false;
    }
    check_tiles(*this, slot);
    for (int64_t t = head_tile_offsets[slot]; t < head_tile_offsets[slot + 1]; ++t) {
      if (tile_key_order(t) == kKeysInPlace) {
        check_tile_keys(*this, slot, t, span_buffer, strided_buffer, column_buffer);
        continue;
      }
      if (!have_query_order) slot_query_order = query_order(slot);
      have_query_order = true;
      detail::check_key_ordered_tile(*this, slot, t, order_runs, slot_query_order, span_buffer);
    }
  }
  for (size_t p = 0; p < extra_passes.size(); ++p) {
    const Plan& pass = extra_passes[p];
    const std::string name = "pass " + std::to_string(p + 1);
    if (!(pass.shape == shape)) {
      fail("extra_passes", name + " has shape " + pass.summary() +
                               ", expected the shape of pass 0 (" + summary() + ")");
    }
    if (!pass.extra_passes.empty()) {
      fail("extra_passes", name + " has " + std::to_string(pass.extra_passes.size()) +
                               " passes of its own, expected none (passes are one level)");
    }
    try {
      pass.validate();
    } catch (const Error& error) {
      throw Error(error.code(), "plan.extra_passes: " + name + ": " + error.what());
    }
  }
}

}  // namespace mmsparse
