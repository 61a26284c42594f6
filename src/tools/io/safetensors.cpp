#include "mmsparse/tools/io.h"

#include <algorithm>
#include <array>
#include <bit>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <vector>

#include "mmsparse/status.h"

namespace mmsparse {

namespace {

// safetensors stores data little-endian; tensors are copied byte for byte.
static_assert(std::endian::native == std::endian::little,
              "safetensors I/O assumes a little-endian host");

using Json = nlohmann::json;

constexpr std::size_t kHeaderLengthBytes = 8;  // u64 little-endian before the JSON header
constexpr std::size_t kBitsPerByte = 8;
// The reference writer pads the header with spaces so that the data section starts aligned.
constexpr std::size_t kHeaderAlignment = 8;
constexpr std::string_view kMetadataKey = "__metadata__";
// The reference implementation's limit; it also keeps a corrupt length from allocating gigabytes.
constexpr uint64_t kMaxHeaderBytes = 100'000'000;

struct DTypeCode {
  DType dtype;
  std::string_view code;
};
constexpr std::array<DTypeCode, 6> kDTypeCodes{{{DType::kFloat32, "F32"},
                                                {DType::kFloat16, "F16"},
                                                {DType::kBFloat16, "BF16"},
                                                {DType::kInt32, "I32"},
                                                {DType::kInt64, "I64"},
                                                {DType::kUInt8, "U8"}}};

std::string_view dtype_code(DType dtype) {
  for (const DTypeCode& entry : kDTypeCodes) {
    if (entry.dtype == dtype) return entry.code;
  }
  throw_invalid_argument("dtype", "a dtype safetensors can store", std::string(dtype_name(dtype)));
}

std::optional<DType> dtype_from_code(std::string_view code) {
  for (const DTypeCode& entry : kDTypeCodes) {
    if (entry.code == code) return entry.dtype;
  }
  return std::nullopt;
}

std::string in_quotes(std::string_view text) { return std::string("'").append(text).append("'"); }

[[noreturn]] void throw_file_error(ErrorCode code, const std::string& path, std::string_view what) {
  throw Error(code,
              std::string("safetensors file ").append(in_quotes(path)).append(": ").append(what));
}

[[noreturn]] void throw_tensor_error(const std::string& path, std::string_view tensor,
                                     std::string_view what) {
  throw_file_error(ErrorCode::kParseError, path,
                   std::string("tensor ").append(in_quotes(tensor)).append(": ").append(what));
}

// One tensor's header entry, checked against the data section.
struct Entry {
  std::string name;
  DType dtype = DType::kFloat32;
  std::vector<int64_t> shape;
  uint64_t begin = 0;
  uint64_t end = 0;
};

const Json* find_key(const Json& object, std::string_view key) {
  const auto found = object.find(key);
  return found == object.end() ? nullptr : &*found;
}

std::string describe(const Json* value) { return value ? value->dump() : "none"; }

// Bytes that `shape` of `dtype` occupies, or nullopt when that overflows.
std::optional<uint64_t> byte_size(const std::vector<int64_t>& shape, DType dtype) {
  uint64_t bytes = dtype_size(dtype);
  for (int64_t extent : shape) {
    const auto factor = static_cast<uint64_t>(extent);
    if (factor != 0 && bytes > std::numeric_limits<uint64_t>::max() / factor) return std::nullopt;
    bytes *= factor;
  }
  return bytes;
}

bool is_int64(const Json& value) {
  return value.is_number_unsigned() &&
         value.get<uint64_t>() <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max());
}

DType parse_dtype(const Json* value, const std::string& path, const std::string& name) {
  const std::optional<DType> dtype =
      value && value->is_string() ? dtype_from_code(value->get<std::string>()) : std::nullopt;
  if (!dtype) {
    throw_tensor_error(path, name,
                       "dtype: expected \"F32\", \"F16\", \"BF16\", \"I32\", \"I64\" or "
                       "\"U8\", got " +
                           describe(value));
  }
  return *dtype;
}

std::vector<int64_t> parse_shape(const Json* value, const std::string& path,
                                 const std::string& name) {
  const bool valid = value && value->is_array() && value->size() <= kMaxDims &&
                     std::all_of(value->begin(), value->end(), is_int64);
  if (!valid) {
    throw_tensor_error(path, name,
                       "shape: expected an array of at most " + std::to_string(kMaxDims) +
                           " non-negative extents, got " + describe(value));
  }
  return value->get<std::vector<int64_t>>();
}

Entry parse_entry(const std::string& name, const Json& value, uint64_t data_size,
                  const std::string& path) {
  if (!value.is_object()) throw_tensor_error(path, name, "expected an object, got " + value.dump());
  Entry entry;
  entry.name = name;
  entry.dtype = parse_dtype(find_key(value, "dtype"), path, name);
  entry.shape = parse_shape(find_key(value, "shape"), path, name);

  const Json* offsets = find_key(value, "data_offsets");
  const bool valid = offsets && offsets->is_array() && offsets->size() == 2 &&
                     (*offsets)[0].is_number_unsigned() && (*offsets)[1].is_number_unsigned() &&
                     (*offsets)[0].get<uint64_t>() <= (*offsets)[1].get<uint64_t>();
  if (!valid) {
    throw_tensor_error(
        path, name,
        "data_offsets: expected [begin, end] with 0 <= begin <= end, got " + describe(offsets));
  }
  entry.begin = (*offsets)[0].get<uint64_t>();
  entry.end = (*offsets)[1].get<uint64_t>();
  const std::optional<uint64_t> bytes = byte_size(entry.shape, entry.dtype);
  if (!bytes || *bytes != entry.end - entry.begin) {
    throw_tensor_error(path, name,
                       "shape " + value.at("shape").dump() + " of " + value.at("dtype").dump() +
                           " needs " + (bytes ? std::to_string(*bytes) : "too many") +
                           " bytes, data_offsets " + offsets->dump() + " span " +
                           std::to_string(entry.end - entry.begin));
  }
  if (entry.end > data_size) {
    throw_tensor_error(path, name,
                       "data_offsets " + offsets->dump() +
                           " out of range: the data section holds " + std::to_string(data_size) +
                           " bytes (truncated file?)");
  }
  return entry;
}

// Every byte of the data section belongs to at most one tensor.
void check_no_overlap(std::vector<Entry> entries, const std::string& path) {
  std::erase_if(entries, [](const Entry& entry) { return entry.begin == entry.end; });
  std::sort(entries.begin(), entries.end(),
            [](const Entry& a, const Entry& b) { return a.begin < b.begin; });
  for (std::size_t i = 1; i < entries.size(); ++i) {
    const Entry& previous = entries[i - 1];
    if (entries[i].begin < previous.end) {
      throw_tensor_error(path, entries[i].name,
                         "data_offsets [" + std::to_string(entries[i].begin) + ", " +
                             std::to_string(entries[i].end) + "] overlap tensor " +
                             in_quotes(previous.name) + " [" + std::to_string(previous.begin) +
                             ", " + std::to_string(previous.end) + "]");
    }
  }
}

std::map<std::string, std::string> parse_metadata(const Json& value, const std::string& path) {
  if (!value.is_object()) {
    throw_file_error(
        ErrorCode::kParseError, path,
        std::string(kMetadataKey) + ": expected an object of strings, got " + value.dump());
  }
  std::map<std::string, std::string> metadata;
  for (const auto& item : value.items()) {
    if (!item.value().is_string()) {
      throw_file_error(ErrorCode::kParseError, path,
                       std::string(kMetadataKey) + "[" + in_quotes(item.key()) +
                           "]: expected a string, got " + item.value().dump());
    }
    metadata.emplace(item.key(), item.value().get<std::string>());
  }
  return metadata;
}

// Reads the header length and JSON header; leaves `file` at the data section.
Json read_header(std::ifstream& file, uint64_t file_size, const std::string& path) {
  if (file_size < kHeaderLengthBytes) {
    throw_file_error(ErrorCode::kParseError, path,
                     "truncated header: expected at least " + std::to_string(kHeaderLengthBytes) +
                         " bytes for its length, got a " + std::to_string(file_size) +
                         "-byte file");
  }
  std::array<unsigned char, kHeaderLengthBytes> length_bytes{};
  if (!file.read(reinterpret_cast<char*>(length_bytes.data()), kHeaderLengthBytes)) {
    throw_file_error(ErrorCode::kIoError, path, "cannot read the header length");
  }
  uint64_t header_length = 0;
  for (std::size_t i = 0; i < kHeaderLengthBytes; ++i) {
    header_length |= static_cast<uint64_t>(length_bytes[i]) << (kBitsPerByte * i);
  }
  if (header_length > kMaxHeaderBytes) {
    throw_file_error(ErrorCode::kParseError, path,
                     "header length " + std::to_string(header_length) + " exceeds the limit of " +
                         std::to_string(kMaxHeaderBytes) + " bytes");
  }
  const uint64_t available = file_size - kHeaderLengthBytes;
  if (header_length > available) {
    throw_file_error(ErrorCode::kParseError, path,
                     "truncated or corrupt header: its length field says " +
                         std::to_string(header_length) + " bytes, the file has " +
                         std::to_string(available) + " after it");
  }
  std::string text(header_length, '\0');
  if (!file.read(text.data(), static_cast<std::streamsize>(header_length))) {
    throw_file_error(ErrorCode::kIoError, path, "cannot read the header");
  }
  try {
    Json header = Json::parse(text);
    if (!header.is_object()) {
      throw_file_error(ErrorCode::kParseError, path,
                       std::string("header: expected a JSON object, got ") + header.type_name());
    }
    return header;
  } catch (const Json::exception& error) {
    // Not only parse_error: a number beyond double's range ("1e400") throws out_of_range.
    throw_file_error(ErrorCode::kParseError, path, std::string("bad JSON header: ") + error.what());
  }
}

void check_writable(const std::string& name, const TensorView& view) {
  const std::string field = "tensors[" + in_quotes(name) + "]";
  if (name.empty() || name == kMetadataKey) {
    throw_invalid_argument(
        "tensor name", "a non-empty name other than " + std::string(kMetadataKey), in_quotes(name));
  }
  if (view.device.type != DeviceType::kCPU) {
    throw_invalid_argument(field + " device", "cpu", device_name(view.device));
  }
  if (view.ndim < 0 || view.ndim > kMaxDims) {
    throw_invalid_argument(field + " ndim", "0 to " + std::to_string(kMaxDims),
                           std::to_string(view.ndim));
  }
  for (int d = 0; d < view.ndim; ++d) {
    if (view.shape[d] < 0) {
      throw_invalid_argument(field + " shape", "non-negative extents", view.shape_string());
    }
  }
  if (view.data == nullptr && view.numel() != 0) {
    throw_invalid_argument(field + " data", "a host pointer", "null");
  }
}

void write_bytes(std::ofstream& file, const void* data, std::size_t size, const std::string& path) {
  if (!file.write(static_cast<const char*>(data), static_cast<std::streamsize>(size))) {
    throw_file_error(ErrorCode::kIoError, path, "write failed");
  }
}

}  // namespace

