#pragma once
// The tile oracle in the CLI's reports (docs/tile_oracle.md): per head and per layer, the fewest
// engine tiles reaching recall 0.90 / 0.95 / 0.98, the bound on speedup they give, and each
// pattern run's share of the bound at the recall it reached on each head.

#include <CLI/CLI.hpp>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "mmsparse/device.h"
#include "mmsparse/tensor.h"
#include "mmsparse/tools/metrics.h"

namespace mmsparse::cli {

// --oracle-tiles and --sparse-throughput.
struct TileOracleFlags {
  int64_t sample_tiles = -1;       // query tiles per head; 0 = all; -1: the device's default
  double sparse_throughput = 1.0;  // the engine's sparse tiles' throughput relative to dense
  int64_t gpu_default_tiles = 0;
  int64_t cpu_default_tiles = 0;
  // The command's defaults per device (0 = all query tiles).
  void add_to(CLI::App& command, int64_t gpu_default, int64_t cpu_default);
  int64_t tiles(bool gpu) const;
};

// Per-head oracles at kTileOracleRecalls and, per run, at the recall that run reached on each
// head.
struct LayerTileOracle {
  TileCostUnit unit = TileCostUnit::kTiles;
  int64_t tile_rows = 0;
  int64_t chunk_keys = 0;
  int64_t sampled_tiles = 0;  // per head
  int64_t query_tiles = 0;    // per head
  double sparse_throughput = 1.0;
  std::vector<TileOracle> heads;  // levels at kTileOracleRecalls
  // Per run: per head, the oracle's cost share at the run's recall on that head (NaN: no recall).
  std::vector<std::vector<double>> run_cost_shares;

  // Mean over heads of the cost share at level `level`, its standard error, and the bound.
  double mean_cost_share(std::size_t level) const;
  double mean_cost_share_stderr(std::size_t level) const;
  double bound(std::size_t level) const;
  // The bound for run `run`: every head at the recall the run reached on it; NaN without recalls.
  double run_bound(std::size_t run) const;
};

// The oracle of query heads `heads` (empty: all), `head_recalls[run][n]` the recall each run
// reached on heads[n] (may be empty). q, k where the runs read them (device tensors on the GPU:
// the device sums; cost in tiles; on the host: cost in `host_unit`), lse_dense a host
// [1, heads, q_len] fp32 view (copied to q's device when needed), or empty (ndim 0) on the host:
// each summed row's LSE is then computed with its sums.
LayerTileOracle measure_tile_oracle(const TensorView& q, const TensorView& k,
                                    const TensorView& lse_dense, int64_t tile_rows,
                                    const TileOracleFlags& flags, int threads,
                                    const std::vector<std::vector<double>>& head_recalls,
                                    const std::vector<int64_t>& heads = {},
                                    TileCostUnit host_unit = TileCostUnit::kPairs);

// A searched layer's oracle, in the search's tiles (`tile_rows` × 128 keys, cost in tiles as the
// cost models count chunks): on the GPU from the engine's dense LSE (q, k, v host views copied,
// fp32 as bf16), on the host from each summed row's own LSE (no dense run). `chosen_recalls[n]`:
// the chosen spec's recall on heads[n].
LayerTileOracle search_tile_oracle(const TensorView& q, const TensorView& k, const TensorView& v,
                                   bool gpu, int64_t tile_rows, const TileOracleFlags& flags,
                                   int threads, const std::vector<int64_t>& heads,
                                   const std::vector<double>& chosen_recalls);

// "tile oracle (...): recall 0.90: 3.10% of tiles, bound 32.0x; ..." for a layer.
void print_tile_oracle_line(const LayerTileOracle& oracle);
// One row per head: tiles and density at each recall (behaviours may be empty).
void print_tile_oracle_heads(const LayerTileOracle& oracle,
                             const std::vector<std::string>& behaviours);
// The footer's sentence on the oracle and "% bound".
std::string tile_oracle_footer(const LayerTileOracle& oracle);
nlohmann::json tile_oracle_json(const LayerTileOracle& oracle);

}  // namespace mmsparse::cli
