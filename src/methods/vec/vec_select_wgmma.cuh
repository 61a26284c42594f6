#pragma once
// VecAttention's score pass on warpgroup MMAs (sm_90a, head_dim 128): the same selection as
// vec_select.cuh's select_kernel (TilingSelect + minS, the same keep masks), with the scores of a
// chunk computed by one asynchronous wgmma per head_dim step, both operands in shared memory,
// instead of ldmatrix fragments and mma.sync per warp. A CTA serves the same kCtaRows pooled blocks
// of one head slot over the same key split as select_kernel: two warpgroups of 64 rows, so warp w
// holds rows 16 w .. 16 w + 15 as before. The keys of a chunk lie in shared memory in lane-tile
// order (lane_tile_key), so that in the m64nN accumulator each lane of a row's quad holds one whole
// 16-key tile: its filter (filter_and_store_chunk: the same operations on each score as
// select_kernel's filter_half_chunk) takes a tile's maximum and keep mask in registers, where
// mma.sync's layout spreads a tile over the quad and needs shuffles for both.
//
// Pipeline: the pooled queries (kCtaRows x head_dim) and the key chunks (kChunkKeys x head_dim) lie
// in shared memory as 128-byte swizzle atoms (sm90/traits.cuh's layout, which the descriptors
// read), copied by every thread with cp.async through a ring of kWgmmaStages stages. Each stage
// has two transaction barriers (StageBarriers): "loaded" completes when every thread's copies of
// the stage's chunk have landed, "consumed" when every warp's wgmma has read it; a warp waits
// only for those, where one CTA barrier per chunk held every warp to the slowest. Each warpgroup
// issues chunk c + 1's wgmma group into one accumulator set, then filters chunk c from the other
// while the tensor cores run: two sets of kChunkKeys / 2 floats a thread, where select_kernel
// held the 32 registers of the pooled fragments and 32 accumulators.
//
// Arithmetic: the products are exact and summed in fp32 by the tensor cores in their own order,
// as with mma.sync, so a score may differ from select_kernel's in its last bits; the selection
// keeps the host's rounding bound (vec_device.cu's design comment).

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <limits>

#include "cuda/attention/sm80/ptx.cuh"
#include "cuda/attention/sm90/ptx.cuh"
#include "methods/vec/vec_select.cuh"

namespace mmsparse::cuda::vec_kernels {

constexpr int kWgmmaHeadDim = kMaxHeadDim;  // the one head_dim compiled for (else select_kernel)
constexpr int kWgmmaWarpgroupRows = kWarpgroupWarps * kMmaRows;  // M of the wgmma
static_assert(kCtaRows % kWgmmaWarpgroupRows == 0, "the CTA's rows are whole warpgroups");
constexpr int kWgmmaWarpgroups = kCtaRows / kWgmmaWarpgroupRows;
static_assert(kWgmmaWarpgroups * kWarpgroupThreads == kSelectThreads,
              "the same threads as select_kernel: its grid and split choice serve both");
// Four stages: chunks c + 1 .. c + 3 in flight while chunk c is filtered; 32 KiB of queries and
// 64 KiB of keys (and an atom of alignment slack) keep two CTAs per SM, as select_kernel.
constexpr int kWgmmaStages = 4;
constexpr int kWgmmaAccumulatorTiles = kChunkKeys / kMmaN;  // the m64nN accumulator's 8-key tiles
static_assert(kWgmmaAccumulatorTiles == 2 * kChunkTiles, "two 8-key halves per 16-key tile");

template <class Element>
struct WgmmaSelectLayout {
  static constexpr int kAtomElements = kSwizzleBytes / static_cast<int>(sizeof(Element));
  static constexpr int kColumnBlocks = kWgmmaHeadDim / kAtomElements;  // atoms across head_dim
  static constexpr int kStepsPerAtom = kAtomElements / kMmaK;          // k-steps per atom
  static constexpr int kHeadDimSteps = kWgmmaHeadDim / kMmaK;
  static constexpr int kStepBytes = kMmaK * static_cast<int>(sizeof(Element));
  static constexpr int kVectorElements = kCopyBytes / static_cast<int>(sizeof(Element));
  static constexpr int kVectorsPerRow = kWgmmaHeadDim / kVectorElements;
  static constexpr int kVectorsPerAtomRow = kSwizzleBytes / kCopyBytes;
  static constexpr int kRowsPerPass = kSelectThreads / kVectorsPerRow;  // rows a pass copies
  static constexpr int kQueryBlockBytes = kCtaRows * kSwizzleBytes;     // a column block of Q
  static constexpr int kChunkBlockBytes = kChunkKeys * kSwizzleBytes;   // a column block of keys
  static_assert(kWgmmaHeadDim % kAtomElements == 0, "head_dim fills whole swizzle atoms");
  static_assert(kSelectThreads % kVectorsPerRow == 0, "a copy pass covers whole rows");
  static_assert(kChunkKeys % kRowsPerPass == 0 && kCtaRows % kRowsPerPass == 0,
                "chunks and the query tile are whole passes");
  static_assert(kRowsPerPass % kSwizzleAtomRows == 0,
                "a thread's vector keeps its place in the swizzle from pass to pass");

