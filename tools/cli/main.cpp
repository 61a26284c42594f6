// mmsparse: the command-line tool. Subcommands share one flag vocabulary (cli_common.h).

#include <cstdio>
#include <vector>

#include <fmt/core.h>

#include "bench_command.h"
#include "characterise_command.h"
#include "curve_command.h"
#include "info_command.h"
#include "mmsparse/build_info.h"
#include "mmsparse/status.h"
#include "run_command.h"
#include "search_command.h"
#include "show_command.h"
#include "vec_search_command.h"

namespace {

constexpr int kExitUsage = 2;
constexpr int kExitError = 1;

}  // namespace

int main(int argc, char** argv) {
  using namespace mmsparse::cli;
  CLI::App app{"mmsparse: sparse attention for long-context VLM prefill"};
  app.require_subcommand(0, 1);
  app.set_version_flag("--version", mmsparse::build_info().version);
  const std::vector<Command> commands = {
      add_bench_command(app),   add_run_command(app),     add_generate_command(app),
      add_info_command(app),    add_presets_command(app), add_patterns_command(app),
      add_show_command(app),    add_search_command(app),  add_search_vec_command(app),
      add_characterise_command(app),
      add_curve_command(app),
  };
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& error) {
    return app.exit(error);
  }
  if (app.get_subcommands().empty()) {
    // A bare `mmsparse` prints the help and exits as --help does.
    fmt::print("{}", app.help());
    return 0;
  }
  try {
    for (const Command& command : commands) {
      if (command.app->parsed()) return command.run();
    }
  } catch (const mmsparse::Error& error) {
    fmt::print(stderr, "mmsparse: {}: {}\n", mmsparse::error_code_name(error.code()), error.what());
    return kExitError;
  } catch (const std::exception& error) {
    fmt::print(stderr, "mmsparse: internal error: {}\n", error.what());
    return kExitError;
  }
  return kExitUsage;
}
