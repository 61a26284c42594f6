#!/usr/bin/env python3
"""Side-by-side benchmark of mmsparse against the attention people use today, on one GPU, in one run.

Peers: PyTorch SDPA with the cuDNN backend and with the FlashAttention-2 backend, and FlexAttention
(torch.compile'd) with the equivalent block mask. mmsparse runs through its CLI on the very same
tensors (written once to a safetensors file) and its outputs are compared with the peers' (relative
Frobenius error and max abs error of O): dense with cuDNN, A-shape and the grid-like mask with
FlexAttention, whose mask_mod states each mask element by element (mmsparse runs the grid mask as
its `grid-mask` pattern, two passes merged by LSE).

Inputs are random bf16 tensors (N(0, 1)): timings do not depend on values, and accuracy is checked
against the peers, not against a model. Times are CUDA-event medians after warm-up; TFLOP/s count
only computed pairs (4 * pairs * head_dim).

Every implementation is timed in each of --rounds rounds, the order rotated from round to round, so
that none always runs first or last in the GPU's power and clock history (an H100 under its power
cap moves its clock by 20% within a second). A ratio is taken within each round (mmsparse and its
peer timed minutes apart would compare clocks, not kernels) and reported as the median over the
rounds with its range; each row's time is its median over the rounds.

    python3 bench/peers.py --mmsparse build/tools/cli/mmsparse --seq-lens 32768 131072 --out results.json

--non-causal compares full attention (video DiTs: Wan2.1 at 75600 tokens, HunyuanVideo at 118800,
no GQA): SDPA without the causal mask against mmsparse's `full` pattern.
"""

import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys
import tempfile

import torch
from safetensors.torch import load_file, save_file
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.nn.attention.flex_attention import create_block_mask, flex_attention

# A-shape of MMInference Table 2 and the grid-like mask of the issue (FlexAttention took 99.3 ms).
A_SHAPE_SINK, A_SHAPE_LOCAL = 128, 4096
GRID_SINK, GRID_LOCAL, GRID_STRIDE, GRID_WIDTH = 128, 1024, 1024, 64
FLEX_BLOCK = 128


