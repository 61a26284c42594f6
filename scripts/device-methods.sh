#!/usr/bin/env bash
# The methods benchmark (bench/methods.py, docs/methods-bench.md) on the lent GPU machine, in one
# bounded call: peer packages from .whl/ (no registry there), MInference's CUDA extension compiled
# in the background while the benchmark starts, mmsparse through its Python package (build-gpu's
# extension in python/mmsparse; built here when missing), then the sweep under `timeout`. Every
# point is in methods.json the moment it is measured, so a cut run still reports; the pictures and
# tables are drawn from that file afterwards whatever happened. Results in $OUT:
#   methods.json   every point, the inputs' set-up times, what was skipped or failed and why
#   methods.md     the README table (methods x inputs at recall 0.95) and the per-input tables
#   methods.tar.gz the above, one PNG per input, the run's log and the MInference build log
#
#   scripts/device-methods.sh [--no-minference-cuda] [--flashinfer] [--no-search] [-- ARGS]
#
#   ARGS go to methods.py (e.g. -- --rounds 3)
#
#   --no-minference-cuda  no nvcc build: XAttention and FlexPrefill run, vertical-slash does not
#   --flashinfer          also FlashInfer on XAttention's blocks and on mmsparse's own plans (the
#                         input's configs, the vertical-slash specs; bench/methods_flashinfer.py).
#                         Its JIT compiles kernels with nvcc on first use (a minute or more, outside
#                         the method budget) and each plan's block map takes seconds on the host:
#                         raise METHODS_TIMEOUT_S and METHODS_BUDGET_S by about 120 s
#   --no-search           no `mmsparse search` configs at 32K (they come last anyway)
#
# Time: METHODS_TIMEOUT_S (default 300) bounds methods.py; no entry starts after METHODS_BUDGET_S
# (default 270). Installing and drawing add about 20 s: about 5.5 minutes in all on one H100 with
# build-gpu built (CUDA, Release, Python on). Inputs (SYNTHETIC), in order of value:
# video-qwen2.5vl-128k at 32768 then 131072 (with configs/video-qwen2.5vl-128k-131072.json, the
# shipped config, on the latter), then mixed-interleaved and multi-image at 32768; each input gets
# a share of the time left, each method at most METHODS_METHOD_BUDGET_S (25) per input, each point
# METHODS_POINT_BUDGET_S (6) of timed runs.
set -uo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${MMSPARSE_GPU_BUILD_DIR:-$repo/build-gpu}
out=${OUT:-$build/methods-logs}
# METHODS_WORK and METHODS_SITE give each of several concurrent runs (one per GPU) folders of its
# own: the work folder is emptied at the start.
work=${METHODS_WORK:-/tmp/mmsparse-methods}
# Kept in the build folder, which a warm machine keeps between calls: a second call reuses the
# MInference build.
site=${METHODS_SITE:-$build/methods-site}
wheels=$repo/.whl
minference_cuda=1
peers=(flex minference)
search_args=(--search-targets 0.90 0.95 0.98 --search-max-len 32768)
while [[ $# -gt 0 ]]; do
  case $1 in
    --no-minference-cuda) minference_cuda=0 ;;
    --flashinfer) peers+=(flashinfer) ;;
    --no-search) search_args=(--search-targets) ;;
    --) shift; break ;;
    *) echo "device-methods: unknown argument $1 (see the header)" >&2; exit 2 ;;
  esac
  shift
done
rm -rf "$work"
mkdir -p "$out" "$work" "$site"
stamp() { echo "[$(date -u +%H:%M:%S) +$SECONDS s] $*"; }

# The mmsparse CLI and Python extension, as scripts/device-python.sh builds them (its Debian
# packages from .deps/), only when missing.
cli=$build/tools/cli/mmsparse
if [[ ! -x $cli ]] || ! compgen -G "$repo/python/mmsparse/_core*.so" >/dev/null; then
  stamp "building the mmsparse CLI and Python extension (build-gpu lacks them)"
  # shellcheck source=carried-deps.sh
  source "$repo/scripts/carried-deps.sh"
  cmake -S "$repo" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DMMSPARSE_CUDA=ON \
    -DMMSPARSE_BUILD_PYTHON=ON -DPython_EXECUTABLE="$(command -v python3)" "${prefix_args[@]}" \
    >"$work/configure.log" 2>&1 &&
    cmake --build "$build" -j "$(nproc)" --target mmsparse_cli mmsparse_python \
      >"$work/build.log" 2>&1 ||
    { echo "device-methods: build failed"; tail -n 30 "$work/build.log"; exit 1; }
fi

