#!/usr/bin/env bash
# BlindSight on the GPU (docs/blindsight.md): characterise the SYNTHETIC Qwen-style BlindSight model
# with 28 heads on the CPU into a config, print its attention FLOPs reduction on the multi-image
# preset (Table 8's measure), then time the config (every layer) and each template against dense
# on the multi-image preset at each length (36K-300K by default). Logs go to $OUT (else
# <build>/blindsight-logs). Run from a CUDA build (scripts/device-bench.sh builds one).
#
#   scripts/blindsight-bench.sh [build-dir] [seq-len ...]
set -uo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${1:-$repo/build-gpu}
shift || true
lengths=("$@")
[[ ${#lengths[@]} -eq 0 ]] && lengths=(36864 131072 307200)
cli=$build/tools/cli/mmsparse
logs=${OUT:-$build/blindsight-logs}
mkdir -p "$logs"
config=$logs/blindsight-qwen-28h.json
csv_lengths=$(IFS=,; echo "${lengths[*]}")

status=0
"$cli" characterise --preset blindsight-qwen --heads 28 --layers 6 --prompts 20 --device cpu \
  -o "$config" --layout-preset multi-image --seq-len "$csv_lengths" \
  --json "$logs/characterise.json" 2>&1 | tee "$logs/characterise.txt" || status=1

for n in "${lengths[@]}"; do
  "$cli" bench --device cuda --preset multi-image --seq-len "$n" --heads 28 --kv-heads 4 \
    --head-dim 128 --config "$config" --layers all --warmup 1 --repeats 3 \
    --json "$logs/bench-config-$n.json" 2>&1 | tee "$logs/bench-config-$n.txt" || status=1
  "$cli" bench --device cuda --preset multi-image --seq-len "$n" --heads 28 --kv-heads 4 \
    --head-dim 128 --pattern blindsight-sink --pattern blindsight-intra \
    --pattern blindsight-intra-sink --warmup 1 --repeats 3 \
    --json "$logs/bench-templates-$n.json" 2>&1 | tee "$logs/bench-templates-$n.txt" || status=1
done
exit $status
