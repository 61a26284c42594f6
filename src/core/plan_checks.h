#pragma once
// Checks and error helpers that plan validation (plan_validation.cpp) shares with the plan's
// accessors, the builder and the coverage functions (plan.cpp), so that every plan error reads the
// same way.

#include <cstdint>
#include <string>

#include "mmsparse/plan.h"

namespace mmsparse::detail {

// "[begin, end)" for error messages.
std::string range_string(int64_t begin, int64_t end);

// Throws kInvalidArgument "plan.<field>: <message>".
[[noreturn]] void fail(const std::string& field, const std::string& message);

// The shape's fields in range (positive sizes, lengths that fit the int32 records).
void check_shape(const PlanShape& shape);

// head_slot inside [0, head_slots()) and a head_run_offsets array of the right size to index.
void check_head_slot(const Plan& plan, int64_t head_slot);

}  // namespace mmsparse::detail