  // Byte offset of this thread's vector in row `row` of a swizzled tile of `rows` rows: the column
  // block, the row's 128-byte line, the vector XORed with row % 8 (the 128-byte swizzle).
  __device__ static uint32_t vector_offset(int rows, int row, int vector) {
    const int block = vector / kVectorsPerAtomRow;
    const int in_block = vector % kVectorsPerAtomRow;
    return static_cast<uint32_t>(block * rows * kSwizzleBytes + row * kSwizzleBytes +
                                 (in_block ^ (row % kSwizzleAtomRows)) * kCopyBytes);
  }
};

template <class Element>
struct WgmmaSelectStorage {
  // [column block][rows][kAtomElements] each, 128-byte swizzled.
  alignas(kSwizzleAtomBytes) Element query[kCtaRows * kWgmmaHeadDim];
  alignas(kSwizzleAtomBytes) Element keys[kWgmmaStages][kChunkKeys * kWgmmaHeadDim];
  uint64_t loaded[kWgmmaStages];    // StageBarriers: the stage's chunk has landed
  uint64_t consumed[kWgmmaStages];  // StageBarriers: every warp's wgmma has read it
};

// Dynamic shared memory is aligned to 16 bytes only: an atom of slack for the 1024-byte alignment
// the swizzled descriptors need.
template <class Element>
constexpr int wgmma_select_shared_bytes() {
  return static_cast<int>(sizeof(WgmmaSelectStorage<Element>)) + kSwizzleAtomBytes;
}

template <class Element>
__device__ WgmmaSelectStorage<Element>& aligned_select_storage(unsigned char* dynamic_shared) {
  const uint32_t address = shared_address(dynamic_shared);
  const uint32_t padding = (kSwizzleAtomBytes - address % kSwizzleAtomBytes) % kSwizzleAtomBytes;
  return *reinterpret_cast<WgmmaSelectStorage<Element>*>(dynamic_shared + padding);
}

// The key order of a chunk in shared memory. The wgmma accumulator gives lane q of a row's quad
// the columns 8 n + 2 q + j (n < kChunkKeys / 8, j < 2): with shared row d holding chunk key
// lane_tile_key(d) = 16 ((d % 8) / 2) + 2 (d / 8) + d % 2, column 8 n + 2 q + j is key 16 q + 2 n +
// j, so each lane holds one whole 16-key tile (tile q) of its two rows: the tile's maximum and keep
// mask need no shuffles, and the lane stores the mask it built.
__device__ constexpr int lane_tile_key(int row) {
  return kTileKeys * (row % kMmaN / 2) + 2 * (row / kMmaN) + row % 2;
}
static_assert(
    kChunkKeys == kQuadLanes * kTileKeys && kTileKeys == 2 * (kChunkKeys / kMmaN),
    "a chunk's 8-key column groups give each quad lane two keys of every group: one tile");

// Queues the copies of the kCtaRows pooled blocks' head_dim elements (row r at source + r *
// row_stride; rows at or past `valid_rows` zero-filled) into the swizzled tile at `tile`. A thread
// copies the same vector of every kRowsPerPass-th row: its place in the swizzle stays, its source
// advances by kRowsPerPass rows. No commit.
template <class Element>
__device__ void copy_query_tile(uint32_t tile, const Element* source, int64_t row_stride,
                                int valid_rows) {
  using Layout = WgmmaSelectLayout<Element>;
  const int first_row = static_cast<int>(threadIdx.x) / Layout::kVectorsPerRow;
  const int vector = static_cast<int>(threadIdx.x) % Layout::kVectorsPerRow;
  const uint32_t destination = tile + Layout::vector_offset(kCtaRows, first_row, vector);
  const Element* first_source = source + first_row * row_stride + vector * Layout::kVectorElements;
#pragma unroll
  for (int pass = 0; pass < kCtaRows / Layout::kRowsPerPass; ++pass) {
    const bool valid = first_row + pass * Layout::kRowsPerPass < valid_rows;
    copy_async_16(destination + pass * Layout::kRowsPerPass * kSwizzleBytes,
                  valid ? first_source + pass * Layout::kRowsPerPass * row_stride : source, valid);
  }
}

// A thread's share of the key chunks' copies, chunk after chunk: the same vector of every
// kRowsPerPass-th shared row d of a stage, which holds chunk key lane_tile_key(d). kRowsPerPass is
// a multiple of 8, so d % 8 stays from pass to pass and the source advances by a constant,
// lane_tile_key(kRowsPerPass) keys. The cursor carries the thread's source and its keys left
// below kv_len from chunk to chunk (one 64-bit add and one subtraction), where rebuilding them
// from the chunk's index took a 64-bit multiply and a select per pass: the copies were an eighth
// of the score pass's instructions.
template <class Element>
struct KeyChunkCopies {
  using Layout = WgmmaSelectLayout<Element>;
  static_assert(Layout::kRowsPerPass % kMmaN == 0, "a pass keeps each row's place in its group");
  static constexpr int kSourcePassKeys = lane_tile_key(Layout::kRowsPerPass);

