#pragma once
// `mmsparse bench`: a synthetic workload through dense attention and sparse patterns, reported
// side by side (density, recall, output error, time, speedup vs dense).

#include "cli_common.h"

namespace mmsparse::cli {

Command add_bench_command(CLI::App& app);

}  // namespace mmsparse::cli
