#include "tile_oracle_report.h"

#include <fmt/core.h>

#include <algorithm>
#include <cmath>
#include <iterator>
#include <limits>
#include <numeric>
#include <optional>

#include "mmsparse/attention.h"
#include "mmsparse/status.h"

namespace mmsparse::cli {
namespace {

constexpr double kPercent = 100.0;
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr std::size_t kLevels = std::size(kTileOracleRecalls);

const char* unit_name(TileCostUnit unit) {
  return unit == TileCostUnit::kTiles ? "tiles" : "pairs";
}

}  // namespace

void TileOracleFlags::add_to(CLI::App& command, int64_t gpu_default, int64_t cpu_default) {
  gpu_default_tiles = gpu_default;
  cpu_default_tiles = cpu_default;
  command
      .add_option("--oracle-tiles", sample_tiles,
                  fmt::format("query tiles per head summed for the tile oracle, spread evenly (0 = "
                              "all; default {} on the GPU, {} on the CPU)",
                              gpu_default, cpu_default))
      ->check(CLI::NonNegativeNumber);
  command
      .add_option("--sparse-throughput", sparse_throughput,
                  "the engine's throughput on sparse tiles relative to dense, for the tile-oracle "
                  "bound (1 = as fast as dense tiles)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
}

int64_t TileOracleFlags::tiles(bool gpu) const {
  if (sample_tiles >= 0) return sample_tiles;
  return gpu ? gpu_default_tiles : cpu_default_tiles;
}

double LayerTileOracle::mean_cost_share(std::size_t level) const {
  double sum = 0.0;
  for (const TileOracle& head : heads) sum += head.levels.at(level).cost_share;
  return heads.empty() ? kNaN : sum / static_cast<double>(heads.size());
}

double LayerTileOracle::mean_cost_share_stderr(std::size_t level) const {
  // The heads' estimates share the sampled query tiles, so their errors may correlate: adding
  // standard errors (not variances) bounds the mean's from above.
  double sum = 0.0;
  for (const TileOracle& head : heads) sum += head.levels.at(level).cost_share_stderr;
  return heads.empty() ? kNaN : sum / static_cast<double>(heads.size());
}

double LayerTileOracle::bound(std::size_t level) const {
  return tile_oracle_speedup_bound(mean_cost_share(level), sparse_throughput);
}

double LayerTileOracle::run_bound(std::size_t run) const {
  const std::vector<double>& shares = run_cost_shares.at(run);
  double sum = 0.0;
  for (double share : shares) {
    if (std::isnan(share)) return kNaN;
    sum += share;
  }
  if (shares.empty()) return kNaN;
  return tile_oracle_speedup_bound(sum / static_cast<double>(shares.size()), sparse_throughput);
}

LayerTileOracle measure_tile_oracle(const TensorView& q, const TensorView& k,
                                    const TensorView& lse_dense, int64_t tile_rows,
                                    const TileOracleFlags& flags, int threads,
                                    const std::vector<std::vector<double>>& head_recalls,
                                    const std::vector<int64_t>& heads, TileCostUnit host_unit) {
  const bool on_device = q.device.type != DeviceType::kCPU;
  std::optional<DeviceTensor> device_lse;
  if (on_device) device_lse.emplace(DeviceTensor::from_host(lse_dense, q.device));
  const TensorView lse = on_device ? device_lse->view() : lse_dense;

  LayerTileOracle oracle;
  // The engine computes whole tiles.
  oracle.unit = on_device ? TileCostUnit::kTiles : host_unit;
  oracle.tile_rows = tile_rows;
  oracle.sparse_throughput = flags.sparse_throughput;
  oracle.run_cost_shares.assign(head_recalls.size(), {});
  TileMassOptions options;
  options.tile_rows = tile_rows;
  options.sample_tiles = flags.tiles(on_device);
  options.num_threads = threads;
  std::vector<int64_t> summed = heads;
  if (summed.empty()) {
    summed.resize(static_cast<std::size_t>(q.shape[2]));
    std::iota(summed.begin(), summed.end(), int64_t{0});
  }
  for (std::size_t index = 0; index < summed.size(); ++index) {
    const int64_t head = summed[index];
    const TileMass mass = tile_mass(q, k, lse, 0, head, options);
    oracle.chunk_keys = mass.chunk_keys;
    oracle.query_tiles = mass.query_tiles;
    oracle.sampled_tiles = static_cast<int64_t>(mass.sampled.size());
    std::vector<double> recalls(std::begin(kTileOracleRecalls), std::end(kTileOracleRecalls));
    // Each run's recall on this head, as a further level (clamped: rounding can pass 1).
    std::vector<std::size_t> run_level(head_recalls.size(), 0);
    for (std::size_t run = 0; run < head_recalls.size(); ++run) {
      const std::vector<double>& run_recalls = head_recalls[run];
      const bool known = index < run_recalls.size() && std::isfinite(run_recalls[index]) &&
                         run_recalls[index] > 0.0;
      run_level[run] = known ? recalls.size() : 0;
      if (known) recalls.push_back(std::min(1.0, run_recalls[index]));
    }
    TileOracle head_oracle = tile_oracle(mass, recalls, oracle.unit);
    for (std::size_t run = 0; run < head_recalls.size(); ++run) {
      oracle.run_cost_shares[run].push_back(
          run_level[run] > 0 ? head_oracle.levels[run_level[run]].cost_share : kNaN);
    }
    head_oracle.levels.resize(kLevels);
    oracle.heads.push_back(std::move(head_oracle));
  }
  return oracle;
}

LayerTileOracle search_tile_oracle(const TensorView& q, const TensorView& k, const TensorView& v,
                                   bool gpu, int64_t tile_rows, const TileOracleFlags& flags,
                                   int threads, const std::vector<int64_t>& heads,
                                   const std::vector<double>& chosen_recalls) {
  const std::vector<std::vector<double>> runs = {chosen_recalls};
  if (!gpu) {
    return measure_tile_oracle(q, k, TensorView{}, tile_rows, flags, threads, runs, heads,
                               TileCostUnit::kTiles);
  }
  // The engine runs 16-bit inputs; fp32 calibration tensors run as bf16, as the search times them.
  const DType dtype = q.dtype == DType::kFloat32 ? DType::kBFloat16 : q.dtype;
  const Device device{DeviceType::kCUDA, 0};
  const DeviceTensor device_q = DeviceTensor::from_host(to_contiguous(q, dtype).view(), device);
  const DeviceTensor device_k = DeviceTensor::from_host(to_contiguous(k, dtype).view(), device);
  const DeviceTensor device_v = DeviceTensor::from_host(to_contiguous(v, dtype).view(), device);
  DeviceTensor out(dtype, q.shape_vector(), device);
  DeviceTensor lse(DType::kFloat32, {q.shape[0], q.shape[2], q.shape[1]}, device);
  attention_dense(device_q.view(), device_k.view(), device_v.view(), out.view(), lse.view());
  Tensor host_lse(DType::kFloat32, {q.shape[0], q.shape[2], q.shape[1]});
  lse.copy_to_host(host_lse.view());
  return measure_tile_oracle(device_q.view(), device_k.view(), host_lse.view(), tile_rows, flags,
                             threads, runs, heads);
}

void print_tile_oracle_line(const LayerTileOracle& oracle) {
  std::string line = fmt::format(
      "tile oracle ({}x{} tiles, cost in {}, {} of {} query tiles per head{}):", oracle.tile_rows,
      oracle.chunk_keys, unit_name(oracle.unit), oracle.sampled_tiles, oracle.query_tiles,
      oracle.sampled_tiles < oracle.query_tiles ? ", spread evenly" : "");
  for (std::size_t level = 0; level < kLevels; ++level) {
    const double error = oracle.mean_cost_share_stderr(level);
    line += fmt::format(
        "{} recall {:.2f}: {:.2f}%{} of dense cost, bound {:.1f}x", level ? ";" : "",
        kTileOracleRecalls[level], kPercent * oracle.mean_cost_share(level),
        error > 0.0 ? fmt::format(" (+-{:.2f}%)", kPercent * error) : "", oracle.bound(level));
  }
  fmt::print("{}\n", line);
}

void print_tile_oracle_heads(const LayerTileOracle& oracle,
                             const std::vector<std::string>& behaviours) {
  fmt::print("{:>5} {:<10}", "head", "behaviour");
  for (double recall : kTileOracleRecalls) {
    fmt::print(" {:>9} {:>8}", fmt::format("tiles@{:.2f}", recall), "cost");
  }
  fmt::print("\n");
  for (std::size_t head = 0; head < oracle.heads.size(); ++head) {
    fmt::print("{:>5} {:<10}", head, head < behaviours.size() ? behaviours[head] : "-");
    for (const TileOracleLevel& level : oracle.heads[head].levels) {
      fmt::print(" {:>9} {:>7.2f}%", level.tiles, kPercent * level.cost_share);
    }
    fmt::print("\n");
  }
}

std::string tile_oracle_footer(const LayerTileOracle& oracle) {
  return fmt::format(
      "tile oracle: per head, the fewest {}x{} tiles (query rows x keys) whose true softmax mass "
      "reaches the recall, taken over all query tiles by mass per cost (docs/tile_oracle.md); "
      "cost: {} over the dense cost{}; bound: dense time / the oracle tiles' time at {:.2f}x "
      "dense's throughput per {}, every head at the recall; % bound: the run's speedup over the "
      "bound with each head at the recall the run reached on it (tiles@r: tiles taken in the "
      "sample)",
      oracle.tile_rows, oracle.chunk_keys, unit_name(oracle.unit),
      oracle.sampled_tiles < oracle.query_tiles
          ? fmt::format(", estimated on {} of {} query tiles per head (+- one standard error)",
                        oracle.sampled_tiles, oracle.query_tiles)
          : "",
      oracle.sparse_throughput, oracle.unit == TileCostUnit::kTiles ? "tile" : "pair");
}

nlohmann::json tile_oracle_json(const LayerTileOracle& oracle) {
  nlohmann::json json = {
      {"cost_unit", unit_name(oracle.unit)}, {"tile_rows", oracle.tile_rows},
      {"chunk_keys", oracle.chunk_keys},     {"sampled_query_tiles", oracle.sampled_tiles},
      {"query_tiles", oracle.query_tiles},   {"sparse_throughput", oracle.sparse_throughput}};
  for (std::size_t level = 0; level < kLevels; ++level) {
    nlohmann::json entry = {{"recall", kTileOracleRecalls[level]},
                            {"mean_cost_share", oracle.mean_cost_share(level)},
                            {"mean_cost_share_stderr", oracle.mean_cost_share_stderr(level)},
                            {"bound", oracle.bound(level)}};
    for (const TileOracle& head : oracle.heads) {
      entry["heads"].push_back({{"tiles", head.levels[level].tiles},
                                {"tile_density", head.levels[level].tile_density},
                                {"cost_share", head.levels[level].cost_share},
                                {"cost_share_stderr", head.levels[level].cost_share_stderr}});
    }
    json["levels"].push_back(entry);
  }
  return json;
}

}  // namespace mmsparse::cli