  const Element* keys;    // [kv_len, k_stride_row] the head's keys: a readable zero-fill source
  const Element* source;  // this thread's vector of its first key in the next chunk
  int64_t row_stride;     // elements between consecutive keys
  int32_t keys_left;      // keys from that first key to kv_len
  uint32_t destination;   // this thread's first vector's byte offset in a stage

  // Starts at the chunk of keys from `scan_begin` (head_keys: the head's key 0).
  __device__ KeyChunkCopies(const VecKernelParams& p, const Element* head_keys, int32_t scan_begin)
      : keys(head_keys), row_stride(p.k_stride_row) {
    const int first_row = static_cast<int>(threadIdx.x) / Layout::kVectorsPerRow;
    const int vector = static_cast<int>(threadIdx.x) % Layout::kVectorsPerRow;
    const int32_t first_key = scan_begin + lane_tile_key(first_row);
    source = keys + first_key * row_stride + vector * Layout::kVectorElements;
    keys_left = p.kv_len - first_key;
    destination = Layout::vector_offset(kChunkKeys, first_row, vector);
  }

  // Queues the next chunk's copies into `stage` (keys past kv_len zero-filled) and moves to the
  // chunk after it. No commit: the stage's barrier tracks the copies (StageBarriers).
  __device__ void queue_next(uint32_t stage) {
#pragma unroll
    for (int pass = 0; pass < kChunkKeys / Layout::kRowsPerPass; ++pass) {
      const bool valid = pass * kSourcePassKeys < keys_left;
      copy_async_16(stage + destination + pass * Layout::kRowsPerPass * kSwizzleBytes,
                    valid ? source + pass * kSourcePassKeys * row_stride : keys, valid);
    }
    source += kChunkKeys * row_stride;
    keys_left -= kChunkKeys;
  }
};

// Whether the barrier's phase of parity `parity` has completed (one mbarrier.try_wait.parity).
__device__ inline bool barrier_phase_complete(uint32_t barrier, uint32_t parity) {
  uint32_t complete = 0;
  asm volatile(
      "{\n"
      ".reg .pred done;\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%1], %2;\n"
      "selp.u32 %0, 1, 0, done;\n"
      "}\n"
      : "=r"(complete)
      : "r"(barrier), "r"(parity)
      : "memory");
  return complete != 0;
}

__device__ inline uint64_t global_nanoseconds() {
  uint64_t now = 0;
  asm volatile("mov.u64 %0, %%globaltimer;\n" : "=l"(now));
  return now;
}

// A stage's wait lasts as long as a chunk's copies or the slowest warp's chunk, microseconds; a
// wait this long means a phase that can never complete (a pipeline bug), and the kernel traps, a
// launch error the caller sees, where waiting on would hang the stream and every test after it.
constexpr uint64_t kStageWaitLimitNanoseconds = 2'000'000'000;

// The ring of kWgmmaStages stages and their barriers. Chunk k of the scan lies in stage
// k % kWgmmaStages, that stage's use k / kWgmmaStages, and each use is one phase of both its
// barriers (phase u completes the u-th use): a wait for chunk k tests the parity of
// k / kWgmmaStages.
//   loaded[s]: kSelectThreads arrivals a phase, one per thread, each by cp.async's mbarrier
//     arrive (noinc: one of the expected arrivals) once the thread's copies of the chunk (and,
//     for chunk 0, of the query tile) have landed. Every thread queues every chunk of the scan.
//   consumed[s]: kSelectWarps arrivals a phase, lane 0 of each warp after its warpgroup's wgmma
//     of the chunk completed (warpgroup_wait), so no wgmma reads the stage any more.
// Invariants, which make each parity test unambiguous (a parity names one phase only while the
// barrier is at most one phase past it and not behind it):
//   - A thread queues chunk k >= kWgmmaStages only after consumed's phase of chunk
//     k - kWgmmaStages completed, which needs every warp past its wgmma of that chunk, hence past
//     its wait for loaded's phase of that chunk: no arrival on loaded[s] for a use comes before
//     the previous use's phase completed, and no thread waits for loaded's phase of chunk k
//     while the phase of chunk k + kWgmmaStages can complete (that needs the thread's own warp
//     to release chunk k, after the wait).
//   - A warp releases chunk k only after its wait for loaded's phase of chunk k (its wgmma read
//     the chunk), which needs every thread to have queued chunk k, hence (k >= kWgmmaStages)
//     waited for consumed's phase of chunk k - kWgmmaStages: no arrival on consumed[s] for a use
//     comes before the previous use's phase completed; a thread waits for consumed's phase of
//     chunk k - kWgmmaStages before queueing chunk k, so the phase of chunk k, which needs the
//     chunk queued, cannot have completed then.
//   - Each thread waits for the phases of a barrier in order (chunk by chunk), so the phase
//     before the one it tests has always completed.
// Progress: in iteration c every wait is for an event of an earlier iteration (loaded of chunk
// c + 1: queued in iteration c + 2 - kWgmmaStages or the prologue; consumed of chunk c - 1:
// released in iteration c - 1), so by induction on c every warp finishes every iteration.
struct StageBarriers {
  uint32_t stages;    // stage 0 (shared address); stage s at + s * stage_bytes
  uint32_t loaded;    // loaded[0] (shared address); loaded[s] at + 8 s
  uint32_t consumed;  // consumed[0] (shared address)

