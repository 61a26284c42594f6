#pragma once
// A tile's keys as a sequence of chunks of at most kBlockN keys: each key range (a span, then the
// strided spans) cut into consecutive chunks (the last one partial, any alignment), then the
// gathered columns kBlockN at a time. Every thread of the CTA walks the same sequence, so chunk
// decisions are uniform without communication.

#include <cstdint>

#include "cuda/plan_view.cuh"
#include "mmsparse/plan.h"

namespace mmsparse::cuda {

// A chunk's step: a span chunk's keys are consecutive (kConsecutive: one tensor copy), a strided
// chunk's every step-th key, a column chunk's read from the column list (kFromColumns). Strided and
// column chunks are gathered row by row.
inline constexpr int32_t kFromColumns = 0;
inline constexpr int32_t kConsecutive = 1;

struct KeyChunk {
  int64_t
      first;  // span/strided chunk: first key; column chunk: index of its first entry in columns
  int32_t count;  // keys in the chunk, 1..kBlockN
  int32_t step;   // kConsecutive, a stride >= 2, or kFromColumns

  __device__ bool consecutive() const { return step == kConsecutive; }
  __device__ bool gathered() const { return step != kConsecutive; }
  __device__ bool from_columns() const { return step == kFromColumns; }
  __device__ int32_t key(const int32_t* columns, int32_t slot) const {
    return from_columns() ? columns[first + slot] : static_cast<int32_t>(first) + slot * step;
  }
  // The last key of a span or strided chunk (keys ascend in both).
  __device__ int32_t last_key() const { return static_cast<int32_t>(first) + (count - 1) * step; }
};

template <int kBlockN>
class KeyChunkCursor {
  static_assert(kGatherChunkKeys % kBlockN == 0,
                "builders size strided spans in whole kGatherChunkKeys: chunks must divide it");

 public:
  __device__ KeyChunkCursor(const TileRecord& tile, const SpanRecord* spans)
      : spans_(spans),
        span_(tile.span_begin),
        span_end_(tile.span_end),
        column_(tile.column_begin),
        column_end_(tile.column_end) {
    if (span_ < span_end_) next_key_ = spans_[span_].begin;
  }

  __device__ bool done() const { return span_ == span_end_ && column_ == column_end_; }

  // The next chunk; requires !done().
  __device__ KeyChunk next() {
    if (span_ < span_end_) {
      const int32_t range_end = spans_[span_].end;
      const int32_t step = spans_[span_].step;
      const int32_t remaining =
          step == kConsecutive ? range_end - next_key_ : (range_end - next_key_ + step - 1) / step;
      const KeyChunk chunk{next_key_, min(kBlockN, remaining), step};
      next_key_ += chunk.count * step;
      if (next_key_ >= range_end && ++span_ < span_end_) next_key_ = spans_[span_].begin;
      return chunk;
    }
    const KeyChunk chunk{
        column_, static_cast<int32_t>(min(static_cast<int64_t>(kBlockN), column_end_ - column_)),
        kFromColumns};
    column_ += chunk.count;
    return chunk;
  }

 private:
  const SpanRecord* spans_;  // [spans] of the plan: its key ranges
  int64_t span_;             // current key range
  int64_t span_end_;
  int32_t next_key_ = 0;  // first key of the current range not yet in a chunk
  int64_t column_;        // next column entry
  int64_t column_end_;
};

}  // namespace mmsparse::cuda
