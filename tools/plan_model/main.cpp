// mmsparse-plan-model: a work model of static plans on the wgmma kernel, from host-built plans
// alone (no GPU). For each pattern it cuts one head slot's tiles into 128-key chunks as the kernel
// does (spans from their begin, then the gathered columns), costs each chunk by the warpgroups
// that compute it (a warpgroup whose 64 rows all precede a chunk skips it), adds a fixed cost per
// CTA, and list-schedules heads × tiles heaviest first onto the SMs as the hardware dispatches the
// launch order. Throughput on computed pairs is the exact pair count over the makespan, reported
// as a share of dense's under the same model. Tiles that read a key order (Plan::key_orders) are
// cut into chunks over physical slots and classified on original positions as the kernels do
// (slot + the span's shift); the copy of K and V into each order is added as wall time before the
// kernel, from the memory bandwidth and dense's measured rate.
//
// The cost constants default to a fit of six H100 measurements (the sink, intra and intra+sink
// templates at 36,864 and 131,072 tokens, docs/blindsight.md) and can be set per run. For sparse
// BlindSight templates a second figure models the same plan with one text tile per text run (the
// plan before text rows were gathered), so that the gain of the gathering is predicted alongside.
//
//   mmsparse-plan-model [--preset multi-image] [--seq-len 36864,131072,307200] [--sms 132] ...

#include <fmt/core.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdint>
#include <functional>
#include <queue>
#include <string>
#include <tuple>
#include <vector>

#include "core/engine_chunks.h"
#include "mmsparse/patterns.h"
#include "mmsparse/plan.h"
#include "mmsparse/status.h"
#include "mmsparse/tools/workload.h"

namespace mmsparse {
namespace {

constexpr int64_t kChunkKeys = kGatherChunkKeys;  // the wgmma kernel's key chunk at head_dim 128
constexpr int64_t kWarpgroupRows = 64;
constexpr int64_t kTileRows = 128;  // two consumer warpgroups
constexpr int64_t kH100Sms = 132;
constexpr int64_t kDefaultHeads = 28;

// Costs in units of one chunk computed by both warpgroups (128 × 128 pairs at full rate).
struct CostModel {
  double cta_overhead = 6.0;     // launch, query load, pipeline fill and epilogue of one CTA
  double one_warpgroup = 0.6;    // a chunk only one warpgroup computes (no ping-pong overlap)
  double skipped = 0.05;         // a chunk every warpgroup skips (loaded, classified, released)
  double masked_extra = 0.15;    // a chunk some row masks in part
  double gathered_extra = 0.15;  // a chunk of gathered columns (cp.async rows, not a tensor copy)
};

// The copy of K and V into each key order's physical layout (Plan::key_orders), which runs before
// the attention kernel: bandwidth-bound, converted to the model's units through dense's measured
// rate (dense's modelled makespan takes dense's measured time).
struct CopyModel {
  double dense_tflops = 590.0;    // dense's measured rate (H200, bf16, head_dim 128, 36K-131K)
  double bandwidth_gbs = 4000.0;  // the copy's achieved memory bandwidth
  int64_t kv_heads = 4;
  int64_t head_dim = 128;
  int64_t element_bytes = 2;  // bf16
};
constexpr double kFlopsPerPairPerDim = 4.0;  // two matrix products of 2 flops per multiply-add
constexpr double kCopyPasses = 2.0 * 2.0;    // K and V, each read once and written once

// Where a tile's rows lie: every row text, every row in an image, or both.
enum class TileClass { kText = 0, kImage = 1, kMixed = 2 };
constexpr int kTileClasses = 3;
constexpr const char* kTileClassNames[kTileClasses] = {"text", "image", "mixed"};

// The cost basis: every term of the cost model counted, so that a fit of the constants to
// measured throughput needs only these counts (the schedule's imbalance aside).
struct ChunkCounts {
  int64_t tiles = 0;           // CTAs per head slot: one fixed cost each
  int64_t chunks = 0;          // key chunks read
  int64_t two_warpgroups = 0;  // chunks both warpgroups compute
  int64_t one_warpgroup = 0;   // chunks one warpgroup computes
  int64_t skipped = 0;         // chunks every warpgroup skips
  int64_t masked = 0;          // chunks some active warpgroup masks element by element
  int64_t gathered = 0;        // chunks of gathered columns
  int64_t partial = 0;         // chunks of fewer than kChunkKeys keys
  int64_t records = 0;         // spans and column runs read (each starts a new chunk)

