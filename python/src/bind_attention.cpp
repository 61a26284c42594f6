// Attention calls and the plan/run split. Every call releases the GIL while the engine works;
// CUDA work is enqueued on the stream the caller passes (torch's current stream).

#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <cstdint>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "bindings.h"
#include "mmsparse/attention.h"
#include "mmsparse/patterns.h"
#include "mmsparse/plan.h"
#include "mmsparse/status.h"

namespace nb = nanobind;

namespace mmsparse::python {
namespace {

AttentionOptions make_options(float scale, bool causal, uintptr_t stream, int num_threads) {
  AttentionOptions options;
  options.scale = scale;
  options.causal = causal;
  options.stream = reinterpret_cast<void*>(stream);  // NOLINT: cudaStream_t as an integer
  options.num_threads = num_threads;
  return options;
}

std::vector<PatternSpec> parse_specs(const std::vector<std::string>& texts) {
  std::vector<PatternSpec> specs;
  specs.reserve(texts.size());
  for (const std::string& text : texts) specs.push_back(PatternSpec::parse(text));
  return specs;
}

// The arguments of prepare() that describe the plan's problem.
struct PlanRequest {
  PlanShape shape;
  Device device;
};

PlanRequest make_request(int64_t batch, int64_t heads, int64_t q_len, int64_t kv_len,
                         int64_t tile_rows, int device_type, int device_index) {
  PlanRequest request;
  request.shape = PlanShape{batch, heads, q_len, kv_len, tile_rows};
  request.device = Device{static_cast<DeviceType>(device_type), device_index};
  return request;
}

// specs: one spec for every head, or one per query head. q, k: the dynamic patterns' inputs (null
// for static ones); host_q, host_k: host copies for the heads a device build cannot estimate.
PreparedPlan prepare(const std::vector<std::string>& spec_texts, const PlanRequest& request,
                     const ModalityLayout* layout, uintptr_t stream, const TensorView* q,
                     const TensorView* k, const TensorView* host_q, const TensorView* host_k,
                     float scale) {
  if (spec_texts.empty()) {
    throw_invalid_argument("pattern", "at least one spec", "none");
  }
  if ((q == nullptr) != (k == nullptr)) {
    throw_invalid_argument("q, k (pattern inputs)", "both or neither", "one of them");
  }
  void* stream_pointer = reinterpret_cast<void*>(stream);  // NOLINT: cudaStream_t as an integer
  const std::vector<PatternSpec> specs = parse_specs(spec_texts);
  PatternInputs inputs;
  PatternInputs host_inputs;
  if (q != nullptr) inputs = PatternInputs{*q, *k, scale};
  if (host_q != nullptr && host_k != nullptr) host_inputs = PatternInputs{*host_q, *host_k, scale};
  const PatternInputs* inputs_pointer = q != nullptr ? &inputs : nullptr;
  const PatternInputs* host_pointer = host_q != nullptr ? &host_inputs : nullptr;
  if (specs.size() == 1) {
    return prepare_pattern(specs.front(), request.shape, layout, request.device, stream_pointer,
                           inputs_pointer);
  }
  return prepare_pattern(specs, request.shape, layout, request.device, stream_pointer,
                         inputs_pointer, host_pointer);
}

void bind_prepared_plan(nb::module_& module) {
  nb::class_<PreparedPlan>(module, "PreparedPlan")
      .def_prop_ro("shape",
                   [](const PreparedPlan& prepared) {
                     const PlanShape& shape = prepared.shape();
                     return std::make_tuple(shape.batch, shape.heads, shape.q_len, shape.kv_len,
                                            shape.tile_rows);
                   })
      .def_prop_ro("device",
                   [](const PreparedPlan& prepared) { return device_name(prepared.device()); })
      .def(
          "summary", [](const PreparedPlan& prepared) { return prepared.plan().summary(); },
          nb::call_guard<nb::gil_scoped_release>())
      .def(
          "pair_counts",
          [](const PreparedPlan& prepared) { return count_plan_pairs(prepared.plan()); },
          nb::call_guard<nb::gil_scoped_release>(),
          "(query, key) pairs each head slot computes after masking");
}

}  // namespace

void bind_attention(nb::module_& module) {
  bind_prepared_plan(module);

  module.def(
      "attention_dense",
      [](const TensorView& q, const TensorView& k, const TensorView& v, const TensorView& out,
         const TensorView& lse, float scale, bool causal, uintptr_t stream, int num_threads) {
        attention_dense(q, k, v, out, lse, make_options(scale, causal, stream, num_threads));
      },
      nb::arg("q"), nb::arg("k"), nb::arg("v"), nb::arg("out"), nb::arg("lse"), nb::arg("scale"),
      nb::arg("causal"), nb::arg("stream"), nb::arg("num_threads"),
      nb::call_guard<nb::gil_scoped_release>());

  module.def(
      "attention_planned",
      [](const PreparedPlan& plan, const TensorView& q, const TensorView& k, const TensorView& v,
         const TensorView& out, const TensorView& lse, float scale, uintptr_t stream,
         int num_threads) {
        attention_planned(plan, q, k, v, out, lse, make_options(scale, true, stream, num_threads));
      },
      nb::arg("plan"), nb::arg("q"), nb::arg("k"), nb::arg("v"), nb::arg("out"), nb::arg("lse"),
      nb::arg("scale"), nb::arg("stream"), nb::arg("num_threads"),
      nb::call_guard<nb::gil_scoped_release>());

  module.def(
      "prepare",
      [](const std::vector<std::string>& specs, int64_t batch, int64_t heads, int64_t q_len,
         int64_t kv_len, int64_t tile_rows, const ModalityLayout* layout, int device_type,
         int device_index, uintptr_t stream, const TensorView* q, const TensorView* k,
         const TensorView* host_q, const TensorView* host_k, float scale) {
        const PlanRequest request =
            make_request(batch, heads, q_len, kv_len, tile_rows, device_type, device_index);
        return prepare(specs, request, layout, stream, q, k, host_q, host_k, scale);
      },
      nb::arg("specs"), nb::arg("batch"), nb::arg("heads"), nb::arg("q_len"), nb::arg("kv_len"),
      nb::arg("tile_rows"), nb::arg("layout").none(), nb::arg("device_type"),
      nb::arg("device_index"), nb::arg("stream"), nb::arg("q").none(), nb::arg("k").none(),
      nb::arg("host_q").none(), nb::arg("host_k").none(), nb::arg("scale"),
      nb::call_guard<nb::gil_scoped_release>());

  module.def(
      "builds_plan_on_device",
      [](const std::string& spec, int64_t batch, int64_t heads, int64_t q_len, int64_t kv_len,
         int64_t tile_rows, const ModalityLayout* layout, int device_type, int device_index) {
        const PlanRequest request =
            make_request(batch, heads, q_len, kv_len, tile_rows, device_type, device_index);
        return builds_plan_on_device(PatternSpec::parse(spec), request.shape, layout,
                                     request.device);
      },
      nb::arg("spec"), nb::arg("batch"), nb::arg("heads"), nb::arg("q_len"), nb::arg("kv_len"),
      nb::arg("tile_rows"), nb::arg("layout").none(), nb::arg("device_type"),
      nb::arg("device_index"));

  module.def(
      "preferred_tile_rows",
      [](int device_type, int device_index, int64_t head_dim) {
        return preferred_tile_rows(Device{static_cast<DeviceType>(device_type), device_index},
                                   head_dim);
      },
      nb::arg("device_type"), nb::arg("device_index"), nb::arg("head_dim"));
}

}  // namespace mmsparse::python
