#!/usr/bin/env bash
# The methods benchmark (bench/methods.py, docs/methods-bench.md) on the lent GPU machine, in one
# call: the peer packages carried in .whl/ installed into /tmp/site (no registry there), MInference
# built from its sdist against the machine's torch and nvcc, the mmsparse CLI (build-gpu, built
# when missing, as scripts/device-bench.sh builds it), then the sweep. Results (methods.json, one
# PNG per input, the log) are packed into $OUT/methods.tar.gz (one file: a call returns at most 8),
# and the README table is printed.
#
#   scripts/device-methods.sh [--no-minference-cuda] [--flashinfer] [--search] [-- methods.py args]
#
#   --no-minference-cuda  install MInference without its CUDA extension (no nvcc build, an
#                         estimated 1-2 minutes on 16 cores saved): XAttention and FlexPrefill run,
#                         vertical-slash is skipped
#   --flashinfer          also FlashInfer on XAttention's blocks (its first use JIT-compiles
#                         kernels with nvcc: minutes)
#   --search              also `mmsparse search` at 32K (0.90/0.95/0.98 targets, on seed 1): about
#                         a minute per target and preset
#
# Default sweep (SYNTHETIC): video-qwen2.5vl-128k at 131072 tokens first (the issue's headline
# input, with the config searched earlier for it, docs/results/e2e-128k-target095-*-config.json),
# then video-qwen2.5vl-128k, multi-image and mixed-interleaved at 32768; 2 rounds, 1 warm-up +
# median of 3. No input starts after METHODS_BUDGET_S seconds (default 240) and methods.py is
# stopped at METHODS_TIMEOUT_S (default 480); results are written after every input, so what ran
# comes back either way.
set -uo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${MMSPARSE_GPU_BUILD_DIR:-$repo/build-gpu}
out=${OUT:-$build/methods-logs}
work=/tmp/mmsparse-methods
site=/tmp/site
wheels=$repo/.whl
minference_cuda=1
peers=(flex minference)
search_args=(--search-targets)
while [[ $# -gt 0 ]]; do
  case $1 in
    --no-minference-cuda) minference_cuda=0 ;;
    --flashinfer) peers+=(flashinfer) ;;
    --search) search_args=(--search-targets 0.90 0.95 0.98 --search-max-len 32768) ;;
    --) shift; break ;;
    *) echo "device-methods: unknown argument $1 (see the header)" >&2; exit 2 ;;
  esac
  shift
done
mkdir -p "$out" "$work" "$site"

# The mmsparse CLI, as scripts/device-bench.sh builds it (its Debian packages from .deps/).
cli=$build/tools/cli/mmsparse
if [[ ! -x $cli ]]; then
  prefix_args=()
  if compgen -G "$repo/.deps/*.deb" >/dev/null; then
    deps=/tmp/mmsparse-deps
    for package in "$repo"/.deps/*.deb; do dpkg -x "$package" "$deps"; done
    prefix_args=(-DCMAKE_PREFIX_PATH="$deps/usr")
    export LD_LIBRARY_PATH="$deps/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  fi
  cmake -S "$repo" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DMMSPARSE_CUDA=ON \
    "${prefix_args[@]}" >"$work/configure.log" 2>&1 &&
    cmake --build "$build" -j "$(nproc)" --target mmsparse_cli >"$work/build.log" 2>&1 ||
    { echo "device-methods: CLI build failed"; tail -n 30 "$work/build.log"; exit 1; }
fi

install_quietly() {  # pip from the carried files only, into /tmp/site
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target "$site" "$@"
}

# MInference: an sdist whose setup.py compiles one CUDA extension (the vertical-slash index
# conversion) with torch's cpp_extension. FORCE_BUILD stops it from fetching a prebuilt wheel from
# GitHub (unreachable there); one architecture keeps nvcc short. setup.py imports
# wheel.bdist_wheel, which newer `wheel` releases dropped: then a shim package provides that module
# (setuptools' command) and extends its __path__ to the real `wheel` for everything else.
sdist=$(compgen -G "$wheels/minference-*.tar.gz" | head -n 1)
if [[ -n $sdist ]]; then
  shim=()
  if ! python3 -c 'import wheel.bdist_wheel' 2>/dev/null; then
    mkdir -p /tmp/wheel-shim/wheel
    printf 'from pkgutil import extend_path\n__path__ = extend_path(__path__, __name__)\n' \
      >/tmp/wheel-shim/wheel/__init__.py
    echo 'from setuptools.command.bdist_wheel import bdist_wheel' \
      >/tmp/wheel-shim/wheel/bdist_wheel.py
    shim=(env PYTHONPATH=/tmp/wheel-shim)
  fi
  start=$SECONDS
  built=0
  if [[ $minference_cuda -eq 1 ]]; then
    MINFERENCE_FORCE_BUILD=TRUE TORCH_CUDA_ARCH_LIST=9.0 MAX_JOBS=$(nproc) timeout 600 \
      "${shim[@]}" python3 -m pip install -q --no-index --no-deps --no-build-isolation \
      --no-cache-dir --target "$site" "$sdist" >"$work/minference-build.log" 2>&1 && built=1
    echo "minference: CUDA extension build $([[ $built -eq 1 ]] && echo ok || echo FAILED)" \
      "in $((SECONDS - start)) s (log in methods.tar.gz: minference-build.log)"
  fi
  if [[ $built -eq 0 ]]; then
    MINFERENCE_SKIP_CUDA_BUILD=TRUE "${shim[@]}" python3 -m pip install -q --no-index --no-deps \
      --no-build-isolation --no-cache-dir --target "$site" "$sdist" \
      >>"$work/minference-build.log" 2>&1 ||
      echo "minference: install failed (its peers will be reported as not installed)"
  fi
else
  echo "minference: no sdist in $wheels (its peers will be reported as not installed)"
fi
if [[ " ${peers[*]} " == *" flashinfer "* ]]; then
  mapfile -t flashinfer_wheels < <(compgen -G "$wheels/flashinfer_python-*.whl"
    compgen -G "$wheels/apache_tvm_ffi-*.whl")
  if [[ ${#flashinfer_wheels[@]} -gt 0 ]]; then
    install_quietly "${flashinfer_wheels[@]}" || echo "flashinfer: install failed"
  fi
  export FLASHINFER_CUDA_ARCH_LIST=9.0a
fi

export PYTHONPATH=$site${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
configs=()
config=$repo/docs/results/e2e-128k-target095-h100-2026-11-22-config.json
[[ -f $config ]] && configs+=(--config-file "video-qwen2.5vl-128k:131072=$config")

start=$SECONDS
status=0
timeout "${METHODS_TIMEOUT_S:-480}" python3 "$repo/bench/methods.py" --mmsparse "$cli" \
  --out "$work" --presets video-qwen2.5vl-128k --seq-lens 131072 \
  --extra video-qwen2.5vl-128k:32768 --extra multi-image:32768 --extra mixed-interleaved:32768 \
  --peers "${peers[@]}" --rounds 2 --warmup 1 --repeats 3 --budget-s "${METHODS_BUDGET_S:-240}" \
  --mmsparse-patterns a-shape:sink=128,local=4096 vertical-slash:vertical=500,slash=2000 \
  vertical-slash:vertical=1000,slash=6096 vec:alpha_ppm=30000 vec:alpha_ppm=100000 grid \
  "${search_args[@]}" "${configs[@]}" "$@" 2>&1 |
  tee "$work/methods.log" || status=1
echo "methods.py: $((SECONDS - start)) s"
tar -czf "$out/methods.tar.gz" -C "$work" --exclude='*.safetensors' . || status=1
exit $status
