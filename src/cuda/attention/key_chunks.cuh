#pragma once
// A tile's keys as a sequence of chunks of at most kBlockN keys: each key range (a span, then the
// strided spans and lattices) cut into consecutive chunks (the last one partial, any alignment;
// a lattice's in whole periods), then the gathered columns kBlockN at a time. Every thread of the
// CTA walks the same sequence, so chunk decisions are uniform without communication.

#include <cstdint>

#include "core/engine_chunks.h"
#include "cuda/runtime/plan_view.cuh"
#include "mmsparse/plan.h"

namespace mmsparse::cuda {

// A chunk's step: a span chunk's keys are consecutive (kConsecutive: one tensor copy), a strided
// chunk's every step-th key, a column chunk's read from the column list (kFromColumns). Strided and
// column chunks are gathered row by row. A lattice chunk holds count / kLatticeWidth periods of
// kLatticeWidth consecutive keys, `step` apart: one tensor copy on the wgmma kernel, gathered on
// the mma.sync kernel.
inline constexpr int32_t kFromColumns = 0;
inline constexpr int32_t kConsecutive = 1;

// log2 of kLatticeWidth: a lattice chunk's slot is (period << kLatticeShift) + key in the period.
inline constexpr int32_t kLatticeShift = 3;
static_assert((1 << kLatticeShift) == kLatticeWidth, "kLatticeShift is log2(kLatticeWidth)");

struct KeyChunk {
  int64_t
      first;  // span/strided chunk: first key; column chunk: index of its first entry in columns
  int32_t count;  // keys in the chunk, 1..kBlockN
  int32_t step;   // kConsecutive, a stride >= 2, or kFromColumns
  // kLatticeShift for a lattice chunk, else 0: slot s holds key first + (s >> shift) · step +
  // (s mod 2^shift), one formula for span, strided and lattice chunks (no branch per key).
  int32_t shift = 0;
  // The tile's key range the chunk comes from (its index in the plan's spans), so that masks can
  // keep what is constant over a range's chunks; unused for column chunks.
  int32_t range = 0;
  // A key-ordered span's chunk (PlanView::span_shifts): its keys are rows of the engine's copy
  // in key-order layout, and key + position_shift is the position masks read. 0 and false for
  // chunks read in place, and for every chunk of a cursor made without span shifts.
  int32_t position_shift = 0;
  bool reads_copy = false;

  __device__ bool consecutive() const { return step == kConsecutive; }
  __device__ bool lattice() const { return shift != 0; }
  // Loaded row by row (cp.async) rather than by tensor copies on the wgmma kernel.
  __device__ bool gathered() const { return step != kConsecutive && !lattice(); }
  __device__ bool from_columns() const { return step == kFromColumns; }
  __device__ int32_t key(const int32_t* columns, int32_t slot) const {
    return from_columns() ? columns[first + slot] : arithmetic_key(slot);
  }
  // The last key of a span, strided or lattice chunk (keys ascend in all three).
  __device__ int32_t last_key() const { return arithmetic_key(count - 1); }
  // The positions of a span, strided or lattice chunk's first and last keys (for masks).
  __device__ int32_t first_position() const {
    return static_cast<int32_t>(first) + position_shift;
  }
  __device__ int32_t last_position() const { return last_key() + position_shift; }

 private:
  __device__ int32_t arithmetic_key(int32_t slot) const {
    return static_cast<int32_t>(first) + (slot >> shift) * step + (slot & ((1 << shift) - 1));
  }
};

// kLattices false: a kernel compiled for plans without lattice records (their chunks' shift is 0
// at compile time). kGathers false: one for plans without strided spans and columns, whose every
// chunk is a span's (consecutive at compile time without lattices too) or a lattice's.
template <int kBlockN, bool kLattices = true, bool kGathers = true>
class KeyChunkCursor {
  static_assert(kGatherChunkKeys % kBlockN == 0,
                "builders size strided spans in whole kGatherChunkKeys: chunks must divide it");
  static_assert(kBlockN % kLatticeWidth == 0, "a lattice chunk holds whole periods");

 public:
  // first_range: the tile's first key range, spans[tile.span_begin], read once for the CTA
  // (TileWork); unused when the tile has none. span_shifts: PlanView::span_shifts for a kernel
  // that reads key-ordered tiles (null for plans without key orders); kernels that do not pass it
  // compile no trace of it.
  __device__ KeyChunkCursor(const TileRecord& tile, const SpanRecord& first_range,
                            const SpanRecord* spans, const int32_t* span_shifts = nullptr)
      : spans_(spans),
        span_shifts_(span_shifts),
        span_(tile.span_begin),
        span_end_(tile.span_end),
        column_(tile.column_begin),
        column_end_(tile.column_end) {
    if (span_ < span_end_) enter_range(first_range);
  }

  __device__ bool done() const {
    return span_ == span_end_ && (!kGathers || column_ == column_end_);
  }

  // The next chunk; requires !done().
  __device__ KeyChunk next() {
    if (!kGathers || span_ < span_end_) {
      const KeyChunk chunk{next_key_,       min(kBlockN, remaining_), step_, shift_,
                           static_cast<int32_t>(span_), position_shift_,          reads_copy_};
      next_key_ += (chunk.count >> shift_) * step_;
      remaining_ -= chunk.count;
      if (remaining_ == 0 && ++span_ < span_end_) enter_range(spans_[span_]);
      return chunk;
    }
    const KeyChunk chunk{
        column_, static_cast<int32_t>(min(static_cast<int64_t>(kBlockN), column_end_ - column_)),
        kFromColumns};
    column_ += chunk.count;
    return chunk;
  }

 private:
  // Takes key range span_ and counts its keys: once per range, so that a chunk costs no load and
  // no division (the span path, which dense runs, divides by nothing at all).
  __device__ void enter_range(const SpanRecord range) {
    next_key_ = range.begin;
    step_ = kGathers || kLattices ? range.step : kConsecutive;
    shift_ = kLattices && range.width > 1 ? kLatticeShift : 0;
    // range_keys (plan_view.cuh) in int32 and with the width known at compile time where the
    // kernel has no lattices: its int64 division costs the producer spills.
    remaining_ = range.end - range.begin;
    if (step_ != kConsecutive) {
      remaining_ = ((remaining_ - (1 << shift_)) / range.step + 1) << shift_;
    }
    if (span_shifts_ != nullptr) {
      const int32_t shift = span_shifts_[span_];
      reads_copy_ = shift != kSpanInPlace;
      position_shift_ = reads_copy_ ? shift : 0;
    }
  }

  const SpanRecord* spans_;  // [spans] of the plan: its key ranges
  const int32_t* span_shifts_;  // [spans] PlanView::span_shifts, or null
  int64_t span_;             // current key range
  int64_t span_end_;
  int32_t next_key_ = 0;   // first key of the current range not yet in a chunk
  int32_t remaining_ = 0;  // keys of the current range not yet in a chunk (ranges are not empty)
  int32_t step_ = kConsecutive;  // the current range's step and shift (KeyChunk)
  int32_t shift_ = 0;
  int32_t position_shift_ = 0;  // the current range's (KeyChunk::position_shift, reads_copy)
  bool reads_copy_ = false;
  int64_t column_;  // next column entry
  int64_t column_end_;
};

}  // namespace mmsparse::cuda
