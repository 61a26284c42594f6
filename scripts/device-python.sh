#!/usr/bin/env bash
# The Python package on the lent GPU machine, in one call: the extension built with the CUDA engine
# into python/mmsparse (no pip: the machine reaches no registry; its torch, transformers,
# safetensors, pytest and nanobind are used), every Python test (the gpu-marked ones run there),
# and the TTFT benchmark of a SYNTHETIC Qwen2.5-VL-7B-shaped text backbone at 64K and 128K tokens.
# Logs and results go to $OUT (else build-gpu/device-logs).
#
# The build directory is scripts/device-bench.sh's (build-gpu), so that after it only the extension
# is left to build; the Debian packages the CLI needs come from .deps/ as there.
#
#   scripts/device-python.sh [--skip-bench] [TTFT bench arguments...]
set -uo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${MMSPARSE_GPU_BUILD_DIR:-$repo/build-gpu}
logs=${OUT:-$build/device-logs}
mkdir -p "$logs"
skip_bench=0
if [[ ${1:-} == --skip-bench ]]; then
  skip_bench=1
  shift
fi

# shellcheck source=carried-deps.sh
source "$repo/scripts/carried-deps.sh"

cmake -S "$repo" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DMMSPARSE_CUDA=ON \
  -DMMSPARSE_BUILD_PYTHON=ON -DPython_EXECUTABLE="$(command -v python3)" "${prefix_args[@]}" \
  >"$logs/python-configure.log" 2>&1 ||
  { echo "configure failed"; tail -n 30 "$logs/python-configure.log"; exit 1; }
cmake --build "$build" -j "$(nproc)" --target mmsparse_python >"$logs/python-build.log" 2>&1 ||
  { echo "build failed"; grep -m 20 -A 5 error "$logs/python-build.log"; exit 1; }

export PYTHONPATH=$repo/python${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
status=0
python3 -c 'import mmsparse, torch; print(mmsparse.build_info(), torch.__version__,
            torch.cuda.get_device_name())' | tee "$logs/python-info.txt"
(cd "$repo" && python3 -m pytest python/tests -p no:cacheprovider -q -rs \
  --junitxml="$logs/pytest.xml") 2>&1 | tee "$logs/pytest.txt" || status=1
if [[ $skip_bench -eq 0 ]]; then
  python3 "$repo/examples/ttft_bench.py" --json "$logs/ttft.json" "$@" 2>&1 |
    tee "$logs/ttft.txt" || status=1
fi
exit $status