  __device__ static uint32_t stage_index(int32_t chunk) {
    return static_cast<uint32_t>(chunk) % kWgmmaStages;
  }
  __device__ static uint32_t parity(int32_t chunk) {
    return static_cast<uint32_t>(chunk) / kWgmmaStages % 2;
  }
  __device__ uint32_t loaded_barrier(int32_t chunk) const {
    return loaded + stage_index(chunk) * static_cast<uint32_t>(sizeof(uint64_t));
  }
  __device__ uint32_t consumed_barrier(int32_t chunk) const {
    return consumed + stage_index(chunk) * static_cast<uint32_t>(sizeof(uint64_t));
  }

  // Thread 0 sets up every barrier; the caller's __syncthreads then publishes them.
  __device__ void initialize() const {
    if (threadIdx.x != 0) return;
    for (int32_t stage = 0; stage < kWgmmaStages; ++stage) {
      barrier_init(loaded_barrier(stage), kSelectThreads);
      barrier_init(consumed_barrier(stage), kSelectWarps);
    }
    fence_barrier_init();
  }

  // Until the phase of `chunk` of `barrier` has completed, or traps after
  // kStageWaitLimitNanoseconds.
  __device__ static void wait(uint32_t barrier, int32_t chunk) {
    const uint32_t phase_parity = parity(chunk);
    if (barrier_phase_complete(barrier, phase_parity)) return;
    const uint64_t start = global_nanoseconds();
    while (!barrier_phase_complete(barrier, phase_parity)) {
      if (global_nanoseconds() - start > kStageWaitLimitNanoseconds) __trap();
    }
  }