const Tensor& TensorFile::at(const std::string& name) const {
  const auto found = tensors.find(name);
  if (found == tensors.end()) {
    std::string names;
    for (const auto& item : tensors) names.append(names.empty() ? "" : ", ").append(item.first);
    throw_invalid_argument("tensor " + in_quotes(name),
                           "a tensor of that name (the file has [" + names + "])", "none");
  }
  return found->second;
}

ModalityLayout TensorFile::layout() const {
  const auto found = metadata.find(kLayoutMetadataKey);
  if (found == metadata.end()) {
    throw_invalid_argument(std::string("metadata ") + in_quotes(kLayoutMetadataKey), "a layout",
                           "none");
  }
  try {
    return ModalityLayout::from_json(found->second);
  } catch (const Error& error) {
    throw Error(error.code(),
                std::string("metadata ") + in_quotes(kLayoutMetadataKey) + ": " + error.what());
  }
}

TensorFile read_safetensors(const std::string& path) {
  std::error_code error;
  const uint64_t file_size = std::filesystem::file_size(path, error);
  if (error) throw_file_error(ErrorCode::kIoError, path, "cannot open: " + error.message());
  std::ifstream file(path, std::ios::binary);
  if (!file) throw_file_error(ErrorCode::kIoError, path, "cannot open for reading");

  const Json header = read_header(file, file_size, path);
  const uint64_t data_start = static_cast<uint64_t>(file.tellg());
  const uint64_t data_size = file_size - data_start;
  TensorFile result;
  std::vector<Entry> entries;
  for (const auto& item : header.items()) {
    if (item.key() == kMetadataKey) {
      result.metadata = parse_metadata(item.value(), path);
    } else {
      entries.push_back(parse_entry(item.key(), item.value(), data_size, path));
    }
  }
  check_no_overlap(entries, path);

  for (const Entry& entry : entries) {
    Tensor tensor(entry.dtype, entry.shape);
    file.seekg(static_cast<std::streamoff>(data_start + entry.begin));
    if (!file.read(reinterpret_cast<char*>(tensor.data()),
                   static_cast<std::streamsize>(tensor.nbytes()))) {
      throw_file_error(ErrorCode::kIoError, path, "cannot read tensor " + in_quotes(entry.name));
    }
    result.tensors.emplace(entry.name, std::move(tensor));
  }
  return result;
}

