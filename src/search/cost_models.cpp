// The search's cost models: chunks the engine computes (modelled) and engine time (measured).

#include <memory>
#include <optional>
#include <string>

#include "mmsparse/attention.h"
#include "mmsparse/build_info.h"
#include "mmsparse/device.h"
#include "mmsparse/search.h"
#include "mmsparse/status.h"

namespace mmsparse {
namespace {

// The Hopper kernel's tile: 128 query rows (its wgmma tile for head_dim 128) by 128 keys per chunk.
constexpr int64_t kEngineTileRows = 128;
constexpr int64_t kEngineKeyChunk = 128;

int64_t chunks_of(int64_t keys) { return (keys + kEngineKeyChunk - 1) / kEngineKeyChunk; }

class ModelledCost final : public CostModel {
 public:
  double cost(const Plan& plan, int64_t) override {
    int64_t chunks = 0;
    for (int64_t t = 0; t < plan.num_tiles(); ++t) {
      for (int64_t s = plan.tile_span_offsets[t]; s < plan.tile_span_offsets[t + 1]; ++s) {
        chunks += chunks_of(plan.spans[s].end - plan.spans[s].begin);
      }
      chunks += chunks_of(plan.tile_column_offsets[t + 1] - plan.tile_column_offsets[t]);
    }
    return static_cast<double>(chunks);
  }
  bool measured() const override { return false; }
  std::string unit() const override { return "key chunks"; }
  std::string gpu() const override { return {}; }
  int64_t tile_rows() const override { return kEngineTileRows; }
};

// One head's slice [1, seq, 1, head_dim] of a [1, seq, heads, head_dim] view.
TensorView head_slice(const TensorView& full, int64_t head) {
  TensorView slice = full;
  slice.data = static_cast<std::byte*>(full.data) +
               head * full.strides[2] * static_cast<int64_t>(dtype_size(full.dtype));
  slice.shape[2] = 1;
  return slice;
}

class MeasuredCost final : public CostModel {
 public:
  MeasuredCost(const TensorView& q, const TensorView& k, const TensorView& v, Device device,
               int warmup, int repeats)
      : device_(device), warmup_(warmup), repeats_(repeats) {
    // The engine runs 16-bit inputs; fp32 calibration tensors are timed as bf16.
    const DType dtype = q.dtype == DType::kFloat32 ? DType::kBFloat16 : q.dtype;
    q_.emplace(DeviceTensor::from_host(to_contiguous(q, dtype).view(), device));
    k_.emplace(DeviceTensor::from_host(to_contiguous(k, dtype).view(), device));
    v_.emplace(DeviceTensor::from_host(to_contiguous(v, dtype).view(), device));
    group_ = q.shape[2] / k.shape[2];
    head_dim_ = q.shape[3];
    out_.emplace(dtype, std::vector<int64_t>{1, q.shape[1], 1, head_dim_}, device);
    lse_.emplace(DType::kFloat32, std::vector<int64_t>{1, 1, q.shape[1]}, device);
    for (const GpuInfo& info : visible_gpus()) {
      if (info.index == device.index) gpu_ = device_name(device) + " " + info.name;
    }
    if (gpu_.empty()) gpu_ = device_name(device);
  }

  double cost(const Plan& plan, int64_t q_head) override {
    const PreparedPlan prepared = prepare_plan(plan, device_);
    const TensorView q = head_slice(q_->view(), q_head);
    const TensorView k = head_slice(k_->view(), q_head / group_);
    const TensorView v = head_slice(v_->view(), q_head / group_);
    return median_device_milliseconds(
        [&] { attention_planned(prepared, q, k, v, out_->view(), lse_->view()); }, warmup_,
        repeats_, device_);
  }
  bool measured() const override { return true; }
  std::string unit() const override { return "ms"; }
  std::string gpu() const override { return gpu_; }
  int64_t tile_rows() const override { return preferred_tile_rows(device_, head_dim_); }

 private:
  Device device_;
  int warmup_;
  int repeats_;
  int64_t group_ = 1;
  int64_t head_dim_ = 0;
  std::string gpu_;
  std::optional<DeviceTensor> q_, k_, v_, out_, lse_;
};

}  // namespace

std::unique_ptr<CostModel> make_modelled_cost() { return std::make_unique<ModelledCost>(); }

std::unique_ptr<CostModel> make_measured_cost(const TensorView& q, const TensorView& k,
                                              const TensorView& v, Device device, int warmup,
                                              int repeats) {
  if (device.type != DeviceType::kCUDA) {
    throw_invalid_argument("device", "a CUDA device for a measured cost", device_name(device));
  }
  if (!build_info().cuda_enabled || visible_gpus().empty()) {
    throw Error(ErrorCode::kUnsupported,
                "measured cost: expected a build with the CUDA engine and a visible GPU, got " +
                    std::string(build_info().cuda_enabled ? "no visible GPU" : "a CPU-only build"));
  }
  if (warmup < 0) throw_invalid_argument("warmup", ">= 0", std::to_string(warmup));
  if (repeats < 1) throw_invalid_argument("repeats", ">= 1", std::to_string(repeats));
  return std::make_unique<MeasuredCost>(q, k, v, device, warmup, repeats);
}

}  // namespace mmsparse
