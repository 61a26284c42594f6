#include "mmsparse/status.h"

namespace mmsparse {

std::string_view error_code_name(ErrorCode code) {
  switch (code) {
    case ErrorCode::kInvalidArgument: return "invalid argument";
    case ErrorCode::kUnsupported: return "unsupported";
    case ErrorCode::kParseError: return "parse error";
    case ErrorCode::kIoError: return "I/O error";
    case ErrorCode::kBackendError: return "backend error";
  }
  return "error";
}

Error::Error(ErrorCode code, const std::string& message) : std::runtime_error(message), code_(code) {}

void throw_invalid_argument(std::string_view argument, std::string_view expected,
                            std::string_view got) {
  std::string message;
  message.append(argument).append(": expected ").append(expected).append(", got ").append(got);
  throw Error(ErrorCode::kInvalidArgument, message);
}

}  // namespace mmsparse
