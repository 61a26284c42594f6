// safetensors files: round trips of every dtype (strided views included), a file assembled byte by
// byte here (independent of the writer), and corrupt files that must fail with the right code.

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <string>
#include <vector>

#include "common/random.h"
#include "common/errors.h"
#include "mmsparse/tools/io.h"
#include "mmsparse/status.h"

namespace mmsparse {
namespace {

using testing::capture_error;

using ::testing::HasSubstr;

constexpr int kLengthBytes = 8;  // the u64 little-endian header length
constexpr int kBitsPerByte = 8;

void append_little_endian(std::string& bytes, uint64_t value, int size) {
  for (int i = 0; i < size; ++i) bytes.push_back(static_cast<char>(value >> (kBitsPerByte * i)));
}

// The file format from its definition: length, JSON header, data.
std::string file_bytes(const std::string& header, const std::string& data) {
  std::string bytes;
  append_little_endian(bytes, header.size(), kLengthBytes);
  return bytes + header + data;
}

std::string bytes_of(const Tensor& tensor) {
  return {reinterpret_cast<const char*>(tensor.data()), tensor.nbytes()};
}

class Safetensors : public ::testing::Test {
 protected:
  Safetensors()
      : directory_(std::filesystem::temp_directory_path() /
                   ("mmsparse_test_safetensors_" + std::to_string(random_.seed()))) {
    std::filesystem::create_directories(directory_);
  }
  ~Safetensors() override { std::filesystem::remove_all(directory_); }

  std::string path(const std::string& name) const { return (directory_ / name).string(); }

  std::string write_file(const std::string& name, const std::string& bytes) const {
    std::ofstream(path(name), std::ios::binary) << bytes;
    return path(name);
  }

  std::string read_file(const std::string& file) const {
    std::ifstream stream(file, std::ios::binary);
    return {std::istreambuf_iterator<char>(stream), std::istreambuf_iterator<char>()};
  }

  Tensor random_bytes_tensor(DType dtype, std::vector<int64_t> shape) {
    Tensor tensor(dtype, std::move(shape));
    for (std::size_t i = 0; i < tensor.nbytes(); ++i) {
      tensor.data()[i] = static_cast<std::byte>(random_.engine()());
    }
    return tensor;
  }

  std::vector<int64_t> random_shape() {
    constexpr int64_t kMaxDimsUsed = 4;
    constexpr int64_t kMaxExtent = 6;
    std::vector<int64_t> shape(static_cast<std::size_t>(random_.uniform_int(0, kMaxDimsUsed)));
    for (int64_t& extent : shape) extent = random_.uniform_int(1, kMaxExtent);
    return shape;
  }

