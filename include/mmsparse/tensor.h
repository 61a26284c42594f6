#pragma once
// Non-owning tensor views that map 1:1 to DLPack (data, dtype, device, shape, strides in elements),
// and a small owning host tensor for workloads, files and tests.

#include <array>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

namespace mmsparse {

enum class DType : uint8_t { kFloat32, kFloat16, kBFloat16, kInt32, kInt64, kUInt8 };

std::size_t dtype_size(DType dtype);
std::string_view dtype_name(DType dtype);           // "float32", "float16", "bfloat16", ...
DType dtype_from_name(std::string_view name);        // throws kParseError on unknown names

// Values match DLPack's DLDeviceType so bindings convert by cast.
enum class DeviceType : uint8_t { kCPU = 1, kCUDA = 2 };

struct Device {
  DeviceType type = DeviceType::kCPU;
  int index = 0;
  bool operator==(const Device&) const = default;
};

std::string device_name(Device device);  // "cpu", "cuda:0"

inline constexpr int kMaxDims = 6;

struct TensorView {
  void* data = nullptr;
  DType dtype = DType::kFloat32;
  Device device{};
  int ndim = 0;
  std::array<int64_t, kMaxDims> shape{};
  std::array<int64_t, kMaxDims> strides{};  // in elements, like DLPack

  // A view of contiguous (row-major) memory.
  static TensorView contiguous(void* data, DType dtype, std::initializer_list<int64_t> shape,
                               Device device = {});
  static TensorView contiguous(void* data, DType dtype, const std::vector<int64_t>& shape,
                               Device device = {});

  int64_t numel() const;
  bool is_contiguous() const;
  std::string shape_string() const;  // "[1, 8192, 28, 128]"
  std::vector<int64_t> shape_vector() const { return {shape.begin(), shape.begin() + ndim}; }
  template <class T>
  T* data_as() const {
    return static_cast<T*>(data);
  }
};

// Owning, contiguous, host memory.
class Tensor {
 public:
  Tensor() = default;
  Tensor(DType dtype, std::vector<int64_t> shape);

  TensorView view() const;
  DType dtype() const { return dtype_; }
  const std::vector<int64_t>& shape() const { return shape_; }
  int64_t numel() const;
  std::size_t nbytes() const { return bytes_.size(); }
  std::byte* data() { return bytes_.data(); }
  const std::byte* data() const { return bytes_.data(); }
  template <class T>
  T* data_as() {
    return reinterpret_cast<T*>(bytes_.data());
  }
  template <class T>
  const T* data_as() const {
    return reinterpret_cast<const T*>(bytes_.data());
  }
  bool empty() const { return bytes_.empty(); }

 private:
  DType dtype_ = DType::kFloat32;
  std::vector<int64_t> shape_;
  std::vector<std::byte> bytes_;
};

// Scalar conversions (round to nearest even) used by host code for bf16/fp16 storage.
uint16_t float_to_bfloat16(float value);
float bfloat16_to_float(uint16_t bits);
uint16_t float_to_half(float value);
float half_to_float(uint16_t bits);
// `value` as storing it in `dtype` and loading it back gives it: rounded to nearest even for
// bfloat16 and float16, unchanged for float32. References that round where the kernels store
// (a pooled query, a score, an output) use it.
float round_to_dtype(DType dtype, float value);

// Element access through a view of a floating dtype (float32/float16/bfloat16) on the host;
// `offset` is in elements from data.
float load_float(const TensorView& view, int64_t offset);
void store_float(const TensorView& view, int64_t offset, float value);

// Copies with dtype conversion between host views of equal shape (any strides).
void copy_tensor(const TensorView& source, const TensorView& destination);
Tensor to_contiguous(const TensorView& source, DType dtype);

}  // namespace mmsparse
