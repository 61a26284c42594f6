#pragma once
// Plans for the GPU engine tests: dense, tri-shape-like with uneven tiles, and random plans with
// permuted query orders, unaligned spans, strided spans, gathered columns, uncovered rows and every
// mask policy.

#include <cstdint>

#include "common/random.h"
#include "core/engine_chunks.h"
#include "mmsparse/layout.h"
#include "mmsparse/plan.h"

namespace mmsparse::test {

enum class MaskMix {
  kCausal,      // every tile causal
  kNonCausal,   // no mask at all
  kMixed,       // per tile: causal, none, window with sinks, same-media, modality pairs, minimum
                // distances and periodic bands, mixtures
  kPositional,  // per tile: causal, none, causal window with sinks, minimum distances and
                // periodic bands (no token arrays)
};

struct RandomPlanOptions {
  bool permute_queries =
      true;                 // query order as runs (strided phases, shuffled blocks, permutation)
  bool leave_gaps = false;  // some rows of the order in no tile
  MaskMix masks = MaskMix::kCausal;
  int64_t max_extra_spans = 3;  // random spans beside the one around the tile's diagonal
  int64_t max_strided_spans = 2;  // every step-th key from a random one, on uncovered keys
  // Groups of kLatticeSpans strided spans of one step over consecutive keys and one count of
  // periods (plan.h), which the CUDA upload merges into lattices, on uncovered keys.
  int64_t max_lattice_groups = 0;
  int64_t max_columns = 96;
};

// Text, one image, one video with frame separators, text, then `one_token_runs` pairs of a
// one-token image (with its markers) and a text token: exactly `length` tokens (>= 66 + 4 ·
// one_token_runs: the media take 64).
ModalityLayout mixed_layout(Random& random, int64_t length, int64_t one_token_runs = 0);

// 64-row tiles in identity order, each with the span [0, kv_len).
Plan dense_plan(const PlanShape& shape, bool causal);

// Sink and local-window spans for the upper rows, dense causal tiles for the last `bottom` rows,
// which are split into tiles of uneven sizes.
Plan tri_shape_plan(const PlanShape& shape, int64_t sink, int64_t local, int64_t bottom);

// `layout` is required for MaskMix::kMixed (same-media and modality-pair policies).
Plan random_plan(Random& random, const PlanShape& shape, const RandomPlanOptions& options,
                 const ModalityLayout* layout = nullptr);

// The same plan with only its spans and strided spans (keep_spans) or only its columns: the two
// halves cover disjoint pairs, so merging their results gives the full plan's.
Plan split_plan(const Plan& plan, bool keep_spans);

}  // namespace mmsparse::test
