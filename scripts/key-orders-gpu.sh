#!/usr/bin/env bash
# Key orders (plan.h's Plan::key_orders) on the GPU:
#   1. the GPU suite's key-order tests (random key-ordered plans on both kernels and both CTA
#      schedules against the fp64 oracle and the CPU reference; per-head configs of heads built on
#      the GPU beside key-ordered BlindSight heads, record for record against the host plan, its
#      download and the oracle; downloads of key-ordered uploads), then the per-head config,
#      prepare and download suites, BlindSight's config tests and its characterised config through
#      the CLI bench, which key orders now pass through;
#   2. the key-order tests under compute-sanitizer memcheck and racecheck, on one configuration
#      each, and the config test on the wgmma kernel under memcheck;
#   3. the engine bench's sink cases (SYNTHETIC plans, bench/sink_order_plans.h): the same pairs
#      read as scattered short spans in place and as one span through a key order, the K/V copy
#      inside the timing, at 32K and 128K, under the default CTA schedule and under persistent CTAs.
# Logs go to $OUT (else <build>/key-orders-logs); steps.txt has each step's time.
#
#   scripts/key-orders-gpu.sh [build-dir]        (default build-gpu)
set -uo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${1:-$repo/build-gpu}
logs=${OUT:-$build/key-orders-logs}
mkdir -p "$logs"
tests=$build/tests/gpu/test_gpu
bench=$build/bench/mmsparse_engine_bench
status=0
step_start=$SECONDS
step_done() {
  echo "[key-orders-gpu] $1: $((SECONDS - step_start)) s" | tee -a "$logs/steps.txt"
  step_start=$SECONDS
}

"$tests" --gtest_filter='*KeyOrders*' >"$logs/tests.txt" 2>&1 || status=1
tail -3 "$logs/tests.txt"
configs='GpuConfigBuild.*:GpuConfigPrepare.*:*PlanDownload*:GpuBlindSightConfig.*'
configs+=':GpuBlindSightBuilder.Configs*'
"$tests" --gtest_filter="$configs" >"$logs/config-tests.txt" 2>&1 || status=1
tail -3 "$logs/config-tests.txt"
# A characterised BlindSight config through the CLI bench (its density column downloads the plan).
ctest --test-dir "$build" -R 'cli\.(characterise_gpu|bench_gpu_blindsight_config)$' \
  --output-on-failure >"$logs/config-cli.txt" 2>&1 || status=1
tail -3 "$logs/config-cli.txt"
step_done "tests"

# One wgmma configuration (persistent and one tile per CTA) and one mma.sync one.
sanitized='Kernels/GpuKeyOrders.RandomPlansMatchTheOracle/bf16_d128_wgmma128_gqa4:Kernels/GpuKeyOrders.RandomPlansMatchTheOracle/bf16_d64_gqa7'
config='Kernels/GpuKeyOrdersConfig.MixedHeadsMatchTheHostPlanAndTheOracle/bf16_d128_wgmma128'
for tool in memcheck racecheck; do
  filter=$sanitized
  [[ $tool == memcheck ]] && filter="$sanitized:$config"
  compute-sanitizer --tool "$tool" --error-exitcode 1 "$tests" --gtest_filter="$filter" \
    >"$logs/$tool.txt" 2>&1 || status=1
  grep -E "ERROR SUMMARY|RACECHECK SUMMARY|PASSED|FAILED" "$logs/$tool.txt" | tail -3
  step_done "$tool"
done

cases=(sinks-in-place-32k sinks-ordered-32k sinks-in-place-128k sinks-ordered-128k)
"$bench" "${cases[@]}" >"$logs/bench.txt" 2>&1 || status=1
MMSPARSE_CTA_SCHEDULE=persistent "$bench" "${cases[@]}" >"$logs/bench-persistent.txt" 2>&1 ||
  status=1
cat "$logs/bench.txt" "$logs/bench-persistent.txt"
step_done "bench"
exit "$status"
