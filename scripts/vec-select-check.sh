#!/usr/bin/env bash
# VecAttention's selection on the GPU: correctness against the CPU reference first, then its phase
# times beside vertical-slash's index on the SYNTHETIC video preset at 128K (seed 1), about two to
# three minutes on one H100:
#   1. the vec GPU tests (ctest -L gpu -R Vec): the device selection equals the host's set for set
#      within the rounding bound (tests/gpu/vec_selection_check.h), plans record for record;
#   2. compute-sanitizer memcheck on the vec tests of the score pass's edges (edge shapes, chunks
#      at the candidate ranges' edges);
#   3. mmsparse_index_bench 131072 vec,vertical-slash 4 1 1: vec's phases (pool, score, count,
#      write, ...) per alpha beside vertical-slash's index milliseconds.
# Each step's log goes to $OUT (else <build>/vec-select-logs); steps.txt has each step's exit status
# and time. The script exits 1 when a step failed, after running every step.
#
#   scripts/vec-select-check.sh [build-dir]        (a CUDA Release build; default build-gpu)
set -uo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${1:-$repo/build-gpu}
out=${OUT:-$build/vec-select-logs}
mkdir -p "$out"

status=0
# Runs one step with its output in $out/<name>.txt and records its exit status and time.
step() {
  local name=$1
  shift
  local start=$SECONDS
  "$@" >"$out/$name.txt" 2>&1
  local rc=$?
  echo "[vec-select-check] $name: exit $rc, $((SECONDS - start)) s" | tee -a "$out/steps.txt"
  [[ $rc -eq 0 ]] || status=1
}

step tests ctest --test-dir "$build" -L '^gpu$' -R Vec --output-on-failure
step memcheck compute-sanitizer --tool memcheck --error-exitcode 1 "$build/tests/gpu/test_gpu" \
  --gtest_filter='GpuVecBuild.EdgeShapes*:GpuVecBuild.ChunksAtCandidateRangeEdges*'
step phases "$build/bench/mmsparse_index_bench" 131072 vec,vertical-slash 4 1 1
grep -E '^(vertical-slash|vec)|phases \(kept pool\)' "$out/phases.txt"
exit $status
