#!/usr/bin/env bash
# BlindSight's throughput on computed pairs against dense (docs/blindsight.md, "Where the 36K time
# goes"), SYNTHETIC inputs throughout, on one GPU in about 4 minutes:
#   1. the BlindSight GPU tests (every template, the device builder, configs) against the oracle;
#   2. compute-sanitizer (memcheck, racecheck, synccheck) on the template and builder tests;
#   3. the plan model's chunk statistics (fill, masked and gathered chunks, chunks per tile, waves;
#      host plans, no GPU) at the bench's lengths;
#   4. the engine bench: dense at 32K and 128K (the reference rates) and the short-tile cases,
#      128-row tiles of 8 to 64 whole unmasked chunks as spans and as gathered columns, as a span
#      ending at the tile's diagonal, as one span per chunk and as a span then one gathered chunk,
#      from which step 6 fits the fixed cost per CTA and the extra cost of a gathered chunk, a
#      diagonal chunk, a record and a switch from spans to gathered columns;
#   5. one `mmsparse bench` per length (default 36864 131072) on the multi-image preset: dense and
#      the sink, intra and intra+sink templates (bench --json: throughput_vs_dense);
#   6. a summary: the templates' throughput on computed pairs as a share of dense's, the fit, and
#      the plan model's prediction with the fitted fixed cost;
#   7. the cost constants that reproduce the templates' shares (scripts/blindsight_cost_fit.py).
# Logs go to $OUT (else <build>/blindsight-throughput-logs); steps.txt has each step's time.
#
#   scripts/blindsight-throughput.sh [build-dir] [seq-len ...]
#   SANITIZER_TOOLS="memcheck" scripts/blindsight-throughput.sh ...   (fewer sanitizer tools)
#   SKIP_TESTS=1 scripts/blindsight-throughput.sh ...                 (timings only: steps 3-7)
set -uo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${1:-$repo/build-gpu}
shift || true
lengths=("$@")
[[ ${#lengths[@]} -eq 0 ]] && lengths=(36864 131072)
skip_tests=${SKIP_TESTS:-0}
read -r -a sanitizer_tools <<<"${SANITIZER_TOOLS:-memcheck racecheck synccheck}"
refuse() {  # refuse <what> <expected> <got>: a bad argument, named, before any step
  echo "blindsight-throughput.sh: $1: expected $2, got '$3'" >&2
  exit 2
}
[[ $skip_tests == 0 || $skip_tests == 1 ]] || refuse SKIP_TESTS "0 or 1" "$skip_tests"
for tool in "${sanitizer_tools[@]}"; do
  [[ $tool =~ ^(memcheck|racecheck|synccheck|initcheck)$ ]] ||
    refuse SANITIZER_TOOLS "memcheck, racecheck, synccheck or initcheck" "$tool"
done
for length in "${lengths[@]}"; do
  [[ $length =~ ^[1-9][0-9]*$ ]] || refuse "seq-len" "a positive whole number of tokens" "$length"
done
logs=${OUT:-$build/blindsight-throughput-logs}
mkdir -p "$logs"
cli=$build/tools/cli/mmsparse
test_binary=$build/tests/gpu/test_gpu
engine_bench=$build/bench/mmsparse_engine_bench
plan_model=$build/tools/plan_model/mmsparse-plan-model
# One template test per kernel the templates run on at head_dim 128, and the device builder's
# records; the full BlindSight suite runs unsanitised in step 1.
sanitizer_filter='Kernels/GpuBlindSight.TemplatesMatchTheOracle/bf16_d128_wgmma128'
sanitizer_filter+=':Kernels/GpuBlindSight.TemplatesMatchTheOracle/bf16_d64'
sanitizer_filter+=':GpuBlindSightBuilder.RecordsEqualTheUpload'
short_cases=()
for form in spans columns diagonal split mixed; do
  for chunks in 64 32 16 8; do short_cases+=("short-$form-$chunks"); done
done
csv_lengths=$(IFS=,; echo "${lengths[*]}")

status=0
step_start=$SECONDS
step_done() {  # step_done <step> <exit status>
  echo "[blindsight-throughput] $1: $((SECONDS - step_start)) s, exit $2" | tee -a "$logs/steps.txt"
  [[ $2 -eq 0 ]] || status=1
  step_start=$SECONDS
}

if [[ $skip_tests == 0 ]]; then
  "$test_binary" --gtest_filter='*GpuBlindSight*' >"$logs/test-gpu-blindsight.txt" 2>&1
  step_done "GPU tests *GpuBlindSight*" $?
  tail -n 5 "$logs/test-gpu-blindsight.txt"
  for tool in "${sanitizer_tools[@]}"; do
    compute-sanitizer --tool "$tool" --error-exitcode 1 "$test_binary" \
      --gtest_filter="$sanitizer_filter" >"$logs/sanitizer-$tool.txt" 2>&1
    step_done "compute-sanitizer $tool" $?
    grep -E "ERROR SUMMARY|RACECHECK SUMMARY|FAILED" "$logs/sanitizer-$tool.txt" | head -n 5
  done
fi

"$plan_model" --seq-len "$csv_lengths" >"$logs/plan-model.txt" 2>&1
step_done "plan model" $?

"$engine_bench" dense-32k dense-128k "${short_cases[@]}" 2>&1 | tee "$logs/engine-bench.txt"
step_done "engine bench" "${PIPESTATUS[0]}"

for n in "${lengths[@]}"; do
  "$cli" bench --device cuda --preset multi-image --seq-len "$n" --heads 28 --kv-heads 4 \
    --head-dim 128 --pattern blindsight-sink --pattern blindsight-intra \
    --pattern blindsight-intra-sink --warmup 2 --repeats 5 --oracle-rows 8 --oracle-tiles 8 \
    --json "$logs/bench-$n.json" >"$logs/bench-$n.txt" 2>&1
  step_done "bench at $n tokens" $?
done

python3 "$repo/scripts/blindsight_throughput_summary.py" "$logs" "${lengths[@]}" \
  >"$logs/summary.txt" 2>&1
step_done "summary" $?
cat "$logs/summary.txt"

# The plan model again with the fixed cost the short tiles measured, beside the figures above.
fixed=$(sed -n 's/^fixed cost per CTA for the model: //p' "$logs/summary.txt")
if [[ -n $fixed ]]; then
  "$plan_model" --seq-len "$csv_lengths" --cta-overhead "$fixed" >"$logs/plan-model-fitted.txt" 2>&1
  step_done "plan model, fixed cost $fixed chunks" $?
  cat "$logs/plan-model-fitted.txt"
fi

# The cost constants that reproduce this run's template shares (the plan model's cost basis).
python3 "$repo/scripts/blindsight_cost_fit.py" "$logs/plan-model.txt" "$logs/summary.txt" \
  >"$logs/cost-fit.txt" 2>&1
step_done "cost fit" $?
cat "$logs/cost-fit.txt"
exit $status
