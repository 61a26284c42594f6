#pragma once
// `mmsparse run`: attention with a chosen pattern or config on tensors from a safetensors file.
// `mmsparse generate`: writes a synthetic workload as such a file.

#include "cli_common.h"

namespace mmsparse::cli {

Command add_run_command(CLI::App& app);
Command add_generate_command(CLI::App& app);

}  // namespace mmsparse::cli
