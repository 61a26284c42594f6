// Times the CUDA attention engine's kernels side by side on the same plans and inputs: the
// mma.sync kernel (64-row tiles) and the wgmma kernel with one consumer warpgroup (64-row tiles)
// and with two (128-row tiles). bf16, 28 query heads over 4 KV heads, head_dim 128; dense causal
// at 8K/32K/128K (and at 32K with head_dim 256, which only the wgmma kernel serves: its columns
// then compare with the wgmma/64 run, whose CTAs hold two warpgroups at head_dim 256 too), A-shape
// (sink 128, local 4096) at 128K, gathered columns at 128K (per 128-row query block its diagonal
// span plus 2048 random keys left of it, distinct per block; and with vertical-slash's tile shape:
// per head 4096 random vertical keys shared by the head's blocks, those left of each block
// gathered, 2048 per tile on average; and, as a diagnostic, the 2048 keys just left of each block
// as columns), A-shape with the grid mask's window (sink 128, local 1024: the grid mask's first
// pass alone) and the grid mask at 128K (k < 128, q - k < 1024 or (q - k) mod 1024 < 64: the
// grid-mask pattern, two passes merged by LSE, see src/methods/static/grid_mask.cpp; its bands as
// spans, as columns with 8 or 16 phases per tile in grid-columns-128k and grid-p16-128k, and as
// lattices copied in boxes of 16 periods × 8 keys in grid-lattice-128k). TFLOP/s count computed
// pairs only (4 · pairs · head_dim). Each kernel also runs once more on fresh outputs, compared
// with the mma.sync kernel's (max |ΔO|, max |ΔLSE|): a large-size cross-check of what the tests
// prove on small ones. The short-spans-N and short-columns-N cases (N = 64, 32, 16, 8) time
// 128-row tiles of N whole, unmasked key chunks each, as spans and as gathered columns: the fixed
// cost per CTA and the cost of a gathered chunk (short_tiles_plan); short-diagonal-N ends each
// tile's span at its diagonal (a masked chunk), short-split-N reads its chunks as N spans,
// short-mixed-N its last chunk as gathered columns after a span. sinks-in-place-L and
// sinks-ordered-L (synthetic, sink_order_plans.h) compute the same pairs, scattered sink keys
// as short spans in place and as one span through a key order (its K/V copy inside the timing).
//
//   mmsparse_engine_bench [case ...]     cases: dense-8k dense-32k dense-128k dense-32k-d256
//                                               a-shape-128k
//                                               columns-128k vertical-columns-128k
//                                               sequential-columns-128k
//                                               a-shape-1k-128k grid-128k
//                                               grid-columns-128k grid-p16-128k
//                                               grid-lattice-128k
//                                               short-spans-{64,32,16,8}
//                                               short-columns-{64,32,16,8}
//                                               short-diagonal-{64,32,16,8}
//                                               short-split-{64,32,16,8}
//                                               short-mixed-{64,32,16,8}
//                                               sinks-{in-place,ordered}-{32k,128k}

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <functional>
#include <iterator>
#include <limits>
#include <numeric>
#include <random>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/plan_coverage.h"
#include "bench_support.h"
#include "sink_order_plans.h"
#include "cuda/common/device_pool.h"
#include "cuda/runtime/engine.h"
#include "mmsparse/attention.h"
#include "mmsparse/patterns.h"
#include "mmsparse/plan.h"

namespace {

using mmsparse::DType;
using mmsparse::Plan;
using mmsparse::PlanShape;
namespace cuda = mmsparse::cuda;
using mmsparse::bench::check;
using mmsparse::bench::median;

constexpr int64_t kQueryHeads = 28;
constexpr int64_t kKeyValueHeads = 4;
constexpr int64_t kHeadDim = 128;  // of every case but those that name another
constexpr int kWarmups = 2;
constexpr int kRepeats = 10;
constexpr std::size_t kFlushBytes = std::size_t{256} << 20;  // several times the 50 MB L2
constexpr int kInitThreads = 256;
constexpr double kFlopsPerPairPerDim = 4.0;  // QK^T and PV, a multiply and an add each
constexpr double kTera = 1e12;
constexpr double kMillisecondsPerSecond = 1e3;

// Uniform values in [-1, 1) from a hash of the index: random-looking, never zero-filled.
__global__ void fill_random_kernel(__nv_bfloat16* data, int64_t count, uint32_t seed) {
  constexpr uint32_t kMultiplier = 0x9E3779B1u;
  constexpr uint32_t kMix = 0x85EBCA6Bu;
  constexpr int kShift = 16;
  constexpr float kToUnit = 1.0f / 8388608.0f;  // 2^-23
  constexpr uint32_t kMantissa = (1u << 23) - 1;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    uint32_t h = static_cast<uint32_t>(i) * kMultiplier ^ seed;
    h ^= h >> kShift;
    h *= kMix;
    h ^= h >> kShift;
    data[i] = __float2bfloat16(static_cast<float>(h & kMantissa) * kToUnit * 2.0f - 1.0f);
  }
}

