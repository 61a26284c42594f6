#include "plan_generators.h"

#include <algorithm>
#include <numeric>
#include <utility>
#include <vector>

namespace mmsparse::test {
namespace {

// Media of mixed_layout: a 4×5 image and a 3-frame 3×4 video with 2 separator tokens per frame.
constexpr Grid kImageGrid{1, 4, 5};
constexpr Grid kVideoGrid{3, 3, 4};
constexpr int64_t kFrameSeparator = 2;

constexpr double kGapProbability = 0.15;
constexpr int64_t kMaxLocalReach =
    150;  // keys before the tile's first aligned row in its local span
constexpr int64_t kMaxExtraSpan = 100;
constexpr int64_t kMaxWindow = 120;
constexpr int64_t kMaxWindowSink = 20;
constexpr int64_t kMaxStride = 6;
constexpr int64_t kMaxBlock = 48;
// Periods below and above the wgmma kernel's 128-key chunk, bands up to a whole period.
constexpr int64_t kMaxPeriod = 200;
constexpr int64_t kMaxMinDistance = 150;
constexpr double kDistanceTermProbability = 0.5;
// Strided spans: steps from 2, and up to this many keys (a chunk is 64 or 128).
constexpr int64_t kMaxStep = 9;
constexpr int64_t kMaxStridedKeys = 300;

std::vector<QueryRun> random_order(Random& random, int64_t q_len) {
  std::vector<QueryRun> runs;
  switch (random.uniform_int(0, 2)) {
    case 0: {  // grid-like: one run per phase of a stride, phases shuffled
      const int64_t stride = random.uniform_int(2, kMaxStride);
      std::vector<int64_t> phases(static_cast<std::size_t>(std::min(stride, q_len)));
      std::iota(phases.begin(), phases.end(), int64_t{0});
      std::shuffle(phases.begin(), phases.end(), random.engine());
      for (int64_t phase : phases)
        runs.push_back({phase, (q_len - phase + stride - 1) / stride, stride});
      break;
    }
    case 1: {  // modality-grouping-like: contiguous blocks in shuffled order
      for (int64_t start = 0; start < q_len;) {
        const int64_t count = std::min(q_len - start, random.uniform_int(1, kMaxBlock));
        runs.push_back({start, count, 1});
        start += count;
      }
      std::shuffle(runs.begin(), runs.end(), random.engine());
      break;
    }
    default: {  // an arbitrary permutation: runs of one
      std::vector<int64_t> positions(static_cast<std::size_t>(q_len));
      std::iota(positions.begin(), positions.end(), int64_t{0});
      std::shuffle(positions.begin(), positions.end(), random.engine());
      for (int64_t position : positions) runs.push_back({position, 1, 1});
      break;
    }
  }
  return runs;
}

std::vector<int64_t> order_positions(const std::vector<QueryRun>& runs, int64_t q_len) {
  std::vector<int64_t> order;
  if (runs.empty()) {
    order.resize(static_cast<std::size_t>(q_len));
    std::iota(order.begin(), order.end(), int64_t{0});
    return order;
  }
  for (const QueryRun& run : runs) {
    for (int64_t i = 0; i < run.count; ++i) order.push_back(run.start + i * run.step);
  }
  return order;
}

// A causal minimum distance, a periodic band, or both (the grid mask's bands pass).
void add_distance_terms(Random& random, MaskPolicy& policy) {
  policy.causal = true;
  if (random.bernoulli(kDistanceTermProbability)) {
    policy.min_distance = random.uniform_int(1, kMaxMinDistance);
  }
  if (policy.min_distance == 0 || random.bernoulli(kDistanceTermProbability)) {
    policy.period = random.uniform_int(1, kMaxPeriod);
    policy.band = random.uniform_int(1, policy.period);
  }
}

MaskPolicy random_policy(Random& random, MaskMix mix) {
  MaskPolicy policy;
  if (mix == MaskMix::kCausal) return policy;
  policy.causal = false;
  if (mix == MaskMix::kNonCausal) return policy;
  if (mix == MaskMix::kPositional) {
    constexpr int kPositionalPolicies = 5;
    const int kind = static_cast<int>(random.uniform_int(0, kPositionalPolicies - 1));
    policy.causal = kind != 1;
    if (kind == 2 || kind == 4) {
      policy.window = random.uniform_int(1, kMaxWindow);
      policy.window_sink = random.uniform_int(0, kMaxWindowSink);
    }
    if (kind >= 3) add_distance_terms(random, policy);
    return policy;
  }
  constexpr int kPolicies = 7;
  switch (random.uniform_int(0, kPolicies - 1)) {
    case 0:
      policy.causal = true;
      break;
    case 1:
      break;
    case 2:
      policy.causal = true;
      policy.window = random.uniform_int(1, kMaxWindow);
      policy.window_sink = random.uniform_int(0, kMaxWindowSink);
      break;
    case 3:
      policy.causal = true;
      policy.same_media = true;
      break;
    case 4:
      policy.modality_pairs = static_cast<uint16_t>(random.uniform_int(1, kAllModalityPairs));
      break;
    case 5:
      add_distance_terms(random, policy);
      policy.same_media = random.bernoulli(kDistanceTermProbability);
      break;
    default:
      policy.causal = true;
      policy.window = random.uniform_int(1, kMaxWindow);
      policy.window_sink = random.uniform_int(0, kMaxWindowSink);
      policy.modality_pairs = static_cast<uint16_t>(random.uniform_int(1, kAllModalityPairs));
      break;
  }
  return policy;
}

// Spans (disjoint, sorted, any alignment), strided spans, lattice groups and columns (unique,
// outside the spans, random order) of one tile whose rows have the given aligned positions.
void add_random_keys(Random& random, PlanBuilder& builder, const PlanShape& shape,
                     const RandomPlanOptions& options, int64_t lowest_aligned,
                     int64_t highest_aligned) {
  const int64_t kv_len = shape.kv_len;
  std::vector<uint8_t> covered(static_cast<std::size_t>(kv_len), 0);
  // Around the diagonal, so that causal rows have keys to attend to.
  if (highest_aligned >= 0) {
    const int64_t begin =
        std::max<int64_t>(0, lowest_aligned - random.uniform_int(0, kMaxLocalReach));
    const int64_t end = std::min(kv_len, highest_aligned + 1);
    std::fill(covered.begin() + begin, covered.begin() + std::max(begin, end), 1);
  }
  const int64_t extra = random.uniform_int(0, options.max_extra_spans);
  for (int64_t s = 0; s < extra; ++s) {
    const int64_t begin = random.uniform_int(0, kv_len - 1);
    const int64_t end = std::min(kv_len, begin + random.uniform_int(1, kMaxExtraSpan));
    std::fill(covered.begin() + begin, covered.begin() + end, 1);
  }
  for (int64_t key = 0; key < kv_len;) {
    if (covered[key] == 0) {
      ++key;
      continue;
    }
    const int64_t begin = key;
    while (key < kv_len && covered[key] != 0) ++key;
    builder.add_span(begin, key);
  }
  // Strided spans (a grid's lines) on uncovered keys: each runs from the first uncovered key at or
  // after a random one until its next key would be covered or past kv_len, up to kMaxStridedKeys
  // keys (more than one chunk).
  const int64_t strided = random.uniform_int(0, options.max_strided_spans);
  for (int64_t s = 0; s < strided; ++s) {
    const int64_t step = random.uniform_int(2, kMaxStep);
    int64_t first = random.uniform_int(0, kv_len - 1);
    while (first < kv_len && covered[first] != 0) ++first;
    int64_t end = first;
    for (int64_t n = 0; n < kMaxStridedKeys && end < kv_len && covered[end] == 0; ++n) {
      covered[end] = 1;
      end += step;
    }
    builder.add_strided_span(first, std::min(end, kv_len), step);
  }
  const int64_t groups = random.uniform_int(0, options.max_lattice_groups);
  for (int64_t g = 0; g < groups && kv_len >= kLatticePeriodsPerChunk * kLatticeSpans; ++g) {
    const int64_t step = random.uniform_int(kLatticeSpans, kv_len / kLatticePeriodsPerChunk);
    const int64_t whole_periods = kv_len / step;
    // Whole chunks' periods or not: a lattice's last chunk may be partial.
    const int64_t periods = random.uniform_int(1, whole_periods);
    const int64_t first = random.uniform_int(0, whole_periods - periods) * step +
                          random.uniform_int(0, step - kLatticeSpans);
    const auto key_of = [&](int64_t period, int64_t t) { return first + period * step + t; };
    bool uncovered = true;
    for (int64_t i = 0; i < periods && uncovered; ++i) {
      for (int64_t t = 0; t < kLatticeSpans; ++t) uncovered = uncovered && !covered[key_of(i, t)];
    }
    if (!uncovered) continue;
    for (int64_t t = 0; t < kLatticeSpans; ++t) {
      for (int64_t i = 0; i < periods; ++i) covered[key_of(i, t)] = 1;
      builder.add_strided_span(key_of(0, t), key_of(periods - 1, t) + 1, step);
    }
  }
  const int64_t columns = random.uniform_int(0, options.max_columns);
  for (int64_t c = 0; c < columns; ++c) {
    const int64_t key = random.uniform_int(0, kv_len - 1);
    if (covered[key] != 0) continue;
    covered[key] = 1;
    builder.add_column(key);
  }
}

}  // namespace

ModalityLayout mixed_layout(Random& random, int64_t length, int64_t one_token_runs) {
  constexpr Grid kOneToken{1, 1, 1};
  const int64_t tail = one_token_runs * LayoutBuilder().image(kOneToken).text(1).build().length();
  const int64_t media_tokens =
      LayoutBuilder().image(kImageGrid).video(kVideoGrid, kFrameSeparator).build().length();
  // At least one text token before and after the media.
  const int64_t body = length - tail;
  const int64_t leading =
      random.uniform_int(1, std::max<int64_t>(1, std::min(body / 2, body - media_tokens - 1)));
  LayoutBuilder builder;
  builder.text(leading).image(kImageGrid).video(kVideoGrid, kFrameSeparator);
  builder.text(body - leading - media_tokens);
  for (int64_t run = 0; run < one_token_runs; ++run) builder.image(kOneToken).text(1);
  return builder.build();
}

Plan dense_plan(const PlanShape& shape, bool causal) {
  PlanBuilder builder(shape);
  MaskPolicy policy;
  policy.causal = causal;
  for (int64_t slot = 0; slot < shape.head_slots(); ++slot) {
    builder.begin_head();
    for (int64_t begin = 0; begin < shape.q_len; begin += shape.tile_rows) {
      builder.begin_tile(begin, std::min(shape.q_len, begin + shape.tile_rows), policy);
      builder.add_span(0, shape.kv_len);
    }
  }
  return builder.finish();
}

Plan tri_shape_plan(const PlanShape& shape, int64_t sink, int64_t local, int64_t bottom) {
  PlanBuilder builder(shape);
  const int64_t offset = shape.causal_offset();
  const int64_t bottom_begin = std::max<int64_t>(0, shape.q_len - bottom);
  for (int64_t slot = 0; slot < shape.head_slots(); ++slot) {
    builder.begin_head();
    for (int64_t begin = 0; begin < bottom_begin; begin += shape.tile_rows) {
      const int64_t end = std::min(bottom_begin, begin + shape.tile_rows);
      builder.begin_tile(begin, end);
      const int64_t local_begin = std::clamp<int64_t>(begin + offset - local, 0, shape.kv_len);
      const int64_t local_end = std::clamp<int64_t>(end + offset, 0, shape.kv_len);
      const int64_t sink_end = std::min(sink, local_begin);
      builder.add_span(0, sink_end);
      builder.add_span(std::max(sink_end, local_begin), local_end);
    }
    // The bottom rows in two tiles of unequal size (about 5/8 and 3/8), then dense causal.
    constexpr int64_t kUnevenNumerator = 5;
    constexpr int64_t kUnevenDenominator = 8;
    const int64_t split =
        bottom_begin + (shape.q_len - bottom_begin) * kUnevenNumerator / kUnevenDenominator;
    for (const auto& [begin, end] :
         {std::pair{bottom_begin, split}, std::pair{split, shape.q_len}}) {
      if (begin == end) continue;
      builder.begin_tile(begin, end);
      builder.add_span(0, shape.kv_len);
    }
  }
  return builder.finish();
}

Plan random_plan(Random& random, const PlanShape& shape, const RandomPlanOptions& options,
                 const ModalityLayout* layout) {
  PlanBuilder builder(shape);
  const int64_t offset = shape.causal_offset();
  for (int64_t slot = 0; slot < shape.head_slots(); ++slot) {
    const std::vector<QueryRun> runs =
        options.permute_queries ? random_order(random, shape.q_len) : std::vector<QueryRun>{};
    const std::vector<int64_t> order = order_positions(runs, shape.q_len);
    builder.begin_head(runs);
    for (int64_t begin = 0; begin < shape.q_len;) {
      const int64_t end = std::min(shape.q_len, begin + random.uniform_int(1, shape.tile_rows));
      if (options.leave_gaps && random.bernoulli(kGapProbability)) {
        begin = end;
        continue;
      }
      builder.begin_tile(begin, end, random_policy(random, options.masks));
      const auto [lowest, highest] =
          std::minmax_element(order.begin() + begin, order.begin() + end);
      add_random_keys(random, builder, shape, options, *lowest + offset, *highest + offset);
      begin = end;
    }
  }
  if (layout != nullptr) builder.attach_layout(*layout);
  return builder.finish();
}

Plan split_plan(const Plan& plan, bool keep_spans) {
  Plan half = plan;
  const std::size_t tiles = plan.tiles.size();
  if (keep_spans) {
    half.columns.clear();
    half.tile_column_offsets.assign(tiles + 1, 0);
  } else {
    half.spans.clear();
    half.tile_span_offsets.assign(tiles + 1, 0);
    half.strided_spans.clear();
    half.tile_strided_offsets.assign(tiles + 1, 0);
  }
  half.validate();
  return half;
}

}  // namespace mmsparse::test