  // Until `chunk` has landed, then orders the copies (generic proxy) before this thread's wgmma
  // (async proxy) reads them.
  __device__ void wait_loaded(int32_t chunk) const {
    wait(loaded_barrier(chunk), chunk);
    fence_proxy_async();
  }

  // This warp's wgmma has read `chunk` (after warpgroup_wait): one arrival per warp.
  __device__ void release(int32_t chunk) const {
    if (threadIdx.x % kWarpSize == 0) barrier_arrive(consumed_barrier(chunk));
  }

  // This thread's copies of `chunk` (after those of the chunk kWgmmaStages before it were read
  // by every warp) and its arrival on the chunk's loaded barrier once they land.
  template <class Element>
  __device__ void queue(int32_t chunk, KeyChunkCopies<Element>& copies,
                        uint32_t stage_bytes) const {
    if (chunk >= kWgmmaStages) wait(consumed_barrier(chunk - kWgmmaStages), chunk - kWgmmaStages);
    copies.queue_next(stages + stage_index(chunk) * stage_bytes);
    barrier_arrive_after_async_copies(loaded_barrier(chunk));
  }
};

// Issues the scores of the warpgroup's 64 pooled blocks against a stage's kChunkKeys keys (raw dot
// products) as one wgmma group: scores[n] holds the stage's rows 8 n .. 8 n + 7 (lane-tile order).
template <class Element>
__device__ void issue_chunk_scores(uint32_t query, uint32_t stage,
                                   float (&scores)[kWgmmaAccumulatorTiles][4]) {
  using Layout = WgmmaSelectLayout<Element>;
  const uint64_t query_descriptor = matrix_descriptor(query, kCopyBytes, kSwizzleAtomBytes);
  const uint64_t key_descriptor = matrix_descriptor(stage, kCopyBytes, kSwizzleAtomBytes);
  warpgroup_fence();
#pragma unroll
  for (int step = 0; step < Layout::kHeadDimSteps; ++step) {
    // K-steps inside an atom advance the start address; the hardware applies the swizzle to the
    // resulting addresses (the atoms are 1024-byte aligned).
    const int block = step / Layout::kStepsPerAtom;
    const uint32_t within = step % Layout::kStepsPerAtom * Layout::kStepBytes;
    WgmmaScores<Element, kChunkKeys>::run(
        scores, advance_descriptor(query_descriptor, block * Layout::kQueryBlockBytes + within),
        advance_descriptor(key_descriptor, block * Layout::kChunkBlockBytes + within), step > 0);
  }
  warpgroup_commit();
}

// A chunk's scores times p.scale, out of the accumulators (issue_chunk_scores's, complete) into
// registers of their own, in the accumulators' shape. The accumulators are then free for the next
// chunk's wgmma while these are filtered: no instruction but the wgmma touches them in between,
// else ptxas serialises it.
__device__ inline void scale_chunk_scores(const VecKernelParams& p,
                                          const float (&scores)[kWgmmaAccumulatorTiles][4],
                                          float (&scaled)[kWgmmaAccumulatorTiles][4]) {
#pragma unroll
  for (int group = 0; group < kWgmmaAccumulatorTiles; ++group) {
#pragma unroll
    for (int i = 0; i < 4; ++i) scaled[group][i] = __fmul_rn(scores[group][i], p.scale);
  }
}

// `value` (the same in every lane of the warp) as lane 0's: ptxas then knows it is warp-uniform
// and keeps it, and what the loop derives from it (the query tile's descriptors, the warp's
// candidate ranges and key end), in uniform registers instead of the 128 per-thread registers,
// where those loop invariants spilled to local memory and were reloaded every chunk.
__device__ inline int32_t warp_uniform(int32_t value) {
  return __shfl_sync(kFullWarpMask, value, 0);
}

// Where the groups of the running maximum start, per lane: its tile's position in its group
// (0: a group starts there), carried from chunk to chunk by one add and one compare (the step and
// the group length from the constant bank), where stepping a shared position through the chunk's
// four tiles took ~25 instructions per chunk.
struct LaneGroups {
  int32_t position;  // the lane's tile's, in [0, p.group_tiles)

