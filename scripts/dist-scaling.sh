#!/usr/bin/env bash
# Scaling of sequence-parallel attention from 1 to 2 to 4 GPUs in one call, on a build made before
# (it builds nothing): the fault tests on 2 GPUs, then per length one run per world size —
# W = 1: single-GPU dense (the engine's, cuDNN-class); W = 2 and 4: Spava, ZigZag ring, StarAttention
# and APB-style with an event trace (--trace) — then Spava's accuracy over l_a and l_p on one GPU.
# Every step has a timeout of its own so a stuck step cannot eat the call. Writes logs, JSON, traces
# and summary.txt (time, speedup vs dense, vs ring, per-GPU efficiency, exposed communication) to
# the results directory. Synthetic workloads (the video preset); the figures say so.
#
#   scripts/dist-scaling.sh BUILD_DIR RESULTS_DIR [LENGTH ...]     (default 131072 262144 524288)
#   MMSPARSE_DIST_REPEATS=n    timed runs per scheme (default 3; 1 is enough at 1M)
#   MMSPARSE_DIST_SKIP_FAULTS=1, MMSPARSE_DIST_SKIP_ACCURACY=1   leave those steps out
#   MMSPARSE_DIST_ACCURACY_LENGTH=n   accuracy sweep length (default 131072, needle preset)
#   MMSPARSE_DIST_LOCAL_PATTERN=spec   also time spava+sparse: this pattern inside each GPU
set -uo pipefail

# shellcheck source-path=SCRIPTDIR source=dist-common.sh
source "$(dirname "${BASH_SOURCE[0]}")/dist-common.sh"
started=$(date +%s.%N)
verdicts=()

# step NAME SECONDS COMMAND...: runs it under a timeout, logs to RESULTS/NAME.log.
step() {
  local name=$1 limit=$2
  shift 2
  echo "== $name (timeout ${limit} s): $*"
  local begin
  begin=$(now)
  timeout -k 10 "$limit" "$@" >"$results/$name.log" 2>&1
  local status=$?
  local verdict=PASS
  if [[ $status -eq 124 || $status -eq 137 ]]; then
    verdict="TIMEOUT"
    failed=1
  elif [[ $status -ne 0 ]]; then
    verdict="FAIL"
    failed=1
  fi
  verdicts+=("$(printf '%-8s %-34s %8s s' "$verdict" "$name" "$(elapsed "$begin")")")
  tail -n 30 "$results/$name.log"
  echo "== $name: $verdict after $(elapsed "$begin") s"
}

# Seconds a bench step may take at LENGTH tokens: start-up and generation, plus 3 s per (n/128K)^2
# (attention grows as n^2: dense takes 0.22 s per run at 128K on an H100, 3.5 s at 512K; a step
# makes about ten runs per scheme at a fraction of dense each): generous for its runs, tight enough
# that the call survives a stuck step.
limit_for() {
  local ratio=$(($1 / 131072))
  echo $((60 + 3 * ratio * ratio))
}

if [[ ! -x $bench ]]; then
  echo "no $bench: configure a CUDA build with NCCL (see docs/dist.md)" >&2
  exit 1
fi
gpus=$(nvidia-smi -L 2>/dev/null | wc -l)
nvidia-smi -L >"$results/gpus.txt" 2>&1
date -u +%Y-%m-%dT%H:%M:%SZ >"$results/date.txt"

if [[ ${MMSPARSE_DIST_SKIP_FAULTS:-0} != 1 && $gpus -ge 2 ]]; then
  step faults_2gpu 150 env CUDA_VISIBLE_DEVICES=0,1 ctest --test-dir "$build" -R 'dist\.fault' \
    --output-on-failure
fi
schemes=spava,zigzag-ring,star,apb
sparse=()
if [[ -n ${MMSPARSE_DIST_LOCAL_PATTERN:-} ]]; then
  schemes+=,spava+sparse
  sparse=(--local-pattern "$MMSPARSE_DIST_LOCAL_PATTERN")
