// Fuzzes read_safetensors (the header length, JSON header, dtypes, shapes and data offsets) and
// the layout in its metadata: the input's bytes are written to a temporary file, which is either
// read or rejected with an mmsparse::Error.

#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <system_error>

#include "mmsparse/status.h"
#include "mmsparse/tools/io.h"

namespace {

// One file per fuzzing process (libFuzzer's -jobs and -fork run several), rewritten per input and
// removed at exit.
struct ScratchFile {
  std::string path = (std::filesystem::temp_directory_path() /
                      ("mmsparse_fuzz_" + std::to_string(getpid()) + ".safetensors"))
                         .string();
  ~ScratchFile() {
    std::error_code ignored;
    std::filesystem::remove(path, ignored);
  }
};

const std::string& scratch_path() {
  static const ScratchFile file;
  return file.path;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // data: `size` bytes, the whole file.
  {
    std::ofstream file(scratch_path(), std::ios::binary | std::ios::trunc);
    file.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
    if (!file.flush()) std::abort();  // the fuzzer's own temporary file: not the input's fault
  }
  try {
    const mmsparse::TensorFile file = mmsparse::read_safetensors(scratch_path());
    mmsparse::tensor_file_layers(file);
    if (file.has_layout()) file.layout();
  } catch (const mmsparse::Error&) {
    // rejected cleanly
  }
  return 0;
}
