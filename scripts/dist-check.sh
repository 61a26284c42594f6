#!/usr/bin/env bash
# The multi-GPU check of sequence-parallel attention in one call, on a build made before (it builds
# nothing): the GPU selection test, the multi_gpu ctests (checks against single-GPU references, a
# fault test that kills a rank), then mmsparse-dist-bench timing Spava, ZigZag ring, StarAttention,
# APB-style and single-GPU dense at each length, on every visible GPU (CUDA_VISIBLE_DEVICES limits
# them). Everything goes to the results directory; a summary is printed last. Non-zero exit when a
# step fails. Every step's wall time is printed after it and in the summary.
#
#   scripts/dist-check.sh BUILD_DIR RESULTS_DIR [LENGTH ...]
#   default lengths: 131072 262144 524288 (synthetic video preset; add 1048576 for 1M)
#   MMSPARSE_DIST_LOCAL_PATTERN=spec   also time spava+sparse with this pattern inside each GPU
#   MMSPARSE_DIST_REPEATS=n            timed runs per scheme (default 3)
# Each bench also writes a CUDA-event timeline (RESULTS/trace_LENGTH.json, --trace) and its summary;
# scripts/dist-scaling.sh runs 1, 2 and 4 GPUs per length with a summary table.
set -uo pipefail

# shellcheck source-path=SCRIPTDIR source=dist-common.sh
source "$(dirname "${BASH_SOURCE[0]}")/dist-common.sh"
script_started=$(date +%s.%N)
summary=()

step() {  # step NAME COMMAND...: runs it, logs to RESULTS/NAME.log, records the verdict and time
  local name=$1
  shift
  echo "== $name: $*"
  local started
  started=$(now)
  local verdict
  if "$@" >"$results/$name.log" 2>&1; then
    verdict="PASS  $name"
  else
    verdict="FAIL  $name (see $results/$name.log)"
    failed=1
  fi
  local took
  took=$(elapsed "$started")
  summary+=("$(printf '%-60s %8s s' "$verdict" "$took")")
  tail -n 25 "$results/$name.log"
  echo "== $name took $took s"
}

if [[ ! -x $bench ]]; then
  echo "no $bench: configure a CUDA build with NCCL (see docs/dist.md)" >&2
  exit 1
fi
nvidia-smi -L >"$results/gpus.txt" 2>&1
date -u +%Y-%m-%dT%H:%M:%SZ >"$results/date.txt"

step gpu_dist_tests "$build/tests/gpu/test_gpu" --gtest_filter='GpuDist*'
step single_gpu_check "$bench" --gpus 1 --check --length 3001 --query 37 --heads 8 --kv-heads 2 \
  --head-dim 128
step multi_gpu_ctests ctest --test-dir "$build" -L multi_gpu --output-on-failure
sparse=()
schemes=spava,zigzag-ring,star,apb,dense
if [[ -n ${MMSPARSE_DIST_LOCAL_PATTERN:-} ]]; then
  schemes+=,spava+sparse
  sparse=(--local-pattern "$MMSPARSE_DIST_LOCAL_PATTERN")
fi
for length in "${lengths[@]}"; do
  step "bench_$length" "$bench" --length "$length" --warmup 1 --repeats "$repeats" \
    --schemes "$schemes" "${sparse[@]}" --json "$results/bench_$length.json" \
    --trace "$results/trace_$length.json"
done

# Recall and needles kept over l_a and l_p, 2/4/8 virtual ranks on one GPU (synthetic needle preset).
step "accuracy_${lengths[0]}" env CUDA_VISIBLE_DEVICES=0 "$bench" --accuracy \
  --preset mixed-interleaved --length "${lengths[0]}" --json "$results/accuracy_${lengths[0]}.json"

echo
echo "== summary ($(wc -l <"$results/gpus.txt") GPUs, results in $results, $(elapsed "$script_started") s in all)"
printf '%s\n' "${summary[@]}"
exit $failed
