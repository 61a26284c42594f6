#!/usr/bin/env bash
# BlindSight's throughput on computed pairs against dense (docs/blindsight.md, "Where the 36K time
# goes"), under both CTA schedules of the wgmma kernel (MMSPARSE_CTA_SCHEDULE: one CTA per tile,
# and persistent CTAs on a dynamic tile queue), SYNTHETIC inputs throughout, on one GPU in about 5
# minutes:
#   1. the persistent kernel's tests (bit for bit against one CTA per tile, the oracle, the
#      refusals; bounded by PERSISTENT_TEST_SECONDS, default 180: where they fail or hang, the
#      later steps run one CTA per tile only) and the BlindSight GPU tests (every template, the
#      device builder, configs);
#   2. compute-sanitizer (memcheck, racecheck, synccheck) on the template and builder tests and on
#      the persistent kernel's random plans, tiny images and repeated launches;
#   3. the plan model's chunk statistics (fill, masked and gathered chunks, chunks per tile, waves;
#      host plans, no GPU) at the bench's lengths;
#   4. the engine bench per schedule: dense at 32K and 128K (the reference rates; under persistent
#      dense runs persistent too, the A/B's cost on long tiles), a sink-like plan in place and
#      through a key order at 32K and 128K (the copy's cost and gain) and, with SHORT_TILES=1, the
#      short-tile cases, 128-row tiles of 8 to 64 whole unmasked chunks as spans and as gathered
#      columns, as a span ending at the tile's diagonal, as one span per chunk and as a span then
#      one gathered chunk, from which step 6 fits the fixed cost per CTA (per tile, persistent) and
#      the extra cost of a gathered chunk, a diagonal chunk, a record and a switch from spans to
#      gathered columns;
#   5. one `mmsparse bench` per length (default 36864 131072) and schedule on the multi-image
#      preset: dense and the sink, intra and intra+sink templates, each in place (permute=0) and
#      through its key order (permute=1: K and V copied into the order inside the attention time)
#      in the same process (bench --json: throughput_vs_dense);
#   6. a summary: the templates' throughput on computed pairs as a share of dense's per schedule,
#      the key orders against in place, the schedules' A/B, the fits, and the plan model's
#      prediction with the fitted fixed cost;
#   7. the cost constants that reproduce the templates' shares (scripts/blindsight_cost_fit.py).
# Logs go to $OUT (else <build>/blindsight-throughput-logs); steps.txt has each step's time.
#
#   scripts/blindsight-throughput.sh [build-dir] [seq-len ...]
#   SANITIZER_TOOLS="memcheck" scripts/blindsight-throughput.sh ...   (fewer sanitizer tools)
#   SCHEDULES="tile" scripts/blindsight-throughput.sh ...             (one schedule)
#   SKIP_TESTS=1 scripts/blindsight-throughput.sh ...                 (timings only: steps 3-7)
#   SHORT_TILES=1 scripts/blindsight-throughput.sh ...                (the short-tile fits, +80 s)
#   BIDIRECTIONAL=1 scripts/blindsight-throughput.sh ...              (the templates of the Gemma 3
#       style, bidirectional=1, in step 5: in place with the media lift and token masks against
#       through the key order, unmasked image tiles; the engine bench and the short-tile fits are
#       unchanged; steps 3 and 7, which model the causal templates, are not run)
set -uo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${1:-$repo/build-gpu}
shift || true
lengths=("$@")
[[ ${#lengths[@]} -eq 0 ]] && lengths=(36864 131072)
skip_tests=${SKIP_TESTS:-0}
short_tiles=${SHORT_TILES:-0}
bidirectional=${BIDIRECTIONAL:-0}
read -r -a sanitizer_tools <<<"${SANITIZER_TOOLS:-memcheck racecheck synccheck}"
refuse() {  # refuse <what> <expected> <got>: a bad argument, named, before any step
  echo "blindsight-throughput.sh: $1: expected $2, got '$3'" >&2
  exit 2
}
[[ $skip_tests == 0 || $skip_tests == 1 ]] || refuse SKIP_TESTS "0 or 1" "$skip_tests"
[[ $short_tiles == 0 || $short_tiles == 1 ]] || refuse SHORT_TILES "0 or 1" "$short_tiles"
[[ $bidirectional == 0 || $bidirectional == 1 ]] || refuse BIDIRECTIONAL "0 or 1" "$bidirectional"
for tool in "${sanitizer_tools[@]}"; do
  [[ $tool =~ ^(memcheck|racecheck|synccheck|initcheck)$ ]] ||
    refuse SANITIZER_TOOLS "memcheck, racecheck, synccheck or initcheck" "$tool"
done
read -r -a schedules <<<"${SCHEDULES:-tile persistent}"
[[ ${#schedules[@]} -gt 0 ]] || refuse SCHEDULES "tile, persistent or both" ""
for schedule in "${schedules[@]}"; do
  [[ $schedule =~ ^(tile|persistent)$ ]] || refuse SCHEDULES "tile or persistent" "$schedule"
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
persistent_sanitizer_filter='Dtypes/GpuPersistentSchedule.RandomPlans/bfloat16'
persistent_sanitizer_filter+=':Dtypes/GpuPersistentSchedule.AHundredTinyImages/float16'
persistent_sanitizer_filter+=':Dtypes/GpuPersistentSchedule.RepeatedLaunchesOnOneStream/bfloat16'
# The persistent kernel's tests run first, bounded: where they fail or hang, the later steps run
# one CTA per tile only, so that a broken kernel costs minutes, not the session.
persistent_test_seconds=${PERSISTENT_TEST_SECONDS:-180}
sanitizer_seconds=${SANITIZER_SECONDS:-300}  # per tool
short_cases=()
if [[ $short_tiles == 1 ]]; then
  for form in spans columns diagonal split mixed; do
    for chunks in 64 32 16 8; do short_cases+=("short-$form-$chunks"); done
  done
fi
# The engine bench's key-order cases: the same sink-like pairs as short spans in place and as one
# span through a key order, its K/V copy inside the timing (absent names select nothing).
key_order_cases=(sinks-in-place-32k sinks-ordered-32k sinks-in-place-128k sinks-ordered-128k)
# Each template in place and through its key order, in one bench (one process, one dense), of the
# Qwen style (causal) or, with BIDIRECTIONAL=1, of the Gemma 3 style.
template_patterns=()
for template in blindsight-sink blindsight-intra blindsight-intra-sink; do
  for permute in 0 1; do
    template_patterns+=(--pattern "$template:bidirectional=$bidirectional,permute=$permute")
  done
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
  timeout -k 10 "$persistent_test_seconds" "$test_binary" --gtest_filter='*GpuPersistentSchedule*' \
    >"$logs/test-gpu-persistent.txt" 2>&1
  persistent_status=$?
  step_done "GPU tests *GpuPersistentSchedule*" "$persistent_status"
  tail -n 5 "$logs/test-gpu-persistent.txt"
  if [[ $persistent_status -eq 0 ]]; then
    sanitizer_filter+=":$persistent_sanitizer_filter"
  else
    echo "[blindsight-throughput] the persistent kernel's tests failed (exit $persistent_status," \
      "124: timed out after $persistent_test_seconds s): the later steps run schedule tile only" |
      tee -a "$logs/steps.txt"
    schedules=(tile)
  fi
  "$test_binary" --gtest_filter='*GpuBlindSight*' >"$logs/test-gpu-blindsight.txt" 2>&1
  step_done "GPU tests *GpuBlindSight*" $?
  tail -n 5 "$logs/test-gpu-blindsight.txt"
  for tool in "${sanitizer_tools[@]}"; do
    timeout -k 10 "$sanitizer_seconds" compute-sanitizer --tool "$tool" --error-exitcode 1 \
      "$test_binary" --gtest_filter="$sanitizer_filter" >"$logs/sanitizer-$tool.txt" 2>&1
    step_done "compute-sanitizer $tool" $?
    grep -E "ERROR SUMMARY|RACECHECK SUMMARY|FAILED" "$logs/sanitizer-$tool.txt" | head -n 5
  done
fi

# The plan model and the cost fit model the Qwen style's templates (causal, no token masks).
model_runs=1
if [[ $bidirectional == 1 ]]; then
  model_runs=0
  echo "[blindsight-throughput] plan model and cost fit: not run with BIDIRECTIONAL=1 (they model" \
    "the causal templates only)" | tee -a "$logs/steps.txt"
else
  "$plan_model" --seq-len "$csv_lengths" >"$logs/plan-model.txt" 2>&1
  step_done "plan model" $?
fi

for schedule in "${schedules[@]}"; do
  MMSPARSE_CTA_SCHEDULE=$schedule "$engine_bench" dense-32k dense-128k "${key_order_cases[@]}" \
    "${short_cases[@]}" 2>&1 |
    tee "$logs/engine-bench-$schedule.txt"
  step_done "engine bench, schedule $schedule" "${PIPESTATUS[0]}"
done

for n in "${lengths[@]}"; do
  for schedule in "${schedules[@]}"; do
    MMSPARSE_CTA_SCHEDULE=$schedule "$cli" bench --device cuda --preset multi-image \
      --seq-len "$n" --heads 28 --kv-heads 4 --head-dim 128 "${template_patterns[@]}" \
      --warmup 2 --repeats 5 \
      --oracle-rows 8 --oracle-tiles 8 --json "$logs/bench-$n-$schedule.json" \
      >"$logs/bench-$n-$schedule.txt" 2>&1
    step_done "bench at $n tokens, schedule $schedule" $?
  done
done

python3 "$repo/scripts/blindsight_throughput_summary.py" "$logs" "${lengths[@]}" \
  --schedules "${schedules[@]}" >"$logs/summary.txt" 2>&1
step_done "summary" $?
cat "$logs/summary.txt"

# The plan model and the cost fit describe one CTA per tile: they read that schedule's run alone.
fit_summary=$logs/summary.txt
if [[ ${#schedules[@]} -gt 1 && " ${schedules[*]} " == *" tile "* ]]; then
  fit_summary=$logs/summary-tile.txt
  python3 "$repo/scripts/blindsight_throughput_summary.py" "$logs" "${lengths[@]}" \
    --schedules tile >"$fit_summary" 2>&1
fi
if [[ $model_runs == 1 && " ${schedules[*]} " == *" tile "* ]]; then
  # The plan model again with the fixed cost the short tiles measured, beside the figures above.
  fixed=$(sed -n 's/^fixed cost per CTA for the model: //p' "$fit_summary")
  if [[ -n $fixed ]]; then
    "$plan_model" --seq-len "$csv_lengths" --cta-overhead "$fixed" \
      >"$logs/plan-model-fitted.txt" 2>&1
    step_done "plan model, fixed cost $fixed chunks" $?
    cat "$logs/plan-model-fitted.txt"
  fi
  # The cost constants that reproduce this run's template shares (the plan model's cost basis).
  python3 "$repo/scripts/blindsight_cost_fit.py" "$logs/plan-model.txt" "$fit_summary" \
    >"$logs/cost-fit.txt" 2>&1
  step_done "cost fit" $?
  cat "$logs/cost-fit.txt"
fi
exit $status
