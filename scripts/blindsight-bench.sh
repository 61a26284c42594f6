#!/usr/bin/env bash
# BlindSight on the GPU (docs/blindsight.md), SYNTHETIC inputs throughout:
#   1. characterise the SYNTHETIC Qwen-style BlindSight model (28 heads, 6 layers, 20 prompts) into
#      a config at NMSE <= alpha (0.1), and print its attention FLOPs reduction on the multi-image
#      preset (Table 8's measure) at each length; on the CPU, in the background, beside step 2;
#   2. time cuDNN dense (PyTorch SDPA, cuDNN backend, K/V expanded to the query heads) at every
#      length: 1 warm-up and 3 timed calls each;
#   3. per length ONE bench on the multi-image preset: mmsparse's dense, the config and the
#      sink-packed templates (blindsight-sink, blindsight-intra-sink) in every layer, for the
#      config's speedups and the throughput on computed pairs (bench --json: tflops,
#      throughput_vs_dense); the oracle metrics, which this script does not print, on few rows;
#      the config's BlindSight heads (which characterise writes in place, permute=0, since a
#      config is built per call) are switched to key orders (permute=-1) there, as the templates
#      read them; then a second bench of dense and the config as written, in place, the key
#      orders' A/B (SKIP_IN_PLACE=1 leaves it out);
#   4. print per length cuDNN's and mmsparse's dense and the config per layer with its speedups
#      and its index (the per-call build), for both placements, then per layer the configs' and
#      the templates' throughput as a share of dense's.
# Logs and JSON go to $OUT (else <build>/blindsight-logs); steps.txt has each step's time, and each
# bench log its steps per layer. Run from a CUDA build with Python on (torch and safetensors,
# bench/peers.py's imports, for step 2; SKIP_PEERS=1 leaves it out).
#
#   scripts/blindsight-bench.sh [build-dir] [seq-len ...]        (default 36864 131072 307200)
#   LAYERS=1,3 scripts/blindsight-bench.sh ...                   (those layers only; default all)
#   CHARACTERISE_DEVICE=cuda scripts/blindsight-bench.sh ...     (Alg. 1's attention on the GPU,
#                                                                 then before step 2, not beside)
set -uo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${1:-$repo/build-gpu}
shift || true
lengths=("$@")
[[ ${#lengths[@]} -eq 0 ]] && lengths=(36864 131072 307200)
cli=$build/tools/cli/mmsparse
logs=${OUT:-$build/blindsight-logs}
mkdir -p "$logs"
in_place_config=$logs/blindsight-qwen-28h.json  # as characterise writes it
config=$logs/blindsight-qwen-28h-key-orders.json
csv_lengths=$(IFS=,; echo "${lengths[*]}")
heads=28
kv_heads=4
head_dim=128
shape=(--heads "$heads" --kv-heads "$kv_heads" --head-dim "$head_dim")
warmup=1
repeats=3
timing=(--warmup "$warmup" --repeats "$repeats")
# The oracle density and the tile oracle are not what this script reports: a few rows and tiles
# keep their work per layer small at 300K tokens.
oracle=(--oracle-rows 8 --oracle-tiles 8)

status=0
# Prints how long the step that just ended took, so that a device run shows where its time goes.
step_start=$SECONDS
step_done() {
  echo "[blindsight-bench] $1: $((SECONDS - step_start)) s" | tee -a "$logs/steps.txt"
  step_start=$SECONDS
}

# About 35 s of one CPU core (measured on a shared 2-core machine: 33 s user time).
characterise() {
  "$cli" characterise --preset blindsight-qwen --heads "$heads" --layers 6 --prompts 20 \
    --device "${CHARACTERISE_DEVICE:-cpu}" -o "$in_place_config" --layout-preset multi-image \
    --seq-len "$csv_lengths" --json "$logs/characterise.json" >"$logs/characterise.txt" 2>&1
}
characterise_pid=
if [[ ${CHARACTERISE_DEVICE:-cpu} == cpu ]]; then
  characterise &
  characterise_pid=$!
else
  characterise || status=1
  cat "$logs/characterise.txt"
  step_done characterise
fi

if [[ -z ${SKIP_PEERS:-} ]]; then
  python3 - "$repo/bench" "$logs/cudnn-dense.json" "$heads" "$kv_heads" "$head_dim" "$warmup" \
    "$repeats" "${lengths[@]}" <<'PYTHON' 2>&1 | tee "$logs/cudnn-dense.txt" || status=1
# cuDNN dense (SDPA) on random bf16 inputs: times do not depend on values. K/V expanded to the
# query heads, timed as bench/peers.py times it (its median_ms).
import json, sys
import torch
from torch.nn.attention import SDPBackend, sdpa_kernel

sys.path.insert(0, sys.argv[1])
from peers import median_ms  # noqa: E402

path = sys.argv[2]
heads, kv_heads, head_dim, warmup, repeats = map(int, sys.argv[3:8])
result = {"gpu": torch.cuda.get_device_name(0), "torch": torch.__version__, "ms": {}}
for n in map(int, sys.argv[8:]):
    q = torch.randn(1, heads, n, head_dim, device="cuda", dtype=torch.bfloat16)
    k, v = (torch.randn(1, kv_heads, n, head_dim, device="cuda", dtype=torch.bfloat16)
            .repeat_interleave(heads // kv_heads, 1) for _ in range(2))

    def call():
        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)

    result["ms"][str(n)] = median_ms(call, warmup, repeats)
    print(f"cuDNN dense at {n} tokens: {result['ms'][str(n)]:.2f} ms (median of {repeats})",
          flush=True)
    del q, k, v
    torch.cuda.empty_cache()
json.dump(result, open(path, "w"), indent=2)
PYTHON
  step_done "cuDNN dense (SDPA)"
fi

if [[ -n $characterise_pid ]]; then
  wait "$characterise_pid" || status=1
  cat "$logs/characterise.txt"
  step_done "characterise (what was left after cuDNN)"
fi
# The same heads through key orders: every BlindSight spec's permute=0 set to -1 (key order where
# causal, as the templates' default).
if [[ -f $in_place_config ]]; then
  sed -E 's/permute=0\b/permute=-1/g' "$in_place_config" >"$config" || status=1
fi

for n in "${lengths[@]}"; do
  "$cli" bench --device cuda --preset multi-image --seq-len "$n" "${shape[@]}" \
    --config "$config" --layers "${LAYERS:-all}" \
    --pattern blindsight-sink --pattern blindsight-intra-sink "${timing[@]}" "${oracle[@]}" \
    --json "$logs/bench-$n.json" 2>&1 | tee "$logs/bench-$n.txt" || status=1
  step_done "bench at $n tokens"
  if [[ -z ${SKIP_IN_PLACE:-} ]]; then
    "$cli" bench --device cuda --preset multi-image --seq-len "$n" "${shape[@]}" \
      --config "$in_place_config" --layers "${LAYERS:-all}" "${timing[@]}" "${oracle[@]}" \
      --json "$logs/bench-$n-in-place.json" 2>&1 | tee "$logs/bench-$n-in-place.txt" || status=1
    step_done "bench at $n tokens, config in place"
  fi
done

python3 - "$logs" "${lengths[@]}" <<'PYTHON' | tee "$logs/summary.txt" || status=1
import json, os, sys

logs, lengths = sys.argv[1], [int(n) for n in sys.argv[2:]]


def load(name):
    path = os.path.join(logs, name)
    return json.load(open(path)) if os.path.exists(path) else None


cudnn = (load("cudnn-dense.json") or {"ms": {}})["ms"]
nan = float("nan")


def mean_ms(bench, pattern):
    layers = bench["layers"]
    if pattern == "dense":
        return sum(layer["dense"]["attention_ms"] for layer in layers) / len(layers)
    return sum(run["attention_ms"] for layer in layers for run in layer["patterns"]
               if run["pattern"] == pattern) / len(layers)


def mean_index_ms(bench):
    """The config's per-call build (index) per layer."""
    layers = bench["layers"]
    return sum(run.get("index_ms", nan) for layer in layers for run in layer["patterns"]
               if run["pattern"] == "config") / len(layers)


print("BlindSight on the multi-image preset (SYNTHETIC), 28 heads, 4 KV heads, d128, bf16; the "
      "config through key orders (permute=-1), in place: as characterise writes it (permute=0)")
print(f"{'tokens':>8} {'cuDNN ms':>9} {'dense ms':>9} {'config ms':>9} {'vs cuDNN':>9} "
      f"{'vs dense':>9} {'index ms':>9} {'in place':>9} {'vs cuDNN':>9} {'vs dense':>9} "
      f"{'index ms':>9} {'order':>8}   (per layer, mean over the layers run; index: the "
      "config's build per call)")
for n in lengths:
    bench = load(f"bench-{n}.json")
    if bench is None:
        continue
    dense_ms, config_ms = mean_ms(bench, "dense"), mean_ms(bench, "config")
    base = cudnn.get(str(n), nan)
    line = (f"{n:>8} {base:>9.2f} {dense_ms:>9.2f} {config_ms:>9.2f} {base / config_ms:>8.2f}x "
            f"{dense_ms / config_ms:>8.2f}x {mean_index_ms(bench):>9.2f}")
    in_place = load(f"bench-{n}-in-place.json")
    if in_place is not None:
        # Each against the dense of its own bench, which ran beside it.
        place_ms = mean_ms(in_place, "config")
        line += (f" {place_ms:>9.2f} {base / place_ms:>8.2f}x "
                 f"{mean_ms(in_place, 'dense') / place_ms:>8.2f}x {mean_index_ms(in_place):>9.2f} "
                 f"{place_ms / config_ms:>7.2f}x")
    print(line)
print()
print("per layer: throughput on computed pairs (4 * pairs * d / time) as a share of dense's")
print(f"{'tokens':>8} {'layer':>5} {'pattern':<22} {'pairs':>15} {'ms':>9} {'TFLOP/s':>8} "
      f"{'of dense':>9} {'speedup':>8}")
for n in lengths:
    for name, suffix in (("", ""), (" in place", "-in-place")):
        bench = load(f"bench-{n}{suffix}.json")
        if bench is None:
            continue
        for layer in bench["layers"]:
            dense = layer["dense"]
            print(f"{n:>8} {layer['layer']:>5} {'dense' + name:<22} {dense['pairs']:>15} "
                  f"{dense['attention_ms']:>9.2f} {dense['tflops']:>8.1f} {1.0:>8.1%} "
                  f"{1.0:>7.2f}x")
            for run in layer["patterns"]:
                label = run["pattern"] + (name if run["pattern"] == "config" else "")
                print(f"{n:>8} {layer['layer']:>5} {label:<22} {run['computed_pairs']:>15} "
                      f"{run['attention_ms']:>9.2f} {run['tflops']:>8.1f} "
                      f"{run['throughput_vs_dense']:>8.1%} "
                      f"{dense['attention_ms'] / run['attention_ms']:>7.2f}x")
PYTHON
exit $status