def median_ms(work, warmup, repeats):
    for _ in range(warmup):
        work()
    times = []
    for _ in range(repeats):
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        work()
        stop.record()
        stop.synchronize()
        times.append(start.elapsed_time(stop))
    times.sort()
    return times[len(times) // 2]


def causal_pairs(seq_len):
    return seq_len * (seq_len + 1) // 2


def a_shape_pairs(seq_len, sink, local):
    rows = torch.arange(seq_len, dtype=torch.int64)
    window = torch.clamp(rows + 1, max=local)
    sinks = torch.clamp(torch.clamp(rows + 1 - local, min=0), max=sink)
    return int((window + sinks).sum())


def grid_pairs(seq_len, sink, local, period, band):
    # Row q keeps its first min(sink, q + 1) keys and, among the others, every distance d <= q - that
    # many with d < local or d mod period < band: a prefix count over distances.
    distances = torch.arange(seq_len, dtype=torch.int64)
    kept = ((distances < local) | (distances % period < band)).to(torch.int64)
    prefix = torch.cat([torch.zeros(1, dtype=torch.int64), kept.cumsum(0)])  # prefix[i] = sum d < i
    rows = torch.arange(seq_len, dtype=torch.int64)
    sinks = torch.clamp(rows + 1, max=sink)
    return int((sinks + prefix[rows + 1 - sinks]).sum())


def a_shape_mask(b, h, q, k):
    return (k <= q) & ((k < A_SHAPE_SINK) | (q - k < A_SHAPE_LOCAL))


def grid_mask(b, h, q, k):
    return (k <= q) & ((k < GRID_SINK) | (q - k < GRID_LOCAL) | ((q - k) % GRID_STRIDE < GRID_WIDTH))


def causal_mask(b, h, q, k):
    return k <= q


def full_mask(b, h, q, k):
    return k >= 0


def run_mmsparse(binary, tensor_file, pattern, args):
    out_file = tensor_file + f".{pattern.split(':')[0]}.out.safetensors"
    command = [binary, "run", "-i", tensor_file, "-o", out_file, "--pattern", pattern,
               "--device", "cuda", "--warmup", str(args.warmup), "--repeats", str(args.repeats),
               "--json", "-", "--quiet"]
    result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed:\n{result.stderr}")
    report = json.loads(result.stdout)
    out = load_file(out_file)["out"].cuda()
    os.remove(out_file)
    # `run --json` reports per layer; a plain q/k/v file is one layer with one pattern run.
    return report["layers"][0]["patterns"][0]["attention_ms"], out


def relative_error(actual, expected):
    actual, expected = actual.float(), expected.float()
    return float((actual - expected).norm() / expected.norm())


def max_abs_error(actual, expected):
    return float((actual.float() - expected.float()).abs().max())


class Timed:
    """One implementation on one pattern: `run()` times it and returns (ms, its output)."""

    def __init__(self, impl, pattern, pairs, run, note="", reference=None):
        self.impl, self.pattern, self.pairs, self.run = impl, pattern, pairs, run
        self.note, self.reference = note, reference  # reference: the peer whose output it is compared with
        self.round_ms, self.out = [], None


def ratio_summary(numerators, denominators):
    """Per-round ratios numerator / denominator: their median, minimum and maximum."""
    ratios = [n / d for n, d in zip(numerators, denominators)]
    return statistics.median(ratios), min(ratios), max(ratios)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mmsparse", required=True, help="path to the mmsparse binary")
    parser.add_argument("--seq-lens", type=int, nargs="+", default=[32768, 131072])
    parser.add_argument("--heads", type=int, default=28)
    parser.add_argument("--kv-heads", type=int, default=4)
    parser.add_argument("--head-dim", type=int, default=128)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=3,
                        help="times every implementation is timed, in an order rotated per round")
    parser.add_argument("--skip-flex", action="store_true", help="no FlexAttention (compile time)")
    parser.add_argument("--masks", nargs="*", default=["a-shape", "grid"], choices=["a-shape", "grid"],
                        help="the sparse masks to compare (--masks alone: none, dense only)")
    parser.add_argument("--skip-dense", action="store_true",
                        help="no dense rows (the ratios then use the first row of each length)")
    parser.add_argument("--non-causal", action="store_true",
                        help="full attention (video DiTs): SDPA with is_causal=False, mmsparse's "
                             "'full' pattern on a file marked non-causal, every pair counted")
    parser.add_argument("--out", help="write the results as JSON")
    args = parser.parse_args()
    for name in ("warmup", "repeats", "rounds"):
        minimum = 0 if name == "warmup" else 1
        if getattr(args, name) < minimum:
            parser.error(f"--{name} must be at least {minimum}, got {getattr(args, name)}")

    torch.manual_seed(0)
    gpu = torch.cuda.get_device_name(0)
    rows = []
    compiled_flex = torch.compile(flex_attention, dynamic=False)
    with tempfile.TemporaryDirectory() as scratch:
        for seq_len in args.seq_lens:
            shape_q = (1, seq_len, args.heads, args.head_dim)
            shape_kv = (1, seq_len, args.kv_heads, args.head_dim)
            q = torch.randn(shape_q, device="cuda", dtype=torch.bfloat16)
            k = torch.randn(shape_kv, device="cuda", dtype=torch.bfloat16)
            v = torch.randn(shape_kv, device="cuda", dtype=torch.bfloat16)
            tensor_file = os.path.join(scratch, f"qkv_{seq_len}.safetensors")
            # mmsparse run reads the attention's causality from the file (mmsparse.causal).
            save_file({"q": q.cpu(), "k": k.cpu(), "v": v.cpu()}, tensor_file,
                      metadata={"mmsparse.causal": "0" if args.non_causal else "1"})
            # SDPA and Flex take [batch, heads, seq, dim] views of the same memory.
            qt, kt, vt = (x.transpose(1, 2) for x in (q, k, v))
            group = args.heads // args.kv_heads
            kt_full, vt_full = kt.repeat_interleave(group, 1), vt.repeat_interleave(group, 1)

            def sdpa(backend, **kwargs):
                def work():
                    return torch.nn.functional.scaled_dot_product_attention(
                        qt, **kwargs, is_causal=not args.non_causal)

                def run():
                    with sdpa_kernel(backend):
                        return median_ms(work, args.warmup, args.repeats), work()
                return run

            def mmsparse(spec):
                def run():
                    ms, out = run_mmsparse(args.mmsparse, tensor_file, spec, args)
                    return ms, out.transpose(1, 2)
                return run

            def flex(block_mask):
                def work():
                    return compiled_flex(qt, kt, vt, block_mask=block_mask, enable_gqa=True)
                return lambda: (median_ms(work, args.warmup, args.repeats), work())

            dense_pairs = seq_len * seq_len if args.non_causal else causal_pairs(seq_len)
            dense_spec = "full" if args.non_causal else "dense"
            timed = []
            if not args.skip_dense:
                timed += [Timed("sdpa-cudnn", "dense", dense_pairs,
                                sdpa(SDPBackend.CUDNN_ATTENTION, key=kt_full, value=vt_full),
                                note=f"K/V expanded to {args.heads} heads"),
                          Timed("sdpa-flash2", "dense", dense_pairs,
                                sdpa(SDPBackend.FLASH_ATTENTION, key=kt, value=vt, enable_gqa=True)),
                          Timed("mmsparse", "dense", dense_pairs, mmsparse(dense_spec), reference="sdpa-cudnn")]

            masks = [("a-shape", a_shape_mask, a_shape_pairs(seq_len, A_SHAPE_SINK, A_SHAPE_LOCAL),
                      f"a-shape:sink={A_SHAPE_SINK},local={A_SHAPE_LOCAL}"),
                     ("grid", grid_mask, grid_pairs(seq_len, GRID_SINK, GRID_LOCAL, GRID_STRIDE, GRID_WIDTH),
                      f"grid-mask:sink={GRID_SINK},local={GRID_LOCAL},period={GRID_STRIDE},band={GRID_WIDTH}")]
            masks = [mask for mask in masks if mask[0] in args.masks]
            if not args.skip_flex:
                dense_mask = full_mask if args.non_causal else causal_mask
                dense = [] if args.skip_dense else [("dense", dense_mask, dense_pairs, None)]
                for name, mask_mod, pairs, _ in dense + masks:
                    # _compile evaluates the mask block by block instead of materialising N x N.
                    block_mask = create_block_mask(mask_mod, None, None, seq_len, seq_len, device="cuda",
                                                   BLOCK_SIZE=FLEX_BLOCK, _compile=True)
                    timed.append(Timed("flexattention", name, pairs, flex(block_mask)))
            reference_of_mask = None if args.skip_flex else "flexattention"
            timed += [Timed("mmsparse", name, pairs, mmsparse(spec), reference=reference_of_mask)
                      for name, _, pairs, spec in masks]

            # Outputs are kept (from the first round) only where a comparison reads them.
            compared = {(e.reference, e.pattern) for e in timed if e.reference} | {
                (e.impl, e.pattern) for e in timed if e.reference}
            for round_index in range(args.rounds):
                shift = round_index % len(timed)
                for entry in timed[shift:] + timed[:shift]:
                    ms, out = entry.run()
                    entry.round_ms.append(ms)
                    if entry.out is None and (entry.impl, entry.pattern) in compared:
                        entry.out = out
                    del out
                    print(f"{seq_len:>8} round {round_index + 1}/{args.rounds} {entry.impl:<14} "
                          f"{entry.pattern:<8} {ms:>10.2f} ms", flush=True)

            print()
            for entry in timed:
                peer = next((p for p in timed if p.impl == entry.reference and p.pattern == entry.pattern), None)
                ms = statistics.median(entry.round_ms)
                tflops = 4.0 * entry.pairs * args.head_dim * args.heads / (ms * 1e-3) / 1e12
                error = relative_error(entry.out, peer.out) if peer is not None else None
                max_error = max_abs_error(entry.out, peer.out) if peer is not None else None
                rows.append({"seq_len": seq_len, "impl": entry.impl, "pattern": entry.pattern, "ms": ms,
                             "round_ms": entry.round_ms, "tflops": tflops, "rel_err_vs_peer": error,
                             "max_abs_err_vs_peer": max_error, "note": entry.note})
                spread = f"[{min(entry.round_ms):.2f}-{max(entry.round_ms):.2f}]"
                print(f"{seq_len:>8} {entry.impl:<22} {entry.pattern:<10} {ms:>10.2f} ms {spread:>17} "
                      f"{tflops:>8.1f} TFLOP/s"
                      + (f"  rel err {error:.2e}  max abs err {max_error:.2e}" if peer is not None else "")
                      + (f"  {entry.note}" if entry.note else ""),
                      flush=True)
            del q, k, v, qt, kt, vt, kt_full, vt_full, timed
            torch.cuda.empty_cache()

    report = {"gpu": gpu, "date": datetime.date.today().isoformat(), "torch": torch.__version__,
              "command": " ".join(sys.argv), "heads": args.heads, "kv_heads": args.kv_heads,
              "head_dim": args.head_dim, "dtype": "bfloat16", "rounds": args.rounds,
              "causal": not args.non_causal, "rows": rows,
              "ratios": []}

    def print_ratios(title, pairs_of_rows, kind):
        print(f"\n{title} (median over {args.rounds} rounds of the same round's ratio [min-max]):")
        for seq_len, pattern, numerator, denominator, label in pairs_of_rows:
            mid, low, high = ratio_summary(numerator["round_ms"], denominator["round_ms"])
            report["ratios"].append({"kind": kind, "seq_len": seq_len, "pattern": pattern, "label": label,
                                     "median": mid, "min": low, "max": high})
            print(f"{seq_len:>8} {label:<34} {mid:>7.3f}x  [{low:.3f}-{high:.3f}]")

    dense_ratios, flex_ratios = [], []
    for seq_len in args.seq_lens:
        of_length = [r for r in rows if r["seq_len"] == seq_len]
        base = next((r for r in of_length if r["impl"] == "sdpa-cudnn"), of_length[0])
        dense_ratios += [(seq_len, r["pattern"], base, r, f"{r['impl']} {r['pattern']}") for r in of_length]
        for peer in (r for r in of_length if r["impl"] == "flexattention"):
            ours = next((o for o in of_length if o["impl"] == "mmsparse" and o["pattern"] == peer["pattern"]),
                        None)
            if ours is not None:
                flex_ratios.append((seq_len, peer["pattern"], peer, ours, peer["pattern"]))
    print_ratios(f"ratios vs {'sdpa-cudnn dense' if not args.skip_dense else 'the first row'} "
                 "(time of the base / time of the impl)", dense_ratios, "vs-dense-base")
    print_ratios("mmsparse against FlexAttention on the same mask (time of Flex / time of mmsparse)",
                 flex_ratios, "mmsparse-vs-flex")
    if args.out:
        with open(args.out, "w") as file:
            json.dump(report, file, indent=2)


if __name__ == "__main__":
    main()
