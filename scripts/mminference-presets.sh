#!/usr/bin/env bash
# The MMInference search and bench on the SYNTHETIC presets beside the default video one: the
# Qwen3-VL-style prompt (video-qwen3vl-128k: timestamps before every frame, several videos of
# different frame sizes, images) and mixed-interleaved (a video interrupted by documents and
# images). Per preset: the GPU search on seed 1 (every boundary mode, item boundary and item sinks
# included, all built on the GPU), then `mmsparse bench --device cuda --config` with that config on
# seed 0 with the preset's needles. Prints per preset the bench's recall, needles kept and the
# tile-oracle "% of bound" lines; full outputs in $OUT (else <build>/mminference-presets).
#
#   scripts/mminference-presets.sh [build-dir]
#
# Environment: SEQ_LEN (default 65536, which fits the default time limits; at 131072, the presets'
# own length, the searches took 114 s (video-qwen3vl-128k) and 93 s (mixed-interleaved) on an H100
# on 2026-11-27: SEQ_LEN=131072 SEARCH_TIMEOUT=150 BENCH_TIMEOUT=60 takes about 6 minutes),
# SEARCH_TIMEOUT and BENCH_TIMEOUT (seconds per step, default 110 and 35: at most about 5 minutes
# in all), PRESETS (default both, space-separated). A search that runs out of its time writes no
# config and the preset's bench is skipped.
set -uo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${1:-$repo/build-gpu}
cli=$build/tools/cli/mmsparse
out=${OUT:-$build/mminference-presets}
seq_len=${SEQ_LEN:-65536}
search_timeout=${SEARCH_TIMEOUT:-110}
bench_timeout=${BENCH_TIMEOUT:-35}
read -r -a presets <<<"${PRESETS:-video-qwen3vl-128k mixed-interleaved}"
mkdir -p "$out"
if [[ ! -x $cli ]]; then
  echo "mminference-presets.sh: expected the CLI at $cli (build the mmsparse_cli target)" >&2
  exit 2
fi

status=0
for preset in "${presets[@]}"; do
  tag=$preset-$seq_len
  config=$out/config-$tag.json
  echo "== $preset, $seq_len tokens (SYNTHETIC): search on seed 1 (timeout ${search_timeout} s)"
  start=$SECONDS
  # A 0.96 target for the 0.95 bar over all rows (scripts/mminference-default.sh).
  timeout "$search_timeout" "$cli" search --preset "$preset" --seq-len "$seq_len" --seed 1 \
    --device cuda --target-mean-recall 0.96 --quiet --output "$config" \
    --json "$out/search-$tag.json" >"$out/search-$tag.txt" 2>&1
  search_status=$?
  echo "search: exit $search_status after $((SECONDS - start)) s ($out/search-$tag.txt)"
  if [[ $search_status -ne 0 || ! -f $config ]]; then
    tail -n 5 "$out/search-$tag.txt"
    status=1
    continue
  fi
  # The heads' patterns with their boundary mode and item sinks, counted.
  grep -Eo '"[0-9]+": "[^"]*"' "$config" | sed -E 's/^"[0-9]+": "//; s/"$//' |
    awk -F'[:,]' '{ mode = ""; sinks = ""
      for (i = 2; i <= NF; ++i) { if ($i ~ /^boundary=/) mode = $i; if ($i ~ /^item_sinks=/) sinks = $i }
      print $1, mode, sinks }' | sort | uniq -c | sort -rn
  echo "== $preset: bench of that config on seed 0 (timeout ${bench_timeout} s)"
  start=$SECONDS
  timeout "$bench_timeout" "$cli" bench --device cuda --preset "$preset" --seq-len "$seq_len" \
    --seed 0 --config "$config" --warmup 1 --repeats 3 --json "$out/bench-$tag.json" \
    >"$out/bench-$tag.txt" 2>&1
  bench_status=$?
  echo "bench: exit $bench_status after $((SECONDS - start)) s ($out/bench-$tag.txt)"
  [[ $bench_status -eq 0 ]] || status=1
  # The summary table (recall, needles kept, % of the tile-oracle bound per run) through the tile
  # oracle's line; progress and the column footers are in the file.
  awk '/^mmsparse bench/ { shown = 1 } shown { print } /^tile oracle \(/ { exit }' \
    "$out/bench-$tag.txt"
done
exit $status