# MInference: an sdist. Its Python modules (XAttention, FlexPrefill, the Triton kernels) are
# installed at once without compiling; its one CUDA extension (the vertical-slash index
# conversion) is compiled in the background into a staging folder and its .so files moved into
# place when done (a rename: the benchmark, whose MInference peers wait for the build, never sees
# half a file). FORCE_BUILD stops setup.py fetching a prebuilt wheel (no network there). setup.py imports
# wheel.bdist_wheel, which newer `wheel` releases dropped: a shim then provides it.
sdist=$(compgen -G "$wheels/minference-*.tar.gz" | head -n 1)
build_pid=
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
  pip_sdist=(python3 -m pip install -q --no-index --no-deps --no-build-isolation --no-cache-dir
             --upgrade)
  if [[ ! -d $site/minference ]]; then
    MINFERENCE_SKIP_CUDA_BUILD=TRUE "${shim[@]}" "${pip_sdist[@]}" --target "$site" "$sdist" \
      >"$work/minference-install.log" 2>&1 ||
      echo "minference: install failed (its peers will be reported as not installed)"
  fi
  if [[ $minference_cuda -eq 1 ]] && ! compgen -G "$site/minference/*.so" >/dev/null; then
    export METHODS_BUILDING_MARKER=$work/minference-building
    touch "$METHODS_BUILDING_MARKER"
    (
      staging=$work/minference-staging
      start=$SECONDS
      # Bounded, so that it never outlives this call.
      if MINFERENCE_FORCE_BUILD=TRUE TORCH_CUDA_ARCH_LIST=9.0 MAX_JOBS=4 timeout 280 \
        "${shim[@]}" "${pip_sdist[@]}" --target "$staging" "$sdist"; then
        (cd "$staging" && find minference -name '*.so') | while read -r library; do
          mkdir -p "$(dirname "$site/$library")"
          cp "$staging/$library" "$site/$library.part" && mv "$site/$library.part" "$site/$library"
        done
        echo "minference: CUDA extension built in $((SECONDS - start)) s"
      else
        echo "minference: CUDA extension build FAILED after $((SECONDS - start)) s"
      fi
      rm -f "$METHODS_BUILDING_MARKER"
    ) >"$work/minference-build.log" 2>&1 &
    build_pid=$!
    stamp "minference: CUDA extension compiling in the background (pid $build_pid)"
  fi
else
  echo "minference: no sdist in $wheels (its peers will be reported as not installed)"
fi
if [[ " ${peers[*]} " == *" flashinfer "* ]]; then
  mapfile -t flashinfer_wheels < <(compgen -G "$wheels/flashinfer_python-*.whl"
    compgen -G "$wheels/apache_tvm_ffi-*.whl")
  if [[ ${#flashinfer_wheels[@]} -gt 0 ]]; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
      --target "$site" "${flashinfer_wheels[@]}" || echo "flashinfer: install failed"
  fi
  export FLASHINFER_CUDA_ARCH_LIST=9.0a
fi

# The inputs, in order of value (METHODS_INPUTS replaces them: methods.py's input flags).
read -r -a inputs <<<"${METHODS_INPUTS:---presets video-qwen2.5vl-128k --seq-lens 32768 131072 \
--extra mixed-interleaved:32768 --extra multi-image:32768}"

export PYTHONPATH=$repo/python:$site${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
stamp "methods.py starts (timeout ${METHODS_TIMEOUT_S:-300} s, budget ${METHODS_BUDGET_S:-270} s)"
status=0
timeout "${METHODS_TIMEOUT_S:-300}" python3 "$repo/bench/methods.py" --mmsparse "$cli" \
  --out "$work" --mmsparse-api python "${inputs[@]}" --peers "${peers[@]}" \
  --rounds 2 --warmup 1 --repeats 3 --budget-s "${METHODS_BUDGET_S:-270}" \
  --method-budget-s "${METHODS_METHOD_BUDGET_S:-25}" \
  --point-budget-s "${METHODS_POINT_BUDGET_S:-6}" --search-timeout-s 45 \
  "${search_args[@]}" --no-plots "$@" >"$work/methods.log" 2>&1 || status=$?
grep '^\[' "$work/methods.log" | tail -n 80  # the progress lines: what ran when
case $status in
  0) ;;
  124) stamp "methods.py stopped by its timeout: methods.json holds every point measured" ;;
  *) echo "methods.py failed (exit $status):"; tail -n 20 "$work/methods.log" ;;
esac
if [[ -n $build_pid ]]; then
  wait "$build_pid"
  tail -n 3 "$work/minference-build.log"
fi

# Tables and pictures from whatever methods.json holds.
if [[ -f $work/methods.json ]]; then
  { python3 "$repo/bench/methods_report.py" table "$work/methods.json" --summary
    echo
    python3 "$repo/bench/methods_report.py" table "$work/methods.json"
  } >"$work/methods.md" 2>&1
  python3 "$repo/bench/methods_report.py" plot "$work/methods.json" "$work" >/dev/null 2>&1 ||
    echo "pictures not drawn (matplotlib?)"
  cat "$work/methods.md"
  cp "$work/methods.json" "$work/methods.md" "$out/"
else
  echo "device-methods: no methods.json (methods.py failed at its start; log below)"
  tail -n 30 "$work/methods.log"
  status=1
fi
tar -czf "$out/methods.tar.gz" -C "$work" --exclude='*.safetensors' \
  --exclude='minference-staging' . || status=1
stamp "done"
exit $status
