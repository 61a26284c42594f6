#include "plan_records.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
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

// Record sizes of the device plan (cuda/runtime/plan_view.cuh, a CUDA header): a run is three
// int32, a tile four int32 and four int64, a key range (span, strided span or lattice) four int32.
constexpr std::size_t kRunRecordBytes = 3 * sizeof(int32_t);
constexpr std::size_t kTileRecordBytes = 4 * sizeof(int32_t) + 4 * sizeof(int64_t);
constexpr std::size_t kKeyRangeRecordBytes = 4 * sizeof(int32_t);
// A launch record is a tile record, a key range record and a row lattice (four int32); a tile's
// span_begin and span_end follow its four int32.
constexpr std::size_t kLaunchRecordBytes =
    kTileRecordBytes + kKeyRangeRecordBytes + 4 * sizeof(int32_t);
constexpr std::size_t kTileSpanBeginOffset = 4 * sizeof(int32_t);

// The bytes of the host plan's key ranges on the device: its spans and strided spans.
std::size_t key_range_bytes(const Plan& host) {
  return (host.spans.size() + host.strided_spans.size()) * kKeyRangeRecordBytes;
}

// The key-order sections (DevicePlanLayout::span_shifts, key_orders) of `built` against the upload
// of `host`: the same slots and rows, a shift per host key range, the same orders.
void expect_same_key_orders(const cuda::DevicePlan& built, const cuda::DevicePlan& uploaded,
                            const Plan& host) {
  const cuda::DevicePlanLayout& a = built.layout();
  const cuda::DevicePlanLayout& b = uploaded.layout();
  ASSERT_EQ(a.has_key_orders, b.has_key_orders);
  if (!b.has_key_orders) return;
  EXPECT_EQ(a.key_order_slots, b.key_order_slots);
  ASSERT_EQ(a.key_order_rows, b.key_order_rows);
  ASSERT_GE(a.key_orders - a.span_shifts,
            (host.spans.size() + host.strided_spans.size()) * sizeof(int32_t))
      << "span shift capacity";
  const std::size_t shift_bytes = (host.spans.size() + host.strided_spans.size()) * sizeof(int32_t);
  EXPECT_EQ(first_difference(download(built, a.span_shifts, shift_bytes),
                             download(uploaded, b.span_shifts, shift_bytes)),
            -1)
      << "span shifts differ";
  const std::size_t order_bytes = static_cast<std::size_t>(b.key_order_rows) * sizeof(int32_t);
  EXPECT_EQ(first_difference(download(built, a.key_orders, order_bytes),
                             download(uploaded, b.key_orders, order_bytes)),
            -1)
      << "key orders differ";
}

}  // namespace

void expect_same_records(const cuda::DevicePlan& built, const Plan& host, cudaStream_t stream) {
  // As the device builders write them: no lattice records.
  const cuda::DevicePlan uploaded(host, 0, stream, cuda::RecordForm::kAsDeviceBuilders);
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
  ASSERT_EQ(a.has_token_info, b.has_token_info);
  const std::size_t span_bytes = key_range_bytes(host);
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
  if (b.has_token_info) {
    const std::size_t token_bytes = static_cast<std::size_t>(host.shape.kv_len) * sizeof(int32_t);
    EXPECT_EQ(first_difference(download(built, a.token_info, token_bytes),
                               download(uploaded, b.token_info, token_bytes)),
              -1)
        << "token arrays differ";
  }
  expect_same_key_orders(built, uploaded, host);
}

