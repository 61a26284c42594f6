// Fuzzes ModalityLayout::from_json (the layout JSON of files' metadata and the CLI's --layout):
// any text is either a layout or an mmsparse::Error; a layout read back from its own to_json is
// the same layout.

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "mmsparse/layout.h"
#include "mmsparse/status.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // data: `size` bytes of arbitrary text.
  const std::string text(reinterpret_cast<const char*>(data), size);
  mmsparse::ModalityLayout layout;
  try {
    layout = mmsparse::ModalityLayout::from_json(text);
  } catch (const mmsparse::Error&) {
    return 0;  // rejected cleanly
  }
  const mmsparse::ModalityLayout again = mmsparse::ModalityLayout::from_json(layout.to_json());
  if (again.segments() != layout.segments() || again.media() != layout.media() ||
      again.length() != layout.length()) {
    std::abort();  // to_json and from_json disagree
  }
  return 0;
}
