// The names of the synthetic heads' behaviours, as --head-behaviour and the reports spell them.

#include <string>
#include <string_view>

#include "mmsparse/status.h"
#include "mmsparse/tools/workload.h"

namespace mmsparse {

using enum HeadBehaviour;

std::string_view head_behaviour_name(HeadBehaviour behaviour) {
  switch (behaviour) {
    case kLocal: return "local";
    case kGrid: return "grid";
    case kVertical: return "vertical";
    case kDense: return "dense";
  }
  return "unknown";
}

HeadBehaviour head_behaviour_from_name(std::string_view name, const std::string& argument) {
  for (HeadBehaviour behaviour : {kLocal, kGrid, kVertical, kDense}) {
    if (head_behaviour_name(behaviour) == name) return behaviour;
  }
  std::string given = "\"";
  given.append(name).push_back('"');
  throw_invalid_argument(argument, "local, grid, vertical or dense", given);
}

}  // namespace mmsparse
