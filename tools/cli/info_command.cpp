#include "info_command.h"

#include <algorithm>
#include <memory>
#include <string_view>
#include <thread>

#include <fmt/core.h>
#include <nlohmann/json.hpp>

#include "mmsparse/build_info.h"
#include "mmsparse/patterns.h"
#include "mmsparse/tools/workload.h"

namespace mmsparse::cli {
namespace {

// `json_path`: "" for the text report, "-" for JSON on stdout, else the JSON file.
int run_info(const std::string& json_path) {
  const BuildInfo info = build_info();
  const std::vector<GpuInfo> gpus = visible_gpus();
  const unsigned threads = std::thread::hardware_concurrency();
  if (!json_path.empty()) {
    nlohmann::json report = {{"version", info.version},         {"compiler", info.compiler},
                             {"cuda_compiled", info.cuda_enabled}, {"cuda_version", info.cuda_version},
                             {"backends", info.backends},       {"cpu_threads", threads},
                             {"gpus", nlohmann::json::array()}};
    for (const GpuInfo& gpu : gpus) {
      report["gpus"].push_back({{"index", gpu.index},
                                {"name", gpu.name},
                                {"compute_capability", fmt::format("{}.{}", gpu.compute_major,
                                                                   gpu.compute_minor)},
                                {"multiprocessors", gpu.multiprocessors},
                                {"memory_gib", gpu.memory_gib}});
    }
    write_json_output(json_path, report.dump(2));
    return 0;
  }
  fmt::print("mmsparse {}\n", info.version);
  fmt::print("compiler      {}\n", info.compiler);
  fmt::print("CUDA          {}\n",
             info.cuda_enabled ? "compiled with toolkit " + info.cuda_version : "not compiled");
  std::string backends;
  for (const std::string& backend : info.backends) backends += (backends.empty() ? "" : ", ") + backend;
  fmt::print("backends      {}\n", backends);
  fmt::print("CPU threads   {}\n", threads);
  if (gpus.empty()) fmt::print("GPUs          none visible\n");
  for (const GpuInfo& gpu : gpus) {
    fmt::print("GPU {}         {} (sm_{}{}, {} SMs, {:.1f} GiB)\n", gpu.index, gpu.name,
               gpu.compute_major, gpu.compute_minor, gpu.multiprocessors, gpu.memory_gib);
  }
  return 0;
}

int run_presets() {
  fmt::print("{:<26} {:>9}  {}\n", "preset", "tokens", "description (all SYNTHETIC)");
  for (const PresetInfo& preset : workload_presets()) {
    fmt::print("{:<26} {:>9}  {}\n", preset.name, preset.seq_len, preset.description);
  }
  return 0;
}

int run_patterns() {
  // Columns as wide as their longest entry, so that every name and spec stays aligned.
  std::size_t name_width = std::string_view("pattern").size();
  std::size_t spec_width = std::string_view("default spec").size();
  for (const PatternInfo& pattern : known_patterns()) {
    name_width = std::max(name_width, pattern.name.size());
    spec_width = std::max(spec_width, pattern.default_spec.size());
  }
  fmt::print("{:<{}} {:<{}} {}\n", "pattern", name_width, "default spec", spec_width,
             "description");
  for (const PatternInfo& pattern : known_patterns()) {
    fmt::print("{:<{}} {:<{}} {}\n", pattern.name, name_width, pattern.default_spec, spec_width,
               pattern.description);
  }
  return 0;
}

}  // namespace

Command add_info_command(CLI::App& app) {
  auto json_path = std::make_shared<std::string>();
  CLI::App* command = app.add_subcommand("info", "build, backends and visible GPUs");
  // --json alone (the former switch) prints to stdout, as --json - does.
  CLI::Option* json =
      command
          ->add_option("--json", *json_path, "write the report as JSON to a file, or - for stdout")
          ->expected(0, 1);
  return {command, [json_path, json] {
            const std::string path = json->count() > 0 && json_path->empty() ? "-" : *json_path;
            check_output_path(path, "--json");
            return run_info(path);
          }};
}

Command add_presets_command(CLI::App& app) {
  CLI::App* command = app.add_subcommand("presets", "list the synthetic workload presets");
  return {command, [] { return run_presets(); }};
}

Command add_patterns_command(CLI::App& app) {
  CLI::App* command = app.add_subcommand("patterns", "list the patterns and their parameters");
  return {command, [] { return run_patterns(); }};
}

}  // namespace mmsparse::cli
