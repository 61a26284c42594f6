#pragma once
// Compile-time configuration and shared memory of the wgmma attention kernel (sm_90a): one producer
// warpgroup that streams K/V key chunks with tensor copies, and one or two consumer warpgroups of
// 64 query rows each. Every tile lives in shared memory as 128-byte swizzle atoms (8 rows of 64
// 16-bit elements, 1024 bytes), the layout the tensor copies write and the wgmma descriptors read;
// a row of head_dim elements spans head_dim / 64 column blocks of atoms (2 at 128, 4 at 256), so
// no swizzle wider than 128 bytes and no tensor box wider than 64 elements is needed.
//
// Budget, per CTA of two consumer warpgroups (128 query rows), 16-bit elements:
//   head_dim   keys/chunk   Q tile    K+V stage   stages   shared memory       O / S / P registers
//   128        128          32 KiB    64 KiB      3        224 KiB + ~1.2 KiB   64 / 64 / 32
//   256         64          64 KiB    64 KiB      2        192 KiB + ~1.2 KiB  128 / 32 / 16
// against 227 KiB of shared memory a block, and the consumers' kConsumerRegisters a thread (O, S
// and P are the thread's floats of the output, scores and packed probabilities; the rest holds
// the softmax, mask and chunk state). At head_dim 256 a chunk of 128 keys would take 128 KiB a
// stage and 64 more registers of S and P, so chunks hold 64 keys (wgmma_chunk_keys), and a third
// stage (256 KiB) does not fit: the producer refills a stage once both warpgroups' P·V of its
// chunk has completed. One warpgroup (64 rows) would fit three stages (224 KiB) but halves the
// rows each K/V chunk serves and loses the two warpgroups' ping-pong, so head_dim 256 is compiled
// for two (tiles of up to 128 rows; shorter tiles leave the second warpgroup's rows empty).

#include <cstdint>

#include "cuda/attention/sm80/ptx.cuh"
#include "cuda/attention/sm90/params.cuh"
#include "cuda/attention/sm90/ptx.cuh"

namespace mmsparse::cuda {

inline constexpr int kMaxSharedBytesPerBlock = 227 * 1024;  // sm_90's opt-in limit

// kSources_: which key chunks the instantiation loads (ChunkSources); kMaskTerms_: which mask terms
// it evaluates (MaskTerms; both in cuda/attention/sm90/params.cuh).
template <class Element_, int kHeadDim_, int kConsumerWarpgroups_, ChunkSources kSources_,
          MaskTerms kMaskTerms_ = MaskTerms::kPositional>
struct WgmmaTraits {
  using Element = Element_;
  static constexpr int kHeadDim = kHeadDim_;
  static constexpr int kConsumerWarpgroups = kConsumerWarpgroups_;
  static constexpr bool kLattices =
      kSources_ == ChunkSources::kLattices || kSources_ == ChunkSources::kLatticesAndGathers;
  static constexpr bool kGathers =
      kSources_ == ChunkSources::kGathers || kSources_ == ChunkSources::kLatticesAndGathers;
  static constexpr bool kTokens = kMaskTerms_ == MaskTerms::kTokens;
  static_assert(!kTokens || !kLattices, "token masks run on span and gather instantiations only");

  static constexpr int kWarpgroupRows = 64;  // M of every wgmma
  static constexpr int kBlockM = kConsumerWarpgroups * kWarpgroupRows;
  static constexpr int kBlockN =
      wgmma_chunk_keys(kHeadDim);  // keys per chunk: N of the score wgmma
  static constexpr int kMmaK = 16;

  // The accumulators in the mma.sync m16n8 layout (each warp of a warpgroup owns 16 rows), which
  // OnlineSoftmax shares with the mma.sync kernel.
  static constexpr int kRowsPerWarp = 16;
  static constexpr int kAccumulatorTileN = 8;
  static constexpr int kScoreTiles = kBlockN / kAccumulatorTileN;
  static constexpr int kOutputTiles = kHeadDim / kAccumulatorTileN;

  static constexpr int kAtomElements = kSwizzleBytes / static_cast<int>(sizeof(Element));
  static constexpr int kColumnBlocks = kHeadDim / kAtomElements;  // atoms across head_dim
  static constexpr int kStepsPerAtom = kAtomElements / kMmaK;     // score k-steps per atom
  static constexpr int kHeadDimSteps = kHeadDim / kMmaK;          // k-steps of Q·K^T
  static constexpr int kKeySteps = kBlockN / kMmaK;               // k-steps of P·V
  static constexpr int kStepBytes = kMmaK * static_cast<int>(sizeof(Element));