// max |a - b| over `count` floats (bf16 when `bf16`), as the bits of a non-negative float.
__global__ void max_difference_kernel(const void* a, const void* b, int64_t count, bool bf16,
                                      unsigned* result) {
  float local = 0.0f;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float x = bf16 ? __bfloat162float(static_cast<const __nv_bfloat16*>(a)[i])
                         : static_cast<const float*>(a)[i];
    const float y = bf16 ? __bfloat162float(static_cast<const __nv_bfloat16*>(b)[i])
                         : static_cast<const float*>(b)[i];
    // Both -inf (rows without keys) is no difference; NaN poisons the maximum.
    const float difference = x == y ? 0.0f : fabsf(x - y);
    local = fmaxf(local, isnan(difference) ? INFINITY : difference);
  }
  atomicMax(result, __float_as_uint(local));
}

struct DeviceArray {
  void* data = nullptr;
  std::size_t bytes = 0;
  explicit DeviceArray(std::size_t size) : bytes(size) {
    check(cudaMalloc(&data, bytes), "cudaMalloc");
  }
  ~DeviceArray() { cudaFree(data); }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;
};

constexpr int kGridBlocks = 1024;

float max_difference(const DeviceArray& a, const DeviceArray& b, bool bf16) {
  unsigned* result = nullptr;
  check(cudaMalloc(&result, sizeof(unsigned)), "cudaMalloc");
  check(cudaMemset(result, 0, sizeof(unsigned)), "cudaMemset");
  const auto count = static_cast<int64_t>(a.bytes / (bf16 ? sizeof(__nv_bfloat16) : sizeof(float)));
  max_difference_kernel<<<kGridBlocks, kInitThreads>>>(a.data, b.data, count, bf16, result);
  unsigned bits = 0;
  check(cudaMemcpy(&bits, result, sizeof(bits), cudaMemcpyDeviceToHost), "cudaMemcpy");
  cudaFree(result);
  float value = 0.0f;
  std::memcpy(&value, &bits, sizeof(value));
  return value;
}

// Pairs the plan computes. Every case builds the same keys for every head, so head slot 0 counts
// for all.
double computed_pairs(const Plan& plan) {
  int64_t pairs = 0;
  mmsparse::detail::for_each_covered_range(
      plan, 0, [&](int64_t, int64_t begin, int64_t end) { pairs += end - begin; });
  return static_cast<double>(pairs) * static_cast<double>(plan.head_slots());
}

// Per 128-row query block: its diagonal span and kBlockColumns random keys left of it (all of them
// for the first blocks), the same at every tile height and for every head.
constexpr int64_t kColumnBlockRows = 128;
constexpr int64_t kBlockColumns = 2048;
constexpr uint32_t kColumnSeed = 7;

// The column cases' plans: every tile keeps its 128-row block's diagonal span, then gathers the
// keys `columns(head, block)` gives (ascending, left of the block).
using BlockColumns = std::function<std::span<const int32_t>(int64_t head, int64_t block)>;

Plan diagonal_and_columns_plan(const PlanShape& shape, const BlockColumns& columns) {
  mmsparse::PlanBuilder builder(shape);
  for (int64_t head = 0; head < shape.head_slots(); ++head) {
    builder.begin_head();
    for (int64_t begin = 0; begin < shape.q_len; begin += shape.tile_rows) {
      const int64_t block = begin / kColumnBlockRows;
      const int64_t block_begin = block * kColumnBlockRows;
      builder.begin_tile(begin, std::min(shape.q_len, begin + shape.tile_rows));
      builder.add_span(block_begin, std::min(shape.kv_len, block_begin + kColumnBlockRows));
      for (const int32_t key : columns(head, block)) builder.add_column(key);
    }
  }
  return builder.finish();
}

