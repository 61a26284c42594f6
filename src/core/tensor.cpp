#include "mmsparse/tensor.h"

#include <bit>
#include <cmath>
#include <cstring>
#include <sstream>

#include "mmsparse/status.h"

namespace mmsparse {

std::size_t dtype_size(DType dtype) {
  switch (dtype) {
    case DType::kFloat32: return 4;
    case DType::kFloat16: return 2;
    case DType::kBFloat16: return 2;
    case DType::kInt32: return 4;
    case DType::kInt64: return 8;
    case DType::kUInt8: return 1;
  }
  return 0;
}

std::string_view dtype_name(DType dtype) {
  switch (dtype) {
    case DType::kFloat32: return "float32";
    case DType::kFloat16: return "float16";
    case DType::kBFloat16: return "bfloat16";
    case DType::kInt32: return "int32";
    case DType::kInt64: return "int64";
    case DType::kUInt8: return "uint8";
  }
  return "unknown";
}

DType dtype_from_name(std::string_view name) {
  for (DType dtype : {DType::kFloat32, DType::kFloat16, DType::kBFloat16, DType::kInt32,
                      DType::kInt64, DType::kUInt8}) {
    if (dtype_name(dtype) == name) return dtype;
  }
  if (name == "bf16") return DType::kBFloat16;
  if (name == "fp16" || name == "half") return DType::kFloat16;
  if (name == "fp32" || name == "float") return DType::kFloat32;
  throw Error(ErrorCode::kParseError,
              "dtype: expected one of float32, float16, bfloat16 (or bf16, fp16, fp32), int32, "
              "int64, uint8, got '" + std::string(name) + "'");
}

std::string device_name(Device device) {
  if (device.type == DeviceType::kCPU) return "cpu";
  return "cuda:" + std::to_string(device.index);
}

namespace {

template <class Shape>
TensorView make_contiguous(void* data, DType dtype, const Shape& shape, Device device) {
  TensorView view;
  view.data = data;
  view.dtype = dtype;
  view.device = device;
  if (shape.size() > static_cast<std::size_t>(kMaxDims)) {
    throw_invalid_argument("shape", "at most " + std::to_string(kMaxDims) + " dimensions",
                           std::to_string(shape.size()));
  }
  view.ndim = static_cast<int>(shape.size());
  int i = 0;
  for (int64_t extent : shape) view.shape[i++] = extent;
  int64_t stride = 1;
  for (int d = view.ndim - 1; d >= 0; --d) {
    view.strides[d] = stride;
    stride *= view.shape[d];
  }
  return view;
}

}  // namespace

TensorView TensorView::contiguous(void* data, DType dtype, std::initializer_list<int64_t> shape,
                                  Device device) {
  return make_contiguous(data, dtype, shape, device);
}

TensorView TensorView::contiguous(void* data, DType dtype, const std::vector<int64_t>& shape,
                                  Device device) {
  return make_contiguous(data, dtype, shape, device);
}

int64_t TensorView::numel() const {
  int64_t count = 1;
  for (int d = 0; d < ndim; ++d) count *= shape[d];
  return count;
}

bool TensorView::is_contiguous() const {
  int64_t expected = 1;
  for (int d = ndim - 1; d >= 0; --d) {
    if (shape[d] != 1 && strides[d] != expected) return false;
    expected *= shape[d];
  }
  return true;
}

std::string TensorView::shape_string() const {
  std::ostringstream out;
  out << '[';
  for (int d = 0; d < ndim; ++d) out << (d ? ", " : "") << shape[d];
  out << ']';
  return out.str();
}

Tensor::Tensor(DType dtype, std::vector<int64_t> shape) : dtype_(dtype), shape_(std::move(shape)) {
  int64_t count = 1;
  for (int64_t extent : shape_) {
    if (extent < 0) throw_invalid_argument("shape", "non-negative extents", std::to_string(extent));
    count *= extent;
  }
  bytes_.resize(static_cast<std::size_t>(count) * dtype_size(dtype_));
}

TensorView Tensor::view() const {
  return TensorView::contiguous(const_cast<std::byte*>(bytes_.data()), dtype_, shape_);
}

int64_t Tensor::numel() const {
  int64_t count = 1;
  for (int64_t extent : shape_) count *= extent;
  return count;
}

uint16_t float_to_bfloat16(float value) {
  uint32_t bits = std::bit_cast<uint32_t>(value);
  if (std::isnan(value)) return static_cast<uint16_t>((bits >> 16) | 0x40);  // keep a quiet NaN
  const uint32_t rounding_bias = 0x7FFF + ((bits >> 16) & 1);
  return static_cast<uint16_t>((bits + rounding_bias) >> 16);
}

float bfloat16_to_float(uint16_t bits) {
  return std::bit_cast<float>(static_cast<uint32_t>(bits) << 16);
}

float round_to_dtype(DType dtype, float value) {
  switch (dtype) {
    case DType::kBFloat16:
      return bfloat16_to_float(float_to_bfloat16(value));
    case DType::kFloat16:
      return half_to_float(float_to_half(value));
    default:
      return value;
  }
}

namespace {
// IEEE half precision, converted by the compiler (round to nearest even). GCC has the arithmetic
// type _Float16 on x86-64; clang before 15 has only the storage type __fp16, which a function
// cannot return (hence memcpy rather than std::bit_cast).
#if defined(__clang__)
using Half = __fp16;
#else
using Half = _Float16;
#endif
static_assert(sizeof(Half) == sizeof(uint16_t));
}  // namespace

uint16_t float_to_half(float value) {
  const Half half = static_cast<Half>(value);
  uint16_t bits = 0;
  std::memcpy(&bits, &half, sizeof(bits));
  return bits;
}

float half_to_float(uint16_t bits) {
  Half half;
  std::memcpy(&half, &bits, sizeof(half));
  return static_cast<float>(half);
}

float load_float(const TensorView& view, int64_t offset) {
  switch (view.dtype) {
    case DType::kFloat32: return static_cast<const float*>(view.data)[offset];
    case DType::kBFloat16: return bfloat16_to_float(static_cast<const uint16_t*>(view.data)[offset]);
    case DType::kFloat16: return half_to_float(static_cast<const uint16_t*>(view.data)[offset]);
    default:
      throw_invalid_argument("tensor dtype", "float32, float16 or bfloat16",
                             std::string(dtype_name(view.dtype)));
  }
}

void store_float(const TensorView& view, int64_t offset, float value) {
  switch (view.dtype) {
    case DType::kFloat32: static_cast<float*>(view.data)[offset] = value; return;
    case DType::kBFloat16: static_cast<uint16_t*>(view.data)[offset] = float_to_bfloat16(value); return;
    case DType::kFloat16: static_cast<uint16_t*>(view.data)[offset] = float_to_half(value); return;
    default:
      throw_invalid_argument("tensor dtype", "float32, float16 or bfloat16",
                             std::string(dtype_name(view.dtype)));
  }
}

namespace {

bool is_floating(DType dtype) {
  return dtype == DType::kFloat32 || dtype == DType::kFloat16 || dtype == DType::kBFloat16;
}

// Calls visit(source_offset, destination_offset) for every element in row-major order.
template <class Visit>
void for_each_element(const TensorView& source, const TensorView& destination, Visit visit) {
  const int64_t count = source.numel();
  std::array<int64_t, kMaxDims> index{};
  for (int64_t n = 0; n < count; ++n) {
    int64_t source_offset = 0;
    int64_t destination_offset = 0;
    for (int d = 0; d < source.ndim; ++d) {
      source_offset += index[d] * source.strides[d];
      destination_offset += index[d] * destination.strides[d];
    }
    visit(source_offset, destination_offset);
    for (int d = source.ndim - 1; d >= 0; --d) {
      if (++index[d] < source.shape[d]) break;
      index[d] = 0;
    }
  }
}

}  // namespace

void copy_tensor(const TensorView& source, const TensorView& destination) {
  if (source.device.type != DeviceType::kCPU || destination.device.type != DeviceType::kCPU) {
    throw_invalid_argument("copy_tensor device", "cpu tensors",
                           device_name(source.device) + " -> " + device_name(destination.device));
  }
  if (source.shape_vector() != destination.shape_vector()) {
    throw_invalid_argument("copy_tensor destination shape", source.shape_string(),
                           destination.shape_string());
  }
  if (source.dtype == destination.dtype) {
    const std::size_t size = dtype_size(source.dtype);
    const auto* from = static_cast<const std::byte*>(source.data);
    auto* to = static_cast<std::byte*>(destination.data);
    for_each_element(source, destination, [&](int64_t s, int64_t d) {
      std::memcpy(to + d * size, from + s * size, size);
    });
    return;
  }
  if (!is_floating(source.dtype) || !is_floating(destination.dtype)) {
    throw_invalid_argument("copy_tensor dtype", "equal dtypes or floating dtypes on both sides",
                           std::string(dtype_name(source.dtype)) + " -> " +
                               std::string(dtype_name(destination.dtype)));
  }
  for_each_element(source, destination, [&](int64_t s, int64_t d) {
    store_float(destination, d, load_float(source, s));
  });
}

Tensor to_contiguous(const TensorView& source, DType dtype) {
  Tensor result(dtype, source.shape_vector());
  copy_tensor(source, result.view());
  return result;
}

}  // namespace mmsparse
