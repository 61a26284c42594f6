#!/usr/bin/env bash
# The 2D-boundary + item-sink grid heads' GPU index on the SYNTHETIC mixed-interleaved preset
# (docs/index_builders.md, "Where the index time goes"):
#   1. the GPU tests of the grouped grid builders (Q/2D/item boundary, item sinks, configs, the
#      config's concatenation of long run lists), record for record against the host plans;
#   2. compute-sanitizer memcheck over the long-run-list config test, the mixed-interleaved 2D +
#      item-sink test and the strided-span threshold test (plans sized by the lattice bound: a
#      write past a capacity is an error here), and racecheck over the threshold test (the tile
#      kernels' shared memory);
#   3. per-stage index times (mmsparse_index_stage_bench) of the config's grid spec and its
#      variants at 131072 tokens, 4 query heads over 1 KV head, and of the spec on 7 query heads
#      over 1 (the config's 7 grid heads in one section);
#      where Nsight Systems is installed, each kernel's GPU time in that build (nsys-kernels.csv);
#   4. the CLI bench of the config's grid spec (index ms as the config's bench counts it), and of
#      a whole config when CONFIG names one.
# Logs go to $OUT (else <build>/mixidx-logs); steps.txt has each step's time. QUICK=1 keeps the
# config's tests (GpuConfigBuild, GpuConfigAssembly), the grouped grid conversion's record tests,
# the memcheck of the long-run-list config test, the 7-head stage bench and the config bench:
# about 90 s on an H100 with CONFIG set.
#
#   scripts/mixidx-gpu-check.sh [build-dir]          (default build-gpu)
#   CONFIG=path/to/config.json scripts/mixidx-gpu-check.sh ...
#   QUICK=1 CONFIG=path/to/config.json scripts/mixidx-gpu-check.sh ...
set -uo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${1:-$repo/build-gpu}
quick=${QUICK:-0}
if [[ $quick != 0 && $quick != 1 ]]; then
  echo "mixidx-gpu-check.sh: QUICK: expected 0 or 1, got '$quick'" >&2
  exit 2
fi

logs=${OUT:-$build/mixidx-logs}
mkdir -p "$logs"
length=131072
spec='grid:boundary=3,hline=0,item_sinks=1,last_q=64,local=0,max_stride=1024,sink=30,slash=1,stride=448,vline=0'
# The spec without the 2D boundary, without the item sinks, and without either; and with the
# stride searched (its fixed stride and slash lines alone skip the estimate and search).
variants=("$spec" "${spec/item_sinks=1/item_sinks=0}" "${spec/boundary=3/boundary=0}"
  "${spec/boundary=3,hline=0,item_sinks=1/boundary=0,hline=0,item_sinks=0}"
  "${spec/stride=448/stride=0}")

status=0
step_start=$SECONDS
step_done() {
  echo "[mixidx-gpu-check] $1: $((SECONDS - step_start)) s" | tee -a "$logs/steps.txt"
  step_start=$SECONDS
}

# sanitize TOOL FILTER LOG: the GPU test binary's tests FILTER under compute-sanitizer's TOOL.
sanitize() {
  compute-sanitizer --tool "$1" --error-exitcode 1 "$build/tests/gpu/test_gpu" \
    --gtest_filter="$2" >"$logs/$3" 2>&1 || status=1
  tail -3 "$logs/$3"
}

config_tests='GpuConfigBuild\.|GpuConfigAssembly\.'
# The tests share the GPU; their host oracles take most of their time, so they run 4 at a time.
if [[ $quick == 1 ]]; then
  # The configs' tests and the grouped grid tile conversion's record tests (not its attention ones).
  grouped='Grid(Query|TwoD)Boundary|GridBoundary(EdgeLayouts|StridedSpan)|ItemGrid(Matches|Strided)'
  tests="GpuIndexBuild\.($grouped|ItemSinkTwoD)|$config_tests"
else
  tests="GpuIndexBuild\..*(Boundary|Item)|$config_tests"
fi
ctest --test-dir "$build" -R "$tests" -j4 --output-on-failure >"$logs/ctest.txt" 2>&1 || status=1
tail -3 "$logs/ctest.txt"
step_done "GPU tests"

# The concatenation's run copy over a slot's runs and the section's slots, under memcheck.
sanitize memcheck 'GpuConfigAssembly.*' memcheck-config.txt
step_done "memcheck of the config assembly"

# The config's 7 grid heads in one section, stage by stage.
"$build/bench/mmsparse_index_stage_bench" mixed-interleaved "$length" 7 1 "$spec" \
  2>&1 | tee -a "$logs/stages.txt" || status=1
step_done "index stages"

# The full check only: the grouped grid builders under memcheck and racecheck, the spec's
# variants stage by stage, per-kernel times, the spec's CLI bench.
full_checks() {
  threshold_test='GpuIndexBuild.GridBoundaryStridedSpanThresholdMatchesTheHost'
  sanitize memcheck "GpuIndexBuild.ItemSinkTwoDGridMatchesTheHostOnMixedInterleaved:$threshold_test" \
    memcheck.txt
  step_done "memcheck"

  sanitize racecheck "$threshold_test" racecheck.txt
  step_done "racecheck"

  for variant in "${variants[@]}"; do
    "$build/bench/mmsparse_index_stage_bench" mixed-interleaved "$length" 4 1 "$variant" \
      2>&1 | tee -a "$logs/stages.txt" || status=1
  done
  step_done "index stages of the variants"

  # Per-kernel GPU times of the spec's build on 4 heads, where Nsight Systems is installed (the
  # stage bench repeats the build, so each kernel's count is a multiple of the builds).
  if command -v nsys >/dev/null; then
    nsys profile --stats=false --force-overwrite true -o "$logs/stages-4-heads" \
      "$build/bench/mmsparse_index_stage_bench" mixed-interleaved "$length" 4 1 "$spec" \
      >"$logs/nsys-run.txt" 2>&1 &&
      nsys stats --report cuda_gpu_kern_sum --format csv "$logs/stages-4-heads.nsys-rep" \
        >"$logs/nsys-kernels.csv" 2>>"$logs/nsys-run.txt"
    head -15 "$logs/nsys-kernels.csv"
    rm -f "$logs/stages-4-heads.nsys-rep" "$logs/stages-4-heads.sqlite"
    step_done "kernel times (nsys)"
  fi

  "$build/tools/cli/mmsparse" bench --device cuda --preset mixed-interleaved --seq-len "$length" \
    --heads 4 --kv-heads 1 --pattern "$spec" --oracle-rows 16 >"$logs/bench-spec.txt" 2>&1 ||
    status=1
  grep -E "index ms|grid" "$logs/bench-spec.txt" | tail -4
  step_done "bench of the spec"
}
if [[ $quick != 1 ]]; then full_checks; fi

if [[ -n ${CONFIG:-} ]]; then
  "$build/tools/cli/mmsparse" bench --device cuda --preset mixed-interleaved --seq-len "$length" \
    --needles 4 --per-head --repeats 5 --config "$CONFIG" >"$logs/bench-config.txt" 2>&1 ||
    status=1
  grep -E "index ms|config" "$logs/bench-config.txt" | tail -3
  # The whole-plan index and concatenation times (per-head build times: bench-config.txt).
  grep -oE "index [0-9.]+ ms \(whole plan|concatenation [0-9.]+ ms" "$logs/bench-config.txt"
  step_done "bench of the config"
fi
exit $status
