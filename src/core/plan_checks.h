#pragma once
// Checks and error helpers that plan validation (plan_validation.cpp) shares with the plan's
// accessors, the builder and the coverage functions (plan.cpp), so that every plan error reads the
// same way. Ranges in messages are layout_internal.h's range_string, as in the layout's errors.

#include <cstdint>
#include <string>

#include "core/layout_internal.h"
#include "mmsparse/plan.h"

namespace mmsparse::detail {

// Throws kInvalidArgument "plan.<field>: <message>".
[[noreturn]] void fail(const std::string& field, const std::string& message);

// The shape's fields in range (positive sizes, lengths that fit the int32 records).
void check_shape(const PlanShape& shape);

// head_slot inside [0, head_slots()) and a head_run_offsets array of the right size to index.
void check_head_slot(const Plan& plan, int64_t head_slot);

}  // namespace mmsparse::detail
