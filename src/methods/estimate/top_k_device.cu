// Top-k of score arrays on the GPU (index_kernels.h), exactly top_k of estimation.h: indices
// [0, forced) first, then the others by descending score with ties to the lower index, returned
// ascending. One block per (head slot, selection):
//   threshold     a most-significant-digit radix select (11-bit digits) finds the prefix of the
//                 last line kept and how many keys sharing it are kept. The first digits count
//                 the array in global memory; once the keys sharing the prefix fit in shared
//                 memory, one more pass copies them there and the remaining digits count only
//                 them. It stops early when every key sharing the prefix is kept.
//   ordered pass  each thread takes 16 consecutive scores; one block scan of (above, equal)
//                 counts per 8192 scores places the kept indices, taking equal keys from the
//                 lowest index up.
// Nothing depends on the order of atomics: the counts are exact, so a run repeats bit for bit.

#include <cstdint>
#include <cub/block/block_scan.cuh>

#include "cuda/common/cuda_check.h"
#include "methods/estimate/index_kernels.h"

namespace mmsparse::cuda::index {
namespace {

constexpr int kSelectThreads = 512;
constexpr int kSelectWarpSize = 32;
constexpr unsigned kSelectFullMask = 0xffffffffu;
constexpr int kDigitBits = 11;
constexpr int kDigits = 1 << kDigitBits;
constexpr int kBinsPerThread = kDigits / kSelectThreads;
constexpr int kKeyBits = 64;
// Scores each thread reads per step of a pass: independent loads in flight.
constexpr int kValuesPerThread = 16;
constexpr int kValuesPerStep = kSelectThreads * kValuesPerThread;
// Keys that share the prefix, held in shared memory once they fit.
constexpr int kCandidateCapacity = 4096;
constexpr int kCountBits = 32;  // the ordered pass packs (equal, above) counts of a step
constexpr uint64_t kCountMask = (uint64_t{1} << kCountBits) - 1;
constexpr int kFlagBits = 32;  // the ordered pass keeps a thread's flags in one unsigned
static_assert(kDigits % kSelectThreads == 0 && kValuesPerStep <= kCountMask &&
              kValuesPerThread <= kFlagBits);

// Scores are sums of probabilities, never negative: the bits of a non-negative double order like
// its value.
__device__ inline uint64_t order_key(double score) {
  return static_cast<uint64_t>(__double_as_longlong(score));
}

enum class Rest : int32_t {
  kNone,       // only the forced lines
  kAll,        // every index
  kThreshold,  // keys whose prefix is above the threshold's, and the first `equal_taken` equal
};

using BlockScan = cub::BlockScan<uint64_t, kSelectThreads>;

struct SelectShared {
  unsigned histogram[kDigits];
  uint64_t candidates[kCandidateCapacity];
  typename BlockScan::TempStorage scan;
  uint64_t digit;            // the digit chosen, written by the thread that holds it
  uint64_t above;            // keys sharing the prefix with a higher digit
  uint64_t digit_count;      // keys sharing the prefix with the chosen digit
  unsigned candidate_count;  // keys copied into candidates
};

// The keys kept by score (beyond the forced ones): those whose bits under `mask` exceed
// `prefix`, and the first `equal_taken` (by index) of those equal to it.
struct Threshold {
  uint64_t prefix = 0;
  uint64_t mask = 0;
  int64_t equal_taken = 0;
};

// Adds one key's digit to the histogram, one atomic per distinct digit of the warp's lanes (an
// array's scores mostly share their leading digits). Every lane of the warp calls it.
__device__ void count_digit(SelectShared& shared, bool counted, uint64_t key, int shift) {
  if (!__any_sync(kSelectFullMask, counted)) return;
  const unsigned digit =
      counted ? static_cast<unsigned>((key >> shift) & (kDigits - 1)) : unsigned{kDigits};
  const unsigned same = __match_any_sync(kSelectFullMask, digit);
  const int lane = static_cast<int>(threadIdx.x) % kSelectWarpSize;
  if (counted && lane == __ffs(static_cast<int>(same)) - 1) {
    atomicAdd(&shared.histogram[digit], static_cast<unsigned>(__popc(same)));
  }
}

// Reads the keys [first, size) from global memory, kValuesPerThread loads in flight per thread,
// and calls visit(matches, key) for each thread's keys in turn; `matches`: the index is in range
// and the key's bits under `mask` equal `prefix`. Every lane of the warp calls visit together
// (the visitors vote across the warp), so out-of-range lanes visit with matches false.
template <class Visit>
__device__ __forceinline__ void visit_global_keys(const double* scores, int64_t first, int64_t size,
                                                  uint64_t prefix, uint64_t mask, Visit visit) {
  for (int64_t base = first; base < size; base += kValuesPerStep) {
    uint64_t keys[kValuesPerThread];
#pragma unroll
    for (int j = 0; j < kValuesPerThread; ++j) {
      const int64_t i = base + j * kSelectThreads + threadIdx.x;
      keys[j] = i < size ? order_key(scores[i]) : 0;
    }
#pragma unroll
    for (int j = 0; j < kValuesPerThread; ++j) {
      const int64_t i = base + j * kSelectThreads + threadIdx.x;
      visit(i < size && (keys[j] & mask) == prefix, keys[j]);
    }
  }
}

// The histogram of the digit at `shift` of the keys [first, size) whose bits under `mask` equal
// `prefix`, read from global memory.
__device__ void count_global_digits(SelectShared& shared, const double* scores, int64_t first,
                                    int64_t size, uint64_t prefix, uint64_t mask, int shift) {
  visit_global_keys(scores, first, size, prefix, mask,
                    [&](bool matches, uint64_t key) { count_digit(shared, matches, key, shift); });
}

// The same over the candidates in shared memory.
__device__ void count_candidate_digits(SelectShared& shared, uint64_t prefix, uint64_t mask,
                                       int shift) {
  const auto count = static_cast<int>(shared.candidate_count);
  for (int base = 0; base < count; base += kSelectThreads) {
    const int i = base + static_cast<int>(threadIdx.x);
    const uint64_t key = i < count ? shared.candidates[i] : 0;
    count_digit(shared, i < count && (key & mask) == prefix, key, shift);
  }
}

// Copies the keys [first, size) whose bits under `mask` equal `prefix` (at most
// kCandidateCapacity) into the candidates, in any order (only their values matter).
__device__ void copy_candidates(SelectShared& shared, const double* scores, int64_t first,
                                int64_t size, uint64_t prefix, uint64_t mask) {
  const int lane = static_cast<int>(threadIdx.x) % kSelectWarpSize;
  visit_global_keys(scores, first, size, prefix, mask, [&](bool matches, uint64_t key) {
    const unsigned warp_matches = __ballot_sync(kSelectFullMask, matches);
    if (warp_matches == 0) return;
    unsigned start = 0;
    if (lane == 0) {
      start = atomicAdd(&shared.candidate_count, static_cast<unsigned>(__popc(warp_matches)));
    }
    start = __shfl_sync(kSelectFullMask, start, 0);
    if (matches) shared.candidates[start + __popc(warp_matches & ((1u << lane) - 1))] = key;
  });
}

// The digit where the count from the top reaches `remaining`: each thread holds kBinsPerThread
// bins from the top down, a block scan gives the keys in higher bins. Sets shared.digit, .above
// and .digit_count.
__device__ void choose_digit(SelectShared& shared, int64_t remaining) {
  const int tid = static_cast<int>(threadIdx.x);
  uint64_t bins[kBinsPerThread];
  uint64_t held = 0;
  for (int j = 0; j < kBinsPerThread; ++j) {
    bins[j] = shared.histogram[kDigits - 1 - (tid * kBinsPerThread + j)];
    held += bins[j];
  }
  uint64_t above = 0;
  BlockScan(shared.scan).ExclusiveSum(held, above);
  const auto needed = static_cast<uint64_t>(remaining);
  for (int j = 0; j < kBinsPerThread; ++j) {
    if (above < needed && above + bins[j] >= needed) {
      shared.digit = static_cast<uint64_t>(kDigits - 1 - (tid * kBinsPerThread + j));
      shared.above = above;
      shared.digit_count = bins[j];
    }
    above += bins[j];
  }
  __syncthreads();
}

// The threshold of the `needed` best keys among [first, size), needed in [1, size - first).
__device__ Threshold find_threshold(SelectShared& shared, const double* scores, int64_t first,
                                    int64_t size, int64_t needed) {
  Threshold threshold;
  int64_t remaining = needed;
  auto sharing = static_cast<uint64_t>(size - first);  // keys that share the prefix
  bool in_shared = false;
  for (int high = kKeyBits; high > 0 && sharing != static_cast<uint64_t>(remaining);) {
    const int width = high < kDigitBits ? high : kDigitBits;
    const int shift = high - width;
    if (!in_shared && sharing <= kCandidateCapacity) {
      if (threadIdx.x == 0) shared.candidate_count = 0;
      __syncthreads();
      copy_candidates(shared, scores, first, size, threshold.prefix, threshold.mask);
      in_shared = true;
    }
    for (int d = static_cast<int>(threadIdx.x); d < kDigits; d += kSelectThreads) {
      shared.histogram[d] = 0;
    }
    __syncthreads();
    if (in_shared) {
      count_candidate_digits(shared, threshold.prefix, threshold.mask, shift);
    } else {
      count_global_digits(shared, scores, first, size, threshold.prefix, threshold.mask, shift);
    }
    __syncthreads();
    choose_digit(shared, remaining);
    threshold.prefix |= shared.digit << shift;
    threshold.mask |= static_cast<uint64_t>((1 << width) - 1) << shift;
    remaining -= static_cast<int64_t>(shared.above);
    sharing = shared.digit_count;
    high = shift;
    __syncthreads();  // every thread has read the choice before the next digit's
  }
  threshold.equal_taken = remaining;
  return threshold;
}

// Writes the kept indices ascending: a kept index's place is the always-kept indices before it
// plus the equal ones before it, at most equal_taken.
__device__ void write_kept_lines(SelectShared& shared, const LineSelection& selection,
                                 const double* scores, int32_t* lines, int64_t kept_forced,
                                 int64_t total, Rest rest, const Threshold& threshold) {
  const int64_t size = selection.size;
  const auto taken = static_cast<uint64_t>(threshold.equal_taken);
  uint64_t above_total = 0;  // always-kept indices before the step
  uint64_t equal_total = 0;  // equal indices before the step
  for (int64_t base = 0;
       base < size && above_total + min(equal_total, taken) < static_cast<uint64_t>(total);
       base += kValuesPerStep) {
    const int64_t first = base + static_cast<int64_t>(threadIdx.x) * kValuesPerThread;
    unsigned always = 0;  // bit j: index first + j is kept whatever its rank
    unsigned equal = 0;   // bit j: its key equals the threshold's
    for (int j = 0; j < kValuesPerThread; ++j) {
      const int64_t i = first + j;
      if (i >= size) break;
      if (i < kept_forced || rest == Rest::kAll) {
        always |= 1u << j;
      } else if (rest == Rest::kThreshold) {
        const uint64_t key = order_key(scores[i]) & threshold.mask;
        if (key > threshold.prefix) always |= 1u << j;
        if (key == threshold.prefix) equal |= 1u << j;
      }
    }
    const uint64_t counts = (static_cast<uint64_t>(__popc(equal)) << kCountBits) | __popc(always);
    uint64_t before = 0;
    uint64_t step_total = 0;
    BlockScan(shared.scan).ExclusiveSum(counts, before, step_total);
    __syncthreads();
    uint64_t above_before = above_total + (before & kCountMask);
    uint64_t equal_before = equal_total + (before >> kCountBits);
    for (int j = 0; j < kValuesPerThread; ++j) {
      if ((always >> j) & 1u) {
        lines[above_before + min(equal_before, taken)] = static_cast<int32_t>(first + j);
        ++above_before;
      } else if ((equal >> j) & 1u) {
        if (equal_before < taken)
          lines[above_before + equal_before] = static_cast<int32_t>(first + j);
        ++equal_before;
      }
    }
    above_total += step_total & kCountMask;
    equal_total += step_total >> kCountBits;
  }
}

__global__ void __launch_bounds__(kSelectThreads)
    select_lines_kernel(const LineSelection first, const LineSelection second) {
  __shared__ SelectShared shared;
  const LineSelection selection = blockIdx.y == 0 ? first : second;
  const int64_t slot = blockIdx.x;
  const double* scores = selection.scores + slot * selection.size;
  const int64_t size = selection.size;
  const int64_t kept_forced = min(selection.forced, size);
  const int64_t total = max(kept_forced, min(selection.budget, size));
  const int64_t needed = total - kept_forced;  // lines chosen by score
  const Rest rest =
      needed == 0 ? Rest::kNone : (needed == size - kept_forced ? Rest::kAll : Rest::kThreshold);
  Threshold threshold;
  if (rest == Rest::kThreshold)
    threshold = find_threshold(shared, scores, kept_forced, size, needed);
  write_kept_lines(shared, selection, scores, selection.lines + slot * selection.capacity,
                   kept_forced, total, rest, threshold);
  if (threadIdx.x == 0) selection.counts[slot] = static_cast<int32_t>(total);
}

}  // namespace

void launch_select_lines(const LineSelection& first, const LineSelection& second, int64_t slots,
                         cudaStream_t stream) {
  if (slots == 0) return;
  const dim3 grid(static_cast<unsigned>(slots), 2);
  select_lines_kernel<<<grid, kSelectThreads, 0, stream>>>(first, second);
  check_launch("index select: top-k lines");
}

}  // namespace mmsparse::cuda::index
