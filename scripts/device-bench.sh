#!/usr/bin/env bash
# Everything the lent GPU machine is for, in one call: build (Release, CUDA on, CLI included), the
# GPU tests and compute-sanitizer (scripts/gpu-check.sh), the engine benchmark (both kernels side by
# side), the index-building benchmark, `mmsparse bench` on the default workload, and the peer benchmark (bench/peers.py). Logs and results go to $OUT (else build-gpu/device-logs).
#
# The device image has CMake, Ninja, nvcc, GoogleTest and PyTorch but none of the Debian packages the
# CLI needs; carry them as .deb files in .deps/ (apt-get download nlohmann-json3-dev libcli11-dev
# libfmt-dev libfmt9 libgtest-dev libgmock-dev googletest libstb-dev libstb0) and they are unpacked into a private
# prefix here.
#
#   scripts/device-bench.sh [--skip-build] [--skip-tests] [--skip-bench] [--skip-peers]
set -uo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=$repo/build-gpu
logs=${OUT:-$build/device-logs}
mkdir -p "$logs"
skip_build=0
skip_tests=0
skip_bench=0
skip_peers=0
for argument in "$@"; do
  case $argument in
    --skip-build) skip_build=1 ;;
    --skip-tests) skip_tests=1 ;;
    --skip-bench) skip_bench=1 ;;
    --skip-peers) skip_peers=1 ;;
    *) echo "device-bench: unknown argument $argument" >&2; exit 2 ;;
  esac
done

# shellcheck source=carried-deps.sh
source "$repo/scripts/carried-deps.sh"

status=0
if [[ $skip_build -eq 0 ]]; then
  cmake -S "$repo" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DMMSPARSE_CUDA=ON \
    "${prefix_args[@]}" >"$logs/configure.log" 2>&1 || { echo "configure failed"; tail -n 30 "$logs/configure.log"; exit 1; }
  cmake --build "$build" -j "$(nproc)" >"$logs/build.log" 2>&1 || { echo "build failed"; grep -m 20 -A 5 error "$logs/build.log"; exit 1; }
fi

if [[ $skip_tests -eq 0 ]]; then
  MMSPARSE_GPU_SKIP_BUILD=1 MMSPARSE_GPU_BUILD_DIR="$build" OUT="$logs" "$repo/scripts/gpu-check.sh" || status=1
fi

"$build/tools/cli/mmsparse" info | tee "$logs/info.txt"
if [[ $skip_bench -eq 0 ]]; then
  "$build/bench/mmsparse_engine_bench" 2>&1 | tee "$logs/engine_bench.txt" || status=1
  "$build/bench/mmsparse_index_bench" 2>&1 | tee "$logs/index_bench.txt" || status=1
  "$build/tools/cli/mmsparse" bench --device cuda --json "$logs/bench.json" 2>&1 | tee "$logs/bench.txt" || status=1
fi
if [[ $skip_peers -eq 0 ]]; then
  PYTHONUNBUFFERED=1 python3 "$repo/bench/peers.py" --mmsparse "$build/tools/cli/mmsparse" \
    --out "$logs/peers.json" 2>&1 | tee "$logs/peers.txt" || status=1
fi
exit "$status"
