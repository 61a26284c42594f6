#pragma once
// Online softmax over key chunks in the exp2 domain. Scores come in as raw dot products; the
// positive scale·log2(e) is applied inside each exponent's multiply-add, FlashAttention-3's form
// exp2(score·scale − max·scale), so a probability costs one FFMA and one ex2. Removed pairs carry a
// raw score of -inf, which a positive scale keeps -inf. Per thread: the two accumulator rows it
// holds (lane / 4 and lane / 4 + 8 of the warp's 16); the four lanes of a row share its maximum
// through shuffles and keep partial sums that are combined once, in finish().

#include <cuda/std/limits>

#include "cuda/attention/sm80/ptx.cuh"

namespace mmsparse::cuda {

// exp2 as the bare hardware instruction, flushing subnormal results to zero. exp2f without
// fast-math adds a range test and two multiplies per call to keep subnormals, which probabilities
// below 2^-126 of the row maximum do not need.
__device__ inline float fast_exp2(float x) {
  float result;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(result) : "f"(x));
  return result;
}

template <class Traits>
class OnlineSoftmax {
 public:
  static constexpr int kRowsPerThread = 2;
  static constexpr int kThreadsPerRow = 4;  // lanes that share one accumulator row
  static constexpr float kNegativeInfinity = -::cuda::std::numeric_limits<float>::infinity();
  static constexpr float kLn2 = 0.693147180559945309f;  // converts log2-domain LSE to natural log
  static constexpr float kLog2E = 1.44269504088896340736f;  // and back

  explicit __device__ OnlineSoftmax(float scale_log2) : scale_log2_(scale_log2) {
#pragma unroll
    for (int r = 0; r < kRowsPerThread; ++r) {
      row_max_[r] = kNegativeInfinity;
      row_sum_[r] = 0.0f;
    }
  }

  // Folds one chunk of raw scores into the running maxima and sums: turns them into unnormalised
  // probabilities exp2(score·scale - max) and rescales the output accumulators to the new maxima.
  __device__ void update(float (&scores)[Traits::kScoreTiles][4],
                         float (&output)[Traits::kOutputTiles][4]) {
    float corrections[kRowsPerThread];
    fold(scores, corrections);
    if (moved(corrections)) rescale(output, corrections);
  }

  // update() in two halves, so that a kernel can fold a chunk while the previous chunk's P·V is
  // still accumulating: fold() leaves in `corrections` the factors that take the output
  // accumulated so far to the new maxima, for rescale() once that product has completed.
  __device__ void fold(float (&scores)[Traits::kScoreTiles][4],
                       float (&corrections)[kRowsPerThread]) {
    // Both rows' maxima before either row's exponentials, each as a tree (max is associative, so
    // the result is the same as a running maximum's): the exponentials wait on this chain.
    float chunk_max[kRowsPerThread];
#pragma unroll
    for (int r = 0; r < kRowsPerThread; ++r) chunk_max[r] = tree_max(scores, r);
#pragma unroll
    for (int offset = 1; offset < kThreadsPerRow; offset *= 2) {
#pragma unroll
      for (int r = 0; r < kRowsPerThread; ++r) {
        chunk_max[r] = fmaxf(chunk_max[r], __shfl_xor_sync(kFullWarpMask, chunk_max[r], offset));
      }
    }
#pragma unroll
    for (int r = 0; r < kRowsPerThread; ++r) {
      const float new_max = fmaxf(row_max_[r], chunk_max[r] * scale_log2_);
      // While every key so far is removed the maximum is -inf; exponentiate against 0 instead,
      // which gives 0 for every removed logit rather than exp2(-inf + inf) = NaN.
      const float reference = new_max == kNegativeInfinity ? 0.0f : new_max;
      corrections[r] = fast_exp2(row_max_[r] - reference);
      row_max_[r] = new_max;
      float chunk_sum = 0.0f;
#pragma unroll
      for (int tile = 0; tile < Traits::kScoreTiles; ++tile) {
#pragma unroll
        for (int c = 0; c < 2; ++c) {
          float& score = scores[tile][2 * r + c];
          score = fast_exp2(fmaf(score, scale_log2_, -reference));
          chunk_sum += score;
        }
      }
      row_sum_[r] = row_sum_[r] * corrections[r] + chunk_sum;
    }
  }

