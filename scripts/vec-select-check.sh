#!/usr/bin/env bash
# VecAttention's selection on the GPU: correctness against the CPU reference first, then its phase
# times under both score passes beside vertical-slash's index on the SYNTHETIC video preset at 128K
# (seed 1), about 3 minutes on one H100 (about 4 with step 4):
#   1. the vec GPU tests (GpuVecBuild.*, GpuVecHeads.*, GpuVecScorePasses.*, GpuVecRuns.*): the
#      device selection equals the host's set for set within the rounding bound
#      (tests/gpu/vec_selection_check.h),
#      plans record for record (per-head alphas in one build and in configs among other methods'
#      heads included); both score passes (mma.sync, wgmma) on the same inputs;
#   2. compute-sanitizer memcheck on the vec tests of the score pass's edges (edge shapes, chunks
#      at the candidate ranges' edges, chunk counts, groups starting inside a chunk, both passes)
#      and of the run passes' staging (spans across splits) and segments (GpuVecRuns); head_dim
#      128 runs the wgmma score pass there (MMSPARSE_VEC_SCORE unset), 64 mma;
#   3. mmsparse_index_bench 131072 vec,vertical-slash 4 1 1, once per score pass
#      (MMSPARSE_VEC_SCORE=mma, then wgmma): vec's phases (pool, score, count, write, ...) per alpha
#      beside vertical-slash's index milliseconds;
#   4. a per-head config of 28 vec heads (the alphas search-vec chose on seed 0 of the SYNTHETIC
#      128K video preset, written to $out/vec28.json), benched with --per-head on seed 1: the vec
#      heads are one section of the config builder (one build, one synchronisation), so its
#      `index ms` is one build over 28 heads (was 28 builds, one after another: 34.7 ms).
#      About 75 s, most of it the dense reference and the recall on the host.
# Each step's log goes to $OUT (else <build>/vec-select-logs); steps.txt has each step's exit status
# and time. The script exits 1 when a step failed, after running every step.
#
#   scripts/vec-select-check.sh [build-dir]        (a CUDA Release build; default build-gpu)
#   VEC_CHECK_MIN=1 scripts/vec-select-check.sh    (the shortest check, ~3 min: the new tests
#                                                   and four of the older ones, memcheck of two,
#                                                   steps 3-4)
set -uo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${1:-$repo/build-gpu}
minimum=${VEC_CHECK_MIN:-0}
if [[ $minimum != 0 && $minimum != 1 ]]; then
  echo "vec-select-check.sh: VEC_CHECK_MIN: expected 0 or 1, got '$minimum'" >&2
  exit 2
fi
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

# One test process (ctest starts one per test, each initialising CUDA).
if [[ $minimum == 1 ]]; then
  tests='GpuVecHeads.*:GpuVecBuild.MatchesTheHostPlanOnRandomInputs:GpuVecBuild.UnionTiles*'
  tests+=':GpuVecBuild.SpansAcrossSplits*:GpuVecBuild.MixedConfigs*:GpuVecBuild.ChunkCounts*'
  tests+=':GpuVecScorePasses.*:GpuVecBuild.SchedulesOfManyTiles*:GpuVecRuns.*'
else
  tests='GpuVecBuild.*:GpuVecHeads.*:GpuVecScorePasses.*:GpuVecRuns.*'
fi
step tests "$build/tests/gpu/test_gpu" --gtest_filter="$tests"
memcheck_tests='GpuVecBuild.EdgeShapes*:GpuVecBuild.ChunksAtCandidateRangeEdges*:GpuVecHeads.*'
memcheck_tests+=':GpuVecBuild.ChunkCountsAroundThePipeline*:GpuVecBuild.SpansAcrossSplits*'
memcheck_tests+=':GpuVecScorePasses.GroupsStartingInsideAChunk*:GpuVecRuns.*'
# The short check's memcheck: the run passes' staging (column runs across words and steps) and
# segments, and the score passes' chunk counts (head_dim 128 on the wgmma pass, 64 on mma.sync).
[[ $minimum == 1 ]] &&
  memcheck_tests='GpuVecBuild.SpansAcrossSplits*:GpuVecBuild.ChunkCounts*:GpuVecRuns.*'
step memcheck compute-sanitizer --tool memcheck --error-exitcode 1 "$build/tests/gpu/test_gpu" \
  --gtest_filter="$memcheck_tests"
# The two score passes in one build, each beside vertical-slash (the bench names the pass that ran).
for pass in mma wgmma; do
  step "phases-$pass" env MMSPARSE_VEC_SCORE=$pass \
    "$build/bench/mmsparse_index_bench" 131072 vec,vertical-slash 4 1 1
done

# search-vec's per-head alphas on seed 0 (session 28's run): the config without the search.
vec28_alphas=(187500 62500 156250 998047 156250 101793 94764 171875 187500 996094 187500 0 187500
  187500 992188 139648 171050 134765 996094 0 144531 0 156250 110785 750000 143554 125000 500000)
{
  printf '{\n  "schema_version": 2,\n  "default": "dense",\n  "layers": {"0": {"heads": {\n'
  for head in "${!vec28_alphas[@]}"; do
    separator=$([[ $head -lt $((${#vec28_alphas[@]} - 1)) ]] && echo , || echo)
    printf '    "%d": "vec:alpha_ppm=%d,causal=1,group=16,pooling=64,union_tiles=1"%s\n' \
      "$head" "${vec28_alphas[$head]}" "$separator"
  done
  printf '  }}}\n}\n'
} >"$out/vec28.json"
step vec28 "$build/tools/cli/mmsparse" bench --device cuda --seq-len 131072 --seed 1 \
  --config "$out/vec28.json" --per-head
for pass in mma wgmma; do
  echo "== score pass $pass"
  grep -E '^(vertical-slash|vec)|phases \(kept pool\)' "$out/phases-$pass.txt"
done
grep -E '^(dense|config) ' "$out/vec28.txt"
exit $status
