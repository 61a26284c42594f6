#include "plan_records.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "device_buffer.h"

namespace mmsparse::test {
namespace {

std::vector<std::byte> download(const cuda::DevicePlan& plan, std::size_t offset,
                                std::size_t bytes) {
  std::vector<std::byte> host(bytes);
  if (bytes > 0) {
    expect_cuda(cudaMemcpy(host.data(), static_cast<const std::byte*>(plan.data()) + offset, bytes,
                           cudaMemcpyDeviceToHost),
                "cudaMemcpy plan to host");
  }
  return host;
}

// Index of the first differing byte, or -1.
int64_t first_difference(const std::vector<std::byte>& a, const std::vector<std::byte>& b) {
  const auto mismatch = std::mismatch(a.begin(), a.end(), b.begin(), b.end());
  return mismatch.first == a.end() && mismatch.second == b.end()
             ? -1
             : static_cast<int64_t>(mismatch.first - a.begin());
}

}  // namespace

void expect_same_records(const cuda::DevicePlan& built, const Plan& host, cudaStream_t stream) {
  const cuda::DevicePlan uploaded(host, stream);
  expect_cuda(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
  EXPECT_EQ(built.shape(), uploaded.shape());
  EXPECT_EQ(built.num_tiles(), uploaded.num_tiles());
  EXPECT_EQ(built.covers_every_row(), uploaded.covers_every_row());
  EXPECT_GE(built.num_columns(), uploaded.num_columns());
  const cuda::DevicePlanLayout& a = built.layout();
  const cuda::DevicePlanLayout& b = uploaded.layout();
  EXPECT_EQ(a.head_run_offsets, b.head_run_offsets);
  EXPECT_EQ(a.runs, b.runs);
  EXPECT_EQ(a.tiles, b.tiles);
  EXPECT_EQ(a.schedule, b.schedule);
  EXPECT_EQ(a.masks, b.masks);
  ASSERT_EQ(a.spans, b.spans);
  EXPECT_FALSE(a.has_token_info);
  // A device span record is two int32 keys, as a KeySpan.
  const std::size_t span_bytes = host.spans.size() * sizeof(KeySpan);
  const std::size_t column_bytes = host.columns.size() * sizeof(int32_t);
  ASSERT_GE(a.columns - a.spans, span_bytes) << "span capacity";
  ASSERT_GE(a.token_info - a.columns, column_bytes) << "column capacity";
  EXPECT_EQ(first_difference(download(built, 0, a.spans), download(uploaded, 0, b.spans)), -1)
      << "header sections (runs, tiles, schedule, masks) differ";
  EXPECT_EQ(first_difference(download(built, a.spans, span_bytes),
                             download(uploaded, b.spans, span_bytes)),
            -1)
      << "spans differ";
  EXPECT_EQ(first_difference(download(built, a.columns, column_bytes),
                             download(uploaded, b.columns, column_bytes)),
            -1)
      << "columns differ";
}

}  // namespace mmsparse::test