  // Whether any row of the warp has a new maximum (a factor other than exactly 1). Once the first
  // chunks have set them, row maxima rarely move, and rescale() can be skipped.
  __device__ static bool moved(const float (&corrections)[kRowsPerThread]) {
    bool unchanged = true;
#pragma unroll
    for (int r = 0; r < kRowsPerThread; ++r) unchanged = unchanged && corrections[r] == 1.0f;
    return __any_sync(kFullWarpMask, !unchanged);
  }

  __device__ static void rescale(float (&output)[Traits::kOutputTiles][4],
                                 const float (&corrections)[kRowsPerThread]) {
#pragma unroll
    for (int r = 0; r < kRowsPerThread; ++r) {
#pragma unroll
      for (int tile = 0; tile < Traits::kOutputTiles; ++tile) {
        output[tile][2 * r] *= corrections[r];
        output[tile][2 * r + 1] *= corrections[r];
      }
    }
  }

  // Starts row `r` from a result over other keys, of natural-log LSE `lse` (-inf: none, and the row
  // starts empty): as if those keys were one logit `lse` whose value is that result, which the
  // caller places in the output accumulators. The row's sum is held once, by the lane that
  // `owner` names, as finish() adds the lanes' shares.
  __device__ void resume(int r, float lse, bool owner) {
    const bool has_keys = lse != kNegativeInfinity;
    row_max_[r] = has_keys ? lse * kLog2E : kNegativeInfinity;
    row_sum_[r] = has_keys && owner ? 1.0f : 0.0f;
  }

  // Normalises the output rows and returns their LSE (natural log); rows without keys get O = 0
  // and LSE = -inf.
  __device__ void finish(float (&output)[Traits::kOutputTiles][4],
                         float (&lse)[kRowsPerThread]) const {
#pragma unroll
    for (int r = 0; r < kRowsPerThread; ++r) {
      float sum = row_sum_[r];
#pragma unroll
      for (int offset = 1; offset < kThreadsPerRow; offset *= 2) {
        sum += __shfl_xor_sync(kFullWarpMask, sum, offset);
      }
      // A row with any key has sum >= 1: its largest logit contributes exp2(0).
      const bool has_keys = sum > 0.0f;
      const float inverse = has_keys ? 1.0f / sum : 0.0f;
      lse[r] = has_keys ? (row_max_[r] + log2f(sum)) * kLn2 : kNegativeInfinity;
#pragma unroll
      for (int tile = 0; tile < Traits::kOutputTiles; ++tile) {
        output[tile][2 * r] *= inverse;
        output[tile][2 * r + 1] *= inverse;
      }
    }
  }

 private:
  // The largest of this thread's scores of row `r` in a chunk, by pairwise halving: a dependency
  // chain of log2(kScoreTiles) + 1 maxima instead of a running maximum's kScoreTiles + 1.
  __device__ static float tree_max(const float (&scores)[Traits::kScoreTiles][4], int r) {
    static_assert((Traits::kScoreTiles & (Traits::kScoreTiles - 1)) == 0,
                  "halving needs 2^n tiles");
    float maxima[Traits::kScoreTiles];
#pragma unroll
    for (int tile = 0; tile < Traits::kScoreTiles; ++tile) {
      maxima[tile] = fmaxf(scores[tile][2 * r], scores[tile][2 * r + 1]);
    }
#pragma unroll
    for (int level = 1; level < Traits::kScoreTiles; level *= 2) {
#pragma unroll
      for (int i = 0; i < Traits::kScoreTiles; i += 2 * level) {
        maxima[i] = fmaxf(maxima[i], maxima[i + level]);
      }
    }
    return maxima[0];
  }

  float scale_log2_;                // > 0 (checked at launch)
  float row_max_[kRowsPerThread];  // log2 domain
  float row_sum_[kRowsPerThread];  // this lane's share of the row's sum of exp2(logit - max)
};

}  // namespace mmsparse::cuda
