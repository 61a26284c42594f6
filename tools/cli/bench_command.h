#pragma once
// `mmsparse bench`: a synthetic workload through dense attention and sparse patterns, reported
// side by side (density, recall, output error, needles, index and attention time, speedup vs
// dense), per head with --per-head and per layer with --layers (docs/report.md).

#include "cli_common.h"

namespace mmsparse::cli {

Command add_bench_command(CLI::App& app);

}  // namespace mmsparse::cli
