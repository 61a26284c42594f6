#pragma once
// The CPU reference backend (the oracle of every other backend). The backend registry makes it
// itself, so that it is present in every build and link.

#include <memory>

#include "core/backend.h"

namespace mmsparse {

std::unique_ptr<Backend> make_cpu_backend();

}  // namespace mmsparse
