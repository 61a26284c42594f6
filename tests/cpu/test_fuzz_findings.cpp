// Inputs the fuzz targets (tests/fuzz, docs/fuzzing.md) found to escape the parsers' error
// contract, reduced to what triggers them: each must now be a clean mmsparse::Error naming where
// it is.

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>

#include "common/errors.h"
#include "mmsparse/layout.h"
#include "mmsparse/patterns.h"
#include "mmsparse/status.h"
#include "mmsparse/tools/io.h"

namespace mmsparse {
namespace {

using testing::capture_error;
using ::testing::HasSubstr;

// Found by reading the fuzz target's parser: 80 bytes of layout JSON asked for one segment per
// frame of 10^8 one-token frames (gigabytes); the layout now refuses more than 2^20 segments.
TEST(FuzzFindings, LayoutJsonWithTooManyFramesFailsFast) {
  const Error error = capture_error([] {
    ModalityLayout::from_json(
        R"({"segments": [{"type": "video", "grid": [100000000, 1, 1], "frame_separator": 1}]})");
  });
  EXPECT_EQ(error.code(), ErrorCode::kParseError);  // the JSON reader reports it as a bad layout
  EXPECT_THAT(error.what(), HasSubstr("layout segments"));
}

// A JSON number beyond double's range: nlohmann::json throws out_of_range, not parse_error.
constexpr const char* kHugeNumber = "1e400";

TEST(FuzzFindings, LayoutJsonWithANumberBeyondDouble) {
  const Error error = capture_error([] {
    ModalityLayout::from_json(std::string(R"({"segments": [{"type": )") + kHugeNumber + "}]}");
  });
  EXPECT_EQ(error.code(), ErrorCode::kParseError);
  EXPECT_THAT(error.what(), HasSubstr("layout JSON: layout: expected valid JSON"));
  EXPECT_THAT(error.what(), HasSubstr("number overflow"));
}

TEST(FuzzFindings, PatternConfigWithANumberBeyondDouble) {
  const Error error = capture_error(
      [] { PatternConfig::from_json(std::string(R"({"schema_version": )") + kHugeNumber + "}"); });
  EXPECT_EQ(error.code(), ErrorCode::kParseError);
  EXPECT_THAT(error.what(), HasSubstr("pattern config: invalid JSON"));
  EXPECT_THAT(error.what(), HasSubstr("number overflow"));
}

TEST(FuzzFindings, SafetensorsHeaderWithANumberBeyondDouble) {
  const std::string header =
      std::string(R"({"q":{"dtype":"F32","shape":[1],"data_offsets":[0,)") + kHugeNumber + "]}}";
  constexpr int kLengthBytes = 8;  // the u64 little-endian header length
  constexpr int kBitsPerByte = 8;
  std::string bytes;
  for (int i = 0; i < kLengthBytes; ++i) {
    bytes.push_back(static_cast<char>(header.size() >> (kBitsPerByte * i)));
  }
  bytes += header;
  const std::string path =
      (std::filesystem::temp_directory_path() / "mmsparse_test_fuzz_findings.safetensors").string();
  std::ofstream(path, std::ios::binary) << bytes;
  const Error error = capture_error([&] { read_safetensors(path); });
  std::filesystem::remove(path);
  EXPECT_EQ(error.code(), ErrorCode::kParseError);
  EXPECT_THAT(error.what(), HasSubstr("safetensors file '" + path + "': bad JSON header"));
  EXPECT_THAT(error.what(), HasSubstr("number overflow"));
}

}  // namespace
}  // namespace mmsparse
