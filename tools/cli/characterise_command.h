#pragma once
// `mmsparse characterise`: BlindSight's characterisation (Alg. 1) and aggregation (Alg. 2) over
// prompts (safetensors dumps or a SYNTHETIC preset) -> per-model pattern config, with the FLOPs it
// saves (Table 8) and, on a preset, the confusion table against the planted types.

#include "cli_common.h"

namespace mmsparse::cli {

Command add_characterise_command(CLI::App& app);

}  // namespace mmsparse::cli
