#pragma once
// Helpers shared by the layout sources: layout.cpp (the ModalityLayout core, validation and
// LayoutBuilder), layout_json.cpp (from_json / to_json) and layout_token_types.cpp
// (from_token_types).

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "mmsparse/layout.h"

namespace mmsparse::detail {

inline constexpr int64_t kNoMarker = -1;
inline constexpr int32_t kNoMedia = -1;

// Strings are built by appending: GCC 12 warns falsely (-Wrestrict) on "[" + std::to_string(x).
std::string indexed(std::string_view name, std::size_t index);

std::string grid_string(const Grid& grid);

std::string range_string(int64_t begin, int64_t end);

// Positive extents, t = 1 for images, and a token count that cannot overflow (grids come from
// files and JSON, so they are untrusted).
void validate_grid(const Grid& grid, Modality modality, const std::string& field);

}  // namespace mmsparse::detail