Plan columns_plan(const PlanShape& shape) {
  std::mt19937 random(kColumnSeed);
  std::vector<std::vector<int32_t>> block_columns;
  for (int64_t begin = 0; begin < shape.q_len; begin += kColumnBlockRows) {
    std::vector<int32_t> keys;
    if (begin <= kBlockColumns) {
      keys.resize(static_cast<std::size_t>(begin));
      std::iota(keys.begin(), keys.end(), 0);
    } else {
      std::uniform_int_distribution<int32_t> key(0, static_cast<int32_t>(begin - 1));
      while (static_cast<int64_t>(keys.size()) < kBlockColumns) {
        keys.push_back(key(random));
        if (static_cast<int64_t>(keys.size()) < kBlockColumns) continue;
        std::sort(keys.begin(), keys.end());
        keys.erase(std::unique(keys.begin(), keys.end()), keys.end());
      }
    }
    block_columns.push_back(std::move(keys));
  }
  return diagonal_and_columns_plan(shape, [&](int64_t, int64_t block) {
    return std::span<const int32_t>(block_columns[static_cast<std::size_t>(block)]);
  });
}

// The same tile shape as vertical-slash gives it: per query head kVerticalKeys random keys (its
// vertical lines, shared by all of the head's query blocks, distinct between heads, as top-k over
// each head's estimate picks them); per 128-row query block its diagonal span plus the head's
// vertical keys left of it, kVerticalKeys / 2 = 2048 per tile on average.
constexpr int64_t kVerticalKeys = 2 * kBlockColumns;

Plan vertical_columns_plan(const PlanShape& shape) {
  std::mt19937 random(kColumnSeed);
  std::vector<std::vector<int32_t>> head_verticals;
  for (int64_t head = 0; head < shape.head_slots(); ++head) {
    std::vector<int32_t> verticals(static_cast<std::size_t>(shape.kv_len));
    std::iota(verticals.begin(), verticals.end(), 0);
    std::shuffle(verticals.begin(), verticals.end(), random);
    verticals.resize(static_cast<std::size_t>(std::min(kVerticalKeys, shape.kv_len)));
    std::sort(verticals.begin(), verticals.end());
    head_verticals.push_back(std::move(verticals));
  }
  return diagonal_and_columns_plan(shape, [&](int64_t head, int64_t block) {
    const std::vector<int32_t>& verticals = head_verticals[static_cast<std::size_t>(head)];
    const auto left = std::lower_bound(verticals.begin(), verticals.end(),
                                       static_cast<int32_t>(block * kColumnBlockRows));
    return std::span<const int32_t>(verticals.begin(), left);
  });
}

// A diagnostic for the gather path without memory randomness: per 128-row block its diagonal
// span plus the 2048 keys just left of it (fewer for the first blocks), as gathered columns, so
// that gathers read consecutive rows that a span would have copied by tensor copies.
Plan sequential_columns_plan(const PlanShape& shape) {
  std::vector<int32_t> keys(static_cast<std::size_t>(shape.kv_len));
  std::iota(keys.begin(), keys.end(), 0);
  return diagonal_and_columns_plan(shape, [&](int64_t, int64_t block) {
    const int64_t block_begin = block * kColumnBlockRows;
    const int64_t first = std::max<int64_t>(0, block_begin - kBlockColumns);
    return std::span<const int32_t>(keys).subspan(static_cast<std::size_t>(first),
                                                  static_cast<std::size_t>(block_begin - first));
  });
}

