// mmsparse._core: the engine's Python binding. The Python package (python/mmsparse) is the API;
// this module is its thin layer over the C++ calls. mmsparse::Error maps to Python exceptions by
// its code, keeping the message that names the argument.

#include <nanobind/nanobind.h>

#include "bindings.h"
#include "mmsparse/status.h"

namespace nb = nanobind;

namespace {

PyObject* exception_type(mmsparse::ErrorCode code) {
  switch (code) {
    case mmsparse::ErrorCode::kInvalidArgument:
    case mmsparse::ErrorCode::kParseError:
      return PyExc_ValueError;
    case mmsparse::ErrorCode::kUnsupported:
      return PyExc_NotImplementedError;
    case mmsparse::ErrorCode::kIoError:
      return PyExc_OSError;
    case mmsparse::ErrorCode::kBackendError:
      return PyExc_RuntimeError;
  }
  return PyExc_RuntimeError;
}

}  // namespace

NB_MODULE(_core, module) {
  module.doc() = "mmsparse's C++ engine (use the mmsparse package, not this module)";
  // torch.compile's caches keep plans and configs alive until interpreter exit, after nanobind's
  // leak check has run: its reports would be about torch's shutdown order, not leaks.
  nb::set_leak_warnings(false);
  nb::register_exception_translator([](const std::exception_ptr& error, void*) {
    try {
      std::rethrow_exception(error);
    } catch (const mmsparse::Error& mmsparse_error) {
      PyErr_SetString(exception_type(mmsparse_error.code()), mmsparse_error.what());
    }
  });
  mmsparse::python::bind_tensors(module);
  mmsparse::python::bind_config(module);
  mmsparse::python::bind_attention(module);
}