  __device__ LaneGroups(const VecKernelParams& p, int32_t scan_begin, int quad_lane)
      : position((scan_begin / kTileKeys + quad_lane) % p.group_tiles) {}

  // The latest tile of the chunk (0 .. kQuadLanes - 1) at or before this lane's tile where a group
  // starts (-1: none; the running maximum of the chunks before goes on): the tiles from
  // quad_lane - position up to the lane's share its group. Then moves to the next chunk.
  __device__ int chunk_group_start(const VecKernelParams& p, int quad_lane) {
    const int group_start = position <= quad_lane ? quad_lane - position : -1;
    position += p.group_chunk_step;
    if (position >= p.group_tiles) position -= p.group_tiles;
    return group_start;
  }
};

// Row h's largest candidate score of the lane's tile (from `tile_begin`; -infinity without one):
// its 16 scores, as a tree of maxima (fmaxf is exact, so the order changes nothing).
template <bool kAllCandidates>
__device__ float lane_tile_maximum(const float (&scaled)[kWgmmaAccumulatorTiles][4], int h,
                                   const BlockKeys& keys, int32_t tile_begin) {
  float pair[kWgmmaAccumulatorTiles];
#pragma unroll
  for (int group = 0; group < kWgmmaAccumulatorTiles; ++group) {
    float two[2];
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      two[j] = scaled[group][2 * h + j];
      if (!kAllCandidates && !keys.is_candidate(tile_begin + 2 * group + j)) {
        two[j] = -std::numeric_limits<float>::infinity();
      }
    }
    pair[group] = fmaxf(two[0], two[1]);
  }
#pragma unroll
  for (int width = kWgmmaAccumulatorTiles / 2; width > 0; width /= 2) {
#pragma unroll
    for (int group = 0; group < width; ++group) {
      pair[group] = fmaxf(pair[group], pair[group + width]);
    }
  }
  return pair[0];
}

// Filters a chunk's scaled scores (lane-tile order: this lane holds tile quad_lane of its two rows)
// as vec.cpp does per tile: each tile's maximum over the row's candidates, the running maximum
// over the group in key order (a segmented prefix maximum over the quad's four tiles, restarting
// where a group starts, carried from chunk to chunk), and the keep test score - m >= log(alpha)
// on candidates; then stores each row's keep mask of the lane's tile. kAllCandidates: the whole
// chunk lies in the rows' CandidateRanges.
template <bool kAllCandidates>
__device__ void filter_and_store_chunk(const VecKernelParams& p, float log_alpha,
                                       int32_t chunk_begin, int32_t warp_end,
                                       const float (&scaled)[kWgmmaAccumulatorTiles][4],
                                       LaneGroups& groups, RowState& state,
                                       const MaskStore& store) {
  const int quad_lane = static_cast<int>(threadIdx.x) % kQuadLanes;
  const int32_t tile_begin = chunk_begin + quad_lane * kTileKeys;
  const int group_start = groups.chunk_group_start(p, quad_lane);
  float running[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    running[h] = lane_tile_maximum<kAllCandidates>(scaled, h, state.keys[h], tile_begin);
  }
  // Tile t - offset is in this tile's group when it is at or after the group's start.
  const int segment_first = max(group_start, 0);
#pragma unroll
  for (int offset = 1; offset < kQuadLanes; offset *= 2) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const float earlier = __shfl_up_sync(kFullWarpMask, running[h], offset, kQuadLanes);
      running[h] = fmaxf(running[h], quad_lane - offset >= segment_first ? earlier : running[h]);
    }
  }
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    if (group_start < 0) running[h] = fmaxf(running[h], state.running[h]);
    state.running[h] = __shfl_sync(kFullWarpMask, running[h], kQuadLanes - 1, kQuadLanes);
  }
  // Tiles below warp_end lie below kv_len: within the row's mask_pitch.
  if (tile_begin >= warp_end) return;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    uint32_t kept = 0u;