  static constexpr int kConsumerWarps = kConsumerWarpgroups * kWarpgroupWarps;
  // Column chunks are gathered by the whole producer warpgroup, and then each of its threads
  // arrives on a stage's chunk_loaded barrier once per chunk; without gathers one thread loads
  // and arrives, and the warpgroup's other threads leave at once.
  static constexpr int kProducerThreads = kWarpgroupThreads;
  static constexpr int kProducerWarps = kProducerThreads / kWarpSize;
  static constexpr int kLoadingThreads = kGathers ? kProducerThreads : 1;
  static constexpr int kThreads = (1 + kConsumerWarpgroups) * kWarpgroupThreads;

  // Register split (setmaxnreg): at 3 warpgroups the launch cap is 168 registers a thread; the
  // producer gives most of its share to the consumers, who hold S, P and O in registers. 40 leave
  // the producer's gathers without spills and still fit the consumers (229-236 used); against 24 /
  // 240 they ran 0.6-2% faster on the grid mask, dense 128K and columns (docs/perf-notes.md, v10).
  // At head_dim 256 the consumers fit too (O takes 64 more registers, S and P 48 fewer: the
  // budget above; no spills in ptxas's report).
  static constexpr bool kReallocateRegisters = kConsumerWarpgroups > 1;
  static constexpr int kProducerRegisters = 40;
  static constexpr int kConsumerRegisters = 232;

  // Rows move as 16-byte vectors in the query loads and the epilogue.
  static constexpr int kVectorElements = kCopyBytes / static_cast<int>(sizeof(Element));
  static constexpr int kVectorsPerRow = kHeadDim / kVectorElements;
  static constexpr int kVectorsPerAtomRow = kSwizzleBytes / kCopyBytes;
  static constexpr int kRowVectorsPerThread =
      kWarpgroupRows * kVectorsPerRow / kWarpgroupThreads;  // a warpgroup moves its 64 rows
  static constexpr int kRowsPerVectorPass = kWarpgroupThreads / kVectorsPerRow;
  // Column gathers: a group of kGatherLanesPerRow lanes copies a key row's 128-byte lines, one
  // 16-byte vector of each column block per lane, so that every copy instruction of a warp reads
  // whole lines of kGatherRowsPerWarp rows. A thread keeps its vector (and so its place in the
  // swizzle) in every pass: a pass costs it one key and two row addresses, not one per vector.
  static constexpr int kGatherLanesPerRow = kVectorsPerAtomRow;
  static constexpr int kGatherRowsPerWarp = kWarpSize / kGatherLanesPerRow;
  static constexpr int kGatherRowsPerPass = kProducerThreads / kWarpSize * kGatherRowsPerWarp;
  static constexpr int kGatherPasses = kBlockN / kGatherRowsPerPass;

  // Bytes of one K (or V) chunk as it lands in shared memory: kColumnBlocks boxes of
  // [kBlockN rows][kAtomElements].
  static constexpr int kChunkBlockBytes = kBlockN * kSwizzleBytes;
  static constexpr int kChunkBytes = kColumnBlocks * kChunkBlockBytes;
  static constexpr int kQueryBlockBytes = kBlockM * kSwizzleBytes;  // one column block of Q
  static constexpr int kQueryBytes = kColumnBlocks * kQueryBlockBytes;

  // K/V chunks in flight: with three, a consumer holds two (one in Q·K^T, the previous in P·V)
  // while the producer fills the third; with two (head_dim 256, where three do not fit) the
  // producer refills a stage once its P·V has completed. kStageReserveBytes covers the barriers,
  // row positions and bounds, and the atom of alignment slack (kWgmmaSharedBytes).
  static constexpr int kMaxStages = 3;
  static constexpr int kStageReserveBytes = 2 * kSwizzleAtomBytes;
  static constexpr int kStagesThatFit =
      (kMaxSharedBytesPerBlock - kQueryBytes - kStageReserveBytes) / (2 * kChunkBytes);
  static constexpr int kStages = kStagesThatFit < kMaxStages ? kStagesThatFit : kMaxStages;

  static_assert(sizeof(Element) == 2, "wgmma here takes 16-bit inputs");
  static_assert(kHeadDim % kAtomElements == 0, "head_dim must fill whole swizzle atoms");
  static_assert(
      kHeadDim == 128 || kHeadDim == 256,
      "the output wgmma is m64n{128,256}k16 (WgmmaOutput): one covers the whole head_dim");
  static_assert(kBlockN == 128 || kBlockN == 64,
                "the score wgmma is m64n{64,128}k16 (WgmmaScores)");
  static_assert(kStages >= 2, "a consumer holds a chunk in Q·K^T and the previous one in P·V");
  static_assert(kBlockN % kSwizzleAtomRows == 0 && kWarpgroupRows % kSwizzleAtomRows == 0,
                "tiles are whole swizzle atoms");
  static_assert(kWarpgroupRows * kVectorsPerRow % kWarpgroupThreads == 0,
                "every thread moves whole vectors of its warpgroup's rows");
  static_assert(kWarpgroupRows <= kWarpgroupThreads, "one thread per row gathers row positions");
  static_assert(kWarpgroupThreads % kVectorsPerRow == 0, "a pass covers whole rows");
  static_assert(kBlockN % kGatherRowsPerPass == 0, "column gathers cover a chunk in whole passes");
  static_assert(kGatherPasses * kGatherRowsPerWarp <= kWarpSize,
                "each row a producer warp gathers is looked up by one of its lanes (lanes past "
                "kGatherPasses passes look up nothing)");
  static_assert(kGatherRowsPerPass % kSwizzleAtomRows == 0,
                "a gathering thread's rows keep their place in the swizzle from pass to pass");

