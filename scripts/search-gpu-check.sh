#!/usr/bin/env bash
# The measured search on the GPU (docs/search.md): its GPU tests (candidates scored over every row
# on the GPU against the CPU reference), then the timed search of the SYNTHETIC default video preset
# at 128K tokens, 28 heads, searched on seed 0, and `bench` judging the config on seed 1 (a seed
# the search never saw). Logs go to $OUT (else <build>/search-logs). Run from a CUDA build.
#
#   scripts/search-gpu-check.sh [build-dir] [seq-len]
set -uo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${1:-$repo/build-gpu}
seq_len=${2:-131072}
cli=$build/tools/cli/mmsparse
logs=${OUT:-$build/search-logs}
mkdir -p "$logs"

status=0
"$build/tests/gpu/test_gpu" --gtest_filter='GpuSearchRows.*' 2>&1 | tee "$logs/test-gpu-search.txt" \
  || status=1
# The search flags of scripts/mminference-e2e.sh; `time` reports the wall time against the 60 s bar.
{ time "$cli" search --device cuda --seq-len "$seq_len" --needles 4 --seed 0 --boundary-modes 0 \
    --target-mean-recall 0.96 --output "$logs/config.json" --json "$logs/search.json"; } \
  > "$logs/search.txt" 2> "$logs/search-stderr.txt" || status=1
tail -n 3 "$logs/search-stderr.txt"
grep -E "mean recall|s$" "$logs/search.txt" | tail -n 3
"$cli" bench --device cuda --seq-len "$seq_len" --needles 4 --seed 1 --config "$logs/config.json" \
  --per-head --json "$logs/bench.json" 2>&1 | tee "$logs/bench.txt" || status=1
exit $status
