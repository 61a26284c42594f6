#pragma once
// Preset layouts of the synthetic workloads (internal: workload_presets() is the public list).

#include <cstdint>
#include <string_view>

#include "mmsparse/layout.h"

namespace mmsparse::detail {

// The layout of preset `name` with exactly `seq_len` tokens (0: the preset's own length). Throws
// kInvalidArgument naming `preset` (unknown name; the message lists the known ones) or `seq_len`
// (shorter than the preset's smallest form).
ModalityLayout build_preset_layout(std::string_view name, int64_t seq_len);

}  // namespace mmsparse::detail
