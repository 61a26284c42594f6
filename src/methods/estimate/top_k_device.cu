// Top-k of score arrays on the GPU (index_kernels.h), exactly top_k of estimation.h: indices
// [0, forced) first, then the others by descending score with ties to the lower index, returned
// ascending. One block per (head slot, selection): a most-significant-digit radix select finds the
// score of the last line kept and how many lines equal to it are kept; one ordered pass then writes
// the kept indices, taking equal scores from the lowest index up.

#include <cub/block/block_scan.cuh>
#include <cstdint>

#include "cuda/common/cuda_check.h"
#include "methods/estimate/index_kernels.h"

namespace mmsparse::cuda::index {
namespace {

constexpr int kSelectThreads = 512;
constexpr int kDigitBits = 8;
constexpr int kDigits = 1 << kDigitBits;
constexpr int kKeyBits = 64;
constexpr uint64_t kDigitMask = kDigits - 1;

// Scores are sums of probabilities, never negative: the bits of a non-negative double order like
// its value.
__device__ inline uint64_t order_key(double score) {
  return static_cast<uint64_t>(__double_as_longlong(score));
}

enum class Rest : int32_t {
  kNone,       // only the forced lines
  kAll,        // every index
  kThreshold,  // keys above the threshold, and the first `equal_taken` keys equal to it
};

using BlockScan = cub::BlockScan<int64_t, kSelectThreads>;

__global__ void __launch_bounds__(kSelectThreads)
    select_lines_kernel(const LineSelection first, const LineSelection second) {
  const LineSelection selection = blockIdx.y == 0 ? first : second;
  const int64_t slot = blockIdx.x;
  const double* scores = selection.scores + slot * selection.size;
  const int64_t size = selection.size;
  const int64_t kept_forced = min(selection.forced, size);
  const int64_t total = max(kept_forced, min(selection.budget, size));
  const int64_t needed = total - kept_forced;  // lines chosen by score
  const int tid = static_cast<int>(threadIdx.x);

  __shared__ unsigned histogram[kDigits];
  __shared__ uint64_t shared_prefix;
  __shared__ int64_t shared_remaining;
  __shared__ typename BlockScan::TempStorage scan_storage;

  Rest rest = needed == 0 ? Rest::kNone
                          : (needed == size - kept_forced ? Rest::kAll : Rest::kThreshold);
  uint64_t threshold = 0;
  int64_t equal_taken = 0;
  if (rest == Rest::kThreshold) {
    // Digit by digit from the top: the keys sharing the prefix found so far, by next digit; the
    // needed-th largest key's digit is where the count from the top reaches `remaining`.
    uint64_t prefix = 0;
    uint64_t prefix_mask = 0;
    int64_t remaining = needed;
    for (int shift = kKeyBits - kDigitBits; shift >= 0; shift -= kDigitBits) {
      for (int d = tid; d < kDigits; d += kSelectThreads) histogram[d] = 0;
      __syncthreads();
      // Scores of one array mostly share their leading digits, so the lanes of a warp aggregate
      // their increments per digit: one atomic per distinct digit instead of 32 on one address.
      for (int64_t first = kept_forced; first < size; first += kSelectThreads) {
        const int64_t i = first + tid;
        const uint64_t key = i < size ? order_key(scores[i]) : 0;
        const bool counted = i < size && (key & prefix_mask) == prefix;
        const unsigned digit = counted ? static_cast<unsigned>((key >> shift) & kDigitMask) : kDigits;
        const unsigned same = __match_any_sync(__activemask(), digit);
        if (counted && static_cast<int>(threadIdx.x) % warpSize == __ffs(static_cast<int>(same)) - 1) {
          atomicAdd(&histogram[digit], static_cast<unsigned>(__popc(same)));
        }
      }
      __syncthreads();
      if (tid == 0) {
        int64_t above = 0;
        int digit = kDigits - 1;
        while (above + histogram[digit] < remaining) above += histogram[digit--];
        shared_prefix = prefix | (static_cast<uint64_t>(digit) << shift);
        shared_remaining = remaining - above;
      }
      __syncthreads();
      prefix = shared_prefix;
      remaining = shared_remaining;
      prefix_mask |= kDigitMask << shift;
      __syncthreads();  // shared_prefix is read before the next digit overwrites it
    }
    threshold = prefix;
    equal_taken = remaining;
  }

  // Ordered pass: running counts of equal keys seen and of lines written.
  int32_t* lines = selection.lines + slot * selection.capacity;
  int64_t equal_before = 0;
  int64_t written = 0;
  for (int64_t base = 0; base < size && written < total; base += kSelectThreads) {
    const int64_t i = base + tid;
    bool equal = false;
    bool keep = false;
    if (i < size) {
      if (i < kept_forced || rest == Rest::kAll) {
        keep = true;
      } else if (rest == Rest::kThreshold) {
        const uint64_t key = order_key(scores[i]);
        equal = key == threshold;
        keep = key > threshold;
      }
    }
    int64_t equal_rank = 0;
    int64_t equal_count = 0;
    BlockScan(scan_storage).ExclusiveSum(static_cast<int64_t>(equal), equal_rank, equal_count);
    __syncthreads();
    if (equal && equal_before + equal_rank < equal_taken) keep = true;
    int64_t position = 0;
    int64_t kept_count = 0;
    BlockScan(scan_storage).ExclusiveSum(static_cast<int64_t>(keep), position, kept_count);
    __syncthreads();
    if (keep) lines[written + position] = static_cast<int32_t>(i);
    equal_before += equal_count;
    written += kept_count;
  }
  if (tid == 0) selection.counts[slot] = static_cast<int32_t>(total);
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
