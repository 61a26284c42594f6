#pragma once
// How the engines walk a tile's gathered keys, in chunks. Host and device plan builders shape the
// plans they build to these chunks (whole chunks per strided span, lattices of whole chunks) so
// that no chunk is computed half empty; they are engine internals, not part of the plan's meaning.

#include <cstdint>

namespace mmsparse {

// The engines gather keys (columns, strided spans' keys) in chunks of up to this many: the wgmma
// kernel's chunk (the mma.sync kernel's 64 divides it). A chunk ends where a strided span ends, so
// builders keep a strided span's length a multiple of it and list the rest of its keys as columns:
// the tile's gathered keys then fill whole chunks, as one column list would.
inline constexpr int64_t kGatherChunkKeys = 128;
// The CUDA upload turns kLatticeSpans strided spans of a tile in a row, with one step, consecutive
// begins and one count, inside the whole periods (of the step) of kv_len, into a lattice (a band
// kLatticeSpans keys wide repeating every step) that the wgmma kernel copies in chunks of 16
// periods × 8 keys by tensor copies, like a span, instead of gathering it.
inline constexpr int64_t kLatticeSpans = 8;
// The periods of one lattice chunk. A lattice's count is best a multiple of it: its last chunk is
// computed whole, whatever part of it the lattice holds.
inline constexpr int64_t kLatticePeriodsPerChunk = kGatherChunkKeys / kLatticeSpans;

}  // namespace mmsparse
