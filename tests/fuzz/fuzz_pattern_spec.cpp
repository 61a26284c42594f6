// Fuzzes PatternSpec::parse and resolve_pattern (the CLI's --pattern and every spec of a config):
// any text is either a spec or an mmsparse::Error; a parsed spec survives to_string and parse;
// resolving, with and without a layout that has a video, gives a spec or an mmsparse::Error.

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "mmsparse/layout.h"
#include "mmsparse/patterns.h"
#include "mmsparse/status.h"

namespace {

// A small layout with a video, so that layout-dependent defaults (token_per_frame) are exercised.
const mmsparse::ModalityLayout& video_layout() {
  static const mmsparse::ModalityLayout layout = mmsparse::ModalityLayout::from_json(
      R"({"segments": [{"type": "text", "length": 8},
                       {"type": "video", "grid": [2, 2, 3], "frame_separator": 1},
                       {"type": "text", "length": 4}]})");
  return layout;
}

void resolve(const mmsparse::PatternSpec& spec, const mmsparse::ModalityLayout* layout) {
  try {
    const mmsparse::PatternSpec resolved = mmsparse::resolve_pattern(spec, layout);
    if (resolved.name != spec.name) std::abort();  // resolving keeps the pattern
  } catch (const mmsparse::Error&) {
    // unknown pattern or parameter: rejected cleanly
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // data: `size` bytes of arbitrary text.
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  mmsparse::PatternSpec spec;
  try {
    spec = mmsparse::PatternSpec::parse(text);
  } catch (const mmsparse::Error&) {
    return 0;  // rejected cleanly
  }
  const mmsparse::PatternSpec again = mmsparse::PatternSpec::parse(spec.to_string());
  if (again.name != spec.name || again.params != spec.params || again.lists != spec.lists) {
    std::abort();
  }
  resolve(spec, nullptr);
  resolve(spec, &video_layout());
  return 0;
}
