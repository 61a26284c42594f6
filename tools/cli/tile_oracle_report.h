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
  int64_t sample_tiles = 0;        // query tiles per head; 0 = all
  double sparse_throughput = 1.0;  // the engine's sparse tiles' throughput relative to dense
  // `default_tiles`: the command's default sample (0 = all).
  void add_to(CLI::App& command, int64_t default_tiles);
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

// Per head `head_recalls[run][head]` (the recall each run reached; may be empty). q, k where the
// runs read them (device tensors on the GPU: the device sums), lse_dense a host [1, heads, q_len]
// fp32 view (copied to q's device when needed), or empty on the host: each summed row's LSE is
// then computed with its sums.
LayerTileOracle measure_tile_oracle(const TensorView& q, const TensorView& k,
                                    const TensorView& lse_dense, int64_t tile_rows,
                                    const TileOracleFlags& flags, int threads,
                                    const std::vector<std::vector<double>>& head_recalls);

// "tile oracle (...): recall 0.90: 3.10% of tiles, bound 32.0x; ..." for a layer.
void print_tile_oracle_line(const LayerTileOracle& oracle);
// One row per head: tiles and density at each recall (behaviours may be empty).
void print_tile_oracle_heads(const LayerTileOracle& oracle,
                             const std::vector<std::string>& behaviours);
// The footer's sentence on the oracle and "% bound".
std::string tile_oracle_footer(const LayerTileOracle& oracle);
nlohmann::json tile_oracle_json(const LayerTileOracle& oracle);

}  // namespace mmsparse::cli
