// Fuzzes PatternConfig::from_json (the CLI's --config files): any text is either a config or an
// mmsparse::Error; a config survives to_json and from_json; layer_specs of every configured layer
// gives specs or an mmsparse::Error.

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "mmsparse/patterns.h"
#include "mmsparse/status.h"

namespace {

// Query heads asked of layer_specs: a few, so that larger head indices are rejected.
constexpr int64_t kHeads = 4;

bool same_config(const mmsparse::PatternConfig& a, const mmsparse::PatternConfig& b) {
  const auto same_spec = [](const mmsparse::PatternSpec& x, const mmsparse::PatternSpec& y) {
    return x == y;
  };
  if (!same_spec(a.default_spec, b.default_spec) || a.search != b.search ||
      a.layer_defaults.size() != b.layer_defaults.size() ||
      a.head_specs.size() != b.head_specs.size() || a.head_scores.size() != b.head_scores.size()) {
    return false;
  }
  for (const auto& [layer, spec] : a.layer_defaults) {
    const auto found = b.layer_defaults.find(layer);
    if (found == b.layer_defaults.end() || !same_spec(spec, found->second)) return false;
  }
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // data: `size` bytes of arbitrary text.
  const std::string text(reinterpret_cast<const char*>(data), size);
  mmsparse::PatternConfig config;
  try {
    config = mmsparse::PatternConfig::from_json(text);
  } catch (const mmsparse::Error&) {
    return 0;  // rejected cleanly
  }
  if (!same_config(config, mmsparse::PatternConfig::from_json(config.to_json()))) std::abort();
  for (const auto& [layer, heads] : config.head_specs) {
    try {
      config.layer_specs(layer, kHeads);
    } catch (const mmsparse::Error&) {
      // a head index >= kHeads: rejected cleanly
    }
  }
  return 0;
}
