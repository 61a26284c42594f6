#!/usr/bin/env bash
# VecAttention's GPU evidence (docs/vec.md "Reproducing the figures"), all SYNTHETIC, the figures
# the issue asks for first, so that a time limit cuts the optional steps, not them:
#   1. timing: `bench` at 128K (seed 1) of fixed vec alphas beside vertical-slash: selection ms
#      against vertical-slash's index ms, recall, attention ms; each alpha twice, with the default
#      union tiles (the plan's 128-row tiles hold two pooled blocks and their keys' union) and with
#      one tile per pooled block (union_tiles=0);
#   1b. the selection's phases (bench/index_bench.cu) beside vertical-slash's index stages;
#   2. cuDNN dense at the same shape (bench/peers.py: PyTorch SDPA, cuDNN backend);
#   3. the recall-vs-density curve at 128K (`mmsparse curve`: JSON + PNG), bounded by
#      $VEC_BENCH_CURVE_TIMEOUT seconds;
#   4. search-vec (per-head alpha to recall 0.95, then the DP) on seed 0, and `bench` of its config
#      on seed 1 (out of sample) beside vertical-slash;
#   then, while the script has run less than $VEC_BENCH_BUDGET seconds:
#   5. `search` (MMInference's Alg. 4) on the same input, without and with vec candidates
#      (--vec-alphas: the mixed search), each bounded by $VEC_BENCH_SEARCH_TIMEOUT seconds, and
#      `bench` of the mixed and the MMInference-only configs;
#   6. the DiT presets (non-causal): search-vec on seed 0, bench the config on seed 1 against
#      `full`, and peers.py --non-causal at the same shapes;
#   7. a summary (scripts/vec_summary.py): selection vs vertical-slash, speedups against cuDNN at
#      matched recall.
# Cut for time: 4 query heads on 1 KV head at 128K (`--heads 4 --kv-heads 1`: one head of each
# behaviour, local, grid, vertical, dense) and 4 heads on the DiT presets; attention time scales
# with the heads, so ratios to cuDNN at the same shape keep their meaning.
#
#   scripts/vec-bench.sh [build-dir]        (a CUDA Release build; output in $OUT or build/vec-logs)
# Environment: VEC_BENCH_DEVICE (cuda), VEC_BENCH_SEQ_LEN (131072), VEC_BENCH_DIT_SEQ_LEN (0: the
# presets' 75600 and 118800), VEC_BENCH_PEERS (1; 0 skips peers.py), VEC_BENCH_SEARCHES (1; 0
# skips the two MMInference searches and their benches), VEC_BENCH_SEARCH_TIMEOUT (60 s per
# search), VEC_BENCH_CURVE (1; 0 skips the curve, which is computed on the host and does not
# change with the GPU selection), VEC_BENCH_CURVE_HEADS (all), VEC_BENCH_CURVE_TIMEOUT (90 s),
# VEC_BENCH_BUDGET (180 s: each command of steps 5-6 starts only before it, so the script ends
# within about 4 minutes on one H100: one command past the budget at most). VEC_BENCH_DEVICE=cpu
# with short lengths checks
# every command line on a machine without a GPU (the CPU test cli.vec_bench_script does).
set -uo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${1:-$repo/build-gpu}
cli=$build/tools/cli/mmsparse
out=${OUT:-$build/vec-logs}
mkdir -p "$out"
device=${VEC_BENCH_DEVICE:-cuda}
seq_len=${VEC_BENCH_SEQ_LEN:-131072}
dit_seq_len=${VEC_BENCH_DIT_SEQ_LEN:-0}
peers=${VEC_BENCH_PEERS:-1}
searches=${VEC_BENCH_SEARCHES:-1}
search_timeout=${VEC_BENCH_SEARCH_TIMEOUT:-60}
curve_heads=${VEC_BENCH_CURVE_HEADS:-all}
curve_timeout=${VEC_BENCH_CURVE_TIMEOUT:-90}
curve=${VEC_BENCH_CURVE:-1}
if [[ $curve != 0 && $curve != 1 ]]; then
  echo "vec-bench.sh: VEC_BENCH_CURVE: expected 0 or 1, got '$curve'" >&2
  exit 2
fi
budget=${VEC_BENCH_BUDGET:-180}
# The timing step's vec alphas (alpha_ppm): around the default 0.1, so that one of them matches
# vertical-slash's recall or the 0.95 target.
timing_alphas=(30000 100000 300000)
video=(--preset video-qwen2.5vl-128k --seq-len "$seq_len" --heads 4 --kv-heads 1 --head-dim 128)
dit_heads=(--heads 4 --kv-heads 4 --head-dim 128)
timing=(--warmup 1 --repeats 3)
[[ $device == cpu ]] && timing=()
status=0

# step NAME COMMAND...: runs it with its output in $out/NAME.txt (and on stdout), timed.
step() {
  local name=$1
  shift
  local started=$SECONDS
  echo "== $name: $*"
  "$@" 2>&1 | tee "$out/$name.txt"
  local rc=${PIPESTATUS[0]}
  echo "== $name: exit $rc, $((SECONDS - started)) s"
  [[ $rc -ne 0 ]] && status=1
  return "$rc"
}

within_budget() {  # NAME: whether optional steps may still start
  ((SECONDS < budget)) && return 0
  echo "== $1: skipped, ${SECONDS} s of the ${budget} s budget used"
  return 1
}

