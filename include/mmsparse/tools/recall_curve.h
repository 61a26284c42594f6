#pragma once
// Recall-versus-density curves (VecAttention's Fig. 1/3; docs/vec.md "Recall against density"):
// for one query head, families of pattern specs (vec alphas, vertical-slash counts, A-shape local
// widths, ...) each give a point (density, recall), and two oracles give the best any method can
// reach:
//   token oracle   the fewest (row, key) pairs whose true softmax mass reaches a mean recall r:
//                  recall is additive over pairs (each row's probabilities sum to 1), so taking
//                  pairs by probability, largest first, over all rows together is exactly optimal
//                  (any k pairs hold at most the k largest probabilities). Every method's point
//                  lies on or to the right of this curve (a test checks it).
//   tile oracle    the same at the engine's tile granularity (metrics.h tile_oracle, cost in
//                  pairs): the best a block-sparse (top-k tiles) method can do. Causal only.
//
// Every method and the token oracle are measured on the same sampled query rows (spread evenly,
// the last included; every row when sample_rows is 0): a point's density is the pairs the plan
// gives those rows over the pairs they see (causal: their causal keys; non-causal: every key), its
// recall the mean over them of the softmax mass the plan keeps, exact per row. On the same rows
// the comparison with the token oracle is exact; the tile oracle sums its own sample of query
// tiles. vec specs are measured from their selection margins (score − running maximum), computed
// once per (pooling, group, causal), so a whole alpha sweep costs one selection pass.

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "mmsparse/layout.h"
#include "mmsparse/patterns.h"
#include "mmsparse/plan.h"
#include "mmsparse/tensor.h"
#include "mmsparse/tools/viz.h"

namespace mmsparse {

// A family of specs, one point each (e.g. "vec": vec at alpha_ppm 1000 ... 1000000).
struct CurveFamily {
  std::string name;
  std::vector<PatternSpec> specs;  // resolved specs (defaults filled)
};

struct RecallCurveOptions {
  int64_t sample_rows = 256;  // query rows scored; 0 = every row
  std::vector<double> oracle_recalls = {0.5,  0.6,  0.7,  0.8,   0.85, 0.9,
                                        0.95, 0.98, 0.99, 0.995, 0.999};
  int64_t tile_rows = kDefaultTileRows;  // plans' query tiles, and the tile oracle's
  int64_t tile_samples = 32;             // query tiles the tile oracle sums; 0 = all
  bool tile_oracle = true;               // causal inputs only
  bool causal = true;
  const ModalityLayout* layout = nullptr;  // for specs that read one
  float scale = 0.0f;                      // 0 = 1/sqrt(head_dim)
  int num_threads = 0;                     // 0 = hardware concurrency
  // vec specs from their selection margins (one pass for a whole sweep); false builds their plans
  // like any other spec's (the same points, slower: tests compare the two).
  bool vec_from_margins = true;
};

struct CurvePoint {
  std::string spec;  // the spec of a method's point; empty for oracle points
  double density = 0.0;
  double recall = 0.0;
  // The token oracle's density at this point's recall (method points): density / this is how
  // many times the oracle's pairs the method needs.
  double oracle_density = 0.0;
};

struct FamilyCurve {
  std::string name;
  std::vector<CurvePoint> points;  // in the family's spec order
};

struct HeadCurves {
  int64_t head = 0;
  std::vector<FamilyCurve> families;
  std::vector<CurvePoint> token_oracle;  // at options.oracle_recalls
  std::vector<CurvePoint> tile_oracle;   // at options.oracle_recalls; empty when not measured
  int64_t rows_sampled = 0;
  int64_t pairs_sampled = 0;  // pairs the sampled rows see (the densities' denominator)
};

// q [batch, q_len, q_heads, head_dim], k [batch, kv_len, kv_heads, head_dim] host views of a
// floating dtype (batch element 0 is used), `head` a query head (its KV head follows GQA).
// Throws naming the argument on bad shapes, heads, recalls or specs.
HeadCurves measure_recall_curves(const TensorView& q, const TensorView& k, int64_t head,
                                 std::span<const CurveFamily> families,
                                 const RecallCurveOptions& options = {});

// The token oracle's density (over pairs_sampled) at mean recall `recall` over rows whose pooled
// probabilities, sorted descending, are `sorted_mass` with `rows` rows: the fewest pairs whose
// mass reaches recall · rows. Exposed for tests.
double token_oracle_density(std::span<const float> sorted_mass, int64_t rows, int64_t pairs_sampled,
                            double recall);

// The mean over heads of each family's points (point by point: the heads share the specs), of the
// token oracle and of the tile oracle (density at each recall). Throws naming `heads` when they
// do not share families and recalls.
HeadCurves mean_recall_curves(std::span<const HeadCurves> heads);

struct CurvePlotOptions {
  int64_t width = 900;  // pixels
  int64_t height = 600;
  std::string title;
};

// The curves as a line plot: density on a log10 axis, recall on a linear one; one colour per
// family, the token oracle black, the tile oracle grey; a legend.
Image render_recall_curves(const HeadCurves& curves, const CurvePlotOptions& options);

}  // namespace mmsparse
