// Essential-KV selection on the host (the reference the device selection is checked against) and
// the per-device dispatch.

#include "dist/selection.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <limits>
#include <mutex>
#include <numeric>
#include <string>
#include <vector>

#include "mmsparse/dist.h"
#include "mmsparse/status.h"

namespace mmsparse::dist {
namespace detail {
namespace {

constexpr int kDeviceTypes = 3;  // indexed by DeviceType's DLPack value

struct SelectorTable {
  std::mutex mutex;
  std::array<SelectAndPack, kDeviceTypes> selectors{};
};

SelectorTable& selector_table() {
  static SelectorTable table;
  return table;
}

void select_and_pack_host(const TensorView& query_q, const TensorView& block_k,
                          const TensorView& block_v, int64_t count, int64_t pool_width,
                          void* message, void* /*stream*/) {
  const std::vector<std::vector<int64_t>> selected =
      select_essential(query_q, block_k, count, pool_width);
  const int64_t kv_heads = block_k.shape[2];
  const int64_t head_dim = block_k.shape[3];
  const TensorView keys =
      passing_keys(message, block_k.dtype, count, kv_heads, head_dim, block_k.device);
  const TensorView values =
      passing_values(message, block_k.dtype, count, kv_heads, head_dim, block_k.device);
  for (int64_t h = 0; h < kv_heads; ++h) {
    for (int64_t i = 0; i < count; ++i) {
      const int64_t position = selected[static_cast<std::size_t>(h)][static_cast<std::size_t>(i)];
      for (int64_t d = 0; d < head_dim; ++d) {
        const int64_t source_k =
            position * block_k.strides[1] + h * block_k.strides[2] + d * block_k.strides[3];
        const int64_t source_v =
            position * block_v.strides[1] + h * block_v.strides[2] + d * block_v.strides[3];
        const int64_t target = i * keys.strides[1] + h * keys.strides[2] + d;
        store_float(keys, target, load_float(block_k, source_k));
        store_float(values, target, load_float(block_v, source_v));
      }
    }
  }
}

// Mean of the query block's Q over its rows and each KV head's query group: [kv_heads][head_dim],
// fp32 summed row by row, then head by head in the group, as the device selection sums, so that
// both select the same keys bit for bit.
std::vector<std::vector<float>> mean_query(const TensorView& query_q, int64_t kv_heads) {
  const int64_t query_len = query_q.shape[1];
  const int64_t q_heads = query_q.shape[2];
  const int64_t head_dim = query_q.shape[3];
  const int64_t group = q_heads / kv_heads;
  std::vector<std::vector<float>> mean(static_cast<std::size_t>(kv_heads),
                                       std::vector<float>(static_cast<std::size_t>(head_dim)));
  for (int64_t h = 0; h < kv_heads; ++h) {
    for (int64_t d = 0; d < head_dim; ++d) {
      float sum = 0.0f;
      for (int64_t i = 0; i < query_len; ++i) {
        for (int64_t g = 0; g < group; ++g) {
          sum += load_float(query_q, i * query_q.strides[1] + (h * group + g) * query_q.strides[2] +
                                         d * query_q.strides[3]);
        }
      }
      mean[static_cast<std::size_t>(h)][static_cast<std::size_t>(d)] =
          sum / static_cast<float>(query_len * group);
    }
  }
  return mean;
}

}  // namespace

void register_selector(DeviceType device, SelectAndPack selector) {
  SelectorTable& table = selector_table();
  std::lock_guard lock(table.mutex);
  table.selectors[static_cast<std::size_t>(device)] = selector;
}

void select_and_pack(const TensorView& query_q, const TensorView& block_k,
                     const TensorView& block_v, int64_t count, int64_t pool_width, void* message,
                     void* stream) {
  if (count == 0) return;
  if (block_k.device.type == DeviceType::kCPU) {
    select_and_pack_host(query_q, block_k, block_v, count, pool_width, message, stream);
    return;
  }
  SelectorTable& table = selector_table();
  SelectAndPack selector = nullptr;
  {
    std::lock_guard lock(table.mutex);
    selector = table.selectors[static_cast<std::size_t>(block_k.device.type)];
  }
  if (selector == nullptr) {
    throw Error(ErrorCode::kUnsupported,
                "essential-KV selection on " + device_name(block_k.device) +
                    " needs a backend that registers one; this build has none");
  }
  selector(query_q, block_k, block_v, count, pool_width, message, stream);
}

TensorView passing_keys(void* message, DType dtype, int64_t rows, int64_t kv_heads,
                        int64_t head_dim, Device device) {
  TensorView view =
      TensorView::contiguous(message, dtype, {1, rows, kv_heads, 2 * head_dim}, device);
  view.shape[3] = head_dim;  // K is the first half of each row; strides stay those of K|V
  return view;
}

TensorView passing_values(void* message, DType dtype, int64_t rows, int64_t kv_heads,
                          int64_t head_dim, Device device) {
  TensorView view = passing_keys(message, dtype, rows, kv_heads, head_dim, device);
  view.data = static_cast<std::byte*>(message) + head_dim * static_cast<int64_t>(dtype_size(dtype));
  return view;
}

}  // namespace detail

std::vector<std::vector<int64_t>> select_essential(const TensorView& query_q,
                                                   const TensorView& block_k, int64_t count,
                                                   int64_t pool_width) {
  if (query_q.device.type != DeviceType::kCPU || block_k.device.type != DeviceType::kCPU) {
    throw_invalid_argument("query_q, block_k", "host tensors", device_name(block_k.device));
  }
  const int64_t len = block_k.shape[1];
  const int64_t kv_heads = block_k.shape[2];
  const int64_t head_dim = block_k.shape[3];
  if (count < 0 || count > len) {
    throw_invalid_argument("count", "in [0, " + std::to_string(len) + "] (the block length)",
                           std::to_string(count));
  }
  if (query_q.shape[1] < 1 || query_q.shape[2] % kv_heads != 0 || query_q.shape[3] != head_dim) {
    throw_invalid_argument("query_q", "[1, >= 1, a multiple of kv_heads, head_dim]",
                           query_q.shape_string());
  }
  const std::vector<std::vector<float>> mean = detail::mean_query(query_q, kv_heads);
  const int64_t reach = pool_width / 2;
  std::vector<std::vector<int64_t>> selected(static_cast<std::size_t>(kv_heads));
  std::vector<float> scores(static_cast<std::size_t>(len));
  std::vector<float> pooled(static_cast<std::size_t>(len));
  std::vector<int64_t> order(static_cast<std::size_t>(len));
  for (int64_t h = 0; h < kv_heads; ++h) {
    for (int64_t j = 0; j < len; ++j) {
      // fp32 fused multiply-adds in dimension order, as the device selection computes.
      float score = 0.0f;
      const std::vector<float>& head_mean = mean[static_cast<std::size_t>(h)];
      for (int64_t d = 0; d < head_dim; ++d) {
        const int64_t offset =
            j * block_k.strides[1] + h * block_k.strides[2] + d * block_k.strides[3];
        score =
            std::fma(load_float(block_k, offset), head_mean[static_cast<std::size_t>(d)], score);
      }
      scores[static_cast<std::size_t>(j)] = score;
    }
    for (int64_t j = 0; j < len; ++j) {
      float best = -std::numeric_limits<float>::infinity();
      for (int64_t t = std::max<int64_t>(0, j - reach); t <= std::min(len - 1, j + reach); ++t) {
        best = std::max(best, scores[static_cast<std::size_t>(t)]);
      }
      pooled[static_cast<std::size_t>(j)] = best;
    }
    std::iota(order.begin(), order.end(), int64_t{0});
    const auto higher = [&](int64_t a, int64_t b) {
      const float pa = pooled[static_cast<std::size_t>(a)];
      const float pb = pooled[static_cast<std::size_t>(b)];
      return pa != pb ? pa > pb : a < b;
    };
    std::partial_sort(order.begin(), order.begin() + count, order.end(), higher);
    std::vector<int64_t>& chosen = selected[static_cast<std::size_t>(h)];
    chosen.assign(order.begin(), order.begin() + count);
    std::sort(chosen.begin(), chosen.end());
  }
  return selected;
}

}  // namespace mmsparse::dist
