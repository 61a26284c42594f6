#pragma once
// `mmsparse search`: the offline modality-aware pattern search (MMInference Alg. 4) on a synthetic
// workload or a calibration file, written as a per-model pattern config (docs/search.md).

#include "cli_common.h"

namespace mmsparse::cli {

Command add_search_command(CLI::App& app);

}  // namespace mmsparse::cli
