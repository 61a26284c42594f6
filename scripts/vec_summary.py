#!/usr/bin/env python3
"""The figures VecAttention's issue asks for, from the JSON scripts/vec-bench.sh writes (SYNTHETIC).

Per pattern run of each bench: recall, density, index (selection) ms, attention ms, their sum, the
speedup against mmsparse dense (bench's own) and against cuDNN dense at the same shape
(bench/peers.py: PyTorch SDPA, cuDNN backend, random inputs: dense time does not depend on values).
Then vec's selection time against vertical-slash's index time; the speed against cuDNN at matched
recall (the fastest vec run whose recall reaches vertical-slash's, and the one reaching 0.95); and
the mixed config against both single-method configs at mean recall >= 0.95.

    python3 scripts/vec_summary.py OUT_DIR
"""

import json
import os
import sys

RECALL_TARGET = 0.95


def load(directory, name):
    path = os.path.join(directory, name)
    if not os.path.exists(path):
        return None
    with open(path) as file:
        return json.load(file)


def cudnn_ms(peers, seq_len):
    """cuDNN dense time at seq_len from a peers.py report, or None."""
    if peers is None:
        return None
    rows = [r for r in peers["rows"] if r["impl"] == "sdpa-cudnn" and r["pattern"] == "dense"
            and r["seq_len"] == seq_len]
    return rows[0]["ms"] if rows else None


def runs(bench):
    """(label, spec, recall, density, index ms, attention ms, speedup vs mmsparse dense) per run."""
    layer = bench["layers"][0]
    dense = layer["dense"]["attention_ms"]
    yield ("dense", layer["dense"]["spec"], 1.0, 1.0, 0.0, dense, 1.0)
    for run in layer["patterns"]:
        yield (run["pattern"], run["spec"], run.get("recall_mean", float("nan")), run["density"],
               run["index_ms"], run["attention_ms"], run.get("speedup", float("nan")))


def print_bench(title, bench, peers):
    seq_len = bench["workload"]["seq_len"]
    base = cudnn_ms(peers, seq_len)
    print(f"\n{title}: {bench['workload']['preset']} {seq_len} tokens, "
          f"{bench['workload']['q_heads']} heads, seed {bench['workload']['seed']}, {bench['device']}"
          + (f"; cuDNN dense {base:.2f} ms" if base else "; no cuDNN figure"))
    print(f"{'run':<16} {'recall':>7} {'density':>8} {'index ms':>9} {'attn ms':>9} {'total ms':>9} "
          f"{'vs dense':>9} {'vs cuDNN':>9}  spec")
    found = {}
    for label, spec, recall, density, index_ms, attention_ms, speedup in runs(bench):
        total = index_ms + attention_ms
        versus = f"{base / total:>8.2f}x" if base else f"{'-':>9}"
        print(f"{label:<16} {recall:>7.4f} {100 * density:>7.2f}% {index_ms:>9.2f} {attention_ms:>9.2f} "
              f"{total:>9.2f} {speedup:>8.2f}x {versus}  {spec[:60]}")
        # vec runs (the timing bench's alphas) and repeated patterns go by their specs.
        key = spec if label == "vec" or label in found else label
        found[key] = (recall, density, index_ms, attention_ms, total)
    return found


def print_timing(found, base):
    """Selection against vertical-slash's index, and vec against cuDNN at matched recall."""
    vec = {label: values for label, values in found.items() if label.startswith("vec")}
    slash = found.get("vertical-slash")
    if not vec or slash is None:
        return
    for label, (recall, _, index_ms, _, _) in vec.items():
        verdict = "within" if index_ms <= slash[2] else "ABOVE"
        name = label.split(',')[0] + (" per block" if "union_tiles=0" in label else "")
        print(f"selection {name:<22} {index_ms:8.3f} ms vs vertical-slash index "
              f"{slash[2]:8.3f} ms: {verdict}")
    for name, target in (("vertical-slash's recall", slash[0]), ("recall target", RECALL_TARGET)):
        matched = [(values[4], label, values) for label, values in vec.items()
                   if values[0] >= target]
        if not matched:
            print(f"at {name} {target:.4f}: no vec run reaches it")
            continue
        total, label, values = min(matched)
        versus = f"{base / total:.2f}x cuDNN dense" if base else "no cuDNN figure"
        print(f"at {name} {target:.4f}: {label} recall {values[0]:.4f}, selection + attention "
              f"{total:.2f} ms, {versus}")


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    directory = sys.argv[1]
    peers = load(directory, "peers-128k.json")
    timing = load(directory, "bench-timing-128k.json")
    if timing is not None:
        found = print_bench("timing (fixed alphas, selection included)", timing, peers)
        print_timing(found, cudnn_ms(peers, timing["workload"]["seq_len"]))
    results = {}
    for name in ("vec", "mixed", "mminference"):
        bench = load(directory, f"bench-{name}-128k.json")
        if bench is not None:
            results[name] = print_bench(f"{name} config", bench, peers)

    vec = results.get("vec", {})
    if "config" in vec and "vertical-slash" in vec:
        print(f"\nselection (vec config, every head) {vec['config'][2]:.2f} ms vs vertical-slash index "
              f"{vec['vertical-slash'][2]:.2f} ms at the same length: "
              + ("within" if vec["config"][2] <= vec["vertical-slash"][2] else "ABOVE"))

    print(f"\nconfigs at mean recall >= {RECALL_TARGET} (out of sample), fastest first:")
    configs = [(values["config"][4], name, values["config"]) for name, values in results.items()
               if "config" in values]
    for total, name, (recall, density, _, _, _) in sorted(configs):
        verdict = "meets" if recall >= RECALL_TARGET else "misses"
        print(f"  {name:<12} total {total:9.2f} ms, recall {recall:.4f} ({verdict}), density "
              f"{100 * density:.2f}%")

    dit_peers = load(directory, "peers-dit.json")
    for preset in ("dit-wan2.1-76k", "dit-hunyuan-119k"):
        bench = load(directory, f"bench-vec-{preset}.json")
        if bench is not None:
            print_bench(f"vec config (non-causal)", bench, dit_peers)
    return 0


if __name__ == "__main__":
    sys.exit(main())