  test::Random random_;
  std::filesystem::path directory_;
};

TEST_F(Safetensors, RoundTripsEveryDtypeStridedViewsMetadataAndLayout) {
  SCOPED_TRACE(random_.trace());
  // Views point into the tensors' heap buffers, which stay put when the vector grows.
  std::vector<Tensor> storage;
  std::map<std::string, TensorView> views;
  for (DType dtype : {DType::kFloat32, DType::kFloat16, DType::kBFloat16, DType::kInt32,
                      DType::kInt64, DType::kUInt8}) {
    storage.push_back(random_bytes_tensor(dtype, random_shape()));
    views[std::string(dtype_name(dtype))] = storage.back().view();
  }
  storage.push_back(random_bytes_tensor(DType::kFloat32, {0, 3}));
  views["empty"] = storage.back().view();
  // [c, b, a] view of [a, b, c] memory, and every other element of a bf16 and a u8 vector.
  const int64_t a = random_.uniform_int(1, 5), b = random_.uniform_int(1, 5),
                c = random_.uniform_int(1, 5);
  storage.push_back(random_bytes_tensor(DType::kFloat32, {a, b, c}));
  TensorView transposed = storage.back().view();
  transposed.shape = {c, b, a};
  transposed.strides = {1, c, b * c};
  views["transposed"] = transposed;
  for (DType dtype : {DType::kBFloat16, DType::kUInt8}) {
    const int64_t count = random_.uniform_int(1, 20);
    storage.push_back(random_bytes_tensor(dtype, {2 * count}));
    TensorView every_other = storage.back().view();
    every_other.shape[0] = count;
    every_other.strides[0] = 2;
    views["every_other_" + std::string(dtype_name(dtype))] = every_other;
  }
  const ModalityLayout layout =
      LayoutBuilder().text(5).image(Grid{1, 2, 3}).video(Grid{3, 2, 2}, 2).text(4).build();
  const std::map<std::string, std::string> metadata{{kLayoutMetadataKey, layout.to_json()},
                                                    {"model", "Qwen2.5-VL-7B, layer 3"}};

  write_safetensors(path("round_trip.safetensors"), views, metadata);
  const TensorFile file = read_safetensors(path("round_trip.safetensors"));

  EXPECT_EQ(file.metadata, metadata);
  ASSERT_TRUE(file.has_layout());
  EXPECT_EQ(file.layout(), layout);
  ASSERT_EQ(file.tensors.size(), views.size());
  for (const auto& [name, view] : views) {
    SCOPED_TRACE(name);
    const Tensor& read = file.at(name);
    EXPECT_EQ(read.dtype(), view.dtype);
    EXPECT_EQ(read.shape(), view.shape_vector());
    EXPECT_EQ(bytes_of(read), bytes_of(to_contiguous(view, view.dtype)));
  }
}

TEST_F(Safetensors, WritesDeterministicAlignedFiles) {
  SCOPED_TRACE(random_.trace());
  const Tensor q = random_bytes_tensor(DType::kBFloat16, random_shape());
  const Tensor lse = random_bytes_tensor(DType::kFloat32, random_shape());
  // Inserted in a different order the second time: the file must not depend on it.
  std::map<std::string, TensorView> first;
  first["q"] = q.view();
  first["lse"] = lse.view();
  std::map<std::string, TensorView> second;
  second["lse"] = lse.view();
  second["q"] = q.view();
  write_safetensors(path("first.safetensors"), first, {{"b", "2"}, {"a", "1"}});
  write_safetensors(path("second.safetensors"), second, {{"a", "1"}, {"b", "2"}});
  const std::string bytes = read_file(path("first.safetensors"));
  EXPECT_EQ(bytes, read_file(path("second.safetensors")));

  ASSERT_GE(bytes.size(), static_cast<std::size_t>(kLengthBytes));
  uint64_t header_length = 0;
  for (int i = 0; i < kLengthBytes; ++i) {
    header_length |= static_cast<uint64_t>(static_cast<unsigned char>(bytes[i]))
                     << (kBitsPerByte * i);
  }
  constexpr uint64_t kAlignment = 8;
  EXPECT_EQ(header_length % kAlignment, 0u);
  EXPECT_EQ(bytes.size() - kLengthBytes - header_length, lse.nbytes() + q.nbytes());
  // Tensors are stored in name order: lse first.
  EXPECT_EQ(bytes.substr(kLengthBytes + header_length, lse.nbytes()), bytes_of(lse));
}

TEST_F(Safetensors, ReadsAHandMadeFile) {
  // Data deliberately not in header order, an empty tensor, a scalar, and no header padding.
  const std::string header = R"({"__metadata__":{"format":"pt"},)"
                             R"("zeta":{"dtype":"I64","shape":[2],"data_offsets":[0,16]},)"
                             R"("alpha":{"dtype":"BF16","shape":[1,3],"data_offsets":[16,22]},)"
                             R"("empty":{"dtype":"F32","shape":[0,4],"data_offsets":[22,22]},)"
                             R"("scalar":{"dtype":"F16","shape":[],"data_offsets":[22,24]},)"
                             R"("count":{"dtype":"I32","shape":[1],"data_offsets":[24,28]},)"
                             R"("mask":{"dtype":"U8","shape":[2],"data_offsets":[28,30]}})";
  constexpr int64_t kBig = int64_t{1} << 40;
  constexpr uint16_t kBFloat16One = 0x3F80, kBFloat16MinusTwo = 0xC000, kBFloat16Inf = 0x7F80;
  constexpr uint16_t kHalfOne = 0x3C00;
  std::string data;
  append_little_endian(data, static_cast<uint64_t>(int64_t{-5}), sizeof(int64_t));
  append_little_endian(data, kBig, sizeof(int64_t));
  for (uint16_t bits : {kBFloat16One, kBFloat16MinusTwo, kBFloat16Inf}) {
    append_little_endian(data, bits, sizeof(uint16_t));
  }
  append_little_endian(data, kHalfOne, sizeof(uint16_t));
  append_little_endian(data, static_cast<uint32_t>(-7), sizeof(int32_t));
  data += "\x01\xff";
  const std::string file_path = write_file("hand_made.safetensors", file_bytes(header, data));

  const TensorFile file = read_safetensors(file_path);
  EXPECT_EQ(file.metadata, (std::map<std::string, std::string>{{"format", "pt"}}));
  EXPECT_FALSE(file.has_layout());
  const Tensor& zeta = file.at("zeta");
  ASSERT_EQ(zeta.dtype(), DType::kInt64);
  EXPECT_EQ(zeta.data_as<int64_t>()[0], -5);
  EXPECT_EQ(zeta.data_as<int64_t>()[1], kBig);
  const Tensor& alpha = file.at("alpha");
  ASSERT_EQ(alpha.dtype(), DType::kBFloat16);
  EXPECT_EQ(alpha.shape(), (std::vector<int64_t>{1, 3}));
  EXPECT_EQ(load_float(alpha.view(), 0), 1.0f);
  EXPECT_EQ(load_float(alpha.view(), 1), -2.0f);
  EXPECT_TRUE(std::isinf(load_float(alpha.view(), 2)));
  EXPECT_EQ(file.at("empty").shape(), (std::vector<int64_t>{0, 4}));
  EXPECT_EQ(file.at("empty").nbytes(), 0u);
  EXPECT_TRUE(file.at("scalar").shape().empty());
  EXPECT_EQ(load_float(file.at("scalar").view(), 0), 1.0f);
  EXPECT_EQ(file.at("count").data_as<int32_t>()[0], -7);
  EXPECT_EQ(file.at("mask").data_as<uint8_t>()[1], 0xFF);
}

TEST_F(Safetensors, CorruptFilesFailWithTheRightCode) {
  const std::string good_header = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                                  R"("b":{"dtype":"U8","shape":[4],"data_offsets":[8,12]}})";
  const std::string good_data(12, '\x2a');
  const std::string good = file_bytes(good_header, good_data);
  ASSERT_NO_THROW(read_safetensors(write_file("good.safetensors", good)));

  const auto with_header = [&](const std::string& header) { return file_bytes(header, good_data); };
  const auto entry_a = [&](const std::string& fields) {
    return with_header(R"({"a":{)" + fields + "}}");
  };
  std::string absurd_length;
  append_little_endian(absurd_length, uint64_t{1} << 40, kLengthBytes);
  std::string too_long;
  append_little_endian(too_long, 1000, kLengthBytes);
  struct Case {
    std::string name;
    std::string bytes;
    ErrorCode code;
    std::string message;
  };
  const std::vector<Case> cases{
      {"shorter than the length field", "\x01\x02\x03\x04", ErrorCode::kParseError,
       "truncated header: expected at least 8 bytes for its length, got a 4-byte file"},
      {"absurd header length", absurd_length + "{}", ErrorCode::kParseError,
       "header length 1099511627776 exceeds the limit of 100000000 bytes"},
      {"header longer than the file", too_long + "{}", ErrorCode::kParseError,
       "truncated or corrupt header: its length field says 1000 bytes, the file has 2 after it"},
      {"truncated header", good.substr(0, kLengthBytes + 20), ErrorCode::kParseError,
       "truncated or corrupt header: its length field says " + std::to_string(good_header.size()) +
           " bytes, the file has 20 after it"},
      {"bad JSON", with_header("{not json}"), ErrorCode::kParseError, "bad JSON header"},
      {"header not an object", with_header("[1, 2]"), ErrorCode::kParseError,
       "header: expected a JSON object, got array"},
      {"entry not an object", with_header(R"({"a": 3})"), ErrorCode::kParseError,
       "tensor 'a': expected an object, got 3"},
      {"unknown dtype", entry_a(R"("dtype":"F64","shape":[1],"data_offsets":[0,8])"),
       ErrorCode::kParseError, R"(tensor 'a': dtype: expected "F32")"},
      {"missing dtype", entry_a(R"("shape":[2],"data_offsets":[0,8])"), ErrorCode::kParseError,
       "tensor 'a': dtype: expected"},
      {"negative extent", entry_a(R"("dtype":"F32","shape":[-2],"data_offsets":[0,8])"),
       ErrorCode::kParseError, "tensor 'a': shape: expected an array of at most 6 non-negative"},
      {"too many dimensions",
       entry_a(R"("dtype":"U8","shape":[1,1,1,1,1,1,1],"data_offsets":[0,1])"),
       ErrorCode::kParseError, "tensor 'a': shape: expected an array of at most 6"},
      {"size mismatch", entry_a(R"("dtype":"F32","shape":[3],"data_offsets":[0,8])"),
       ErrorCode::kParseError,
       R"(tensor 'a': shape [3] of "F32" needs 12 bytes, data_offsets [0,8] span 8)"},
      {"size overflow",
       entry_a(R"("dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,8])"),
       ErrorCode::kParseError, "needs too many bytes"},
      {"offsets reversed", entry_a(R"("dtype":"U8","shape":[0],"data_offsets":[8,0])"),
       ErrorCode::kParseError, "tensor 'a': data_offsets: expected [begin, end] with 0 <= begin"},
      {"negative offset", entry_a(R"("dtype":"U8","shape":[1],"data_offsets":[-1,0])"),
       ErrorCode::kParseError, "tensor 'a': data_offsets: expected"},
      {"truncated data", good.substr(0, good.size() - 2), ErrorCode::kParseError,
       "tensor 'b': data_offsets [8,12] out of range: the data section holds 10 bytes"},
      {"offsets past the end", entry_a(R"("dtype":"U8","shape":[4],"data_offsets":[10,14])"),
       ErrorCode::kParseError, "tensor 'a': data_offsets [10,14] out of range"},
      {"overlapping tensors",
       with_header(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                   R"("b":{"dtype":"U8","shape":[4],"data_offsets":[4,8]}})"),
       ErrorCode::kParseError, "tensor 'b': data_offsets [4, 8] overlap tensor 'a' [0, 8]"},
      {"non-string metadata", with_header(R"({"__metadata__":{"k":1}})"), ErrorCode::kParseError,
       "__metadata__['k']: expected a string, got 1"},
      {"metadata not an object", with_header(R"({"__metadata__":["k"]})"), ErrorCode::kParseError,
       "__metadata__: expected an object of strings"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const std::string file = write_file("corrupt.safetensors", c.bytes);
    const Error error = capture_error([&] { read_safetensors(file); });
    EXPECT_EQ(error.code(), c.code) << error.what();
    EXPECT_THAT(error.what(), HasSubstr(c.message));
    EXPECT_THAT(error.what(), HasSubstr("'" + file + "'"));
  }
}

TEST_F(Safetensors, UnreadableFilesAreIoErrors) {
  for (const std::string& file : {path("missing.safetensors"), directory_.string()}) {
    SCOPED_TRACE(file);
    const Error error = capture_error([&] { read_safetensors(file); });
    EXPECT_EQ(error.code(), ErrorCode::kIoError);
    EXPECT_THAT(error.what(), HasSubstr("'" + file + "'"));
  }
}

TEST_F(Safetensors, WriterRejectsWhatItCannotStore) {
  Tensor tensor(DType::kFloat32, {2});
  TensorView on_gpu = tensor.view();
  on_gpu.device = Device{DeviceType::kCUDA, 1};
  Error error = capture_error([&] { write_safetensors(path("x.safetensors"), {{"q", on_gpu}}); });
  EXPECT_EQ(error.code(), ErrorCode::kInvalidArgument);
  EXPECT_THAT(error.what(), HasSubstr("tensors['q'] device: expected cpu, got cuda:1"));

  error = capture_error([&] {
    write_safetensors(path("x.safetensors"), {{"__metadata__", tensor.view()}});
  });
  EXPECT_EQ(error.code(), ErrorCode::kInvalidArgument);
  EXPECT_THAT(error.what(), HasSubstr("tensor name"));

  const std::string invalid_utf8 = "\xff\xfe";
  error = capture_error([&] {
    write_safetensors(path("x.safetensors"), {{"q", tensor.view()}}, {{"note", invalid_utf8}});
  });
  EXPECT_EQ(error.code(), ErrorCode::kInvalidArgument);
  EXPECT_THAT(error.what(), HasSubstr("tensor names and metadata: expected valid UTF-8 strings"));

  const std::string unwritable = path("no_such_directory/x.safetensors");
  error = capture_error([&] { write_safetensors(unwritable, {{"q", tensor.view()}}); });
  EXPECT_EQ(error.code(), ErrorCode::kIoError);
  EXPECT_THAT(error.what(), HasSubstr("'" + unwritable + "': cannot open for writing"));
}

TEST(TensorFile, AccessorsNameWhatIsMissing) {
  TensorFile file;
  file.tensors.emplace("k", Tensor(DType::kFloat32, {1}));
  file.tensors.emplace("v", Tensor(DType::kFloat32, {1}));
  Error error = capture_error([&] { file.at("q"); });
  EXPECT_EQ(error.code(), ErrorCode::kInvalidArgument);
  EXPECT_THAT(
      error.what(),
      HasSubstr("tensor 'q': expected a tensor of that name (the file has [k, v]), got none"));

  error = capture_error([&] { file.layout(); });
  EXPECT_EQ(error.code(), ErrorCode::kInvalidArgument);
  EXPECT_THAT(error.what(), HasSubstr("metadata 'mmsparse.layout'"));

  file.metadata[kLayoutMetadataKey] = "{";
  error = capture_error([&] { file.layout(); });
  EXPECT_EQ(error.code(), ErrorCode::kParseError);
  EXPECT_THAT(error.what(), HasSubstr("metadata 'mmsparse.layout': layout JSON"));
}

}  // namespace
}  // namespace mmsparse