  ChunkCounts& operator+=(const ChunkCounts& other) {
    tiles += other.tiles;
    chunks += other.chunks;
    two_warpgroups += other.two_warpgroups;
    one_warpgroup += other.one_warpgroup;
    skipped += other.skipped;
    masked += other.masked;
    gathered += other.gathered;
    partial += other.partial;
    records += other.records;
    return *this;
  }
};

struct TileWork {
  double cost = 0;
  int64_t keys = 0;              // the schedule's weight
  int64_t empty_slots = 0;       // key slots of partial chunks
  int64_t warpgroup_chunks = 0;  // (chunk, warpgroup) pairs computed, skipped ones not counted
  ChunkCounts counts;
  TileClass tile_class = TileClass::kText;
  bool text = false;  // its first row is text (the "text" column's tiles)
};

// What one chunk asks of the tile's warpgroups.
struct ChunkClass {
  int active = 0;       // warpgroups with a row at or after the chunk's lowest key
  bool masked = false;  // some active warpgroup has a row before the chunk's highest key
};

// The cost of one chunk whose keys lie in [lowest, highest] for rows `rows` (positions, ascending
// per warpgroup of kWarpgroupRows).
ChunkClass classify_chunk(const std::vector<int64_t>& rows, int64_t lowest, int64_t highest) {
  ChunkClass result;
  for (std::size_t first = 0; first < rows.size(); first += kWarpgroupRows) {
    const std::size_t last = std::min(rows.size(), first + kWarpgroupRows);
    const int64_t low = *std::min_element(rows.begin() + first, rows.begin() + last);
    const int64_t high = *std::max_element(rows.begin() + first, rows.begin() + last);
    if (lowest > high) continue;
    ++result.active;
    result.masked = result.masked || highest > low;
  }
  return result;
}

double chunk_cost(const ChunkClass& chunk, bool gathered, const CostModel& model) {
  const int active = chunk.active;
  const bool masked = chunk.masked;
  double cost = active == 2 ? 1.0 : active == 1 ? model.one_warpgroup : model.skipped;
  if (active > 0 && masked) cost += model.masked_extra;
  if (gathered) cost += model.gathered_extra;
  return cost;
}

// A tile's class from its rows' media (positions; text when the layout has no media).
TileClass classify_tile(const std::vector<int64_t>& rows, const std::vector<int32_t>& token_media) {
  if (token_media.empty()) return TileClass::kText;
  const auto is_text = [&token_media](int64_t row) { return token_media[row] < 0; };
  if (std::all_of(rows.begin(), rows.end(), is_text)) return TileClass::kText;
  if (std::none_of(rows.begin(), rows.end(), is_text)) return TileClass::kImage;
  return TileClass::kMixed;
}

TileWork tile_work(const Plan& plan, const std::vector<int64_t>& order, int64_t t,
                   const std::vector<int32_t>& token_media, const CostModel& model) {
  const QueryTile& tile = plan.tiles[t];
  const int64_t offset = plan.shape.causal_offset();
  std::vector<int64_t> rows;
  for (int64_t i = tile.begin; i < tile.end; ++i) rows.push_back(order[i] + offset);
  TileWork work;
  work.cost = model.cta_overhead;
  work.tile_class = classify_tile(rows, token_media);
  work.text = token_media.empty() || token_media[rows.front()] < 0;
  ChunkCounts& counts = work.counts;
  counts.tiles = 1;
  const auto add_chunk = [&](int64_t count, int64_t lowest, int64_t highest, bool gathered) {
    ++counts.chunks;
    work.keys += count;
    work.empty_slots += kChunkKeys - count;
    const ChunkClass chunk = classify_chunk(rows, lowest, highest);
    counts.two_warpgroups += chunk.active == 2 ? 1 : 0;
    counts.one_warpgroup += chunk.active == 1 ? 1 : 0;
    counts.skipped += chunk.active == 0 ? 1 : 0;
    counts.masked += chunk.active > 0 && chunk.masked ? 1 : 0;
    counts.gathered += gathered ? 1 : 0;
    counts.partial += count < kChunkKeys ? 1 : 0;
    work.warpgroup_chunks += chunk.active;
    work.cost += chunk_cost(chunk, gathered, model);
  };
  const int32_t key_order = plan.tile_key_order(t);
  for (int64_t s = plan.tile_span_offsets[t]; s < plan.tile_span_offsets[t + 1]; ++s) {
    const KeySpan& span = plan.spans[s];
    ++counts.records;
    // Through a key order the span covers physical slots; the kernels classify its chunks by
    // slot + the span's shift (anchored at its last slot), exact on its last consecutive run and,
    // before it, at or below every row (Plan::key_orders).
    const int64_t shift = key_order == kKeysInPlace ? 0
                                                    : plan.key_orders[key_order][span.end - 1] -
                                                          static_cast<int64_t>(span.end - 1);
    for (int64_t begin = span.begin; begin < span.end; begin += kChunkKeys) {
      const int64_t end = std::min<int64_t>(span.end, begin + kChunkKeys);
      add_chunk(end - begin, begin + shift, end - 1 + shift, false);
    }
  }
  const int64_t columns_end = plan.tile_column_offsets[t + 1];
  counts.records += columns_end > plan.tile_column_offsets[t] ? 1 : 0;
  for (int64_t c = plan.tile_column_offsets[t]; c < columns_end; c += kChunkKeys) {
    const int64_t end = std::min(columns_end, c + kChunkKeys);
    const auto [low, high] =
        std::minmax_element(plan.columns.begin() + c, plan.columns.begin() + end);
    add_chunk(end - c, *low, *high, true);
  }
  return work;
}

// The same key sets with one text tile per run of consecutive text rows, rows in position order:
// the plan before text rows were gathered into full tiles.
Plan text_tile_per_run(const Plan& plan, const std::vector<int64_t>& order,
                       const std::vector<int32_t>& token_media) {
  const int64_t offset = plan.shape.causal_offset();
  std::vector<std::tuple<int64_t, int64_t, int64_t>> tiles;  // first row, last row + 1, source
  for (int64_t t = 0; t < plan.num_tiles(); ++t) {
    const QueryTile& tile = plan.tiles[t];
    if (token_media[order[tile.begin] + offset] >= 0) {
      tiles.emplace_back(order[tile.begin], order[tile.end - 1] + 1, t);
      continue;
    }
    for (int64_t i = tile.begin; i < tile.end; ++i) tiles.emplace_back(order[i], order[i] + 1, -1);
  }
  std::sort(tiles.begin(), tiles.end());
  PlanBuilder builder(plan.shape);
  for (const std::vector<int32_t>& key_order : plan.key_orders) builder.add_key_order(key_order);
  builder.begin_head();
  for (std::size_t i = 0; i < tiles.size();) {
    const auto [begin, end, source] = tiles[i];
    if (source >= 0) {
      builder.begin_tile(begin, end, plan.masks[plan.tile_masks[source]],
                         plan.tile_key_order(source));
      for (int64_t s = plan.tile_span_offsets[source]; s < plan.tile_span_offsets[source + 1]; ++s)
        builder.add_span(plan.spans[s].begin, plan.spans[s].end);
      for (int64_t c = plan.tile_column_offsets[source]; c < plan.tile_column_offsets[source + 1];
           ++c)
        builder.add_column(plan.columns[c]);
      ++i;
      continue;
    }
    std::size_t run_end = i + 1;  // text rows of one run, at most a tile
    while (run_end < tiles.size() && std::get<2>(tiles[run_end]) < 0 &&
           std::get<0>(tiles[run_end]) == std::get<0>(tiles[run_end - 1]) + 1 &&
           static_cast<int64_t>(run_end - i) < plan.shape.tile_rows)
      ++run_end;
    const int64_t last = std::get<0>(tiles[run_end - 1]);
    builder.begin_tile(begin, last + 1);
    builder.add_span(0, std::min(last + 1 + offset, plan.shape.kv_len));
    i = run_end;
  }
  return builder.finish();
}

struct Prediction {
  int64_t tiles = 0, chunks = 0, empty_slots = 0, masked_chunks = 0, warpgroup_chunks = 0;
  int64_t gathered_chunks = 0;
  ChunkCounts by_class[kTileClasses];  // the cost basis per TileClass
  int64_t pairs = 0;                   // computed pairs of one head slot
  std::vector<int64_t> tile_chunks;    // key chunks per tile, ascending
  double cost = 0, text_cost = 0, overhead = 0;
  double makespan = 0;    // in chunk units on `sms` SMs
  double copy = 0;        // the key orders' copy, in the same units (wall time before the kernel)
  double efficiency = 0;  // computed pairs per chunk unit of SM time, the copy included
};

// Greedy list scheduling of `heads` copies of the slot's tiles, heaviest first (ties by position,
// then head), onto `sms` SMs, one CTA each.
Prediction predict(const Plan& plan, const std::vector<int32_t>& token_media, int64_t heads,
                   int64_t sms, const CostModel& model) {
  const std::vector<int64_t> order = plan.query_order(0);
  std::vector<TileWork> works;
  Prediction result;
  for (int64_t t = 0; t < plan.num_tiles(); ++t) {
    works.push_back(tile_work(plan, order, t, token_media, model));
    const TileWork& work = works.back();
    result.chunks += work.counts.chunks;
    result.empty_slots += work.empty_slots;
    result.masked_chunks += work.counts.masked;
    result.warpgroup_chunks += work.warpgroup_chunks;
    result.gathered_chunks += work.counts.gathered;
    result.by_class[static_cast<int>(work.tile_class)] += work.counts;
    result.tile_chunks.push_back(work.counts.chunks);
    result.cost += work.cost;
    if (work.text) result.text_cost += work.cost;
  }
  result.tiles = plan.num_tiles();
  result.overhead = model.cta_overhead * static_cast<double>(result.tiles);
  std::vector<std::tuple<int64_t, int64_t, int64_t>> launch;  // -keys, position, head
  for (int64_t head = 0; head < heads; ++head) {
    for (int64_t t = 0; t < plan.num_tiles(); ++t) launch.emplace_back(-works[t].keys, t, head);
  }
  std::sort(launch.begin(), launch.end());
  std::priority_queue<double, std::vector<double>, std::greater<>> free_at;
  for (int64_t sm = 0; sm < sms; ++sm) free_at.push(0.0);
  for (const auto& [keys, t, head] : launch) {
    const double start = free_at.top();
    free_at.pop();
    free_at.push(start + works[t].cost);
    result.makespan = std::max(result.makespan, start + works[t].cost);
  }
  std::sort(result.tile_chunks.begin(), result.tile_chunks.end());
  result.pairs = count_plan_pairs(plan, 0);
  const double pairs = static_cast<double>(result.pairs) * static_cast<double>(heads);
  result.efficiency = pairs / (static_cast<double>(kTileRows * kChunkKeys) * result.makespan *
                               static_cast<double>(sms));
  return result;
}

// Adds the copy of the plan's key orders to `p` (wall time in the units of `dense`'s makespan).
void add_copy(const Plan& plan, const Prediction& dense, int64_t heads, const CopyModel& copy,
              Prediction& p) {
  double slots = 0;
  for (const std::vector<int32_t>& key_order : plan.key_orders) {
    slots += static_cast<double>(key_order.size());
  }
  if (slots == 0) return;
  const double bytes =
      slots * static_cast<double>(copy.kv_heads * copy.head_dim * copy.element_bytes) * kCopyPasses;
  const double dense_seconds = static_cast<double>(dense.pairs) * static_cast<double>(heads) *
                               kFlopsPerPairPerDim * static_cast<double>(copy.head_dim) /
                               (copy.dense_tflops * 1e12);
  p.copy = bytes / (copy.bandwidth_gbs * 1e9) * dense.makespan / dense_seconds;
  p.efficiency *= p.makespan / (p.makespan + p.copy);
}

void print_prediction(int64_t tokens, const std::string& name, const std::string& form,
                      const Prediction& p, const Prediction& dense, int64_t heads, int64_t sms) {
  const double busy = p.cost * static_cast<double>(heads) / static_cast<double>(sms);
  fmt::print(
      "{:>8} {:<31} {:<13} {:>6} {:>8} {:>8.1f}% {:>8.1f}% {:>8.1f}% {:>8.2f}% {:>8.1f}% "
      "{:>8.1f}%\n",
      tokens, name, form, p.tiles, p.chunks,
      100.0 * static_cast<double>(p.empty_slots) / static_cast<double>(p.chunks * kChunkKeys),
      100.0 * p.text_cost / p.cost, 100.0 * p.overhead / p.cost, 100.0 * (p.makespan / busy - 1.0),
      100.0 * p.copy / (p.makespan + p.copy), 100.0 * p.efficiency / dense.efficiency);
}

// The chunk statistics behind the cost: fill (computed pairs over the pairs the kernel's chunks
// hold, 128 rows × 128 keys each), fill of the warpgroups that compute (a skipped warpgroup's 64
// rows not counted), the share of chunks with element masks, chunks per tile (min, quartiles,
// max) and the waves of CTAs on the SMs.
void print_chunk_stats(int64_t tokens, const std::string& name, const Prediction& p, int64_t heads,
                       int64_t sms, int64_t ctas_per_sm) {
  const auto share = [](double part, double whole) { return 100.0 * part / whole; };
  const auto quantile = [&p](double q) {
    const auto last = static_cast<double>(p.tile_chunks.size() - 1);
    return p.tile_chunks[static_cast<std::size_t>(q * last + 0.5)];
  };
  const auto pairs = static_cast<double>(p.pairs);
  const auto chunks = static_cast<double>(p.chunks);
  fmt::print(
      "{:>8} {:<31} {:>7.1f}% {:>7.1f}% {:>7.1f}% {:>7.1f}% {:>5}/{:>4}/{:>4}/{:>4}/{:>5} "
      "{:>7.1f}\n",
      tokens, name, share(pairs, chunks * kTileRows * kChunkKeys),
      share(pairs, static_cast<double>(p.warpgroup_chunks * kWarpgroupRows * kChunkKeys)),
      share(static_cast<double>(p.masked_chunks), chunks),
      share(static_cast<double>(p.gathered_chunks), chunks), quantile(0), quantile(0.25),
      quantile(0.5), quantile(0.75), quantile(1),
      static_cast<double>(p.tiles * heads) / static_cast<double>(sms * ctas_per_sm));
}

// The cost basis, one line per tile class and pattern: every count the cost model weighs, for a
// fit of its constants to measured throughput (scripts/blindsight_cost_fit.py). pairs: computed
// pairs of one head slot, on the pattern's first line.
void print_cost_basis(int64_t tokens, const std::string& name, const Prediction& p) {
  for (int c = 0; c < kTileClasses; ++c) {
    const ChunkCounts& n = p.by_class[c];
    fmt::print("{:>8} {:<31} {:<6} {:>13} {:>6} {:>8} {:>8} {:>7} {:>7} {:>7} {:>8} {:>7} {:>7}\n",
               tokens, name, kTileClassNames[c], c == 0 ? fmt::format("{}", p.pairs) : "-", n.tiles,
               n.chunks, n.two_warpgroups, n.one_warpgroup, n.skipped, n.masked, n.gathered,
               n.partial, n.records);
  }
}

int run(const std::string& preset, const std::vector<int64_t>& lengths,
        const std::vector<std::string>& patterns, int64_t heads, int64_t sms, int64_t ctas_per_sm,
        const CostModel& model, const CopyModel& copy) {
  fmt::print("{:>8} {:<31} {:<13} {:>6} {:>8} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9}\n", "tokens",
             "pattern", "text tiles", "tiles", "chunks", "part.fill", "text", "per-CTA",
             "imbalance", "copy", "of dense");
  std::vector<std::tuple<int64_t, std::string, Prediction>> built;  // the plans as built
  for (const int64_t seq_len : lengths) {
    WorkloadSpec spec;
    spec.preset = preset;
    spec.seq_len = seq_len;
    const Workload workload = Workload::create(spec);
    const ModalityLayout& layout = workload.layout();
    const std::vector<int32_t> token_media = layout.token_media();
    const PlanShape shape{
        .q_len = layout.length(), .kv_len = layout.length(), .tile_rows = kTileRows};
    const Prediction dense = predict(build_plan(PatternSpec::parse("dense"), shape, &layout),
                                     token_media, heads, sms, model);
    print_prediction(layout.length(), "dense", "-", dense, dense, heads, sms);
    built.emplace_back(layout.length(), "dense", dense);
    for (const std::string& text : patterns) {
      const PatternSpec resolved = resolve_pattern(PatternSpec::parse(text), &layout);
      const Plan plan = build_plan(resolved, shape, &layout);
      if (!plan.runs.empty()) {
        const Plan per_run = text_tile_per_run(plan, plan.query_order(0), token_media);
        Prediction per_run_prediction = predict(per_run, token_media, heads, sms, model);
        add_copy(per_run, dense, heads, copy, per_run_prediction);
        print_prediction(layout.length(), text, "one per run", per_run_prediction, dense, heads,
                         sms);
      }
      Prediction as_built = predict(plan, token_media, heads, sms, model);
      add_copy(plan, dense, heads, copy, as_built);
      print_prediction(layout.length(), text, plan.runs.empty() ? "as built" : "gathered", as_built,
                       dense, heads, sms);
      built.emplace_back(layout.length(), text, as_built);
    }
  }
  fmt::print("\n{:>8} {:<31} {:>8} {:>8} {:>8} {:>8} {:>26} {:>7}\n", "tokens", "pattern", "fill",
             "wg fill", "masked", "gathered", "chunks/tile min/q1/med/q3/max", "waves");
  for (const auto& [tokens, name, prediction] : built)
    print_chunk_stats(tokens, name, prediction, heads, sms, ctas_per_sm);
  fmt::print(
      "\ncost basis\n{:>8} {:<31} {:<6} {:>13} {:>6} {:>8} {:>8} {:>7} {:>7} {:>7} {:>8} "
      "{:>7} {:>7}\n",
      "tokens", "pattern", "class", "pairs", "tiles", "chunks", "two-wg", "one-wg", "skipped",
      "masked", "gathered", "partial", "records");
  for (const auto& [tokens, name, prediction] : built) print_cost_basis(tokens, name, prediction);
  fmt::print(
      "\nSYNTHETIC layout (preset '{}'), one head slot's plan replicated on {} heads, {} SMs. "
      "part.fill: key slots of partial chunks; text: share of the cost in text tiles; per-CTA: "
      "share that is the fixed cost per CTA ({:.2f} chunks); imbalance: makespan over the "
      "SMs' mean busy time; copy: share of the time in the copy of K and V into the plan's key "
      "orders ({:.0f} GB/s, dense at {:.0f} TFLOP/s, {} KV heads of {}); of dense: modelled "
      "throughput on computed pairs over dense's, the copy included. "
      "fill: computed pairs over the {}x{} pairs of every chunk read (a partly masked chunk costs "
      "a whole one); wg fill: the same over the {}-row warpgroups that compute (skipped ones not "
      "counted); masked: chunks some computing row masks in part (diagonal, image boundary, "
      "partial column chunk); gathered: chunks of gathered columns; waves: CTAs over {} SMs x {} "
      "CTA(s) each. cost basis (per head slot, by tile class: rows all text, all image, both): "
      "two-wg / one-wg / skipped: chunks two, one or no warpgroup computes; partial: chunks of "
      "fewer than {} keys; records: spans and column runs read.\n",
      preset, heads, sms, model.cta_overhead, copy.bandwidth_gbs, copy.dense_tflops, copy.kv_heads,
      copy.head_dim, kTileRows, kChunkKeys, kWarpgroupRows, sms, ctas_per_sm, kChunkKeys);
  return 0;
}

}  // namespace
}  // namespace mmsparse

