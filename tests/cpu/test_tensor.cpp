// Tensor views, owning tensors, bf16/fp16 conversions and copies between strided views.

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "common/random.h"
#include "common/errors.h"
#include "mmsparse/status.h"
#include "mmsparse/tensor.h"

namespace mmsparse {
namespace {

using testing::capture_error;

using ::testing::HasSubstr;

// A 16-bit IEEE-style float format, decoded here from its definition so that the library's
// conversions are checked against something they do not share code with.
struct Format {
  int exponent_bits;
  int mantissa_bits;
};
constexpr Format kHalf{5, 10};
constexpr Format kBFloat16{8, 7};
constexpr uint32_t kPatterns = 1u << 16;
constexpr uint16_t kSignBit = 0x8000;

double decode(Format format, uint16_t bits) {
  const int exponent_mask = (1 << format.exponent_bits) - 1;
  const int bias = exponent_mask >> 1;
  const int exponent = (bits >> format.mantissa_bits) & exponent_mask;
  const int mantissa = bits & ((1 << format.mantissa_bits) - 1);
  double magnitude = 0.0;
  if (exponent == exponent_mask) {
    magnitude = mantissa != 0 ? std::numeric_limits<double>::quiet_NaN()
                              : std::numeric_limits<double>::infinity();
  } else if (exponent == 0) {  // subnormal
    magnitude = std::ldexp(mantissa, 1 - bias - format.mantissa_bits);
  } else {
    magnitude =
        std::ldexp((1 << format.mantissa_bits) + mantissa, exponent - bias - format.mantissa_bits);
  }
  return (bits & kSignBit) != 0 ? -magnitude : magnitude;
}

double max_finite(Format format) {
  const uint16_t infinity_bits =
      static_cast<uint16_t>(((1 << format.exponent_bits) - 1) << format.mantissa_bits);
  return decode(format, infinity_bits - 1);
}

// `bits` must be the representable value nearest to x, ties to an even mantissa.
void expect_nearest(Format format, float x, uint16_t bits) {
  SCOPED_TRACE(::testing::Message() << "x = " << x << ", bits = 0x" << std::hex << bits);
  if (x != 0.0f) EXPECT_EQ((bits & kSignBit) != 0, std::signbit(x));
  const uint16_t magnitude = bits & ~kSignBit;
  const double target = std::abs(static_cast<double>(x));
  const double error = std::abs(decode(format, magnitude) - target);
  for (int step : {-1, 1}) {
    if (magnitude == 0 && step < 0) continue;
    const double neighbor_error = std::abs(decode(format, magnitude + step) - target);
    EXPECT_LE(error, neighbor_error);
    if (error == neighbor_error) EXPECT_EQ(magnitude % 2, 0) << "a tie must go to even";
  }
}

// A random float of random magnitude up to `limit` (any sign).
float random_float(test::Random& random, double limit) {
  constexpr int kMinExponent = -150;  // reaches below the smallest float subnormal
  const int max_exponent = std::ilogb(limit);
  for (;;) {
    const double value = std::ldexp(
        random.uniform(1.0, 2.0), static_cast<int>(random.uniform_int(kMinExponent, max_exponent)));
    if (value >= limit) continue;  // checked before the cast: out-of-range casts are undefined
    const auto x = static_cast<float>(value);
    return random.bernoulli(0.5) ? -x : x;
  }
}

TEST(DType, NamesSizesAndAliases) {
  EXPECT_EQ(dtype_size(DType::kFloat32), 4u);
  EXPECT_EQ(dtype_size(DType::kBFloat16), 2u);
  EXPECT_EQ(dtype_size(DType::kInt64), 8u);
  EXPECT_EQ(dtype_size(DType::kUInt8), 1u);
  for (DType dtype : {DType::kFloat32, DType::kFloat16, DType::kBFloat16, DType::kInt32,
                      DType::kInt64, DType::kUInt8}) {
    EXPECT_EQ(dtype_from_name(dtype_name(dtype)), dtype);
  }
  EXPECT_EQ(dtype_from_name("bf16"), DType::kBFloat16);
  EXPECT_EQ(dtype_from_name("fp16"), DType::kFloat16);
  const Error error = capture_error([] { dtype_from_name("float64"); });
  EXPECT_EQ(error.code(), ErrorCode::kParseError);
  EXPECT_THAT(error.what(), HasSubstr("'float64'"));
}

TEST(HalfConversion, DecodesEveryBitPatternAndRoundTrips) {
  for (uint32_t pattern = 0; pattern < kPatterns; ++pattern) {
    const auto bits = static_cast<uint16_t>(pattern);
    const double expected = decode(kHalf, bits);
    const float value = half_to_float(bits);
    if (std::isnan(expected)) {
      ASSERT_TRUE(std::isnan(value)) << "bits " << bits;
      ASSERT_TRUE(std::isnan(half_to_float(float_to_half(value)))) << "bits " << bits;
      continue;
    }
    ASSERT_EQ(static_cast<double>(value), expected) << "bits " << bits;
    ASSERT_EQ(float_to_half(value), bits) << "bits " << bits;
  }
}

TEST(BFloat16Conversion, DecodesEveryBitPatternAndRoundTrips) {
  for (uint32_t pattern = 0; pattern < kPatterns; ++pattern) {
    const auto bits = static_cast<uint16_t>(pattern);
    const double expected = decode(kBFloat16, bits);
    const float value = bfloat16_to_float(bits);
    if (std::isnan(expected)) {
      ASSERT_TRUE(std::isnan(value)) << "bits " << bits;
      ASSERT_TRUE(std::isnan(bfloat16_to_float(float_to_bfloat16(value)))) << "bits " << bits;
      continue;
    }
    ASSERT_EQ(static_cast<double>(value), expected) << "bits " << bits;
    ASSERT_EQ(float_to_bfloat16(value), bits) << "bits " << bits;
  }
}

TEST(HalfConversion, RoundsToNearestEven) {
  const float ulp_at_one = std::ldexp(1.0f, -10);
  EXPECT_EQ(float_to_half(1.0f + ulp_at_one / 2), 0x3C00);      // tie, 1.0 is even
  EXPECT_EQ(float_to_half(1.0f + 3 * ulp_at_one / 2), 0x3C02);  // tie, rounds up to even
  EXPECT_EQ(float_to_half(1.0f + ulp_at_one * 0.51f), 0x3C01);  // above the tie
  EXPECT_EQ(float_to_half(65504.0f), 0x7BFF);                   // largest finite
  EXPECT_EQ(float_to_half(65519.0f), 0x7BFF);
  EXPECT_EQ(float_to_half(65520.0f), 0x7C00);  // tie with the next power: overflows to inf
  EXPECT_EQ(float_to_half(std::ldexp(1.0f, -24)), 0x0001);  // smallest subnormal
  EXPECT_EQ(float_to_half(std::ldexp(1.0f, -25)), 0x0000);  // tie, 0 is even
  EXPECT_EQ(float_to_half(std::ldexp(3.0f, -25)), 0x0002);  // tie, rounds up to even
  EXPECT_EQ(float_to_half(-0.0f), kSignBit);
}

TEST(BFloat16Conversion, RoundsToNearestEven) {
  const float ulp_at_one = std::ldexp(1.0f, -7);
  EXPECT_EQ(float_to_bfloat16(1.0f + ulp_at_one / 2), 0x3F80);
  EXPECT_EQ(float_to_bfloat16(1.0f + 3 * ulp_at_one / 2), 0x3F82);
  EXPECT_EQ(float_to_bfloat16(1.0f + ulp_at_one / 2 + std::ldexp(1.0f, -20)), 0x3F81);
  EXPECT_EQ(float_to_bfloat16(std::numeric_limits<float>::max()), 0x7F80);  // past the last tie
  EXPECT_EQ(float_to_bfloat16(-0.0f), kSignBit);
}

TEST(HalfConversion, RandomValuesRoundToNearest) {
  test::Random random;
  SCOPED_TRACE(random.trace());
  constexpr int kSamples = 20000;
  for (int i = 0; i < kSamples; ++i) {
    const float x = random_float(random, max_finite(kHalf));
    expect_nearest(kHalf, x, float_to_half(x));
    if (HasFailure()) return;
  }
}

TEST(BFloat16Conversion, RandomValuesRoundToNearest) {
  test::Random random;
  SCOPED_TRACE(random.trace());
  constexpr int kSamples = 20000;
  for (int i = 0; i < kSamples; ++i) {
    const float x = random_float(random, max_finite(kBFloat16));
    expect_nearest(kBFloat16, x, float_to_bfloat16(x));
    if (HasFailure()) return;
  }
}

TEST(FloatConversions, InfinitiesAndNaNs) {
  const float infinity = std::numeric_limits<float>::infinity();
  EXPECT_EQ(float_to_half(infinity), 0x7C00);
  EXPECT_EQ(float_to_half(-infinity), 0xFC00);
  EXPECT_EQ(float_to_bfloat16(infinity), 0x7F80);
  EXPECT_EQ(float_to_bfloat16(-infinity), 0xFF80);
  EXPECT_TRUE(std::isnan(half_to_float(float_to_half(std::numeric_limits<float>::quiet_NaN()))));
  EXPECT_TRUE(
      std::isnan(bfloat16_to_float(float_to_bfloat16(std::numeric_limits<float>::quiet_NaN()))));
  // A NaN whose payload lives only in the low mantissa bits must not truncate to infinity.
  const float low_payload_nan = std::bit_cast<float>(0x7F800001u);
  EXPECT_TRUE(std::isnan(bfloat16_to_float(float_to_bfloat16(low_payload_nan))));
  EXPECT_TRUE(std::isnan(half_to_float(float_to_half(low_payload_nan))));
}

TEST(TensorView, ShapesStridesAndContiguity) {
  Tensor tensor(DType::kFloat16, {2, 3, 4});
  EXPECT_EQ(tensor.numel(), 24);
  EXPECT_EQ(tensor.nbytes(), 48u);
  TensorView view = tensor.view();
  EXPECT_EQ(view.shape_string(), "[2, 3, 4]");
  EXPECT_EQ(view.strides[0], 12);
  EXPECT_TRUE(view.is_contiguous());
  std::swap(view.shape[0], view.shape[2]);
  std::swap(view.strides[0], view.strides[2]);
  EXPECT_FALSE(view.is_contiguous());
  // A unit dimension's stride does not matter.
  TensorView unit = Tensor(DType::kFloat32, {1, 5}).view();
  unit.strides[0] = 77;
  EXPECT_TRUE(unit.is_contiguous());
  EXPECT_EQ(device_name(Device{DeviceType::kCUDA, 3}), "cuda:3");
}

TEST(LoadStoreFloat, RoundsToTheViewDtype) {
  test::Random random;
  SCOPED_TRACE(random.trace());
  const float value = random.normal();
  for (DType dtype : {DType::kFloat32, DType::kFloat16, DType::kBFloat16}) {
    Tensor tensor(dtype, {2});
    store_float(tensor.view(), 1, value);
    const float loaded = load_float(tensor.view(), 1);
    if (dtype == DType::kFloat32) EXPECT_EQ(loaded, value);
    if (dtype == DType::kFloat16) EXPECT_EQ(loaded, half_to_float(float_to_half(value)));
    if (dtype == DType::kBFloat16) EXPECT_EQ(loaded, bfloat16_to_float(float_to_bfloat16(value)));
  }
  const Error error = capture_error([] { load_float(Tensor(DType::kInt32, {1}).view(), 0); });
  EXPECT_EQ(error.code(), ErrorCode::kInvalidArgument);
  EXPECT_THAT(error.what(), HasSubstr("tensor dtype"));
  EXPECT_THAT(error.what(), HasSubstr("int32"));
}

TEST(CopyTensor, TransposedSourceConvertsToHalfPrecision) {
  test::Random random;
  SCOPED_TRACE(random.trace());
  constexpr int64_t kMaxExtent = 9;
  const int64_t a = random.uniform_int(1, kMaxExtent);
  const int64_t b = random.uniform_int(1, kMaxExtent);
  const int64_t c = random.uniform_int(1, kMaxExtent);
  const Tensor source = random.normal_tensor(DType::kFloat32, {a, b, c});
  // [c, b, a] view of [a, b, c] memory.
  TensorView transposed = source.view();
  transposed.shape = {c, b, a};
  transposed.strides = {1, c, b * c};
  const float* values = source.data_as<float>();
  for (DType dtype : {DType::kBFloat16, DType::kFloat16}) {
    const Tensor destination = to_contiguous(transposed, dtype);
    ASSERT_EQ(destination.shape(), (std::vector<int64_t>{c, b, a}));
    const uint16_t* bits = destination.data_as<uint16_t>();
    for (int64_t i = 0; i < a; ++i) {
      for (int64_t j = 0; j < b; ++j) {
        for (int64_t k = 0; k < c; ++k) {
          const float value = values[(i * b + j) * c + k];
          const uint16_t expected =
              dtype == DType::kBFloat16 ? float_to_bfloat16(value) : float_to_half(value);
          ASSERT_EQ(bits[(k * b + j) * a + i], expected) << "at " << i << ", " << j << ", " << k;
        }
      }
    }
  }
}

TEST(CopyTensor, StridedDestinationKeepsItsGaps) {
  test::Random random;
  SCOPED_TRACE(random.trace());
  constexpr float kPoison = -12345.0f;
  constexpr int64_t kStep = 3;
  const int64_t count = random.uniform_int(1, 50);
  const Tensor source = random.normal_tensor(DType::kBFloat16, {count});
  std::vector<float> storage(static_cast<std::size_t>(count * kStep), kPoison);
  TensorView destination = TensorView::contiguous(storage.data(), DType::kFloat32, {count});
  destination.strides[0] = kStep;
  copy_tensor(source.view(), destination);
  for (int64_t i = 0; i < count * kStep; ++i) {
    const float expected =
        i % kStep == 0 ? bfloat16_to_float(source.data_as<uint16_t>()[i / kStep]) : kPoison;
    ASSERT_EQ(storage[i], expected) << "at " << i;
  }
}

TEST(CopyTensor, IntegersWithNegativeAndZeroStrides) {
  test::Random random;
  SCOPED_TRACE(random.trace());
  const int64_t count = random.uniform_int(1, 40);
  std::vector<int64_t> values(static_cast<std::size_t>(count));
  for (int64_t& value : values)
    value = random.uniform_int(std::numeric_limits<int64_t>::min(),
                               std::numeric_limits<int64_t>::max());
  // Reversed: DLPack allows negative strides with data at the first logical element.
  TensorView reversed = TensorView::contiguous(values.data() + count - 1, DType::kInt64, {count});
  reversed.strides[0] = -1;
  const Tensor copy = to_contiguous(reversed, DType::kInt64);
  for (int64_t i = 0; i < count; ++i) ASSERT_EQ(copy.data_as<int64_t>()[i], values[count - 1 - i]);
  // Broadcast: every row reads the same memory.
  constexpr int64_t kRows = 4;
  TensorView broadcast = TensorView::contiguous(values.data(), DType::kInt64, {kRows, count});
  broadcast.strides[0] = 0;
  const Tensor rows = to_contiguous(broadcast, DType::kInt64);
  for (int64_t r = 0; r < kRows; ++r) {
    for (int64_t i = 0; i < count; ++i)
      ASSERT_EQ(rows.data_as<int64_t>()[r * count + i], values[i]);
  }
}

TEST(CopyTensor, RejectsMismatchedShapesDevicesAndDtypes) {
  Tensor a(DType::kFloat32, {2, 3});
  Tensor b(DType::kFloat32, {3, 2});
  Error error = capture_error([&] { copy_tensor(a.view(), b.view()); });
  EXPECT_EQ(error.code(), ErrorCode::kInvalidArgument);
  EXPECT_THAT(error.what(), HasSubstr("copy_tensor destination shape"));
  EXPECT_THAT(error.what(), HasSubstr("expected [2, 3], got [3, 2]"));

  TensorView on_gpu = a.view();
  on_gpu.device = Device{DeviceType::kCUDA, 0};
  error = capture_error([&] { copy_tensor(on_gpu, a.view()); });
  EXPECT_EQ(error.code(), ErrorCode::kInvalidArgument);
  EXPECT_THAT(error.what(), HasSubstr("copy_tensor device"));
  EXPECT_THAT(error.what(), HasSubstr("cuda:0"));

  Tensor integers(DType::kInt32, {2, 3});
  error = capture_error([&] { copy_tensor(integers.view(), a.view()); });
  EXPECT_EQ(error.code(), ErrorCode::kInvalidArgument);
  EXPECT_THAT(error.what(), HasSubstr("copy_tensor dtype"));
  EXPECT_THAT(error.what(), HasSubstr("int32 -> float32"));
}

TEST(Tensor, RejectsBadShapes) {
  Error error = capture_error([] { Tensor(DType::kFloat32, {2, -1}); });
  EXPECT_EQ(error.code(), ErrorCode::kInvalidArgument);
  EXPECT_THAT(error.what(), HasSubstr("shape: expected non-negative extents, got -1"));
  error = capture_error([] {
    TensorView::contiguous(nullptr, DType::kFloat32, {1, 1, 1, 1, 1, 1, 1});
  });
  EXPECT_EQ(error.code(), ErrorCode::kInvalidArgument);
  EXPECT_THAT(error.what(), HasSubstr("at most 6 dimensions"));
}

}  // namespace
}  // namespace mmsparse