fi
for length in "${lengths[@]}"; do
  limit=$(limit_for "$length")
  step "w1_$length" "$limit" env CUDA_VISIBLE_DEVICES=0 "$bench" --gpus 1 --length "$length" \
    --schemes dense --warmup 1 --repeats "$repeats" --json "$results/w1_$length.json"
  for world in 2 4; do
    [[ $gpus -ge $world ]] || continue
    visible=$(seq -s, 0 $((world - 1)))
    step "w${world}_$length" "$limit" env CUDA_VISIBLE_DEVICES="$visible" "$bench" --gpus "$world" \
      --length "$length" --schemes "$schemes" "${sparse[@]}" --warmup 1 --repeats "$repeats" \
      --trace "$results/trace_w${world}_$length.json" --json "$results/w${world}_$length.json"
  done
done
if [[ ${MMSPARSE_DIST_SKIP_ACCURACY:-0} != 1 ]]; then
  accuracy_length=${MMSPARSE_DIST_ACCURACY_LENGTH:-131072}
  step "accuracy_$accuracy_length" 240 env CUDA_VISIBLE_DEVICES=0 "$bench" --accuracy \
    --preset mixed-interleaved --length "$accuracy_length" --accuracy-worlds 2,4,8 \
    --json "$results/accuracy_$accuracy_length.json"
fi

python3 - "$results" "${lengths[@]}" <<'PY' | tee "$results/summary.txt"
import json, os, sys
results, lengths = sys.argv[1], sys.argv[2:]
def load(name):
    path = os.path.join(results, name)
    return json.load(open(path)) if os.path.exists(path) else None
print("SYNTHETIC video preset; median ms (max over ranks); speedup vs single-GPU dense; "
      "per-GPU efficiency = speedup / W; exposed comm: bench = 1 - no-comm/total, "
      "trace = worst rank's (comm - overlapped) / span")
print(f"{'length':>8} {'W':>2} {'scheme':<12} {'ms':>10} {'vs dense':>9} {'vs ring':>8} "
      f"{'per GPU':>8} {'exp(bench)':>10} {'exp(trace)':>10}")
for length in lengths:
    w1 = load(f"w1_{length}.json")
    dense = next((s["median_ms"] for s in (w1 or {}).get("schemes", []) if s["name"] == "dense"), None)
    if dense:
        print(f"{length:>8} {1:>2} {'dense':<12} {dense:>10.2f} {1.0:>8.2f}x {'':>8} {1.0:>7.2f}x")
    for world in (2, 4):
        run = load(f"w{world}_{length}.json")
        if not run:
            continue
        ring = next((s["median_ms"] for s in run["schemes"] if s["name"] == "zigzag-ring"), None)
        for s in run["schemes"]:
            ms = s["median_ms"]
            exposed = max(0.0, 1 - s["compute_only_ms"] / ms) if ms else 0.0
            traced = [t for t in run.get("trace", []) if t["scheme"] == s["name"]]
            trace_exposed = max(((t["communication_ms"] - t["overlapped_ms"]) / t["span_ms"]
                                 for t in traced if t["span_ms"] > 0), default=None)
            vs_dense = dense / ms if dense and ms else None
            print(f"{length:>8} {world:>2} {s['name']:<12} {ms:>10.2f} "
                  + (f"{vs_dense:>8.2f}x " if vs_dense else f"{'':>9} ")
                  + (f"{ring / ms:>7.2f}x " if ring and ms else f"{'':>8} ")
                  + (f"{vs_dense / world:>7.2f}x " if vs_dense else f"{'':>8} ")
                  + f"{100 * exposed:>9.1f}% "
                  + (f"{100 * trace_exposed:>9.1f}%" if trace_exposed is not None else ""))
PY

echo
echo "== steps ($gpus GPUs, results in $results, $(elapsed "$started") s in all)"
printf '%s\n' "${verdicts[@]}" | tee -a "$results/summary.txt"
exit $failed