// The fixed cost per CTA, measured: every 128-row query block reads `chunks` whole key chunks
// just left of its rows (keys [position - chunks * 128, position) at causal offset
// kShortTileLeadKeys), as spans (tensor copies) or as gathered columns, so that no chunk is masked
// or partial. Timed at several `chunks`, time = waves * (fixed + chunks * per chunk) gives the
// fixed cost in chunks (scripts/blindsight-throughput.sh fits it); spans against columns give the
// extra cost of a gathered chunk. kShortTileBlocks blocks of 128 rows on 28 heads are 56 waves of
// 132 SMs exactly at one CTA per SM, so no partial last wave blurs the fit.
// Two more forms read BlindSight tiles' other traits from the same fit: kDiagonal ends the span at
// the tile's last row, so its last chunk is the causal diagonal (masked element by element, as an
// image tile's own image or dense's is), and its fixed cost against kSpans' is a diagonal chunk's
// extra cost; kSplit cuts the span into one-chunk spans a chunk apart (a record per chunk, as
// sink tiles read text runs and sinks), and its cost per chunk against kSpans' is a record's;
// kMixed reads the last chunk as gathered columns after the others' span (most BlindSight image
// tiles read spans, then a column run), and its fixed cost against kSpans', less a gathered
// chunk's extra, is the cost of switching from tensor copies to gathered rows in one CTA.
constexpr int64_t kShortTileBlocks = 264;
constexpr int64_t kShortTileMaxChunks = 64;
constexpr int64_t kShortTileMinChunks = 8;    // cases at 64, 32, 16 and 8 chunks a tile
constexpr int64_t kShortTileChunkKeys = 128;  // the wgmma kernel's key chunk at head_dim 128
constexpr int64_t kShortTileLength = kShortTileBlocks * kColumnBlockRows;
constexpr int64_t kShortTileLeadKeys = kShortTileMaxChunks * kShortTileChunkKeys;
constexpr int64_t kShortTileSplitLeadKeys = 2 * kShortTileLeadKeys;  // a gap after every chunk

enum class ShortTileForm { kSpans, kColumns, kDiagonal, kSplit, kMixed };
constexpr ShortTileForm kShortTileForms[] = {ShortTileForm::kSpans, ShortTileForm::kColumns,
                                             ShortTileForm::kDiagonal, ShortTileForm::kSplit,
                                             ShortTileForm::kMixed};

const char* short_tile_form_name(ShortTileForm form) {
  switch (form) {
    case ShortTileForm::kSpans:
      return "spans";
    case ShortTileForm::kColumns:
      return "columns";
    case ShortTileForm::kDiagonal:
      return "diagonal";
    case ShortTileForm::kSplit:
      return "split";
    case ShortTileForm::kMixed:
      return "mixed";
  }
  return "?";
}

// One tile's `chunks` key chunks in `form`; `position` is the first row's block's position and
// `tile_end` one past its last row's (causal offset included).
void add_short_tile_keys(mmsparse::PlanBuilder& builder, ShortTileForm form, int64_t chunks,
                         int64_t position, int64_t tile_end) {
  const int64_t keys = chunks * kShortTileChunkKeys;
  switch (form) {
    case ShortTileForm::kSpans:
      builder.add_span(position - keys, position);
      break;
    case ShortTileForm::kColumns:
      for (int64_t key = position - keys; key < position; ++key) builder.add_column(key);
      break;
    case ShortTileForm::kDiagonal:
      builder.add_span(tile_end - keys, tile_end);
      break;
    case ShortTileForm::kSplit:
      for (int64_t chunk = chunks; chunk >= 1; --chunk) {
        const int64_t begin = position - 2 * chunk * kShortTileChunkKeys;
        builder.add_span(begin, begin + kShortTileChunkKeys);
      }
      break;
    case ShortTileForm::kMixed:
      builder.add_span(position - keys, position - kShortTileChunkKeys);
      for (int64_t key = position - kShortTileChunkKeys; key < position; ++key) {
        builder.add_column(key);
      }
      break;
  }
}

std::function<Plan(const PlanShape&)> short_tiles_plan(int64_t chunks, ShortTileForm form) {
  return [chunks, form](const PlanShape& shape) {
    mmsparse::PlanBuilder builder(shape);
    const int64_t offset = shape.causal_offset();
    for (int64_t head = 0; head < shape.head_slots(); ++head) {
      builder.begin_head();
      for (int64_t begin = 0; begin < shape.q_len; begin += shape.tile_rows) {
        const int64_t end = std::min(shape.q_len, begin + shape.tile_rows);
        const int64_t position = begin / kColumnBlockRows * kColumnBlockRows + offset;
        builder.begin_tile(begin, end);
        add_short_tile_keys(builder, form, chunks, position, end + offset);
      }
    }
    return builder.finish();
  };
}

std::function<Plan(const PlanShape&)> pattern_plan(const std::string& pattern) {
  return [pattern](const PlanShape& shape) {
    return mmsparse::build_plan(mmsparse::PatternSpec::parse(pattern), shape);
  };
}

