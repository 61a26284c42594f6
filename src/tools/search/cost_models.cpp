// The search's cost models: chunks the engine computes (modelled) and engine time (measured).

#include <algorithm>
#include <chrono>
#include <memory>
#include <string>
#include <utility>

#include "mmsparse/attention.h"
#include "mmsparse/build_info.h"
#include "mmsparse/device.h"
#include "mmsparse/tools/search.h"
#include "mmsparse/status.h"

namespace mmsparse {
namespace {

// The Hopper kernel's tile: 128 query rows (its wgmma tile for head_dim 128) by 128 keys per chunk.
constexpr int64_t kEngineTileRows = 128;
constexpr int64_t kEngineKeyChunk = 128;

int64_t chunks_of(int64_t keys) { return (keys + kEngineKeyChunk - 1) / kEngineKeyChunk; }

class ModelledCost final : public CostModel {
 public:
  std::unique_ptr<CostInputs> prepare(const TensorView&, const TensorView&,
                                      const TensorView&) override {
    return std::make_unique<CostInputs>();  // the model reads only the plan
  }
  double cost(const Plan& plan, const CostInputs&) override {
    int64_t chunks = 0;
    for (int64_t p = 0; p < plan.num_passes(); ++p) {
      const Plan& pass = plan.pass(p);
      for (int64_t t = 0; t < pass.num_tiles(); ++t) {
        for (int64_t s = pass.tile_span_offsets[t]; s < pass.tile_span_offsets[t + 1]; ++s) {
          chunks += chunks_of(pass.spans[s].end - pass.spans[s].begin);
        }
        for (int64_t s = pass.tile_strided_offsets[t]; s < pass.tile_strided_offsets[t + 1]; ++s) {
          chunks += chunks_of(pass.strided_spans[s].count());
        }
        chunks += chunks_of(pass.tile_column_offsets[t + 1] - pass.tile_column_offsets[t]);
      }
    }
    return static_cast<double>(chunks);
  }
  double index_cost(const PatternSpec& spec, const PlanShape& shape, const ModalityLayout&, float,
                    const CostInputs&) override {
    if (!is_dynamic(spec)) return 0.0;
    const PatternSpec resolved = resolve_pattern(spec);
    // VecAttention scores every pooled query block against every key (docs/vec.md).
    if (resolved.name == "vec") {
      const int64_t pooling = std::max<int64_t>(1, resolved.param("pooling", 1));
      return static_cast<double>(chunks_of((shape.q_len + pooling - 1) / pooling) *
                                 chunks_of(shape.kv_len));
    }
    // The estimate: the last last_q rows against every key, one row block of chunks per 128 rows.
    const int64_t last_q = resolved.param("last_q", 0);
    return static_cast<double>(chunks_of(last_q) * chunks_of(shape.kv_len));
  }
  bool measured() const override { return false; }
  std::string unit() const override { return "key chunks"; }
  std::string gpu() const override { return {}; }
  int64_t tile_rows(int64_t) const override { return kEngineTileRows; }
};

// A scope's q, k, v on the device, with the output buffers every candidate's run writes, and the
// host q and k it was prepared from (for the index of patterns the GPU does not build; the scope
// that prepared these outlives them). Prepared from device views, it borrows them (the scope's
// scorer owns them) and has no host q and k.
struct DeviceInputs final : CostInputs {
  DeviceInputs(std::vector<DeviceTensor> owned_tensors, TensorView device_q, TensorView device_k,
               TensorView device_v, Device device, const TensorView& host_q_view,
               const TensorView& host_k_view)
      : owned(std::move(owned_tensors)),
        q(device_q),
        k(device_k),
        v(device_v),
        out(q.dtype, q.shape_vector(), device),
        lse(DType::kFloat32, {1, 1, q.shape[1]}, device),
        host_q(host_q_view),
        host_k(host_k_view) {}
  std::vector<DeviceTensor> owned;  // the copies q, k, v view, when made from host views
  TensorView q, k, v;
  DeviceTensor out, lse;
  TensorView host_q, host_k;
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

  std::unique_ptr<CostInputs> prepare(const TensorView& q, const TensorView& k,
                                      const TensorView& v) override {
    if (q.device == device_) {
      return std::make_unique<DeviceInputs>(std::vector<DeviceTensor>{}, q, k, v, device_,
                                            TensorView{}, TensorView{});
    }
    std::vector<DeviceTensor> owned;
    for (const TensorView* host : {&q, &k, &v}) owned.push_back(to_device(*host));
    const TensorView device_q = owned[0].view(), device_k = owned[1].view(),
                     device_v = owned[2].view();
    return std::make_unique<DeviceInputs>(std::move(owned), device_q, device_k, device_v, device_,
                                          q, k);
  }

  double cost(const Plan& plan, const CostInputs& inputs) override {
    return cost_prepared(prepare_plan(plan, device_), inputs);
  }

  double cost_prepared(const PreparedPlan& prepared, const CostInputs& inputs) override {
    return time_runs(prepared, inputs, warmup_, repeats_);
  }

  double cost_prepared_within(const PreparedPlan& prepared, const CostInputs& inputs,
                              double limit) override {
    // One warm-up (module loading, the first touch of the plan) and one timed run.
    const double quick = time_runs(prepared, inputs, 1, 1);
    if (quick > kQuickOverBudget * limit) return quick;
    return cost_prepared(prepared, inputs);
  }

  double index_cost(const PatternSpec& spec, const PlanShape& shape, const ModalityLayout& layout,
                    float scale, const CostInputs& inputs) override {
    const DeviceInputs& device_inputs = ours(inputs);
    if (!is_dynamic(spec)) return 0.0;
    const PatternInputs on_device{device_inputs.q, device_inputs.k, scale};
    const auto build_on_device = [&] {
      (void)prepare_pattern(spec, shape, &layout, device_, nullptr, &on_device);
      synchronize(device_);
    };
    try {
      build_on_device();  // a first build, outside the timing, which also says where it runs
    } catch (const Error& error) {
      if (error.code() != ErrorCode::kUnsupported) throw;
      if (device_inputs.host_q.data == nullptr) {
        throw Error(ErrorCode::kUnsupported,
                    "index cost of " + spec.to_string() +
                        ": built on the host, but the inputs were prepared from device tensors");
      }
      // Built on the host at every run (docs/index_builders.md): one build, it takes long.
      const PatternInputs on_host{device_inputs.host_q, device_inputs.host_k, scale};
      const auto start = std::chrono::steady_clock::now();
      (void)prepare_pattern(spec, shape, &layout, device_, nullptr, &on_host);
      synchronize(device_);
      return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
          .count();
    }
    // Each build ends in a synchronisation, so the events span its host work too.
    return median_device_milliseconds(build_on_device, std::max(0, warmup_ - 1), repeats_,
                                      device_);
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

  double time_runs(const PreparedPlan& prepared, const CostInputs& inputs, int warmup,
                   int repeats) const {
    const DeviceInputs& device_inputs = ours(inputs);
    return median_device_milliseconds(
        [&] {
          attention_planned(prepared, device_inputs.q, device_inputs.k, device_inputs.v,
                            device_inputs.out.view(), device_inputs.lse.view());
        },
        warmup, repeats, device_);
  }

  static const DeviceInputs& ours(const CostInputs& inputs) {
    const auto* device_inputs = dynamic_cast<const DeviceInputs*>(&inputs);
    if (device_inputs == nullptr) {
      throw_invalid_argument("inputs", "CostInputs prepared by this measured cost model",
                             "inputs of another model");
    }
    return *device_inputs;
  }

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
