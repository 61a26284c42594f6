// The tile oracle (GUIDE §3, docs/tile_oracle.md): block sums of the dense softmax over the
// engine's tiles, and the fewest tiles that reach a recall.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <string>
#include <vector>

#include "core/backend.h"
#include "core/engine_chunks.h"
#include "core/parallel.h"
#include "cpu/dot.h"
#include "mmsparse/status.h"
#include "mmsparse/tools/metrics.h"
#include "tools/head_rows.h"
#include "tools/metrics/metric_checks.h"

namespace mmsparse {
namespace {

using detail::check_index;
using detail::check_rank;

// Cumulative tile masses land a few ulps off exact fractions; a tile whose inclusion reaches the
// target within this relative slack counts as reaching it (as for oracle_density).
constexpr double kRecallSlack = 1e-9;

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Keys row i sees under bottom-right aligned causal masking.
int64_t causal_keys(int64_t row, int64_t q_len, int64_t kv_len) {
  return std::clamp<int64_t>(row + kv_len - q_len + 1, 0, kv_len);
}

void check_tile_mass_arguments(const TensorView& q, const TensorView& k,
                               const TensorView& lse_dense, int64_t batch_index, int64_t head,
                               const TileMassOptions& options) {
  check_rank("q", q, 4, "[batch, q_len, q_heads, head_dim]");
  check_rank("k", k, 4, "[batch, kv_len, kv_heads, head_dim]");
  const bool lse_given = lse_dense.ndim != 0;
  if (!lse_given && q.device.type != DeviceType::kCPU) {
    throw_invalid_argument("lse_dense", "the dense LSE for CUDA tensors", "none");
  }
  if (lse_given) check_rank("lse_dense", lse_dense, 3, "[batch, q_heads, q_len]");
  if (q.shape[0] != k.shape[0] || q.shape[3] != k.shape[3]) {
    throw_invalid_argument("k shape", "batch and head_dim of q (" + q.shape_string() + ")",
                           k.shape_string());
  }
  if (k.shape[2] <= 0 || q.shape[2] % k.shape[2] != 0) {
    throw_invalid_argument("k heads (dimension 2)",
                           "a positive divisor of q_heads = " + std::to_string(q.shape[2]),
                           std::to_string(k.shape[2]));
  }
  if (k.dtype != q.dtype) {
    throw_invalid_argument("k dtype", std::string(dtype_name(q.dtype)) + " (the dtype of q)",
                           std::string(dtype_name(k.dtype)));
  }
  const std::vector<int64_t> lse_shape = {q.shape[0], q.shape[2], q.shape[1]};
  if (lse_given && (lse_dense.shape_vector() != lse_shape || lse_dense.dtype != DType::kFloat32)) {
    throw_invalid_argument(
        "lse_dense", "float32 [batch, q_heads, q_len] of q",
        std::string(dtype_name(lse_dense.dtype)) + " " + lse_dense.shape_string());
  }
  if (k.device != q.device || (lse_given && lse_dense.device != q.device)) {
    throw_invalid_argument("k, lse_dense device", device_name(q.device) + " (the device of q)",
                           device_name(k.device) + ", " + device_name(lse_dense.device));
  }
  check_index("batch_index", batch_index, q.shape[0]);
  check_index("head", head, q.shape[2]);
  if (options.tile_rows <= 0) {
    throw_invalid_argument("tile_rows", "> 0", std::to_string(options.tile_rows));
  }
  if (options.chunk_keys < 0) {
    throw_invalid_argument("chunk_keys", ">= 0 (0 = the engine's key chunk)",
                           std::to_string(options.chunk_keys));
  }
  if (options.sample_tiles < 0) {
    throw_invalid_argument("sample_tiles", ">= 0 (0 = all)", std::to_string(options.sample_tiles));
  }
  if (!std::isfinite(options.scale)) {
    throw_invalid_argument("scale", "a finite value (0 = 1/sqrt(head_dim))",
                           std::to_string(options.scale));
  }
}

// log Σ exp(scores); -inf for no scores.
double log_sum_exp(const std::vector<double>& scores) {
  if (scores.empty()) return -std::numeric_limits<double>::infinity();
  const double max_score = *std::max_element(scores.begin(), scores.end());
  double total = 0.0;
  for (double score : scores) total += std::exp(score - max_score);
  return max_score + std::log(total);
}

// The sums of one query tile's rows on the host: mass [key_chunks], zeroed by the caller. Without
// lse_dense (ndim 0), each row's LSE comes from its own scores, in fp64.
void host_tile_sums(const TensorView& q, const TensorView& lse_dense,
                    const std::vector<float>& keys, int64_t batch_index, int64_t head, float scale,
                    const TileMass& result, int64_t tile, double* mass) {
  const int64_t head_dim = q.shape[3];
  std::vector<float> query(static_cast<std::size_t>(head_dim));
  std::vector<double> scores;
  const int64_t row_end = std::min(result.q_len, (tile + 1) * result.tile_rows);
  for (int64_t row = tile * result.tile_rows; row < row_end; ++row) {
    const int64_t visible = causal_keys(row, result.q_len, result.kv_len);
    const int64_t base = batch_index * q.strides[0] + row * q.strides[1] + head * q.strides[2];
    for (int64_t d = 0; d < head_dim; ++d) query[d] = load_float(q, base + d * q.strides[3]);
    scores.resize(static_cast<std::size_t>(visible));
    for (int64_t j = 0; j < visible; ++j) {
      scores[j] =
          static_cast<double>(scale) * cpu::dot(query.data(), keys.data() + j * head_dim, head_dim);
    }
    const double lse = lse_dense.ndim != 0 ? detail::lse_at(lse_dense, batch_index, head, row)
                                           : log_sum_exp(scores);
    if (!std::isfinite(lse)) continue;  // a row without keys has no mass
    for (int64_t j = 0; j < visible; ++j) mass[j / result.chunk_keys] += std::exp(scores[j] - lse);
  }
}

// Causal pairs of query tile `tile` × key chunk `chunk`.
int64_t tile_pairs(const TileMass& mass, int64_t tile, int64_t chunk) {
  const int64_t key_begin = chunk * mass.chunk_keys;
  const int64_t key_end = std::min(mass.kv_len, key_begin + mass.chunk_keys);
  int64_t pairs = 0;
  const int64_t row_end = std::min(mass.q_len, (tile + 1) * mass.tile_rows);
  for (int64_t row = tile * mass.tile_rows; row < row_end; ++row) {
    pairs += std::max<int64_t>(
        0, std::min(key_end, causal_keys(row, mass.q_len, mass.kv_len)) - key_begin);
  }
  return pairs;
}

struct Candidate {
  int64_t sample = 0;  // index into mass.sampled
  double mass = 0.0;
  double cost = 0.0;
};

}  // namespace

TileMass tile_mass(const TensorView& q, const TensorView& k, const TensorView& lse_dense,
                   int64_t batch_index, int64_t head, const TileMassOptions& options) {
  check_tile_mass_arguments(q, k, lse_dense, batch_index, head, options);
  const bool lse_given = lse_dense.ndim != 0;
  TileMass result;
  result.q_len = q.shape[1];
  result.kv_len = k.shape[1];
  result.tile_rows = options.tile_rows;
  result.chunk_keys = options.chunk_keys > 0 ? options.chunk_keys : kGatherChunkKeys;
  result.query_tiles = ceil_div(result.q_len, result.tile_rows);
  result.key_chunks = ceil_div(result.kv_len, result.chunk_keys);
  const int64_t count = options.sample_tiles > 0
                            ? std::min(options.sample_tiles, result.query_tiles)
                            : result.query_tiles;
  result.sampled = sample_rows(result.query_tiles, count);
  result.mass.assign(result.sampled.size() * static_cast<std::size_t>(result.key_chunks), 0.0);
  if (result.sampled.empty() || result.key_chunks == 0) return result;

  const int64_t head_dim = q.shape[3];
  const float scale =
      options.scale != 0.0f ? options.scale : 1.0f / std::sqrt(static_cast<float>(head_dim));
  if (q.device.type != DeviceType::kCPU) {
    backend_for_tensors("tile_mass", q.device)
        .tile_mass(q, k, lse_dense, batch_index, head, scale, result.tile_rows, result.chunk_keys,
                   result.sampled, result.mass, options.stream);
    return result;
  }
  detail::check_host("q", q);
  detail::check_host("k", k);
  if (lse_given) detail::check_host("lse_dense", lse_dense);
  const int64_t kv_head = head / (q.shape[2] / k.shape[2]);
  const std::vector<float> keys = tools::head_rows_fp32(k, batch_index, kv_head);
  detail::parallel_for(
      static_cast<int64_t>(result.sampled.size()), options.num_threads, [&](int64_t n) {
        host_tile_sums(q, lse_dense, keys, batch_index, head, scale, result, result.sampled[n],
                       result.mass.data() + n * result.key_chunks);
      });
  return result;
}

TileOracle tile_oracle(const TileMass& mass, std::span<const double> recalls, TileCostUnit unit) {
  for (double recall : recalls) {
    if (!(recall > 0.0 && recall <= 1.0)) {
      throw_invalid_argument("recalls", "values in (0, 1]", std::to_string(recall));
    }
  }
  const std::size_t samples = mass.sampled.size();
  if (mass.mass.size() != samples * static_cast<std::size_t>(mass.key_chunks)) {
    throw_invalid_argument("mass", "[sampled, key_chunks] block sums (from tile_mass)",
                           std::to_string(mass.mass.size()) + " values");
  }
  TileOracle oracle;
  oracle.sampled_tiles = static_cast<int64_t>(samples);
  oracle.query_tiles = mass.query_tiles;

  // Every causal tile of the sample with its mass and cost; dense cost per sampled query tile.
  std::vector<Candidate> candidates;
  std::vector<double> dense_cost(samples, 0.0);
  double total_mass = 0.0;
  for (std::size_t n = 0; n < samples; ++n) {
    for (int64_t c = 0; c < mass.key_chunks; ++c) {
      const int64_t pairs = tile_pairs(mass, mass.sampled[n], c);
      if (pairs == 0) continue;
      const double cost = unit == TileCostUnit::kTiles ? 1.0 : static_cast<double>(pairs);
      const double tile_mass_value = mass.mass[n * mass.key_chunks + c];
      candidates.push_back({static_cast<int64_t>(n), tile_mass_value, cost});
      dense_cost[n] += cost;
      total_mass += tile_mass_value;
    }
  }
  oracle.causal_tiles = static_cast<int64_t>(candidates.size());
  // Mass per cost, descending: with unit costs, by mass (exactly the fewest tiles); with pair
  // costs, the order of the fractional knapsack (docs/tile_oracle.md).
  std::sort(candidates.begin(), candidates.end(), [](const Candidate& a, const Candidate& b) {
    return a.mass * b.cost > b.mass * a.cost;
  });
  const double dense_total = std::accumulate(dense_cost.begin(), dense_cost.end(), 0.0);

  for (double recall : recalls) {
    TileOracleLevel level;
    level.recall = recall;
    std::vector<double> chosen_cost(samples, 0.0);
    const double target = recall * total_mass * (1.0 - kRecallSlack);
    double covered = 0.0;
    for (const Candidate& candidate : candidates) {
      if (covered >= target || total_mass <= 0.0) break;
      ++level.tiles;
      // The last tile counts for the share of it the target needs: a lower bound on every tile
      // set's cost (the fractional knapsack), within one tile of the greedy set's.
      const double needed = target - covered;
      const double part =
          candidate.mass > needed && candidate.mass > 0.0 ? needed / candidate.mass : 1.0;
      chosen_cost[candidate.sample] += part * candidate.cost;
      covered += candidate.mass;
    }
    const double chosen_total = std::accumulate(chosen_cost.begin(), chosen_cost.end(), 0.0);
    level.tile_density =
        oracle.causal_tiles > 0 ? static_cast<double>(level.tiles) / oracle.causal_tiles : 0.0;
    level.cost_share = dense_total > 0.0 ? chosen_total / dense_total : 0.0;
    // Ratio estimator over sampled query tiles (linearised), with the finite population
    // correction; the selection threshold is taken as fixed.
    const double n = static_cast<double>(samples);
    if (samples >= 2 && oracle.sampled_tiles < oracle.query_tiles && dense_total > 0.0) {
      double squares = 0.0;
      for (std::size_t s = 0; s < samples; ++s) {
        const double residual = chosen_cost[s] - level.cost_share * dense_cost[s];
        squares += residual * residual;
      }
      const double mean_dense = dense_total / n;
      const double correction = 1.0 - n / static_cast<double>(oracle.query_tiles);
      level.cost_share_stderr = std::sqrt(correction * squares / (n * (n - 1.0))) / mean_dense;
    }
    oracle.levels.push_back(level);
  }
  return oracle;
}

double tile_oracle_speedup_bound(double cost_share, double sparse_throughput) {
  if (!(sparse_throughput > 0.0)) {
    throw_invalid_argument("sparse_throughput", "> 0 (relative to dense)",
                           std::to_string(sparse_throughput));
  }
  if (!(cost_share > 0.0)) return std::numeric_limits<double>::infinity();
  return sparse_throughput / cost_share;
}

}  // namespace mmsparse
