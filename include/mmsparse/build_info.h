#pragma once
// What this build of mmsparse contains and which devices it can see.

#include <string>
#include <vector>

namespace mmsparse {

struct GpuInfo {
  int index = 0;
  std::string name;
  int compute_major = 0;
  int compute_minor = 0;
  int multiprocessors = 0;
  double memory_gib = 0.0;
};

struct BuildInfo {
  std::string version;
  std::string compiler;
  bool cuda_enabled = false;      // CUDA code was compiled in
  std::string cuda_version;       // toolkit version it was compiled with
  std::vector<std::string> backends;  // attention backends: "cpu-reference" (+ "cuda-sm90a")
};

BuildInfo build_info();
// GPUs visible at run time (empty without CUDA or without a device). Never throws.
std::vector<GpuInfo> visible_gpus();

}  // namespace mmsparse
