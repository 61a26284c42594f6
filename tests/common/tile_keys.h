#pragma once
// Every key a plan's tile lists, expanded from its fields alone (spans, strided spans, columns), in
// plan order: the tests' own definition of a tile's keys, independent of the library's coverage
// helpers.

#include <cstdint>
#include <vector>

#include "mmsparse/plan.h"

namespace mmsparse::testing {

inline std::vector<int64_t> listed_tile_keys(const Plan& plan, int64_t t) {
  std::vector<int64_t> keys;
  for (int64_t s = plan.tile_span_offsets[t]; s < plan.tile_span_offsets[t + 1]; ++s) {
    for (int64_t key = plan.spans[s].begin; key < plan.spans[s].end; ++key) keys.push_back(key);
  }
  for (int64_t s = plan.tile_strided_offsets[t]; s < plan.tile_strided_offsets[t + 1]; ++s) {
    const StridedSpan& lattice = plan.strided_spans[s];
    for (int64_t key = lattice.begin; key < lattice.end; key += lattice.step) keys.push_back(key);
  }
  for (int64_t c = plan.tile_column_offsets[t]; c < plan.tile_column_offsets[t + 1]; ++c) {
    keys.push_back(plan.columns[c]);
  }
  return keys;
}

}  // namespace mmsparse::testing
