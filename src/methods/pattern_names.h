#pragma once
// The names build_plan knows, for the checks and messages of the spec and config parsers.

#include <string>
#include <string_view>

namespace mmsparse {

bool is_known_pattern(std::string_view name);
std::string known_pattern_names();  // "dense, a-shape, ..., vertical-slash, grid"

}  // namespace mmsparse