  // Byte offset of 16-byte vector `vector` of `row` in a swizzled tile of `rows` rows: column
  // block, then the row's 128-byte line, whose vectors are permuted by XOR with row % 8 (what
  // the tensor copies' 128-byte swizzle does, and what wgmma expects).
  __device__ static uint32_t swizzled_vector_offset(int rows, int row, int vector) {
    const int block = vector / kVectorsPerAtomRow;
    const int in_block = vector % kVectorsPerAtomRow;
    return static_cast<uint32_t>(block * rows * kSwizzleBytes + row * kSwizzleBytes +
                                 (in_block ^ (row % kSwizzleAtomRows)) * kCopyBytes);
  }
};

// Hardware barriers of the kernels' warpgroups (0 is __syncthreads).
enum class WgmmaBarrier : int {
  kSyncThreads = 0,
  kFirstConsumerWarpgroup = 1,  // + consumer warpgroup index: its 128 threads
  kFirstIssueTurn = 3,          // + consumer warpgroup index: its turn to issue wgmma (IssueTurns)
  kProducerGather = 5,          // the producer's warps, at each gathered chunk's free stage
};

template <class Traits>
struct WgmmaSharedStorage {
  using Element = typename Traits::Element;
  // Each a sequence of [rows][kAtomElements] column blocks, 128-byte swizzled. The query tile holds
  // O in the epilogue.
  alignas(kSwizzleAtomBytes) Element query[Traits::kBlockM * Traits::kHeadDim];
  alignas(kSwizzleAtomBytes) Element keys[Traits::kStages][Traits::kBlockN * Traits::kHeadDim];
  alignas(kSwizzleAtomBytes) Element values[Traits::kStages][Traits::kBlockN * Traits::kHeadDim];
  uint64_t chunk_loaded[Traits::kStages];    // completes when a stage's K and V have landed
                                             // and every producer thread has arrived
  uint64_t chunk_consumed[Traits::kStages];  // completes when every consumer warp is done with it
  int32_t row_positions[Traits::kBlockM];    // original query position or kNoRow
  int32_t warp_row_lowest[Traits::kConsumerWarps];  // bounds of each consumer warp's aligned rows
  int32_t warp_row_highest[Traits::kConsumerWarps];
  // Bounds of each consumer warp's row phases (aligned position mod the mask's period), for
  // lattice chunks (cuda/attention/sm90/mask.cuh); unused without a period.
  int32_t warp_phase_lowest[Traits::kConsumerWarps];
  int32_t warp_phase_highest[Traits::kConsumerWarps];
  // Bounds of the keys of the gathered chunk a stage holds, one pair per producer warp (its lanes'
  // keys), written by the warp's lane 0 and published by the stage's chunk_loaded barrier, so that
  // a consumer classifies the chunk without loading its keys (cuda/attention/sm90/mask.cuh).
  // Unused without gathers.
  int32_t chunk_key_lowest[Traits::kStages][Traits::kProducerWarps];
  int32_t chunk_key_highest[Traits::kStages][Traits::kProducerWarps];
};

// Dynamic shared memory is only guaranteed 16-byte alignment; the launch adds an atom of slack and
// the kernel places the storage at the next atom boundary.
template <class Traits>
inline constexpr int kWgmmaSharedBytes =
    static_cast<int>(sizeof(WgmmaSharedStorage<Traits>)) + kSwizzleAtomBytes;

template <class Traits>
__device__ WgmmaSharedStorage<Traits>& aligned_wgmma_storage(unsigned char* dynamic_shared) {
  const uint32_t address = shared_address(dynamic_shared);
  const uint32_t padding = (kSwizzleAtomBytes - address % kSwizzleAtomBytes) % kSwizzleAtomBytes;
  return *reinterpret_cast<WgmmaSharedStorage<Traits>*>(dynamic_shared + padding);
}

// Position in a ring of kStages buffers: the stage and the parity of the barrier phase it waits
// for.
template <int kStages>
struct PipelineState {
  int stage = 0;
  uint32_t phase = 0;
  __device__ void advance() {
    if (++stage == kStages) {
      stage = 0;
      phase ^= 1u;
    }
  }
};

}  // namespace mmsparse::cuda
