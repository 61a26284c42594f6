#!/usr/bin/env bash
# Installs a build of mmsparse into a temporary prefix, then configures, builds and runs the
# consumer project tests/package against it through find_package(mmsparse). The consumer asks for
# no CUDA component and CMake is kept from finding the CUDA toolkit, so this checks that a CPU-only
# consumer of a CUDA-built install needs no toolkit. For a CUDA-built install it then builds the
# consumer again with COMPONENTS cuda and checks that the CUDA backend registered itself.
# Usage: scripts/check-package.sh [build directory, default: build]
set -euo pipefail
cd "$(dirname "$0")/.."

build_dir=${1:-build}
work_dir=$(mktemp -d)
trap 'rm -rf "$work_dir"' EXIT
prefix=$work_dir/prefix

# Configures and builds the consumer in $1 with the extra CMake arguments that follow; prints
# what it prints when run.
consume() {
  local binary_dir=$1
  shift
  cmake -S tests/package -B "$binary_dir" -G Ninja -DCMAKE_PREFIX_PATH="$prefix" \
    --no-warn-unused-cli "$@" > /dev/null
  cmake --build "$binary_dir" > /dev/null
  "$binary_dir/consumer"
}

cmake --install "$build_dir" --prefix "$prefix" > /dev/null
consume "$work_dir/cpu" -DCMAKE_DISABLE_FIND_PACKAGE_CUDAToolkit=ON
if [[ -n "$(find "$prefix" -name mmsparseCudaTargets.cmake)" ]]; then
  output=$(consume "$work_dir/cuda" -DMMSPARSE_CONSUMER_CUDA=ON)
  echo "$output"
  if [[ "$output" != *cuda-* ]]; then
    echo "check-package: mmsparse::cuda linked, but no CUDA backend registered itself" >&2
    exit 1
  fi
fi
echo "check-package: the installed package works from $build_dir"
