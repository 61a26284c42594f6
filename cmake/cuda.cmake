# The CUDA engine targets Hopper only (sm_90a). It is optional: the CPU build never needs CUDA.
set(MMSPARSE_WITH_CUDA OFF)
if(NOT MMSPARSE_CUDA STREQUAL "OFF")
  include(CheckLanguage)
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    set(MMSPARSE_WITH_CUDA ON)
  elseif(MMSPARSE_CUDA STREQUAL "ON")
    message(FATAL_ERROR "MMSPARSE_CUDA=ON but no CUDA compiler was found (set CMAKE_CUDA_COMPILER)")
  endif()
endif()

if(MMSPARSE_WITH_CUDA)
  if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
    set(CMAKE_CUDA_ARCHITECTURES 90a)
  endif()
  enable_language(CUDA)
  # CMake 3.25 predates nvcc 13's C++20 support; tell it the flag.
  set(CMAKE_CUDA20_STANDARD_COMPILE_OPTION "-std=c++20")
  set(CMAKE_CUDA20_EXTENSION_COMPILE_OPTION "-std=c++20")
  set(CMAKE_CUDA_STANDARD 20)
  set(CMAKE_CUDA_STANDARD_REQUIRED ON)
  find_package(CUDAToolkit REQUIRED)
  # Compiled into the mmsparse library itself (see CMakeLists.txt): the engine and the core call
  # each other, which one library links without ordering tricks.
  set(MMSPARSE_CUDA_SOURCES
    src/cuda/device_query.cu
    src/cuda/device_memory.cu
    src/cuda/device_plan.cu
    src/cuda/attention_engine.cu
    src/cuda/attention_bf16.cu
    src/cuda/attention_fp16.cu
    src/cuda/attention_wgmma_bf16.cu
    src/cuda/attention_wgmma_fp16.cu
    src/cuda/attention_wgmma_lattice_bf16.cu
    src/cuda/attention_wgmma_lattice_fp16.cu
    src/cuda/attention_wgmma_lattice_copies_bf16.cu
    src/cuda/attention_wgmma_lattice_copies_fp16.cu
    src/cuda/attention_wgmma_spans_bf16.cu
    src/cuda/attention_wgmma_spans_fp16.cu
    src/cuda/tensor_map.cu
    src/cuda/merge.cu
    src/cuda/attention_passes.cu
    src/cuda/plan_builders.cu
    src/cuda/index_builders.cu
    src/cuda/index_estimate.cu
    src/cuda/index_select.cu
    src/cuda/index_vertical_slash.cu
    src/cuda/index_key_spaces.cu
    src/cuda/index_grid_groups.cu
    src/cuda/index_grid.cu
    src/cuda/config_builder.cu
  )
  message(STATUS "mmsparse: CUDA engine enabled (architectures ${CMAKE_CUDA_ARCHITECTURES})")
else()
  message(STATUS "mmsparse: CUDA engine disabled; CPU reference backend only")
endif()
