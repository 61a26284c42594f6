// Pooled attention maps and plan masks (include/mmsparse/tools/viz.h).
//
// The dense map is computed one query row at a time: the row's scores against every causal key are
// kept in a kv_len-float scratch row until its LSE is known, then turned into probabilities and
// pooled into the row's cells. That costs one score per pair (N²·d/2 multiply-adds for causal
// attention) and O(kv_len) memory per thread; nothing of size q_len × kv_len exists. Work items are
// grid rows, so each item owns its cells of the original-order grids; the permuted grid, whose rows
// gather queries from everywhere, takes a lock per grid row.

#include <algorithm>
#include <cmath>
#include <limits>
#include <mutex>
#include <string>
#include <vector>

#include "core/parallel.h"
#include "core/plan_coverage.h"
#include "cpu/dot.h"
#include "mmsparse/attention.h"
#include "mmsparse/tools/metrics.h"
#include "mmsparse/status.h"
#include "tools/head_rows.h"
#include "tools/viz/attention_map.h"

namespace mmsparse {
namespace {

// Folds a value into a cell: mean pooling sums (divided by the cell's pair count at the end), max
// pooling keeps the largest value.
void combine(PoolMode mode, double& cell, double value) {
  cell = mode == PoolMode::kMax ? std::max(cell, value) : cell + value;
}

void combine_row(PoolMode mode, const std::vector<double>& row, double* cells) {
  for (std::size_t c = 0; c < row.size(); ++c) combine(mode, cells[c], row[c]);
}

void finish_mean(PoolMode mode, PooledGrid& grid) {
  if (mode != PoolMode::kMean || grid.empty()) return;
  for (int64_t r = 0; r < grid.rows; ++r) {
    for (int64_t c = 0; c < grid.cols; ++c) {
      grid.values[r * grid.cols + c] /= static_cast<double>(grid.cell_pairs(r, c));
    }
  }
}

void check_index(const std::string& name, int64_t value, int64_t limit, const std::string& what) {
  if (value < 0 || value >= limit) {
    throw_invalid_argument(name, "a value in [0, " + std::to_string(limit) + ") (" + what + ")",
                           std::to_string(value));
  }
}

}  // namespace

std::string_view pool_mode_name(PoolMode mode) { return mode == PoolMode::kMax ? "max" : "mean"; }

PoolMode pool_mode_from_name(std::string_view name) {
  if (name == "max") return PoolMode::kMax;
  if (name == "mean") return PoolMode::kMean;
  throw Error(ErrorCode::kParseError,
              "pool mode: expected max or mean, got '" + std::string(name) + "'");
}

namespace viz {

PooledGrid make_grid(int64_t q_len, int64_t kv_len, int64_t cells) {
  if (cells < 1) throw_invalid_argument("cells", ">= 1", std::to_string(cells));
  if (q_len < 1) throw_invalid_argument("q_len", ">= 1 (a picture needs queries)", std::to_string(q_len));
  if (kv_len < 1) throw_invalid_argument("kv_len", ">= 1 (a picture needs keys)", std::to_string(kv_len));
  PooledGrid grid;
  grid.rows = std::min(cells, q_len);
  grid.cols = std::min(cells, kv_len);
  grid.q_len = q_len;
  grid.kv_len = kv_len;
  grid.values.assign(static_cast<std::size_t>(grid.rows * grid.cols), 0.0);
  return grid;
}

void add_range_counts(const CellSplit& keys, int64_t begin, int64_t end, int64_t* counts) {
  if (begin >= end) return;
  for (int64_t c = keys.cell_of(begin); c < keys.cells && keys.begin(c) < end; ++c) {
    counts[c] += std::min(end, keys.begin(c + 1)) - std::max(begin, keys.begin(c));
  }
}

std::vector<int64_t> inverse_permutation(const std::vector<int64_t>& order) {
  std::vector<int64_t> inverse(order.size());
  for (std::size_t i = 0; i < order.size(); ++i) inverse[order[i]] = static_cast<int64_t>(i);
  return inverse;
}

namespace {

// Counts (one per cell) normalised to shares of each cell's pairs.
void store_shares(const std::vector<int64_t>& counts, PooledGrid& grid) {
  for (int64_t r = 0; r < grid.rows; ++r) {
    for (int64_t c = 0; c < grid.cols; ++c) {
      grid.values[r * grid.cols + c] = static_cast<double>(counts[r * grid.cols + c]) /
                                       static_cast<double>(grid.cell_pairs(r, c));
    }
  }
}

}  // namespace

PooledGrid pool_causal_mask(int64_t q_len, int64_t kv_len, int64_t cells,
                            const std::vector<int64_t>& order) {
  PooledGrid grid = make_grid(q_len, kv_len, cells);
  const CellSplit rows = row_split(grid);
  const CellSplit keys = col_split(grid);
  std::vector<int64_t> counts(grid.values.size(), 0);
  for (int64_t i = 0; i < q_len; ++i) {
    const int64_t query = order.empty() ? i : order[i];
    const int64_t visible = std::clamp<int64_t>(query + kv_len - q_len + 1, 0, kv_len);
    add_range_counts(keys, 0, visible, &counts[rows.cell_of(i) * grid.cols]);
  }
  store_shares(counts, grid);
  return grid;
}

}  // namespace viz

PooledGrid pool_plan_mask(const Plan& plan, int64_t head_slot, int64_t cells, RowOrder order) {
  plan.validate();
  check_index("head_slot", head_slot, plan.head_slots(), "the plan's head slots");
  PooledGrid grid = viz::make_grid(plan.shape.q_len, plan.shape.kv_len, cells);
  const viz::CellSplit rows = viz::row_split(grid);
  const viz::CellSplit keys = viz::col_split(grid);
  const std::vector<int64_t> order_index =
      order == RowOrder::kQueryOrder ? viz::inverse_permutation(plan.query_order(head_slot))
                                     : std::vector<int64_t>{};
  std::vector<int64_t> counts(grid.values.size(), 0);
  detail::for_each_covered_range(plan, head_slot, [&](int64_t query, int64_t begin, int64_t end) {
    const int64_t row = rows.cell_of(order_index.empty() ? query : order_index[query]);
    viz::add_range_counts(keys, begin, end, &counts[row * grid.cols]);
  });
  viz::store_shares(counts, grid);
  return grid;
}

PooledGrid pool_plan_columns(const Plan& plan, int64_t head_slot, int64_t cells) {
  plan.validate();
  check_index("head_slot", head_slot, plan.head_slots(), "the plan's head slots");
  PooledGrid grid = viz::make_grid(plan.shape.q_len, plan.shape.kv_len, cells);
  const viz::CellSplit rows = viz::row_split(grid);
  const viz::CellSplit keys = viz::col_split(grid);
  std::vector<int64_t> counts(grid.values.size(), 0);
  for (int64_t p = 0; p < plan.num_passes(); ++p) {
    const Plan& pass = plan.pass(p);
    const std::vector<int64_t> order = pass.query_order(head_slot);
    for (int64_t t = pass.head_tile_offsets[head_slot]; t < pass.head_tile_offsets[head_slot + 1];
         ++t) {
      const MaskPolicy& mask = pass.masks[pass.tile_masks[t]];
      for (int64_t i = pass.tiles[t].begin; i < pass.tiles[t].end; ++i) {
        const int64_t query = order.empty() ? i : order[i];
        int64_t* row_counts = &counts[rows.cell_of(query) * grid.cols];
        for (int64_t c = pass.tile_column_offsets[t]; c < pass.tile_column_offsets[t + 1]; ++c) {
          const int64_t key = pass.columns[c];
          if (detail::mask_keeps(pass, mask, query, key)) ++row_counts[keys.cell_of(key)];
        }
      }
    }
  }
  viz::store_shares(counts, grid);
  return grid;
}

namespace {

// The attention problem of q and k, checked for the maps: host tensors, indices in range, and a
// plan of their lengths.
AttentionProblem checked_map_problem(const TensorView& q, const TensorView& k,
                                     int64_t batch_index, int64_t head, const Plan& plan,
                                     int64_t head_slot, const AttentionMapOptions& options) {
  AttentionOptions attention_options;
  attention_options.scale = options.scale;
  attention_options.num_threads = options.num_threads;
  const AttentionProblem problem = describe_attention(q, k, k, attention_options);
  if (problem.device.type != DeviceType::kCPU) {
    throw_invalid_argument("q device", "cpu (maps are computed on the host)",
                           device_name(problem.device));
  }
  check_index("batch_index", batch_index, problem.batch, "batch of q");
  check_index("head", head, problem.q_heads, "heads of q");
  check_index("head_slot", head_slot, plan.head_slots(), "the plan's head slots");
  if (plan.shape.q_len != problem.q_len || plan.shape.kv_len != problem.kv_len) {
    throw_invalid_argument("plan shape",
                           "q_len " + std::to_string(problem.q_len) + ", kv_len " +
                               std::to_string(problem.kv_len) + " (those of q and k)",
                           "q_len " + std::to_string(plan.shape.q_len) + ", kv_len " +
                               std::to_string(plan.shape.kv_len));
  }
  return problem;
}

// The softmax probabilities of one query row (query_row [head_dim]) over its first `visible` keys
// (keys [kv_len, head_dim]) into weights[0, visible): scaled dot products in float, their
// exponentials summed in double, as the CPU reference computes them.
void softmax_row(const float* query_row, const float* keys, int64_t head_dim, float scale,
                 int64_t visible, std::vector<float>& weights) {
  float max_score = -std::numeric_limits<float>::infinity();
  for (int64_t key = 0; key < visible; ++key) {
    weights[key] = scale * cpu::dot(query_row, &keys[key * head_dim], head_dim);
    max_score = std::max(max_score, weights[key]);
  }
  double sum = 0.0;
  for (int64_t key = 0; key < visible; ++key) {
    weights[key] = std::exp(weights[key] - max_score);
    sum += weights[key];
  }
  const float inverse_sum = static_cast<float>(1.0 / sum);
  for (int64_t key = 0; key < visible; ++key) weights[key] *= inverse_sum;
}

// The maps of the plan's mask, with zero attention grids to pool into; with the rows also in the
// plan's query order when it is not the identity.
HeadAttentionMaps mask_maps(const Plan& plan, int64_t head_slot, const AttentionProblem& problem,
                            const AttentionMapOptions& options) {
  HeadAttentionMaps maps;
  maps.pool = options.pool;
  maps.mask = pool_plan_mask(plan, head_slot, options.cells);
  maps.attention = viz::make_grid(problem.q_len, problem.kv_len, options.cells);
  maps.kept = maps.attention;
  maps.density = plan_density(plan, head_slot);
  if (options.gathered_columns) maps.columns = pool_plan_columns(plan, head_slot, options.cells);
  std::vector<int64_t> order = plan.query_order(head_slot);
  if (!std::is_sorted(order.begin(), order.end())) {  // sorted = the identity
    maps.attention_permuted = maps.attention;
    maps.mask_permuted = pool_plan_mask(plan, head_slot, options.cells, RowOrder::kQueryOrder);
    maps.query_order = std::move(order);
  }
  return maps;
}

// The mean and minimum recall over the rows that see keys (NaN marks those that see none).
void summarise_recall(const std::vector<double>& row_recall, HeadAttentionMaps& maps) {
  double recall_sum = 0.0;
  int64_t rows_with_keys = 0;
  maps.recall_min = 1.0;
  for (double recall : row_recall) {
    if (std::isnan(recall)) continue;
    recall_sum += recall;
    ++rows_with_keys;
    maps.recall_min = std::min(maps.recall_min, recall);
  }
  if (rows_with_keys == 0) {
    maps.recall_min = 0.0;
  } else {
    maps.recall_mean = recall_sum / static_cast<double>(rows_with_keys);
  }
}

}  // namespace

HeadAttentionMaps pool_attention_maps(const TensorView& q, const TensorView& k,
                                      int64_t batch_index, int64_t head, const Plan& plan,
                                      int64_t head_slot, const AttentionMapOptions& options) {
  const AttentionProblem problem =
      checked_map_problem(q, k, batch_index, head, plan, head_slot, options);
  HeadAttentionMaps maps = mask_maps(plan, head_slot, problem, options);
  const bool permuted = !maps.query_order.empty();
  const std::vector<int64_t> order_index =
      permuted ? viz::inverse_permutation(maps.query_order) : std::vector<int64_t>{};

  const int64_t head_dim = problem.head_dim;
  const int64_t kv_len = problem.kv_len;
  const std::vector<float> queries = tools::head_rows_fp32(q, batch_index, head);
  const std::vector<float> keys =
      tools::head_rows_fp32(k, batch_index, head / problem.group_size());
  const detail::RowCoverage coverage(plan, head_slot);
  const viz::CellSplit rows = viz::row_split(maps.attention);
  const viz::CellSplit cols = viz::col_split(maps.attention);
  std::vector<int64_t> key_cell(static_cast<std::size_t>(kv_len));
  for (int64_t key = 0; key < kv_len; ++key) key_cell[key] = cols.cell_of(key);

  constexpr double kNoKeys = std::numeric_limits<double>::quiet_NaN();
  std::vector<double> row_recall(static_cast<std::size_t>(problem.q_len), kNoKeys);
  std::vector<std::mutex> permuted_row_locks(permuted ? rows.cells : 0);
  std::mutex progress_lock;
  int64_t pairs_done = 0;
  const int64_t pairs_total = causal_pair_count(problem.q_len, kv_len);
  const PoolMode mode = options.pool;

  detail::parallel_for(rows.cells, options.num_threads, [&](int64_t cell_row) {
    std::vector<float> weights(static_cast<std::size_t>(kv_len));
    std::vector<double> pooled(static_cast<std::size_t>(cols.cells));
    std::vector<double> pooled_kept(pooled.size());
    double* attention_cells = &maps.attention.values[cell_row * cols.cells];
    double* kept_cells = &maps.kept.values[cell_row * cols.cells];
    const int64_t first = rows.begin(cell_row);
    const int64_t last = rows.begin(cell_row + 1);
    int64_t pairs = 0;
    for (int64_t query = first; query < last; ++query) {
      const int64_t visible = std::clamp<int64_t>(query + problem.causal_offset() + 1, 0, kv_len);
      if (visible == 0) continue;
      pairs += visible;
      softmax_row(&queries[query * head_dim], keys.data(), head_dim, problem.scale, visible,
                  weights);
      std::fill(pooled.begin(), pooled.end(), 0.0);
      for (int64_t key = 0; key < visible; ++key) combine(mode, pooled[key_cell[key]], weights[key]);

      std::fill(pooled_kept.begin(), pooled_kept.end(), 0.0);
      double recall = 0.0;
      coverage.for_each_range(query, [&](int64_t begin, int64_t end) {
        for (int64_t key = begin; key < std::min(end, visible); ++key) {
          combine(mode, pooled_kept[key_cell[key]], weights[key]);
          recall += weights[key];
        }
      });
      row_recall[query] = recall;
      combine_row(mode, pooled, attention_cells);
      combine_row(mode, pooled_kept, kept_cells);
      if (permuted) {
        const int64_t permuted_row = rows.cell_of(order_index[query]);
        const std::lock_guard<std::mutex> lock(permuted_row_locks[permuted_row]);
        combine_row(mode, pooled, &maps.attention_permuted.values[permuted_row * cols.cells]);
      }
    }
    if (options.progress) {
      const std::lock_guard<std::mutex> lock(progress_lock);
      pairs_done += pairs;
      options.progress(pairs_done, pairs_total);
    }
  });

  finish_mean(mode, maps.attention);
  finish_mean(mode, maps.kept);
  finish_mean(mode, maps.attention_permuted);
  summarise_recall(row_recall, maps);
  return maps;
}

}  // namespace mmsparse
