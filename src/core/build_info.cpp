#include "mmsparse/build_info.h"

#ifdef MMSPARSE_WITH_CUDA
#include "cuda/runtime/device_query.h"
#endif

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
  info.backends.push_back("cpu-reference");
#ifdef MMSPARSE_WITH_CUDA
  info.cuda_enabled = true;
  info.cuda_version = cuda::toolkit_version();
  info.backends.push_back("cuda-sm90a");
#endif
  return info;
}

std::vector<GpuInfo> visible_gpus() {
#ifdef MMSPARSE_WITH_CUDA
  return cuda::list_gpus();
#else
  return {};
#endif
}

}  // namespace mmsparse
