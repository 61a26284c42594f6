#!/usr/bin/env bash
# BlindSight's key-ordered templates against dense in alternating rounds (docs/results.md, session
# 30): dense's time at 36K tokens moves by up to 13% between runs on an H200 while the templates'
# moves by 2%, so a share of dense's throughput read from one bench can miss or clear the 85% bar by
# that alone. Each round is one `mmsparse bench` on the SYNTHETIC multi-image preset with a dense
# run among the three key-ordered templates, dense first in odd rounds and last in even ones, under
# the default CTA schedule; the summary gives each template's share of its own round's dense run
# and the median over the rounds. Logs and JSON go to $OUT (else <build>/blindsight-rounds-logs).
#
#   scripts/blindsight-rounds.sh [build-dir] [seq-len ...]     (default build-gpu, 36864)
#   ROUNDS=6 scripts/blindsight-rounds.sh ...                   (rounds per length; default 6)
#   BIDIRECTIONAL=1 scripts/blindsight-rounds.sh ...            (the Gemma 3 style's templates,
#       bidirectional=1: image tiles unmasked through their key order)
set -uo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${1:-$repo/build-gpu}
shift || true
lengths=("$@")
[[ ${#lengths[@]} -eq 0 ]] && lengths=(36864)
rounds=${ROUNDS:-6}
[[ $rounds =~ ^[1-9][0-9]*$ ]] || { echo "blindsight-rounds: ROUNDS: expected a positive integer, got '$rounds'" >&2; exit 2; }
bidirectional=${BIDIRECTIONAL:-0}
[[ $bidirectional == 0 || $bidirectional == 1 ]] ||
  { echo "blindsight-rounds: BIDIRECTIONAL: expected 0 or 1, got '$bidirectional'" >&2; exit 2; }
logs=${OUT:-$build/blindsight-rounds-logs}
cli=$build/tools/cli/mmsparse
[[ -x $cli ]] || { echo "blindsight-rounds: $cli: expected the mmsparse CLI of a CUDA build" >&2; exit 2; }
mkdir -p "$logs"

options="bidirectional=$bidirectional,permute=1"
templates=(--pattern "blindsight-sink:$options" --pattern "blindsight-intra:$options"
  --pattern "blindsight-intra-sink:$options")
status=0
for n in "${lengths[@]}"; do
  for round in $(seq 1 "$rounds"); do
    order=(--pattern dense "${templates[@]}")
    ((round % 2)) || order=("${templates[@]}" --pattern dense)
    "$cli" bench --device cuda --preset multi-image --seq-len "$n" --heads 28 --kv-heads 4 \
      --head-dim 128 "${order[@]}" --warmup 2 --repeats 5 --oracle-rows 8 --oracle-tiles 8 \
      --json "$logs/bench-$n-r$round.json" >"$logs/bench-$n-r$round.txt" 2>&1
    code=$?
    ((code == 0)) || status=1
    echo "[blindsight-rounds] $n tokens, round $round: exit $code"
  done
done
python3 "$repo/scripts/blindsight_rounds_summary.py" "$logs" | tee "$logs/summary.txt" || status=1
exit "$status"
