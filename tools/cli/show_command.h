#pragma once
// `mmsparse show`: PNG pictures of heads' attention maps beside a pattern's mask, as in MMInference's
// Fig. 3, from a synthetic workload or from q, k in a safetensors file.

#include "cli_common.h"

namespace mmsparse::cli {

Command add_show_command(CLI::App& app);

}  // namespace mmsparse::cli
