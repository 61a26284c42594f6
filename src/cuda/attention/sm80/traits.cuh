#pragma once
// Compile-time configuration of the mma.sync attention kernel and its shared-memory layout. Every
// tile size, thread count and fragment count the mainloop, softmax, mask and epilogue use comes
// from here, so a wgmma/TMA mainloop can bring its own traits without touching the others.

#include <cstdint>

#include "cuda/attention/sm80/ptx.cuh"
#include "cuda/runtime/engine.h"
#include "cuda/runtime/plan_view.cuh"

namespace mmsparse::cuda {

template <class Element_, int kHeadDim_>
struct AttentionTraits {
  using Element = Element_;
  static constexpr int kHeadDim = kHeadDim_;

  // One m16n8k16 MMA row block per warp; four warps cover a query tile of 64 rows.
  static constexpr int kMmaM = 16;
  static constexpr int kMmaN = 8;
  static constexpr int kMmaK = 16;
  static constexpr int kWarps = 4;
  static constexpr int kThreads = kWarps * kWarpSize;
  static constexpr int kBlockM = kWarps * kMmaM;  // query rows per CTA
  static constexpr int kBlockN = 64;              // keys per chunk
  static constexpr int kStages = 2;               // K/V chunks in shared memory (double buffering)

  static constexpr int kScoreTiles = kBlockN / kMmaN;     // n-tiles of S per warp
  static constexpr int kOutputTiles = kHeadDim / kMmaN;   // n-tiles of O per warp
  static constexpr int kHeadDimSteps = kHeadDim / kMmaK;  // k-steps of Q·K^T
  static constexpr int kKeySteps = kBlockN / kMmaK;       // k-steps of P·V

  // Rows move as 16-byte vectors (cp.async, ldmatrix rows, epilogue stores).
  static constexpr int kVectorElements = kCopyBytes / static_cast<int>(sizeof(Element));
  static constexpr int kVectorsPerRow = kHeadDim / kVectorElements;
  static constexpr int kQueryLoadIterations = kBlockM * kVectorsPerRow / kThreads;
  static constexpr int kChunkLoadIterations = kBlockN * kVectorsPerRow / kThreads;

  // ldmatrix reads 8 rows of 16 bytes at once; XOR-ing the vector index with row % 8 puts those
  // rows in 8 distinct 16-byte bank groups, so neither ldmatrix nor cp.async conflicts.
  static constexpr int kSwizzleRows = 8;

  static_assert(kBlockM == kMmaSyncTileRows, "the host checks tile_rows against kMmaSyncTileRows");
  static_assert(kHeadDim % (2 * kMmaK) == 0, "ldmatrix.x4 loads two 8-column tiles of V at once");
  static_assert(kVectorsPerRow >= kSwizzleRows, "the swizzle permutes vectors within one row");
  static_assert(kBlockM * kVectorsPerRow % kThreads == 0, "every thread loads whole Q vectors");
  static_assert(kBlockN * kVectorsPerRow % kThreads == 0, "every thread loads whole K/V vectors");
  static_assert(kBlockN <= kThreads, "one thread per key stages key positions and tokens");
  static_assert(kBlockN % kWarpSize == 0, "a warp reduces a chunk's keys in whole strides");

  static constexpr int kRowBytes = kVectorsPerRow * kCopyBytes;
  // Rows covered by one pass of the CTA over a tile with one 16-byte vector per thread; a multiple
  // of kSwizzleRows, so every pass of a thread sees the same swizzle.
  static constexpr int kRowsPerPass = kThreads / kVectorsPerRow;
  static_assert(kRowsPerPass % kSwizzleRows == 0, "each pass must keep a thread's swizzle phase");

  // Byte offset of vector `vector` of `row` in a swizzled [rows][kHeadDim] shared tile.
  __device__ static uint32_t swizzled_byte_offset(int row, int vector) {
    return static_cast<uint32_t>(row * kRowBytes + (vector ^ (row % kSwizzleRows)) * kCopyBytes);
  }
  // Element offset of (row, column) in the same layout.
  __device__ static int swizzled_offset(int row, int column) {
    return static_cast<int>(swizzled_byte_offset(row, column / kVectorElements)) /
               static_cast<int>(sizeof(Element)) +
           column % kVectorElements;
  }
  // The address of vector `vector ^ delta` in the row of `address` (a swizzled vector address in a
  // tile aligned to kRowBytes). Since the swizzle is an XOR, moving by an even `delta` from a
  // vector below kSwizzleRows is one XOR of the whole address, which keeps it out of hoisted
  // registers.
  __device__ static uint32_t move_vectors(uint32_t address, int delta) {
    return address ^ static_cast<uint32_t>(delta * kCopyBytes);
  }
};

// The CTA's shared memory. Q is read into registers once, so its tile holds O in the epilogue.
// Tiles are aligned to kSharedAlignment (at least kRowBytes), which move_vectors relies on.
inline constexpr int kSharedAlignment = 256;

template <class Traits>
struct SharedStorage {
  using Element = typename Traits::Element;
  static_assert(kSharedAlignment % Traits::kRowBytes == 0, "tiles must start on a row boundary");
  alignas(kSharedAlignment) Element query[Traits::kBlockM * Traits::kHeadDim];
  alignas(kSharedAlignment) Element keys[Traits::kStages][Traits::kBlockN * Traits::kHeadDim];
  alignas(kSharedAlignment) Element values[Traits::kStages][Traits::kBlockN * Traits::kHeadDim];
  int32_t key_positions[Traits::kStages][Traits::kBlockN];  // key of each chunk slot
  int32_t key_tokens[Traits::kStages][Traits::kBlockN];     // packed token info, when masks need it
  int32_t row_positions[Traits::kBlockM];                   // original query position or kNoRow
};

// Dynamic shared memory is only guaranteed 16-byte alignment; the launch adds kSharedAlignment
// bytes of slack and the kernel places the storage at the next aligned shared address.
template <class Traits>
inline constexpr int kSharedBytes =
    static_cast<int>(sizeof(SharedStorage<Traits>)) + kSharedAlignment;

template <class Traits>
__device__ SharedStorage<Traits>& aligned_shared_storage(unsigned char* dynamic_shared) {
  const uint32_t address = shared_address(dynamic_shared);
  const uint32_t padding = (kSharedAlignment - address % kSharedAlignment) % kSharedAlignment;
  return *reinterpret_cast<SharedStorage<Traits>*>(dynamic_shared + padding);
}

}  // namespace mmsparse::cuda
