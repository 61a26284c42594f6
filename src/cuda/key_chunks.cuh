#pragma once
// A tile's keys as a sequence of chunks of at most kBlockN keys: each span cut into consecutive
// chunks (the last one partial, any alignment), then the gathered columns kBlockN at a time. Every
// thread of the CTA walks the same sequence, so chunk decisions are uniform without communication.

#include <cstdint>

#include "cuda/plan_view.cuh"

namespace mmsparse::cuda {

struct KeyChunk {
  int64_t first;      // span chunk: first key; column chunk: index of its first entry in columns
  int32_t count;      // keys in the chunk, 1..kBlockN
  bool from_columns;  // keys are columns[first + i] rather than first + i

  __device__ int32_t key(const int32_t* columns, int32_t slot) const {
    return from_columns ? columns[first + slot] : static_cast<int32_t>(first) + slot;
  }
};

template <int kBlockN>
class KeyChunkCursor {
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
      const int32_t span_end = spans_[span_].end;
      const KeyChunk chunk{next_key_, min(kBlockN, span_end - next_key_), false};
      next_key_ += chunk.count;
      if (next_key_ >= span_end && ++span_ < span_end_) next_key_ = spans_[span_].begin;
      return chunk;
    }
    const KeyChunk chunk{
        column_, static_cast<int32_t>(min(static_cast<int64_t>(kBlockN), column_end_ - column_)),
        true};
    column_ += chunk.count;
    return chunk;
  }

 private:
  const SpanRecord* spans_;  // [spans] of the plan
  int64_t span_;             // current span
  int64_t span_end_;
  int32_t next_key_ = 0;  // first key of the current span not yet in a chunk
  int64_t column_;        // next column entry
  int64_t column_end_;
};

}  // namespace mmsparse::cuda
