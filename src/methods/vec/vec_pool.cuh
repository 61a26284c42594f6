#pragma once
// VecAttention's pooled queries (vec_device.cu's design comment): per pooled block, the mean of its
// queries as the host computes it (vec.h), in the input dtype, the score passes' MMA operand.
// Included by vec_device.cu only.

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "cuda/attention/sm80/ptx.cuh"
#include "cuda/common/element_convert.cuh"
#include "methods/vec/vec_select.cuh"

namespace mmsparse::cuda::vec_kernels {

constexpr int kPoolThreads = 128;

// Elements of one 16-byte load: make_estimate_operands admits only rows of whole 16-byte vectors
// (16-byte aligned data, strides and head_dim multiples of them), so a pooled row is whole vectors.
template <class Element>
constexpr int kPoolVectorElements = kCopyBytes / static_cast<int>(sizeof(Element));
// Rows a pooling thread loads before it adds them: the loads of one group are independent, so a
// thread keeps this many 16-byte loads in flight while its sums stay in row order.
constexpr int kPoolRowsInFlight = 8;
constexpr int kPoolVectorWords = kCopyBytes / static_cast<int>(sizeof(uint32_t));
// The 16-bit elements of a loaded word, element 0 in the low bits (little endian).
constexpr int kElementBits = 16;
constexpr int kElementsPerWord = 2;

// Element e of a 16-byte vector held as words.
template <class Element>
__device__ Element element_of(const uint32_t (&words)[kPoolVectorWords], int e) {
  return element_from_bits<Element>(static_cast<uint16_t>(words[e / kElementsPerWord] >>
                                                          (kElementBits * (e % kElementsPerWord))));
}

// Adds kRows rows' 16-byte vectors (row r at rows + r * row_stride) to `sum`, element by element
// in row order; every load is issued before the first addition.
template <class Element, int kRows>
__device__ void add_rows(const Element* rows, int64_t row_stride,
                         float (&sum)[kPoolVectorElements<Element>]) {
  uint4 loaded[kRows];
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    loaded[r] = __ldg(reinterpret_cast<const uint4*>(rows + r * row_stride));
  }
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    const uint32_t words[kPoolVectorWords] = {loaded[r].x, loaded[r].y, loaded[r].z, loaded[r].w};
#pragma unroll
    for (int e = 0; e < kPoolVectorElements<Element>; ++e) {
      sum[e] = __fadd_rn(sum[e], to_float(element_of<Element>(words, e)));
    }
  }
}

// The pooled queries: per (slot, block), the fp32 sum of the block's rows in row order over the row
// count, rounded to the input dtype (the MMA's operand). One thread per 16-byte vector of a pooled
// row (head_dim / 8 threads a row; slot blockIdx.y, item block * vectors + vector along x) sums its
// 8 columns over the block's rows: every element is added in the host's order, so the pooled query
// is the host's bit for bit, with several rows' loads in flight.
template <class Element>
__global__ void __launch_bounds__(kPoolThreads) pool_kernel(const VecKernelParams p) {
  constexpr int kVector = kPoolVectorElements<Element>;
  static_assert(sizeof(Element) * 8 == kElementBits, "16-bit elements, two to a word");
  const int vectors = p.head_dim / kVector;
  // Below blocks * 16 <= 2^31 (vec_device.cu's check_shape bounds the blocks): 32-bit division.
  const auto item = static_cast<int32_t>(blockIdx.x * kPoolThreads + threadIdx.x);
  const int32_t block = item / vectors;
  if (block >= p.blocks) return;
  const int column = item % vectors * kVector;
  const auto slot = static_cast<int32_t>(blockIdx.y);
  const int64_t pooled_row = static_cast<int64_t>(slot) * p.blocks + block;
  const int32_t batch = slot / p.heads;
  const int32_t head = query_head(p, slot % p.heads);
  const int64_t row_begin = static_cast<int64_t>(block) * p.pooling;
  const auto rows =
      static_cast<int32_t>(min(static_cast<int64_t>(p.q_len), row_begin + p.pooling) - row_begin);
  const auto* q = static_cast<const Element*>(p.q) + batch * p.q_stride_batch +
                  head * p.q_stride_head + row_begin * p.q_stride_row + column;
  float sum[kVector];
#pragma unroll
  for (int e = 0; e < kVector; ++e) sum[e] = 0.0f;
  int32_t first = 0;
  for (; first + kPoolRowsInFlight <= rows; first += kPoolRowsInFlight) {
    add_rows<Element, kPoolRowsInFlight>(q + first * p.q_stride_row, p.q_stride_row, sum);
  }
  for (; first < rows; ++first) add_rows<Element, 1>(q + first * p.q_stride_row, 0, sum);
  uint32_t words[kPoolVectorWords] = {};
#pragma unroll
  for (int e = 0; e < kVector; ++e) {
    const Element pooled = from_float<Element>(__fdiv_rn(sum[e], static_cast<float>(rows)));
    words[e / kElementsPerWord] |= static_cast<uint32_t>(bits_of(pooled))
                                   << (kElementBits * (e % kElementsPerWord));
  }
  *reinterpret_cast<uint4*>(static_cast<Element*>(p.pooled) + pooled_row * p.head_dim + column) =
      make_uint4(words[0], words[1], words[2], words[3]);
}

}  // namespace mmsparse::cuda::vec_kernels
