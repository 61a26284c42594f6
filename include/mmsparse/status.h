#pragma once
// Errors. Every public function reports bad input by throwing mmsparse::Error whose message names
// the argument, the expected value and what it got, e.g.
//   "q: expected 4 dimensions [batch, seq, heads, head_dim], got 3".

#include <stdexcept>
#include <string>
#include <string_view>

namespace mmsparse {

enum class ErrorCode {
  kInvalidArgument,  // shape, dtype, stride, device, value out of range
  kUnsupported,      // valid request this build or backend cannot serve (e.g. CUDA tensors without CUDA)
  kParseError,       // malformed JSON, pattern spec or file header
  kIoError,          // file could not be opened, read or written
  kBackendError,     // a CUDA/NCCL call failed
};

std::string_view error_code_name(ErrorCode code);

class Error : public std::runtime_error {
 public:
  Error(ErrorCode code, const std::string& message);
  ErrorCode code() const noexcept { return code_; }

 private:
  ErrorCode code_;
};

// Throws kInvalidArgument with the message "<argument>: expected <expected>, got <got>".
[[noreturn]] void throw_invalid_argument(std::string_view argument, std::string_view expected,
                                         std::string_view got);

}  // namespace mmsparse
