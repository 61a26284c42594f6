#pragma once
// `mmsparse curve`: recall against density of pattern families (vec alphas, vertical-slash counts,
// A-shape windows) beside the token and tile oracles, for a synthetic workload or a file, written
// as JSON and a PNG.

#include "cli_common.h"

namespace mmsparse::cli {

Command add_curve_command(CLI::App& app);

}  // namespace mmsparse::cli