dit_length() {  # the preset's own length unless VEC_BENCH_DIT_SEQ_LEN is set
  [[ $dit_seq_len -ne 0 ]] && echo "$dit_seq_len" && return
  [[ $1 == dit-wan2.1-76k ]] && echo 75600 || echo 118800
}

# 1. Selection against vertical-slash's index, fixed alphas (no search needed), out of sample.
timing_patterns=()
for alpha in "${timing_alphas[@]}"; do
  timing_patterns+=(--pattern "vec:alpha_ppm=$alpha" --pattern "vec:alpha_ppm=$alpha,union_tiles=0")
done
step timing-128k "$cli" bench "${video[@]}" --seed 1 --device "$device" "${timing[@]}" \
  "${timing_patterns[@]}" --pattern vertical-slash --json "$out/bench-timing-128k.json"

# 1b. The selection's phases (stream times between the build's kernels, kept and fresh memory pool)
# and vertical-slash's index stages at the same shape and seed, from the index benchmark.
index_bench=$build/bench/mmsparse_index_bench
if [[ $device == cuda && -x $index_bench ]]; then
  step phases-128k "$index_bench" "$seq_len" vec,vertical-slash 4 1 1
fi

# 2. cuDNN dense (and FlashAttention-2) at the 128K shape, random bf16 inputs.
if [[ $peers -eq 1 ]]; then
  step peers-128k python3 "$repo/bench/peers.py" --mmsparse "$cli" --seq-lens "$seq_len" \
    --heads 4 --kv-heads 1 --head-dim 128 --masks --skip-flex --rounds 1 --warmup 2 --repeats 5 \
    --out "$out/peers-128k.json"
fi

# 3. Recall against density at 128K (computed on the host; the device's selection differs from it
# only at keys within rounding of the threshold), on the CUDA engine's 128-row tiles.
if [[ $curve -eq 1 ]]; then
  step curve-128k timeout "$curve_timeout" "$cli" curve "${video[@]}" --seed 0 \
    --head "$curve_heads" --device "$device" --tile-rows 128 -o "$out/curve-128k"
fi

# 4. The per-head config calibrated on seed 0, benched on seed 1 beside vertical-slash.
step search-vec-128k "$cli" search-vec "${video[@]}" --seed 0 --recall-target 0.95 \
  --device "$device" -o "$out/vec-128k.json"
if [[ -f $out/vec-128k.json ]]; then
  step bench-vec-128k "$cli" bench "${video[@]}" --seed 1 --device "$device" "${timing[@]}" \
    --config "$out/vec-128k.json" --pattern vertical-slash --per-head \
    --json "$out/bench-vec-128k.json"
fi

# 5. MMInference's search without and with vec candidates, and their configs out of sample.
if [[ $searches -eq 1 ]]; then
  within_budget search-mixed-128k && step search-mixed-128k timeout "$search_timeout" "$cli" \
    search "${video[@]}" --seed 0 --target-mean-recall 0.95 \
    --vec-alphas 100000,300000,500000,700000 --device "$device" -o "$out/mixed-128k.json" \
    --json "$out/search-mixed-128k.json"
  within_budget search-mminference-128k && step search-mminference-128k timeout \
    "$search_timeout" "$cli" search "${video[@]}" --seed 0 --target-mean-recall 0.95 \
    --device "$device" -o "$out/mminference-128k.json" --json "$out/search-mminference-128k.json"
  for config in mixed mminference; do
    [[ -f $out/$config-128k.json ]] || { echo "== bench-$config-128k: no config (search cut)"; continue; }
    within_budget "bench-$config-128k" && step "bench-$config-128k" "$cli" bench "${video[@]}" \
      --seed 1 --device "$device" "${timing[@]}" --config "$out/$config-128k.json" --per-head \
      --json "$out/bench-$config-128k.json"
  done
fi

# 6. Video DiTs, non-causal: vec config vs full attention, and SDPA non-causal.
dit_lengths=()
for preset in dit-wan2.1-76k dit-hunyuan-119k; do
  within_budget "search-vec-$preset" || continue
  n=$(dit_length "$preset")
  dit_lengths+=("$n")
  step "search-vec-$preset" "$cli" search-vec --preset "$preset" --seq-len "$n" "${dit_heads[@]}" \
    --seed 0 --recall-target 0.95 --device "$device" -o "$out/vec-$preset.json"
  [[ -f $out/vec-$preset.json ]] && within_budget "bench-vec-$preset" &&
    step "bench-vec-$preset" "$cli" bench --preset "$preset" \
    --seq-len "$n" "${dit_heads[@]}" --seed 1 --device "$device" "${timing[@]}" \
    --config "$out/vec-$preset.json" --per-head --json "$out/bench-vec-$preset.json"
done
if [[ $peers -eq 1 && ${#dit_lengths[@]} -gt 0 ]] && within_budget peers-dit; then
  step peers-dit python3 "$repo/bench/peers.py" --mmsparse "$cli" --seq-lens "${dit_lengths[@]}" \
    --heads 4 --kv-heads 4 --head-dim 128 --masks --skip-flex --non-causal --rounds 1 \
    --warmup 2 --repeats 5 --out "$out/peers-dit.json"
fi

# 7. The figures the issue asks for, from the JSON above.
step summary python3 "$repo/scripts/vec_summary.py" "$out"
echo "== total: ${SECONDS} s"
exit $status
