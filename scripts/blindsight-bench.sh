#!/usr/bin/env bash
# BlindSight on the GPU (docs/blindsight.md), SYNTHETIC inputs throughout:
#   1. characterise the SYNTHETIC Qwen-style BlindSight model (28 heads, 6 layers, 20 prompts) into
#      a config at NMSE <= alpha (0.1), and print its attention FLOPs reduction on the multi-image
#      preset (Table 8's measure) at each length;
#   2. time that config (every layer) against mmsparse's dense on the multi-image preset;
#   3. time the sink-packed templates (blindsight-sink, blindsight-intra-sink) against dense, for
#      the throughput on computed pairs (bench --json: tflops, throughput_vs_dense);
#   4. time cuDNN dense (PyTorch SDPA) at the same shapes (bench/peers.py, dense only);
#   5. print per length: cuDNN and mmsparse dense per layer, the config per layer, its speedups,
#      and the templates' throughput as a share of dense's.
# Logs and JSON go to $OUT (else <build>/blindsight-logs). Run from a CUDA build with Python on
# (torch and safetensors for step 4; SKIP_PEERS=1 leaves it out).
#
#   scripts/blindsight-bench.sh [build-dir] [seq-len ...]        (default 36864 131072 307200)
#   CHARACTERISE_DEVICE=cuda scripts/blindsight-bench.sh ...     (Alg. 1's attention on the GPU)
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
shape=(--heads 28 --kv-heads 4 --head-dim 128)
timing=(--warmup 1 --repeats 3)

status=0
# Prints how long the step that just ended took, so that a device run shows where its time goes.
step_start=$SECONDS
step_done() {
  echo "[blindsight-bench] $1: $((SECONDS - step_start)) s" | tee -a "$logs/steps.txt"
  step_start=$SECONDS
}
# About 35 s of one CPU core (measured on a shared 2-core machine: 33 s user time).
"$cli" characterise --preset blindsight-qwen --heads 28 --layers 6 --prompts 20 \
  --device "${CHARACTERISE_DEVICE:-cpu}" -o "$config" --layout-preset multi-image \
  --seq-len "$csv_lengths" --json "$logs/characterise.json" 2>&1 |
  tee "$logs/characterise.txt" || status=1
step_done characterise

for n in "${lengths[@]}"; do
  "$cli" bench --device cuda --preset multi-image --seq-len "$n" "${shape[@]}" \
    --config "$config" --layers all "${timing[@]}" --quiet \
    --json "$logs/bench-config-$n.json" 2>&1 | tee "$logs/bench-config-$n.txt" || status=1
  step_done "config at $n tokens"
  "$cli" bench --device cuda --preset multi-image --seq-len "$n" "${shape[@]}" \
    --pattern blindsight-sink --pattern blindsight-intra-sink "${timing[@]}" --quiet \
    --json "$logs/bench-templates-$n.json" 2>&1 | tee "$logs/bench-templates-$n.txt" || status=1
  step_done "templates at $n tokens"
done

if [[ -z ${SKIP_PEERS:-} ]]; then
  # Dense only (--masks with no mask), no FlexAttention; one round of 1 + 3 calls per peer.
  python3 "$repo/bench/peers.py" --mmsparse "$cli" --seq-lens "${lengths[@]}" --heads 28 \
    --kv-heads 4 --head-dim 128 --masks --skip-flex --warmup 1 --repeats 3 --rounds 1 \
    --out "$logs/peers-dense.json" 2>&1 | tee "$logs/peers-dense.txt" || status=1
  step_done "cuDNN dense (bench/peers.py)"
fi

python3 - "$logs" "${lengths[@]}" <<'EOF' | tee "$logs/summary.txt" || status=1
import json, os, sys

logs, lengths = sys.argv[1], [int(n) for n in sys.argv[2:]]
peers_file = os.path.join(logs, "peers-dense.json")
cudnn = {}
if os.path.exists(peers_file):
    for row in json.load(open(peers_file))["rows"]:
        if row["impl"] == "sdpa-cudnn" and row["pattern"] == "dense":
            cudnn[row["seq_len"]] = row["ms"]

def load(name):
    path = os.path.join(logs, name)
    return json.load(open(path)) if os.path.exists(path) else None

print("BlindSight on the multi-image preset (SYNTHETIC), 28 heads, 4 KV heads, d128, bf16")
print(f"{'tokens':>8} {'cuDNN ms':>9} {'dense ms':>9} {'config ms':>9} {'vs cuDNN':>9} "
      f"{'vs dense':>9}   (per layer, mean over the config's layers)")
for n in lengths:
    config = load(f"bench-config-{n}.json")
    if config is None:
        continue
    layers = config["layers"]
    dense_ms = sum(layer["dense"]["attention_ms"] for layer in layers) / len(layers)
    config_ms = sum(layer["patterns"][0]["attention_ms"] for layer in layers) / len(layers)
    base = cudnn.get(n)
    print(f"{n:>8} {base if base else float('nan'):>9.2f} {dense_ms:>9.2f} {config_ms:>9.2f} "
          f"{(base / config_ms) if base else float('nan'):>8.2f}x {dense_ms / config_ms:>8.2f}x")
print()
print("throughput on computed pairs (4 * pairs * d / time) against dense's")
print(f"{'tokens':>8} {'pattern':<24} {'pairs':>15} {'ms':>9} {'TFLOP/s':>8} {'of dense':>9}")
for n in lengths:
    templates = load(f"bench-templates-{n}.json")
    if templates is None:
        continue
    layer = templates["layers"][0]
    dense = layer["dense"]
    print(f"{n:>8} {'dense':<24} {dense['pairs']:>15} {dense['attention_ms']:>9.2f} "
          f"{dense['tflops']:>8.1f} {1.0:>8.1%}")
    for run in layer["patterns"]:
        print(f"{n:>8} {run['pattern']:<24} {run['computed_pairs']:>15} {run['attention_ms']:>9.2f} "
              f"{run['tflops']:>8.1f} {run['throughput_vs_dense']:>8.1%}")
EOF
exit $status
