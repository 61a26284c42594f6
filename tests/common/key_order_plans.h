#pragma once
// Random plans whose tiles read keys through key orders (Plan::key_orders), mixed with in-place
// tiles, for the CPU reference and the engines' tests. The generator records the pairs it means
// each row to compute on its own, from its layouts, without the plan's coverage functions, so a
// test can check materialize_mask, the pair counts and attention against it.
//
// An order's layout imitates what key orders are for: a "gathered" region of scattered runs in
// increasing order (text keys and sink keys read by an image tile), padding, then the remaining
// keys in blocks of consecutive positions in random order, with padding between some blocks.

#include <algorithm>
#include <cstdint>
#include <vector>

#include "common/random.h"
#include "mmsparse/plan.h"

namespace mmsparse::test {

struct KeyOrderPlanOptions {
  int64_t batch = 1;
  int64_t heads = 2;
  int64_t q_len = 100;
  int64_t kv_len = 140;
  int64_t tile_rows = 16;
  int64_t orders = 2;
  double in_place_share = 0.3;       // of the tiles, read in place
  double unmasked_share = 0.0;       // of the key-ordered tiles, unmasked (any keys, any order)
  bool strided_query_orders = true;  // some head slots take a two-phase query order
};

struct KeyOrderPlan {
  Plan plan;
  // [head_slots][q_len * kv_len] row-major, 1 = the pair the generator meant to compute.
  std::vector<std::vector<uint8_t>> expected;
};

// A random layout of [0, kv_len) as described above.
inline std::vector<int32_t> random_key_order(Random& random, int64_t kv_len) {
  std::vector<uint8_t> gathered(static_cast<std::size_t>(kv_len), 0);
  std::vector<int32_t> order;
  for (int64_t key = 0; key < kv_len;) {
    const int64_t length = random.uniform_int(1, 6);
    if (random.bernoulli(0.3)) {
      for (int64_t k = key; k < std::min(kv_len, key + length); ++k) {
        gathered[k] = 1;
        order.push_back(static_cast<int32_t>(k));
      }
    }
    key += length + random.uniform_int(1, 12);
  }
  for (int64_t p = random.uniform_int(0, 5); p > 0; --p) order.push_back(kPaddingKey);
  std::vector<std::vector<int32_t>> blocks;
  for (int64_t key = 0; key < kv_len;) {
    std::vector<int32_t> block;
    const int64_t length = random.uniform_int(1, 24);
    for (; key < kv_len && static_cast<int64_t>(block.size()) < length; ++key) {
      if (!gathered[key])
        block.push_back(static_cast<int32_t>(key));
      else if (!block.empty())
        break;
    }
    if (!block.empty()) blocks.push_back(std::move(block));
  }
  std::shuffle(blocks.begin(), blocks.end(), random.engine());
  for (const std::vector<int32_t>& block : blocks) {
    order.insert(order.end(), block.begin(), block.end());
    for (int64_t p = random.bernoulli(0.4) ? random.uniform_int(1, 4) : 0; p > 0; --p) {
      order.push_back(kPaddingKey);
    }
  }
  return order;
}

namespace key_order_plans_detail {

// Calls visit(begin, end) for each maximal stretch [begin, end) of `order`'s slots without padding
// whose neighbours all satisfy continues(previous key, next key), in slot order.
template <class Continues, class Visit>
void for_each_stretch(const std::vector<int32_t>& order, Continues continues, Visit visit) {
  const auto size = static_cast<int64_t>(order.size());
  for (int64_t begin = 0; begin < size;) {
    if (order[begin] == kPaddingKey) {
      ++begin;
      continue;
    }
    int64_t end = begin + 1;
    while (end < size && order[end] != kPaddingKey && continues(order[end - 1], order[end])) ++end;
    visit(begin, end);
    begin = end;
  }
}

// Random valid spans of `order` for a tile whose lowest aligned row is `lowest_row`: per maximal
// padding-free, strictly increasing stretch, maybe one sub-range, trimmed to its last consecutive
// run when the keys before that run would sit above the lowest row (plan.h).
inline std::vector<KeySpan> random_ordered_spans(Random& random, const std::vector<int32_t>& order,
                                                 int64_t lowest_row) {
  std::vector<KeySpan> spans;
  const auto increasing = [](int32_t previous, int32_t next) { return next > previous; };
  for_each_stretch(order, increasing, [&](int64_t begin, int64_t end) {
    if (!random.bernoulli(0.6)) return;
    const int64_t lo = random.uniform_int(begin, end - 1);
    const int64_t hi = random.uniform_int(lo + 1, end);
    int64_t run = hi - 1;
    while (run > lo && order[run - 1] + 1 == order[run]) --run;
    const int64_t first = run > lo && order[run] - 1 > lowest_row ? run : lo;
    // Spans that touch would be merged by PlanBuilder::add_span across two stretches.
    if (spans.empty() || spans.back().end != first) {
      spans.push_back({static_cast<int32_t>(first), static_cast<int32_t>(hi)});
    }
  });
  std::shuffle(spans.begin(), spans.end(), random.engine());
  return spans;
}

// Random spans of `order` for an unmasked tile: per maximal padding-free stretch, whatever its
// keys' order, maybe one sub-range.
inline std::vector<KeySpan> random_unmasked_spans(Random& random,
                                                  const std::vector<int32_t>& order) {
  std::vector<KeySpan> spans;
  const auto any_order = [](int32_t, int32_t) { return true; };
  for_each_stretch(order, any_order, [&](int64_t begin, int64_t end) {
    if (!random.bernoulli(0.6)) return;
    const int64_t lo = random.uniform_int(begin, end - 1);
    spans.push_back(
        {static_cast<int32_t>(lo), static_cast<int32_t>(random.uniform_int(lo + 1, end))});
  });
  std::shuffle(spans.begin(), spans.end(), random.engine());
  return spans;
}

inline std::vector<QueryRun> random_query_order(Random& random, int64_t q_len, bool strided) {
  if (!strided || q_len < 2 || random.bernoulli(0.5)) return {};
  return {{0, (q_len + 1) / 2, 2}, {1, q_len / 2, 2}};
}

inline std::vector<int64_t> positions(const std::vector<QueryRun>& runs, int64_t q_len) {
  std::vector<int64_t> order;
  if (runs.empty()) {
    for (int64_t i = 0; i < q_len; ++i) order.push_back(i);
  }
  for (const QueryRun& run : runs) {
    for (int64_t i = 0; i < run.count; ++i) order.push_back(run.start + i * run.step);
  }
  return order;
}

}  // namespace key_order_plans_detail

// A random plan per the options: tiles of random lengths (at most tile_rows), each in place (random
// spans, causal) or through a random one of the orders; some rows in no tile.
inline KeyOrderPlan random_key_order_plan(Random& random, const KeyOrderPlanOptions& options) {
  namespace kd = key_order_plans_detail;
  const PlanShape shape{options.batch, options.heads, options.q_len, options.kv_len,
                        options.tile_rows};
  const int64_t offset = shape.causal_offset();
  PlanBuilder builder(shape);
  std::vector<std::vector<int32_t>> orders;
  for (int64_t o = 0; o < options.orders; ++o) {
    orders.push_back(random_key_order(random, options.kv_len));
    builder.add_key_order(orders.back());
  }
  KeyOrderPlan result;
  for (int64_t slot = 0; slot < shape.head_slots(); ++slot) {
    const std::vector<QueryRun> runs =
        kd::random_query_order(random, options.q_len, options.strided_query_orders);
    const std::vector<int64_t> query = kd::positions(runs, options.q_len);
    std::vector<uint8_t>& expected =
        result.expected.emplace_back(static_cast<std::size_t>(options.q_len * options.kv_len), 0);
    builder.begin_head(runs);
    for (int64_t begin = 0; begin < options.q_len;) {
      const int64_t end = std::min(options.q_len, begin + random.uniform_int(1, options.tile_rows));
      if (random.bernoulli(0.1)) {  // rows in no tile
        begin = end;
        continue;
      }
      const int64_t lowest = *std::min_element(query.begin() + begin, query.begin() + end) + offset;
      const bool in_place = orders.empty() || random.bernoulli(options.in_place_share);
      const auto o = static_cast<int32_t>(in_place ? 0 : random.uniform_int(0, options.orders - 1));
      std::vector<int32_t> identity;
      if (in_place) {
        for (int64_t key = 0; key < options.kv_len; ++key)
          identity.push_back(static_cast<int32_t>(key));
      }
      const std::vector<int32_t>& layout = in_place ? identity : orders[o];
      const bool unmasked = !in_place && random.bernoulli(options.unmasked_share);
      builder.begin_tile(begin, end, MaskPolicy{.causal = !unmasked}, in_place ? kKeysInPlace : o);
      const std::vector<KeySpan> spans = unmasked
                                             ? kd::random_unmasked_spans(random, layout)
                                             : kd::random_ordered_spans(random, layout, lowest);
      for (const KeySpan& span : spans) {
        builder.add_span(span.begin, span.end);
        for (int64_t i = begin; i < end; ++i) {
          const int64_t aligned = query[i] + offset;
          for (int64_t p = span.begin; p < span.end; ++p) {
            if (unmasked || layout[p] <= aligned) {
              expected[query[i] * options.kv_len + layout[p]] = 1;
            }
          }
        }
      }
      begin = end;
    }
  }
  result.plan = builder.finish();
  return result;
}

}  // namespace mmsparse::test
