#!/usr/bin/env bash
# The GPU check in one call: builds the CUDA engine and its GPU tests (Release, MMSPARSE_CUDA=ON),
# runs `ctest -L '^gpu$'` (the single-GPU suite: -L takes a regex, and `gpu` alone also matches
# multi_gpu), then compute-sanitizer (memcheck, racecheck, synccheck, initcheck) on a small
# selection of GPU tests. Logs go to $OUT when it is set (the device machine's output folder), else
# to <build>/gpu-check-logs. Exits non-zero when any step fails; prints a summary table last.
#
#   scripts/gpu-check.sh
#   MMSPARSE_GPU_BUILD_DIR=dir     build directory (default: build-gpu in the repository)
#   MMSPARSE_GPU_SKIP_BUILD=1      use a build made elsewhere, e.g. built on a machine with the
#                                  Debian dependencies and carried to one with the GPU
#   MMSPARSE_GPU_JOBS=n            build parallelism (default: all cores)
#   MMSPARSE_GPU_SKIP_TESTS=1      only the sanitizers (the tests ran in an earlier call)
set -uo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${MMSPARSE_GPU_BUILD_DIR:-$repo/build-gpu}
logs=${OUT:-$build/gpu-check-logs}
jobs=${MMSPARSE_GPU_JOBS:-$(nproc)}
test_binary=$build/tests/gpu/test_gpu
# Small enough to run under every sanitizer tool in seconds, wide enough to reach every kernel path:
# empty and keyless tiles (fill kernel), masked and unmasked chunks, token masks, column gathers,
# both element types and head dims, both kernels (mma.sync and wgmma, 64- and 128-row tiles), merge,
# the vertical-slash index builder (estimate, top-k, conversion; Q-boundary groups and runs; 2D key
# spaces and the bitmap conversion), the grid index builder (search, conversion, empty capacity
# tiles), the per-head config builder (sections, concatenation, schedule), and every static
# pattern on the two-warpgroup wgmma kernel (its grid masks run the lattice kernels), token
# masks on both wgmma kernels, VecAttention's builder (pooling, count and write passes); head_dim
# 256 (64-key chunks, two stages) on spans with 64-row tiles (one warpgroup without rows), gathered
# columns, passes, the static patterns and token masks; the persistent wgmma kernel (gathered-key
# plans with every mask and uncovered rows, many tiny images).
sanitizer_tests=(
  'GpuAttentionEdges.*'
  'Kernels/GpuAttention.MixedMaskPolicies/bf16_d64'
  'Kernels/GpuAttention.RandomSpansAndColumnsWithPermutedQueries/fp16_d128'
  'GpuMerge.MatchesCpuMerge'
  'Kernels/GpuAttention.RandomSpansWithPermutedQueries/bf16_d128_wgmma128'
  'Kernels/GpuAttention.DenseCausalMatchesOracle/fp16_d128_wgmma64'
  'Kernels/GpuAttention.ManyColumnsAcrossChunks/bf16_d128_wgmma128'
  'GpuPlanBuild.AttentionThroughBothPlansAgree'
  'GpuIndexBuild.VerticalSlashEdgeShapesAndBudgetsMatchTheHostPlan'
  'GpuIndexBuild.PreparePatternEstimatesFromDeviceInputs'
  'GpuIndexBuild.GridEdgeShapesMatchTheHost'
  'GpuIndexBuild.QueryBoundaryAttentionMatchesTheOracle'
  'GpuIndexBuild.TwoDBoundaryEdgeLayoutsMatchTheHostPlan'
  'GpuIndexBuild.GridBoundaryEdgeLayoutsMatchTheHost'
  'GpuConfigBuild.EdgeShapesMatchTheHostPlan'
  'GpuConfigBuild.GridSectionsMatchTheHostPlan'
  'Kernels/GpuAttention.PassesMergeToTheUnion/bf16_d128_wgmma128'
  'Kernels/GpuAttention.StaticPatterns/bf16_d128_wgmma128'
  'Wgmma/GpuTokenMasks.RandomMixedPlans/bf16_d128_wgmma128'
  'Wgmma/GpuTokenMasks.BidirectionalImages/fp16_d128_wgmma64'
  'GpuVecBuild.EdgeShapesMatchTheHostPlan'
  'Kernels/GpuAttention.DenseCausalMatchesOracle/bf16_d256_wgmma64'
  'Kernels/GpuAttention.ManyColumnsAcrossChunks/fp16_d256_wgmma128'
  'Kernels/GpuAttention.PassesMergeToTheUnion/bf16_d256_wgmma128'
  'Kernels/GpuAttention.StaticPatterns/bf16_d256_wgmma128'
  'Wgmma/GpuTokenMasks.BidirectionalImages/bf16_d256_wgmma128'
  'Dtypes/GpuPersistentSchedule.RandomPlans/bfloat16'
  'Dtypes/GpuPersistentSchedule.AHundredTinyImages/float16'
)
sanitizer_filter=$(IFS=:; echo "${sanitizer_tests[*]}")
sanitizer_tools=(memcheck racecheck synccheck initcheck)

mkdir -p "$logs"
declare -a summary=()
failed=0
record() {  # record <step> <exit status>
  if [[ $2 -eq 0 ]]; then summary+=("$1|ok"); else summary+=("$1|FAILED ($2)"); failed=1; fi
}

nvidia-smi >"$logs/nvidia-smi.txt" 2>&1 ||
  echo "nvidia-smi failed; is there a GPU?" >>"$logs/nvidia-smi.txt"

if [[ ${MMSPARSE_GPU_SKIP_BUILD:-0} != 1 ]]; then
  cmake -S "$repo" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DMMSPARSE_CUDA=ON \
    -DMMSPARSE_BUILD_CLI=OFF >"$logs/configure.log" 2>&1
  record configure $?
  cmake --build "$build" --target test_gpu -j "$jobs" >"$logs/build.log" 2>&1
  record build $?
fi

if [[ ! -x $test_binary ]]; then
  echo "gpu-check: $test_binary is missing; see $logs/configure.log and $logs/build.log" >&2
  record "find test_gpu" 1
else
  # ctest's files hold the absolute paths of the tree they were generated in; a build carried to
  # another checkout runs the same tests through the GoogleTest binary directly.
  if [[ ${MMSPARSE_GPU_SKIP_TESTS:-0} == 1 ]]; then
    echo "gpu-check: tests skipped (MMSPARSE_GPU_SKIP_TESTS=1)" >"$logs/ctest.log"
  elif grep -q "$build" "$build/tests/gpu/CTestTestfile.cmake" 2>/dev/null; then
    (cd "$build" && ctest -L '^gpu$' --output-on-failure) >"$logs/ctest.log" 2>&1
    record "ctest -L '^gpu$'" $?
  else
    "$test_binary" >"$logs/ctest.log" 2>&1
    record "test_gpu (carried build)" $?
  fi
  tail -n 40 "$logs/ctest.log"

  for tool in "${sanitizer_tools[@]}"; do
    compute-sanitizer --tool "$tool" --error-exitcode 1 "$test_binary" \
      --gtest_filter="$sanitizer_filter" >"$logs/sanitizer-$tool.log" 2>&1
    record "compute-sanitizer $tool" $?
    grep -E "ERROR SUMMARY|RACECHECK SUMMARY|FAILED" "$logs/sanitizer-$tool.log" | head -n 5
  done
fi

echo
echo "gpu-check summary (logs in $logs)"
printf '%-36s %s\n' step result
for line in "${summary[@]}"; do printf '%-36s %s\n' "${line%%|*}" "${line#*|}"; done
exit "$failed"
