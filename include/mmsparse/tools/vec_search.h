#pragma once
// VecAttention's offline search (paper §3.1 "Dynamic Programming for Offline Search of Per-Head
// Filter Ratios", Eq. 4; docs/vec.md): for each (layer, head) of a calibration input, alpha by
// bisection toward a recall target, every alpha tried kept as a (density, recall) sample; then a
// dynamic program over all heads picks one sample per head, maximising the summed recall under a
// mean density (1 - the paper's target sparsity). The result is a per-model PatternConfig of
// "vec:alpha_ppm=..." heads, which may sit beside MMInference heads in one config.
//
// Recall and density are measured as `mmsparse search` measures them (docs/search.md): recall the
// mean of exp(LSE_plan - LSE_dense) over sampled rows, exact per row; density the plan's computed
// pairs over the causal pairs.

#include <cstdint>
#include <span>
#include <vector>

#include "mmsparse/layout.h"
#include "mmsparse/patterns.h"
#include "mmsparse/tensor.h"

namespace mmsparse {

struct VecSearchOptions {
  // The vec spec every head starts from (pooling, group, causal); alpha_ppm is searched.
  PatternSpec base{"vec", {}};
  double target_recall = 0.95;  // the bisection's aim per head
  int iterations = 20;          // bisection steps over alpha_ppm in [0, 1000000] (2^20 > 10^6)
  // Denser samples after the bisection, at its alpha times extra_ratio^k for k = 1..extra_samples
  // (the authors' 8 at 0.9^k), so that the DP can give a head more than its target.
  int extra_samples = 8;
  double extra_ratio = 0.8;
  int64_t sample_rows = 64;  // rows scored per head, spread evenly, the last one included
  int64_t tile_rows = kDefaultTileRows;
  float scale = 0.0f;  // softmax scale; 0 means 1/sqrt(head_dim)
};

// One alpha tried on one head.
struct VecSample {
  int64_t alpha_ppm = 0;
  double density = 0.0;  // computed pairs / causal (or, non-causal, all) pairs
  double recall = 0.0;
  bool operator==(const VecSample&) const = default;
};

// One head's samples, ascending alpha, and the largest alpha the bisection found to reach the
// target (0 when none does but alpha 0, which keeps every key).
struct VecHeadSearch {
  std::vector<VecSample> samples;
  int64_t alpha_ppm = 0;
};

// The bisection on one query head: q [batch, q_len, q_heads, head_dim], k and v [batch, kv_len,
// kv_heads, head_dim] host views (batch element 0 is used), `head` a query head. Recall falls as
// alpha grows (the kept sets are nested), so the largest alpha at the target is well defined.
VecHeadSearch search_vec_head(const TensorView& q, const TensorView& k, const TensorView& v,
                              int64_t head, const VecSearchOptions& options);

// The sample of one alpha on one head (options.base with alpha_ppm = alpha_ppm), measured as the
// bisection measures it.
VecSample score_vec_alpha(const TensorView& q, const TensorView& k, const TensorView& v,
                          int64_t head, const VecSearchOptions& options, int64_t alpha_ppm);

// Eq. 4: one sample per head (heads[h] non-empty) maximising the summed recall with the mean
// density at most `max_mean_density`, densities rounded up to 1/density_steps; returns the chosen
// index per head. Throws naming max_mean_density when even the sparsest samples exceed it.
std::vector<std::size_t> allocate_vec_heads(const std::vector<std::vector<VecSample>>& heads,
                                            double max_mean_density, int64_t density_steps = 200);

// Writes the chosen alpha of each head into `config` as layer `layer`'s head specs: the base spec
// with alpha_ppm set, every parameter explicit. heads[i] is query head head_ids[i] (i itself when
// head_ids is empty). Other heads and layers of the config (MMInference heads, say) stay as they
// are.
void add_vec_heads(PatternConfig& config, int64_t layer, const VecSearchOptions& options,
                   const std::vector<std::vector<VecSample>>& heads,
                   const std::vector<std::size_t>& chosen, std::span<const int64_t> head_ids = {});

}  // namespace mmsparse
