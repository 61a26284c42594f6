#include "mmsparse/build_info.h"

#include "core/backend.h"

namespace mmsparse {

BuildInfo build_info() {
  BuildInfo info;
  info.version = MMSPARSE_VERSION;
#if defined(__clang__)
  info.compiler = "clang " __clang_version__;
#elif defined(__GNUC__)
  info.compiler = "gcc " __VERSION__;
#else
  info.compiler = "unknown";
#endif
  for (const Backend* backend : registered_backends()) {
    info.backends.push_back(backend->name());
    backend->describe(info);
  }
  return info;
}

std::vector<GpuInfo> visible_gpus() {
  std::vector<GpuInfo> gpus;
  for (const Backend* backend : registered_backends()) {
    const std::vector<GpuInfo> found = backend->visible_gpus();
    gpus.insert(gpus.end(), found.begin(), found.end());
  }
  return gpus;
}

}  // namespace mmsparse