void write_safetensors(const std::string& path, const std::map<std::string, TensorView>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  // Tensors are laid out in key order (std::map), so equal inputs give identical files.
  Json header = Json::object();
  uint64_t offset = 0;
  for (const auto& [name, view] : tensors) {
    check_writable(name, view);
    const uint64_t bytes = static_cast<uint64_t>(view.numel()) * dtype_size(view.dtype);
    header[name] = {{"dtype", dtype_code(view.dtype)},
                    {"shape", view.shape_vector()},
                    {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  if (!metadata.empty()) header[std::string(kMetadataKey)] = metadata;
  std::string text;
  try {
    text = header.dump();
  } catch (const Json::type_error& error) {
    throw_invalid_argument("tensor names and metadata", "valid UTF-8 strings", error.what());
  }
  text.append((kHeaderAlignment - text.size() % kHeaderAlignment) % kHeaderAlignment, ' ');

  std::ofstream file(path, std::ios::binary | std::ios::trunc);
  if (!file) throw_file_error(ErrorCode::kIoError, path, "cannot open for writing");
  std::array<unsigned char, kHeaderLengthBytes> length_bytes{};
  for (std::size_t i = 0; i < kHeaderLengthBytes; ++i) {
    length_bytes[i] = static_cast<unsigned char>(text.size() >> (kBitsPerByte * i));
  }
  write_bytes(file, length_bytes.data(), length_bytes.size(), path);
  write_bytes(file, text.data(), text.size(), path);
  for (const auto& [name, view] : tensors) {
    if (view.is_contiguous()) {
      write_bytes(file, view.data, static_cast<std::size_t>(view.numel()) * dtype_size(view.dtype),
                  path);
    } else {
      const Tensor packed = to_contiguous(view, view.dtype);
      write_bytes(file, packed.data(), packed.nbytes(), path);
    }
  }
  if (!file.flush()) throw_file_error(ErrorCode::kIoError, path, "write failed");
}

}  // namespace mmsparse
