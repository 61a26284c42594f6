#pragma once
// Shared declarations of the extension module mmsparse._core: each bind_* function adds one area
// of the C++ API to the module.

#include <nanobind/nanobind.h>

#include <cstdint>
#include <string>
#include <vector>

#include "mmsparse/tensor.h"

namespace mmsparse::python {

// A tensor as the Python side describes it (torch's data_ptr, dtype, device, sizes and strides
// in elements): a view of the caller's memory, never a copy.
TensorView make_view(uintptr_t data, const std::string& dtype, int device_type, int device_index,
                     const std::vector<int64_t>& shape, const std::vector<int64_t>& strides);

void bind_tensors(nanobind::module_& module);
void bind_config(nanobind::module_& module);
void bind_attention(nanobind::module_& module);

}  // namespace mmsparse::python