// A case's plan; one of several passes runs through cuda::attention_passes, its scratch
// allocation and merge inside the timing.
struct Case {
  std::string name;
  int64_t length;
  std::function<Plan(const PlanShape&)> build;
  int64_t head_dim = kHeadDim;
  int64_t kv_extra = 0;  // keys before the first query: kv_len = length + kv_extra
};

struct KernelChoice {
  const char* name;
  cuda::AttentionKernel kernel;
  int64_t tile_rows;
};

constexpr KernelChoice kKernels[] = {
    {"mma.sync/64", cuda::AttentionKernel::kMmaSync, 64},
    {"wgmma/64", cuda::AttentionKernel::kWgmma, 64},
    {"wgmma/128", cuda::AttentionKernel::kWgmma, 128},
};
constexpr int kKernelCount = static_cast<int>(std::size(kKernels));

struct Timing {
  double milliseconds = 0.0;
  double tflops = 0.0;
  float out_difference = 0.0f;
  float lse_difference = 0.0f;
};

// The arguments of one bench case: bf16 q [1, length, heads, head_dim], k and v [1, kv_len,
// kv_heads, head_dim], contiguous, and out and lse strides of q's layout (the caller sets kernel,
// out and lse).
cuda::AttentionArgs bench_args(int64_t length, int64_t kv_len, int64_t head_dim,
                               const DeviceArray& q, const DeviceArray& k, const DeviceArray& v) {
  cuda::AttentionArgs args;
  args.dtype = DType::kBFloat16;
  args.batch = 1;
  args.q_len = length;
  args.kv_len = kv_len;
  args.q_heads = kQueryHeads;
  args.kv_heads = kKeyValueHeads;
  args.head_dim = head_dim;
  args.scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
  args.q = q.data;
  args.q_strides = {length * kQueryHeads * head_dim, kQueryHeads * head_dim, head_dim, 1};
  args.k = k.data;
  args.k_strides = {kv_len * kKeyValueHeads * head_dim, kKeyValueHeads * head_dim, head_dim, 1};
  args.v = v.data;
  args.v_strides = args.k_strides;
  args.out_strides = args.q_strides;
  args.lse_strides = {kQueryHeads * length, length, 1};
  return args;
}

// The median event time of kRepeats runs after kWarmups, each behind a write of the flush buffer
// (so that no run finds the last one's operands in L2).
float median_milliseconds(const std::function<void()>& run, const DeviceArray& flush,
                          cudaEvent_t start, cudaEvent_t stop) {
  std::vector<float> samples;
  for (int r = 0; r < kWarmups + kRepeats; ++r) {
    check(cudaMemsetAsync(flush.data, r, flush.bytes), "cudaMemsetAsync");
    check(cudaEventRecord(start), "cudaEventRecord");
    run();
    check(cudaEventRecord(stop), "cudaEventRecord");
    check(cudaEventSynchronize(stop), "cudaEventSynchronize");
    float milliseconds = 0.0f;
    check(cudaEventElapsedTime(&milliseconds, start, stop), "cudaEventElapsedTime");
    if (r >= kWarmups) samples.push_back(milliseconds);
  }
  return median(samples);
}

// Whether a kernel serves a case's head_dim: the mma.sync kernel has no head_dim 256.
bool serves(const KernelChoice& kernel, int64_t head_dim) {
  return kernel.kernel != cuda::AttentionKernel::kMmaSync || head_dim != cuda::kWgmmaWideHeadDim;
}

// One table row: the case, its pairs, each kernel's time and TFLOP/s ("-" where it does not serve
// the case), the first kernel's time over the last's, and each later kernel's largest differences
// from the first that ran (the reference).
void print_case_row(const Case& c, double pairs, const Timing (&timings)[kKernelCount]) {
  std::printf("%-23s %10.3e", c.name.c_str(), pairs);
  for (int i = 0; i < kKernelCount; ++i) {
    if (serves(kKernels[i], c.head_dim)) {
      std::printf(" | %9.3f %7.1f", timings[i].milliseconds, timings[i].tflops);
    } else {
      std::printf(" | %9s %7s", "-", "-");
    }
  }
  if (serves(kKernels[0], c.head_dim)) {
    std::printf(" | %5.2fx", timings[0].milliseconds / timings[kKernelCount - 1].milliseconds);
  } else {
    std::printf(" | %6s", "-");
  }
  for (int i = 1; i < kKernelCount; ++i) {
    std::printf(" | %.1e %.1e", timings[i].out_difference, timings[i].lse_difference);
  }
  std::printf("\n");
  std::fflush(stdout);
}