#pragma unroll
    for (int group = 0; group < kWgmmaAccumulatorTiles; ++group) {
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        const int bit = 2 * group + j;
        const bool candidate = kAllCandidates || state.keys[h].is_candidate(tile_begin + bit);
        if (candidate && __fsub_rn(scaled[group][2 * h + j], running[h]) >= log_alpha) {
          kept |= 1u << bit;
        }
      }
    }
    // Row lane / 4 + 8 is stored only where it exists, and then row lane / 4's pointer is not
    // clamped: the second row's is the first's kMmaN rows on, one add where ptxas otherwise
    // rebuilt it from the slot every chunk. tile_begin >= 0: its unsigned division is one shift.
    if (store.active[h]) {
      uint16_t* const row = store.rows[0] + h * kMmaN * static_cast<int64_t>(p.mask_pitch);
      row[static_cast<uint32_t>(tile_begin) / kTileKeys] = static_cast<uint16_t>(kept);
    }
  }
}

// What every step of wgmma_scan_chunks reads.
struct WgmmaScan {
  uint32_t query;  // the warpgroup's rows of the query tile (shared address)
  StageBarriers ring;
  int32_t scan_begin;  // the CTA's first key
  int32_t chunks;
  int32_t warp_end;  // the warp's keys stop there (warp_key_end)
  float log_alpha;
  CandidateRanges full;
};

template <class Element>
constexpr uint32_t kWgmmaStageBytes = kChunkKeys* kWgmmaHeadDim * sizeof(Element);

// The chunks of one CTA's key range, as scan_chunks but through wgmma. The pooled queries and the
// first kWgmmaStages - 1 chunks are queued, chunk 0's wgmma issued once it has landed; then per
// chunk c: wait for chunk c + 1 to land, chunk c's scores scaled out of the accumulators, chunk
// c + 1's wgmma issued into them, chunk c's stage released, chunk c filtered while the tensor
// cores run, and chunk c + kWgmmaStages - 1 queued into the stage of chunk c - 1 once every warp
// has released it (StageBarriers: the waits, their phases and why they complete). A warp runs
// ahead of the CTA's slowest by up to about a chunk and a half (the stages between the chunk it
// waits to load and the one it waits to refill), where the CTA barrier held it to the slowest.
template <class Element>
__device__ void wgmma_scan_chunks(const VecKernelParams& p, const Element* keys,
                                  const Element* pooled, WgmmaScan& scan, RowState& state,
                                  const MaskStore& store) {
  // The query tile lands with chunk 0 (its arrival follows every copy the thread issued).
  const int32_t first_block = static_cast<int32_t>(blockIdx.z) * kCtaRows;
  copy_query_tile<Element>(scan.query, pooled, kWgmmaHeadDim, p.blocks - first_block);
  scan.ring.initialize();
  __syncthreads();  // the barriers are set up before any thread arrives on them
  KeyChunkCopies<Element> copies(p, keys, scan.scan_begin);
  const int32_t prologue_chunks = min(scan.chunks, kWgmmaStages - 1);
  for (int32_t c = 0; c < prologue_chunks; ++c) {
    scan.ring.queue(c, copies, kWgmmaStageBytes<Element>);
  }
  const int warpgroup = warp_uniform(static_cast<int>(threadIdx.x) / kWarpgroupThreads);
  const uint32_t query =
      scan.query + static_cast<uint32_t>(warpgroup * kWgmmaWarpgroupRows * kSwizzleBytes);
  const auto stage_of = [&](int32_t chunk) {
    return scan.ring.stages + StageBarriers::stage_index(chunk) * kWgmmaStageBytes<Element>;
  };
  LaneGroups groups(p, scan.scan_begin, static_cast<int>(threadIdx.x) % kQuadLanes);
  float scores[kWgmmaAccumulatorTiles][4];
  scan.ring.wait_loaded(0);
  issue_chunk_scores<Element>(query, stage_of(0), scores);
  // At least one chunk (the kernel returns before an empty scan): a loop that may run no chunk
  // leaves chunk 0's wgmma to a wait ptxas inserts on a path it cannot prove uniform.
  int32_t c = 0;
  do {
    // Every warpgroup scores every chunk of the CTA, on paths that depend on the block and the
    // loop alone: ptxas serialises wgmma that waits or reads accumulators on a path it cannot
    // prove uniform across the warpgroup. A warp filters up to its rows' last candidate.
    const bool scores_next = c + 1 < scan.chunks;
    if (scores_next) scan.ring.wait_loaded(c + 1);
    const int32_t chunk_begin = scan.scan_begin + c * kChunkKeys;
    const int32_t next_begin = chunk_begin + kChunkKeys;
    float scaled[kWgmmaAccumulatorTiles][4];
    warpgroup_wait<0>();
    pin_accumulators(scores);
    scale_chunk_scores(p, scores, scaled);
    if (scores_next) issue_chunk_scores<Element>(query, stage_of(c + 1), scores);
    scan.ring.release(c);
    if (chunk_begin < scan.warp_end) {
      if (scan.full.hold(chunk_begin, next_begin)) {
        filter_and_store_chunk<true>(p, scan.log_alpha, chunk_begin, scan.warp_end, scaled, groups,
                                     state, store);
      } else {
        filter_and_store_chunk<false>(p, scan.log_alpha, chunk_begin, scan.warp_end, scaled, groups,
                                      state, store);
      }
    }
    const int32_t refill = c + kWgmmaStages - 1;
    if (refill < scan.chunks) scan.ring.queue(refill, copies, kWgmmaStageBytes<Element>);
  } while (++c < scan.chunks);
  warpgroup_wait<0>();  // nothing in flight (the last chunk issues none): ptxas sees it so
}

