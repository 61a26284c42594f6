# MMSPARSE_BUILD_FUZZERS: every target of the build carries ASan, UBSan and libFuzzer's coverage
# instrumentation, so that a finding inside the engine or the tools shows where it happens.
# UBSan findings abort (no recovery), so libFuzzer keeps the input that caused them.
if(NOT CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
  message(FATAL_ERROR "MMSPARSE_BUILD_FUZZERS needs clang (libFuzzer), got "
                      "${CMAKE_CXX_COMPILER_ID}: configure with -DCMAKE_CXX_COMPILER=clang++ in a "
                      "build directory of its own (scripts/fuzz.sh does)")
endif()
if(MMSPARSE_WITH_CUDA)
  message(FATAL_ERROR "MMSPARSE_BUILD_FUZZERS fuzzes the host parsers: configure with "
                      "-DMMSPARSE_CUDA=OFF")
endif()
set(MMSPARSE_SANITIZERS address,undefined)
add_compile_options(-fsanitize=${MMSPARSE_SANITIZERS},fuzzer-no-link
                    -fno-sanitize-recover=undefined -fno-omit-frame-pointer)
add_link_options(-fsanitize=${MMSPARSE_SANITIZERS})
# The half-precision conversions of src/core/tensor.cpp (clang's __fp16) call compiler-rt's
# builtins (__gnu_f2h_ieee), which libgcc lacks.
add_link_options(--rtlib=compiler-rt)