int main(int argc, char** argv) {
  CLI::App app{"Work model of static plans on the wgmma kernel (host plans, no GPU)"};
  std::string preset = "multi-image";
  std::vector<int64_t> lengths = {36864, 131072, 307200};
  // Each template in place and through its key order (permute).
  std::vector<std::string> patterns = {
      "blindsight-sink:permute=0",       "blindsight-sink:permute=1",
      "blindsight-intra:permute=0",      "blindsight-intra:permute=1",
      "blindsight-intra-sink:permute=0", "blindsight-intra-sink:permute=1"};
  int64_t heads = mmsparse::kDefaultHeads;
  int64_t sms = mmsparse::kH100Sms;
  int64_t ctas_per_sm = 1;  // the wgmma kernel's shared memory at head_dim 128 holds one CTA
  mmsparse::CostModel model;
  mmsparse::CopyModel copy;
  app.add_option("--preset", preset, "SYNTHETIC workload preset whose layout the plans read")
      ->capture_default_str();
  app.add_option("--seq-len", lengths, "sequence lengths")->delimiter(',')->capture_default_str();
  app.add_option("--pattern", patterns, "pattern specs to model besides dense")
      ->capture_default_str();
  app.add_option("--heads", heads, "query heads (CTAs per tile)")->check(CLI::PositiveNumber);
  app.add_option("--sms", sms, "SMs (one CTA each)")->check(CLI::PositiveNumber);
  app.add_option("--ctas-per-sm", ctas_per_sm, "resident CTAs per SM, for the waves column")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--cta-overhead", model.cta_overhead, "fixed cost per CTA, in chunks")
      ->capture_default_str();
  app.add_option("--one-warpgroup", model.one_warpgroup, "cost of a one-warpgroup chunk")
      ->capture_default_str();
  app.add_option("--gathered-extra", model.gathered_extra, "extra cost of a gathered chunk")
      ->capture_default_str();
  app.add_option("--masked-extra", model.masked_extra, "extra cost of a partly masked chunk")
      ->capture_default_str();
  app.add_option("--dense-tflops", copy.dense_tflops,
                 "dense's measured TFLOP/s, which converts the key orders' copy into chunks")
      ->capture_default_str();
  app.add_option("--bandwidth-gbs", copy.bandwidth_gbs, "the key-order copy's memory bandwidth")
      ->capture_default_str();
  app.add_option("--kv-heads", copy.kv_heads, "KV heads the copy moves")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  try {
    return mmsparse::run(preset, lengths, patterns, heads, sms, ctas_per_sm, model, copy);
  } catch (const mmsparse::Error& error) {
    fmt::print(stderr, "error: {}\n", error.what());
    return 1;
  }
}