// The run offsets whole; the runs, tiles, schedule, spans and columns the host plan has at the
// front of the device plan's larger sections.
void expect_same_grid_records(const cuda::DevicePlan& built, const Plan& host,
                              cudaStream_t stream) {
  // As the device builders write them: no lattice records.
  const cuda::DevicePlan uploaded(host, 0, stream, cuda::RecordForm::kAsDeviceBuilders);
  expect_cuda(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
  EXPECT_EQ(built.shape(), uploaded.shape());
  EXPECT_EQ(built.covers_every_row(), uploaded.covers_every_row());
  ASSERT_GE(built.num_tiles(), uploaded.num_tiles()) << "tile capacity";
  EXPECT_GE(built.num_columns(), uploaded.num_columns());
  EXPECT_FALSE(built.layout().has_token_info);
  const cuda::DevicePlanLayout& a = built.layout();
  const cuda::DevicePlanLayout& b = uploaded.layout();
  const auto section = [](const cuda::DevicePlan& plan, std::size_t offset, std::size_t bytes) {
    return download(plan, offset, bytes);
  };
  const auto same = [&](const char* name, std::size_t a_offset, std::size_t b_offset,
                        std::size_t bytes, std::size_t a_capacity) {
    ASSERT_GE(a_capacity, bytes) << name << " capacity";
    EXPECT_EQ(first_difference(section(built, a_offset, bytes), section(uploaded, b_offset, bytes)),
              -1)
        << name << " differ";
  };
  const int64_t slots = host.head_slots();
  const auto tiles = static_cast<std::size_t>(uploaded.num_tiles());
  const auto capacity = static_cast<std::size_t>(built.num_tiles());
  const std::vector<std::byte> offsets =
      section(uploaded, b.head_run_offsets, static_cast<std::size_t>(slots + 1) * sizeof(int64_t));
  int64_t runs = 0;
  std::memcpy(&runs, offsets.data() + static_cast<std::size_t>(slots) * sizeof(int64_t),
              sizeof(int64_t));
  same("head run offsets", a.head_run_offsets, b.head_run_offsets,
       static_cast<std::size_t>(slots + 1) * sizeof(int64_t), a.runs - a.head_run_offsets);
  same("runs", a.runs, b.runs, static_cast<std::size_t>(runs) * kRunRecordBytes, a.tiles - a.runs);
  same("tiles", a.tiles, b.tiles, tiles * kTileRecordBytes, a.schedule - a.tiles);
  same("schedule", a.schedule, b.schedule, tiles * sizeof(int32_t), a.masks - a.schedule);
  same("masks", a.masks, b.masks, b.spans - b.masks, a.spans - a.masks);
  same("spans", a.spans, b.spans, key_range_bytes(host), a.columns - a.spans);
  same("columns", a.columns, b.columns, host.columns.size() * sizeof(int32_t),
       a.token_info - a.columns);
  expect_same_key_orders(built, uploaded, host);

  // The empty tiles: zero records, scheduled last in tile order.
  const std::vector<std::byte> tail =
      section(built, a.tiles + tiles * kTileRecordBytes, (capacity - tiles) * kTileRecordBytes);
  EXPECT_TRUE(std::all_of(tail.begin(), tail.end(), [](std::byte x) { return x == std::byte{0}; }))
      << "the tiles beyond the real ones are not empty";
  std::vector<int32_t> schedule_tail(capacity - tiles);
  const std::vector<std::byte> schedule_bytes =
      section(built, a.schedule + tiles * sizeof(int32_t), schedule_tail.size() * sizeof(int32_t));
  if (!schedule_tail.empty()) {
    std::memcpy(schedule_tail.data(), schedule_bytes.data(), schedule_bytes.size());
  }
  for (std::size_t i = 0; i < schedule_tail.size(); ++i) {
    ASSERT_EQ(schedule_tail[i], static_cast<int32_t>(tiles + i)) << "schedule of the empty tiles";
  }
}

int64_t expect_launch_records_follow_schedule(const cuda::DevicePlan& plan, const Plan& host) {
  const cuda::DevicePlanLayout& layout = plan.layout();
  EXPECT_TRUE(layout.has_launch_records);
  if (!layout.has_launch_records) return 0;
  const auto tiles = static_cast<std::size_t>(plan.num_tiles());
  const std::vector<std::byte> records = download(plan, layout.tiles, tiles * kTileRecordBytes);
  const std::vector<std::byte> launch =
      download(plan, layout.launch_records, tiles * kLaunchRecordBytes);
  const std::vector<std::byte> ranges = download(plan, layout.spans, layout.columns - layout.spans);
  std::vector<int32_t> schedule(tiles);
  const std::vector<std::byte> schedule_bytes =
      download(plan, layout.schedule, tiles * sizeof(int32_t));
  if (tiles > 0) std::memcpy(schedule.data(), schedule_bytes.data(), schedule_bytes.size());
  int64_t arithmetic_tiles = 0;
  for (std::size_t i = 0; i < tiles; ++i) {
    EXPECT_GE(schedule[i], 0);
    EXPECT_LT(static_cast<std::size_t>(schedule[i]), tiles);
    if (schedule[i] < 0 || static_cast<std::size_t>(schedule[i]) >= tiles) return arithmetic_tiles;
    const auto t = static_cast<std::size_t>(schedule[i]);
    const std::byte* tile = records.data() + t * kTileRecordBytes;
    const std::byte* launched = launch.data() + i * kLaunchRecordBytes;
    EXPECT_TRUE(std::equal(tile, tile + kTileRecordBytes, launched))
        << "launch record " << i << " does not hold tile " << t;
    int64_t span_begin = 0;
    int64_t span_end = 0;
    std::memcpy(&span_begin, tile + kTileSpanBeginOffset, sizeof(int64_t));
    std::memcpy(&span_end, tile + kTileSpanBeginOffset + sizeof(int64_t), sizeof(int64_t));
    if (span_begin < span_end) {
      const std::byte* first_range =
          ranges.data() + static_cast<std::size_t>(span_begin) * kKeyRangeRecordBytes;
      EXPECT_TRUE(
          std::equal(first_range, first_range + kKeyRangeRecordBytes, launched + kTileRecordBytes))
          << "launch record " << i << " does not hold its tile's first key range";
    }
    // {start, width, inner step, outer step}: where width > 0, every row of the tile.
    std::array<int32_t, 4> rows{};
    std::memcpy(rows.data(), launched + kTileRecordBytes + kKeyRangeRecordBytes, sizeof(rows));
    const auto [start, width, inner, outer] = rows;
    if (width == 0) continue;
    ++arithmetic_tiles;
    const QueryTile& host_tile = host.tiles[t];
    const auto slot = static_cast<int64_t>(std::upper_bound(host.head_tile_offsets.begin(),
                                                            host.head_tile_offsets.end(),
                                                            static_cast<int64_t>(t)) -
                                           host.head_tile_offsets.begin() - 1);
    for (int64_t r = 0; r < host_tile.end - host_tile.begin; ++r) {
      const int64_t position = int64_t{start} + r / width * outer + r % width * inner;
      const int64_t expected = host.query_position(slot, host_tile.begin + r);
      if (position != expected) {
        ADD_FAILURE() << "launch record " << i << " (tile " << t << ") row " << r << " at "
                      << position << ", the plan has " << expected;
        return arithmetic_tiles;
      }
    }
  }
  return arithmetic_tiles;
}

std::vector<std::array<int32_t, 4>> uploaded_key_ranges(const cuda::DevicePlan& plan) {
  const cuda::DevicePlanLayout& layout = plan.layout();
  // An upload's spans section holds its records and nothing else (records fill whole sections).
  const std::vector<std::byte> bytes = download(plan, layout.spans, layout.columns - layout.spans);
  std::vector<std::array<int32_t, 4>> records(bytes.size() / kKeyRangeRecordBytes);
  std::memcpy(records.data(), bytes.data(), records.size() * kKeyRangeRecordBytes);
  return records;
}

}  // namespace mmsparse::test