void run_case(const Case& c) {
  const int64_t length = c.length;
  const int64_t kv_len = length + c.kv_extra;
  const std::size_t q_elements = static_cast<std::size_t>(length * kQueryHeads * c.head_dim);
  const std::size_t kv_elements = static_cast<std::size_t>(kv_len * kKeyValueHeads * c.head_dim);
  const std::size_t lse_elements = static_cast<std::size_t>(kQueryHeads * length);
  DeviceArray q(q_elements * sizeof(__nv_bfloat16));
  DeviceArray k(kv_elements * sizeof(__nv_bfloat16));
  DeviceArray v(kv_elements * sizeof(__nv_bfloat16));
  DeviceArray reference_out(q_elements * sizeof(__nv_bfloat16));
  DeviceArray reference_lse(lse_elements * sizeof(float));
  DeviceArray out(q_elements * sizeof(__nv_bfloat16));
  DeviceArray lse(lse_elements * sizeof(float));
  DeviceArray flush(kFlushBytes);
  constexpr uint32_t kSeeds[] = {1, 2, 3};
  fill_random_kernel<<<kGridBlocks, kInitThreads>>>(static_cast<__nv_bfloat16*>(q.data),
                                                    static_cast<int64_t>(q_elements), kSeeds[0]);
  fill_random_kernel<<<kGridBlocks, kInitThreads>>>(static_cast<__nv_bfloat16*>(k.data),
                                                    static_cast<int64_t>(kv_elements), kSeeds[1]);
  fill_random_kernel<<<kGridBlocks, kInitThreads>>>(static_cast<__nv_bfloat16*>(v.data),
                                                    static_cast<int64_t>(kv_elements), kSeeds[2]);
  check(cudaGetLastError(), "fill_random_kernel");

  cuda::AttentionArgs args = bench_args(length, kv_len, c.head_dim, q, k, v);

  Timing timings[kKernelCount];
  double pairs = 0.0;
  cudaEvent_t start;
  cudaEvent_t stop;
  check(cudaEventCreate(&start), "cudaEventCreate");
  check(cudaEventCreate(&stop), "cudaEventCreate");
  Plan plan;  // rebuilt only when the tile height changes (host builds of 128K plans take seconds)
  bool reference = true;  // the first kernel that serves the case
  for (int i = 0; i < kKernelCount; ++i) {
    if (!serves(kKernels[i], c.head_dim)) continue;
    PlanShape shape;
    shape.heads = kQueryHeads;
    shape.q_len = length;
    shape.kv_len = kv_len;
    shape.tile_rows = kKernels[i].tile_rows;
    if (reference || !(plan.shape == shape)) plan = c.build(shape);
    if (reference) pairs = computed_pairs(plan);  // the same pairs whatever the tile height
    const std::vector<cuda::DevicePlan> passes = cuda::upload_passes(plan, nullptr);
    args.kernel = kKernels[i].kernel;
    args.out = reference ? reference_out.data : out.data;
    args.lse = static_cast<float*>(reference ? reference_lse.data : lse.data);
    timings[i].milliseconds =
        median_milliseconds([&] { cuda::attention_passes(passes, args); }, flush, start, stop);
    timings[i].tflops = kFlopsPerPairPerDim * pairs * static_cast<double>(c.head_dim) /
                        (timings[i].milliseconds / kMillisecondsPerSecond) / kTera;
    if (!reference) {
      timings[i].out_difference = max_difference(reference_out, out, true);
      timings[i].lse_difference = max_difference(reference_lse, lse, false);
      // The next kernel's outputs must not inherit these.
      check(cudaMemset(out.data, 0xff, out.bytes), "cudaMemset");
    }
    reference = false;
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  print_case_row(c, pairs, timings);
}

}  // namespace

