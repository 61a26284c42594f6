#pragma once
// The static patterns' registry entries (static_patterns.cpp, grid_mask.cpp). The shape and the
// parameters alone decide their plans; dense to sf-strided also build on the device
// (static_device.cu), grid-mask on the host only.

#include <array>
#include <cstdint>

#include "methods/registry.h"

namespace mmsparse::detail {

// The static patterns of one pass, in the order known_patterns() lists them.
enum class StaticPattern : int32_t { kDense, kAShape, kTriShape, kSfFixed, kSfStrided };
inline constexpr std::array<StaticPattern, 5> kStaticPatterns = {
    StaticPattern::kDense, StaticPattern::kAShape, StaticPattern::kTriShape,
    StaticPattern::kSfFixed, StaticPattern::kSfStrided};

PatternEntry& static_pattern_entry(StaticPattern pattern);
PatternEntry& grid_mask_entry();
// Non-causal dense ("full"), the reference of non-causal workloads; built on the host only.
PatternEntry& full_attention_entry();

}  // namespace mmsparse::detail
