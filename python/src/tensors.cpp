// Tensor views from the Python side's description of a tensor, and what this build contains.

#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <string>
#include <vector>

#include "bindings.h"
#include "mmsparse/build_info.h"
#include "mmsparse/status.h"

namespace nb = nanobind;

namespace mmsparse::python {

TensorView make_view(uintptr_t data, const std::string& dtype, int device_type, int device_index,
                     const std::vector<int64_t>& shape, const std::vector<int64_t>& strides) {
  if (shape.size() != strides.size()) {
    throw_invalid_argument("strides", std::to_string(shape.size()) + " entries (one per dimension)",
                           std::to_string(strides.size()));
  }
  if (shape.size() > static_cast<std::size_t>(kMaxDims)) {
    throw_invalid_argument("shape", "at most " + std::to_string(kMaxDims) + " dimensions",
                           std::to_string(shape.size()));
  }
  const auto type = static_cast<DeviceType>(device_type);
  if (type != DeviceType::kCPU && type != DeviceType::kCUDA) {
    throw_invalid_argument("device", "cpu or cuda",
                           "DLPack device type " + std::to_string(device_type));
  }
  TensorView view;
  view.data = reinterpret_cast<void*>(data);  // NOLINT: the address torch gave as an integer
  view.dtype = dtype_from_name(dtype);
  view.device = Device{type, device_index};
  view.ndim = static_cast<int>(shape.size());
  for (std::size_t d = 0; d < shape.size(); ++d) {
    view.shape[d] = shape[d];
    view.strides[d] = strides[d];
  }
  return view;
}

void bind_tensors(nb::module_& module) {
  nb::class_<TensorView>(module, "View",
                         "A non-owning view of a tensor's memory (no copy; keep the tensor alive)")
      .def(
          "__init__",
          [](TensorView* self, uintptr_t data, const std::string& dtype, int device_type,
             int device_index, const std::vector<int64_t>& shape,
             const std::vector<int64_t>& strides) {
            new (self)
                TensorView(make_view(data, dtype, device_type, device_index, shape, strides));
          },
          nb::arg("data"), nb::arg("dtype"), nb::arg("device_type"), nb::arg("device_index"),
          nb::arg("shape"), nb::arg("strides"))
      .def_prop_ro("shape", &TensorView::shape_vector)
      .def("__repr__", [](const TensorView& view) {
        return "View(" + std::string(dtype_name(view.dtype)) + ", " + view.shape_string() + ", " +
               device_name(view.device) + ")";
      });

  module.def("build_info", []() {
    const BuildInfo info = mmsparse::build_info();
    nb::dict result;
    result["version"] = info.version;
    result["compiler"] = info.compiler;
    result["cuda_enabled"] = info.cuda_enabled;
    result["cuda_version"] = info.cuda_version;
    result["backends"] = info.backends;
    return result;
  });
  module.def("visible_gpus", []() {
    nb::list gpus;
    for (const GpuInfo& gpu : mmsparse::visible_gpus()) {
      nb::dict entry;
      entry["index"] = gpu.index;
      entry["name"] = gpu.name;
      entry["compute_capability"] = nb::make_tuple(gpu.compute_major, gpu.compute_minor);
      entry["multiprocessors"] = gpu.multiprocessors;
      entry["memory_gib"] = gpu.memory_gib;
      gpus.append(entry);
    }
    return gpus;
  });
}

}  // namespace mmsparse::python