int main(int argc, char** argv) {
  constexpr int64_t k1K = 1024;
  constexpr int64_t k8K = 8192;
  constexpr int64_t k32K = 32768;
  constexpr int64_t k128K = 131072;
  std::vector<Case> cases = {
      {"dense-8k", k8K, pattern_plan("dense")},
      {"dense-32k", k32K, pattern_plan("dense")},
      {"dense-128k", k128K, pattern_plan("dense")},
      {"dense-32k-d256", k32K, pattern_plan("dense"), cuda::kWgmmaWideHeadDim},
      {"a-shape-128k", k128K, pattern_plan("a-shape:sink=128,local=4096")},
      {"columns-128k", k128K, columns_plan},
      {"vertical-columns-128k", k128K, vertical_columns_plan},
      {"sequential-columns-128k", k128K, sequential_columns_plan},
      {"a-shape-1k-128k", k128K, pattern_plan("a-shape:sink=128,local=1024")},
      {"grid-128k", k128K, pattern_plan("grid-mask:lattice=0")},
      {"grid-columns-128k", k128K, pattern_plan("grid-mask:columns=1")},
      {"grid-p16-128k", k128K, pattern_plan("grid-mask:columns=1,phases=16")},
      {"grid-lattice-128k", k128K, pattern_plan("grid-mask:lattice=1")},
  };
  for (const int64_t length : {k32K, k128K}) {
    const std::string size = std::to_string(length / k1K) + "k";
    for (const bool ordered : {false, true}) {
      cases.push_back({std::string(ordered ? "sinks-ordered-" : "sinks-in-place-") + size, length,
                       [ordered](const PlanShape& shape) {
                         return mmsparse::bench::sink_plan(shape, ordered);
                       }});
    }
  }
  for (const ShortTileForm form : kShortTileForms) {
    const int64_t lead =
        form == ShortTileForm::kSplit ? kShortTileSplitLeadKeys : kShortTileLeadKeys;
    for (int64_t chunks = kShortTileMaxChunks; chunks >= kShortTileMinChunks; chunks /= 2) {
      cases.push_back(
          {std::string("short-") + short_tile_form_name(form) + "-" + std::to_string(chunks),
           kShortTileLength, short_tiles_plan(chunks, form), kHeadDim, lead});
    }
  }
  std::vector<std::string> selected(argv + 1, argv + argc);

  cudaDeviceProp properties{};
  check(cudaGetDeviceProperties(&properties, 0), "cudaGetDeviceProperties");
  // Plans of several passes allocate their scratch in stream order on every call: mmsparse's pool
  // (device_pool.h) keeps its memory between calls, as a framework's caching allocator would (its
  // default, made explicit against MMSPARSE_POOL_KEEP_MB), so that the timings hold the kernels
  // and not the driver's mapping of fresh memory.
  cudaMemPool_t pool = cuda::memory_pool(0);
  uint64_t keep_everything = std::numeric_limits<uint64_t>::max();
  check(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep_everything),
        "cudaMemPoolSetAttribute");
  std::printf(
      "mmsparse_engine_bench on %s (%d SMs): bf16, %lld q heads / %lld kv heads, d%lld (unless "
      "the case names another); median of %d after %d warm-ups, L2 flushed before each run\n",
      properties.name, properties.multiProcessorCount, static_cast<long long>(kQueryHeads),
      static_cast<long long>(kKeyValueHeads), static_cast<long long>(kHeadDim), kRepeats, kWarmups);
  // The wgmma kernel's CTA schedule comes from the environment (cuda::CtaSchedule); an A/B runs
  // the bench once per value.
  const char* schedule = std::getenv("MMSPARSE_CTA_SCHEDULE");
  const bool persistent = schedule != nullptr && std::string_view(schedule) == "persistent";
  std::printf("wgmma CTA schedule: %s%s\n",
              schedule == nullptr || *schedule == '\0' ? "auto (unset)" : schedule,
              persistent ? " (the wgmma/128 column at head_dim 128, dense and short cases "
                           "included; one CTA per tile elsewhere)"
                         : "");
  std::printf("%-23s %10s", "case", "pairs");
  for (const KernelChoice& kernel : kKernels) std::printf(" | %-9s %7s", kernel.name, "TFLOP/s");
  std::printf(" | %6s", "gain");
  for (int i = 1; i < kKernelCount; ++i) std::printf(" | %s max|dO| |dLSE|", kKernels[i].name);
  std::printf("\n");
  for (const Case& c : cases) {
    if (!selected.empty() && std::find(selected.begin(), selected.end(), c.name) == selected.end())
      continue;
    try {
      run_case(c);
    } catch (const std::exception& error) {
      std::printf("%-23s failed: %s\n", c.name.c_str(), error.what());
      return 1;
    }
  }
  return 0;
}
