#pragma once
// `mmsparse info` (build, backends, GPUs), `mmsparse presets` and `mmsparse patterns` (listings).

#include "cli_common.h"

namespace mmsparse::cli {

Command add_info_command(CLI::App& app);
Command add_presets_command(CLI::App& app);
Command add_patterns_command(CLI::App& app);

}  // namespace mmsparse::cli
