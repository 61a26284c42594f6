#pragma once
// `mmsparse search-vec`: VecAttention's per-head alpha search (paper §3.1, Eq. 4; docs/vec.md) on
// a synthetic workload or a calibration file, written as a per-model pattern config, optionally
// into an existing config (MMInference heads and vec heads in one config).

#include "cli_common.h"

namespace mmsparse::cli {

Command add_search_vec_command(CLI::App& app);

}  // namespace mmsparse::cli