// select_kernel on wgmma (head_dim 128): the same grid, rows, splits and keep masks.
template <class Element>
__global__ void __launch_bounds__(kSelectThreads, kSelectMinBlocks)
    wgmma_select_kernel(const VecKernelParams p) {
  extern __shared__ __align__(16) unsigned char select_shared[];
  WgmmaSelectStorage<Element>& storage = aligned_select_storage<Element>(select_shared);
  const int32_t slot = static_cast<int32_t>(blockIdx.x);
  const int32_t split = static_cast<int32_t>(blockIdx.y);
  const int32_t first_block = static_cast<int32_t>(blockIdx.z) * kCtaRows;
  const int lane = static_cast<int>(threadIdx.x) % kWarpSize;
  const int warp = warp_uniform(static_cast<int>(threadIdx.x) / kWarpSize);
  const int32_t warp_row = first_block + warp * kMmaRows;
  const int32_t split_begin = split * p.split_keys;
  const int32_t window_end = min(p.kv_len, split_begin + p.split_keys);
  RowState state;
  MaskStore store;
  start_lane_rows(p, slot, warp_row, lane, state, store);
  WgmmaScan scan;
  scan.scan_begin = max(split_begin, state.keys[0].sink_end / kTileKeys * kTileKeys);
  const int32_t scan_end =
      min(window_end, block_keys(p, min(first_block + kCtaRows, p.blocks) - 1).candidate_end);
  scan.warp_end = warp_uniform(min(scan_end, warp_key_end(state)));
  if (scan.scan_begin >= scan_end) return;  // CTA-uniform
  const int32_t batch = slot / p.heads;
  const int32_t kv_head = query_head(p, slot % p.heads) / p.group;
  scan.log_alpha = p.log_alphas[p.alpha_heads == 1 ? 0 : slot % p.heads];
  scan.full = warp_candidate_ranges(p, warp_row);
  scan.chunks = static_cast<int32_t>(ceil_div(scan_end - scan.scan_begin, kChunkKeys));
  scan.query = shared_address(storage.query);
  scan.ring = {shared_address(storage.keys[0]), shared_address(storage.loaded),
               shared_address(storage.consumed)};
  const auto* keys =
      static_cast<const Element*>(p.k) + batch * p.k_stride_batch + kv_head * p.k_stride_head;
  const auto* pooled = static_cast<const Element*>(p.pooled) +
                       (static_cast<int64_t>(slot) * p.blocks + first_block) * kWgmmaHeadDim;
  wgmma_scan_chunks<Element>(p, keys, pooled, scan, state, store);
}

}  // namespace mmsparse::cuda::vec_kernels
