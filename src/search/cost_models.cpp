// The search's cost models: chunks the engine computes (modelled) and engine time (measured).

#include <memory>
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
  double cost(const Plan& plan, const TensorView&, const TensorView&, const TensorView&) override {
    int64_t chunks = 0;
    for (int64_t p = 0; p < plan.num_passes(); ++p) {
      const Plan& pass = plan.pass(p);
      for (int64_t t = 0; t < pass.num_tiles(); ++t) {
        for (int64_t s = pass.tile_span_offsets[t]; s < pass.tile_span_offsets[t + 1]; ++s) {
          chunks += chunks_of(pass.spans[s].end - pass.spans[s].begin);
        }
        chunks += chunks_of(pass.tile_column_offsets[t + 1] - pass.tile_column_offsets[t]);
      }
    }
    return static_cast<double>(chunks);
  }
  bool measured() const override { return false; }
  std::string unit() const override { return "key chunks"; }
  std::string gpu() const override { return {}; }
  int64_t tile_rows(int64_t) const override { return kEngineTileRows; }
};

class MeasuredCost final : public CostModel {
 public:
  MeasuredCost(Device device, int warmup, int repeats)
      : device_(device), warmup_(warmup), repeats_(repeats) {
    for (const GpuInfo& info : visible_gpus()) {
      if (info.index == device.index) gpu_ = device_name(device) + " " + info.name;
    }
    if (gpu_.empty()) gpu_ = device_name(device);
  }

  double cost(const Plan& plan, const TensorView& q, const TensorView& k,
              const TensorView& v) override {
    const DeviceTensor device_q = to_device(q), device_k = to_device(k), device_v = to_device(v);
    const DeviceTensor out(device_q.view().dtype, q.shape_vector(), device_);
    const DeviceTensor lse(DType::kFloat32, {1, 1, q.shape[1]}, device_);
    const PreparedPlan prepared = prepare_plan(plan, device_);
    return median_device_milliseconds(
        [&] {
          attention_planned(prepared, device_q.view(), device_k.view(), device_v.view(),
                            out.view(), lse.view());
        },
        warmup_, repeats_, device_);
  }
  bool measured() const override { return true; }
  std::string unit() const override { return "ms"; }
  std::string gpu() const override { return gpu_; }
  int64_t tile_rows(int64_t head_dim) const override {
    return preferred_tile_rows(device_, head_dim);
  }

 private:
  Device device_;
  int warmup_;
  int repeats_;
  std::string gpu_;

  DeviceTensor to_device(const TensorView& host) const {
    // The engine runs 16-bit inputs; fp32 calibration tensors are timed as bf16.
    const DType dtype = host.dtype == DType::kFloat32 ? DType::kBFloat16 : host.dtype;
    return DeviceTensor::from_host(to_contiguous(host, dtype).view(), device_);
  }
};

}  // namespace

std::unique_ptr<CostModel> make_modelled_cost() { return std::make_unique<ModelledCost>(); }

std::unique_ptr<CostModel> make_measured_cost(Device device, int warmup, int repeats) {
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
  return std::make_unique<MeasuredCost>(device, warmup, repeats);
}

}  // namespace mmsparse
