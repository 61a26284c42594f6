#pragma once
// The accuracy vocabulary (GUIDE §3), one definition for every tool.
//   recall (row)      exp(LSE_plan - LSE_dense): share of the true softmax mass the plan covers
//   output error      ||O_plan - O_dense|| / ||O_dense|| per head
//   NMSE              mean((O_plan - O_dense)^2) / mean(O_dense^2) per head (BlindSight)
//   density           computed pairs / causal pairs (all pairs for non-causal attention)
//   oracle density    fewest pairs (true top entries per row) reaching a recall target / causal
//                     pairs (all pairs for non-causal attention)
//   FLOPs             4 · computed pairs · head_dim
//   needle coverage   needles whose pair with every querying row the plan computes, and the share
//                     of the needles' dense attention probability the plan keeps (below)

#include <cstdint>
#include <limits>
#include <span>
#include <vector>

#include "mmsparse/plan.h"
#include "mmsparse/tensor.h"

namespace mmsparse {

struct HeadAccuracy {
  double recall_mean = 0.0;  // over rows that have at least one key in the dense reference
  double recall_min = 0.0;
  double output_error = 0.0;
  double nmse = 0.0;
};

// out_* [batch, q_len, q_heads, head_dim], lse_* [batch, q_heads, q_len]; host views.
HeadAccuracy compare_head(const TensorView& out_plan, const TensorView& lse_plan,
                          const TensorView& out_dense, const TensorView& lse_dense,
                          int64_t batch_index, int64_t head);
// Per query row; NaN for rows with no keys in the dense reference (nothing to recall).
std::vector<double> row_recall(const TensorView& lse_plan, const TensorView& lse_dense,
                               int64_t batch_index, int64_t head);

// Pairs a causal (or full) attention computes.
int64_t causal_pair_count(int64_t q_len, int64_t kv_len, bool causal = true);
// Computed pairs of the head slot over the causal pairs, or over all pairs when `causal` is false.
double plan_density(const Plan& plan, int64_t head_slot, bool causal = true);
double attention_flops(int64_t pairs, int64_t head_dim);

struct OracleDensity {
  double density = 0.0;  // sum over sampled rows of keys needed / sum of visible keys
  int64_t rows_sampled = 0;
};
// For one query head: the rows `rows` (positions in [0, q_len)) of q against the keys of the
// head's KV head each row sees: its causal keys, or every key when `causal` is false. Exact per
// row; the density is a ratio estimate over the sampled rows (all rows when `rows` is empty).
OracleDensity oracle_density(const TensorView& q, const TensorView& k, int64_t batch_index,
                             int64_t head, double recall, std::span<const int64_t> rows = {},
                             float scale = 0.0f, int num_threads = 0, bool causal = true);

// Rows spread evenly over [0, q_len), `count` of them, always including the last.
std::vector<int64_t> sample_rows(int64_t q_len, int64_t count);

// --- Needle coverage (V-NIAH / MM-NIAH-style retrieval) ---------------------------------------
// A needle is a key that a question's queries must read. For one head slot, needle keys n and the
// querying rows R (query positions, e.g. the final question's rows):
//   covered(n)     the plan computes the pair (i, n), after its mask policy, for every row i in R;
//   p(i, n)        exp(scale · q_i · k_n − LSE_dense(i)), row i's dense softmax probability on n;
//   mass kept(n)   Σ_{i∈R} [pair (i, n) computed] · p(i, n) / Σ_{i∈R} p(i, n): the share of the
//                  needle's dense attention that the plan keeps (NaN when every p(i, n) is 0);
//   dense mass(n)  mean over R of p(i, n): how strongly the head reads the needle at all.
// The head's mass kept pools every needle: Σ_n Σ_i kept p / Σ_n Σ_i p. A needle must be visible to
// every querying row under causal masking (key <= row + kv_len − q_len).
struct NeedleCoverage {
  int64_t needles = 0;
  int64_t covered = 0;
  std::vector<uint8_t> needle_covered;  // [needles] 1 = covered(n)
  // Filled when dense inputs are given (NaN otherwise):
  std::vector<double> needle_mass_kept;   // [needles]
  std::vector<double> needle_dense_mass;  // [needles]
  double mass_kept = std::numeric_limits<double>::quiet_NaN();
  // The pooled sums behind mass_kept, so that callers can pool over heads too.
  double kept_probability = 0.0;
  double dense_probability = 0.0;
};

// What the mass measure reads: host views, any strides, bf16 / fp16 / fp32.
//   q [batch, q_len, q_heads, head_dim], k [batch, kv_len, kv_heads, head_dim] (GQA as in
//   attention.h), lse_dense [batch, q_heads, q_len] fp32 from dense attention with `scale`.
struct NeedleDenseInputs {
  TensorView q;
  TensorView k;
  TensorView lse_dense;
  int64_t batch_index = 0;
  float scale = 0.0f;  // 0 means 1/sqrt(head_dim)
};

// Coverage of `needle_keys` by head slot `head_slot` (batch element × heads + query head) of the
// plan for `query_rows`; with `dense`, also the mass measure for the slot's query head, batch
// element dense->batch_index (a plan of batch 1 serves every batch element).
NeedleCoverage needle_coverage(const Plan& plan, int64_t head_slot,
                               std::span<const int64_t> needle_keys,
                               std::span<const int64_t> query_rows,
                               const NeedleDenseInputs* dense = nullptr);

// --- Tile oracle (GUIDE §3) -------------------------------------------------------------------
// The best any tile-granular method can do on an input: the fewest engine tiles (query tile of
// tile_rows rows × key chunk of chunk_keys keys) whose true softmax mass reaches recall r.
//   mass(t, c)   Σ_{rows i of query tile t} Σ_{causal keys j of chunk c} exp(s_ij − LSE_dense(i)),
//                s_ij = scale · q_i · k_j; a tile's mass is the recall it adds times the row count.
//   recall(T)    mean over rows of the covered mass = Σ_{(t,c)∈T} mass / Σ_all mass: additive over
//                tiles, so the best set is taken over all query tiles together (global greedy),
//                never per query tile (tiles where attention concentrates reach r cheaply and pay
//                for diffuse ones).
// Tiles are counted where they hold at least one causal pair (the engine computes no others).
// docs/tile_oracle.md states what the greedy order guarantees and how sampling is estimated.

// The block sums of one query head over the sampled query tiles.
struct TileMass {
  int64_t q_len = 0;
  int64_t kv_len = 0;
  int64_t tile_rows = 0;
  int64_t chunk_keys = 0;
  int64_t query_tiles = 0;       // all query tiles of the head: ceil(q_len / tile_rows)
  int64_t key_chunks = 0;        // ceil(kv_len / chunk_keys)
  std::vector<int64_t> sampled;  // [sampled] query tile indices, ascending
  std::vector<double> mass;      // [sampled, key_chunks] (0 where a tile has no causal pair)
};

struct TileMassOptions {
  int64_t tile_rows = kDefaultTileRows;  // the engine's query tile: preferred_tile_rows(...)
  int64_t chunk_keys = 0;                // 0 = the engine's key chunk, kGatherChunkKeys (128)
  int64_t sample_tiles = 0;  // query tiles sampled, spread evenly (sample_rows); 0 = all
  float scale = 0.0f;        // 0 = 1/sqrt(head_dim)
  int num_threads = 0;       // CPU threads; 0 = hardware concurrency
  void* stream = nullptr;    // cudaStream_t for CUDA tensors
};

// q [batch, q_len, q_heads, head_dim], k [batch, kv_len, kv_heads, head_dim] (GQA), lse_dense
// [batch, q_heads, q_len] fp32 from dense attention with the same scale. Host tensors are summed
// here (fp64 accumulation; an empty lse_dense view, ndim 0, computes each summed row's LSE from its
// own scores, so a sample needs no dense run); CUDA tensors (lse_dense on the same device) by the
// CUDA engine's one-pass kernel (fp32 scores from the stored dtype).
TileMass tile_mass(const TensorView& q, const TensorView& k, const TensorView& lse_dense,
                   int64_t batch_index, int64_t head, const TileMassOptions& options = {});

// What a tile costs: one unit per tile (the engine computes a tile whole, masked or not), or its
// causal pairs (the CPU reference computes pairs).
enum class TileCostUnit { kTiles, kPairs };

struct TileOracleLevel {
  double recall = 0.0;             // the target r
  int64_t tiles = 0;               // tiles taken in the sample, greedy by mass per cost
  double tile_density = 0.0;       // tiles taken / causal tiles of the sampled query tiles
  double cost_share = 0.0;         // lower bound on cost of reaching r / dense cost (see the doc)
  double cost_share_stderr = 0.0;  // standard error from sampling query tiles; 0 with all tiles
};

struct TileOracle {
  int64_t sampled_tiles = 0;            // query tiles summed
  int64_t query_tiles = 0;              // query tiles of the head
  int64_t causal_tiles = 0;             // tiles with a causal pair among the sampled query tiles
  std::vector<TileOracleLevel> levels;  // one per requested recall, in order
};

// The recall levels of issue-level reports.
inline constexpr double kTileOracleRecalls[] = {0.90, 0.95, 0.98};

TileOracle tile_oracle(const TileMass& mass, std::span<const double> recalls,
                       TileCostUnit unit = TileCostUnit::kTiles);

// The bound on speedup of `cost_share` (from tile_oracle, or the mean over a layer's heads):
// dense time / time of the oracle's tiles = sparse_throughput / cost_share, where
// sparse_throughput is the engine's throughput on sparse tiles relative to dense (per cost unit,
// measured elsewhere; 1 = sparse tiles run as fast as dense ones).
double tile_oracle_speedup_bound(double cost_share, double sparse_throughput = 1.0);

}  // namespace mmsparse
