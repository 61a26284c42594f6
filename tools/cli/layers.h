#pragma once
// Several layers in one invocation: `--layers all|0,3,5`, the layers a config names, and the
// per-layer tensors of input files (named as io.h says: layers.<L>.q, .k, .v; docs/report.md).

#include <cstdint>
#include <string>
#include <vector>

#include "mmsparse/patterns.h"
#include "mmsparse/tools/io.h"

namespace mmsparse::cli {

// --layers: "all" or comma-separated layer indices (>= 0, no repeats).
struct LayerSelection {
  bool all = false;
  std::vector<int64_t> layers;  // when not `all`, in the order given
};
LayerSelection parse_layer_selection(const std::string& text);

// Layers a config names (layer defaults and per-head specs), ascending.
std::vector<int64_t> config_layers(const PatternConfig& config);

// The synthetic workload of layer L: the base seed + L, so that layers differ (SYNTHETIC: real
// layers differ in their weights, not in a seed).
uint64_t synthetic_layer_seed(uint64_t base_seed, int64_t layer);

}  // namespace mmsparse::cli
