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

    python3 bench/peers.py --mmsparse build/tools/cli/mmsparse --seq-lens 32768 131072 --out results.json
"""

import argparse
import datetime
import json
import os
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


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mmsparse", required=True, help="path to the mmsparse binary")
    parser.add_argument("--seq-lens", type=int, nargs="+", default=[32768, 131072])
    parser.add_argument("--heads", type=int, default=28)
    parser.add_argument("--kv-heads", type=int, default=4)
    parser.add_argument("--head-dim", type=int, default=128)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--skip-flex", action="store_true", help="no FlexAttention (compile time)")
    parser.add_argument("--masks", nargs="+", default=["a-shape", "grid"], choices=["a-shape", "grid"],
                        help="the sparse masks to compare")
    parser.add_argument("--skip-dense", action="store_true",
                        help="no dense rows (the ratios then use the first row of each length)")
    parser.add_argument("--out", help="write the results as JSON")
    args = parser.parse_args()

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
            save_file({"q": q.cpu(), "k": k.cpu(), "v": v.cpu()}, tensor_file)
            # SDPA and Flex take [batch, heads, seq, dim] views of the same memory.
            qt, kt, vt = (x.transpose(1, 2) for x in (q, k, v))
            group = args.heads // args.kv_heads
            kt_full, vt_full = kt.repeat_interleave(group, 1), vt.repeat_interleave(group, 1)

            def record(impl, pattern, ms, pairs, out=None, reference=None, note=""):
                tflops = 4.0 * pairs * args.head_dim * args.heads / (ms * 1e-3) / 1e12
                compared = out is not None and reference is not None
                error = relative_error(out, reference) if compared else None
                max_error = max_abs_error(out, reference) if compared else None
                rows.append({"seq_len": seq_len, "impl": impl, "pattern": pattern, "ms": ms,
                             "tflops": tflops, "rel_err_vs_peer": error,
                             "max_abs_err_vs_peer": max_error, "note": note})
                print(f"{seq_len:>8} {impl:<22} {pattern:<10} {ms:>10.2f} ms {tflops:>8.1f} TFLOP/s"
                      + (f"  rel err {error:.2e}  max abs err {max_error:.2e}" if compared else "")
                      + (f"  {note}" if note else ""),
                      flush=True)

            dense_pairs = causal_pairs(seq_len)
            cudnn_out = None
            if not args.skip_dense:
                with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
                    cudnn_out = torch.nn.functional.scaled_dot_product_attention(qt, kt_full, vt_full, is_causal=True)
                    ms = median_ms(lambda: torch.nn.functional.scaled_dot_product_attention(
                        qt, kt_full, vt_full, is_causal=True), args.warmup, args.repeats)
                record("sdpa-cudnn", "dense", ms, dense_pairs, note="K/V expanded to 28 heads")
                with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
                    ms = median_ms(lambda: torch.nn.functional.scaled_dot_product_attention(
                        qt, kt, vt, is_causal=True, enable_gqa=True), args.warmup, args.repeats)
                record("sdpa-flash2", "dense", ms, dense_pairs)
                ms, out = run_mmsparse(args.mmsparse, tensor_file, "dense", args)
                record("mmsparse", "dense", ms, dense_pairs, out.transpose(1, 2), cudnn_out)

            masks = [("a-shape", a_shape_mask, a_shape_pairs(seq_len, A_SHAPE_SINK, A_SHAPE_LOCAL),
                      f"a-shape:sink={A_SHAPE_SINK},local={A_SHAPE_LOCAL}"),
                     ("grid", grid_mask, grid_pairs(seq_len, GRID_SINK, GRID_LOCAL, GRID_STRIDE, GRID_WIDTH),
                      f"grid-mask:sink={GRID_SINK},local={GRID_LOCAL},period={GRID_STRIDE},band={GRID_WIDTH}")]
            masks = [mask for mask in masks if mask[0] in args.masks]
            flex_outputs = {}
            if not args.skip_flex:
                dense = [] if args.skip_dense else [("dense", causal_mask, dense_pairs, None)]
                for name, mask_mod, pairs, _ in dense + masks:
                    # _compile evaluates the mask block by block instead of materialising N x N.
                    block_mask = create_block_mask(mask_mod, None, None, seq_len, seq_len, device="cuda",
                                                   BLOCK_SIZE=FLEX_BLOCK, _compile=True)
                    flex = lambda: compiled_flex(qt, kt, vt, block_mask=block_mask, enable_gqa=True)
                    flex_outputs[name] = flex()
                    ms = median_ms(flex, args.warmup, args.repeats)
                    record("flexattention", name, ms, pairs)
            for name, _, pairs, spec in masks:
                ms, out = run_mmsparse(args.mmsparse, tensor_file, spec, args)
                record("mmsparse", name, ms, pairs, out.transpose(1, 2), flex_outputs.get(name))
            del q, k, v, qt, kt, vt, kt_full, vt_full, cudnn_out, flex_outputs
            torch.cuda.empty_cache()

    report = {"gpu": gpu, "date": datetime.date.today().isoformat(), "torch": torch.__version__,
              "command": " ".join(sys.argv), "heads": args.heads, "kv_heads": args.kv_heads,
              "head_dim": args.head_dim, "dtype": "bfloat16", "rows": rows}
    print("\nratios vs sdpa-cudnn dense (time of cuDNN / time of impl):")
    for seq_len in args.seq_lens:
        base = next((r["ms"] for r in rows if r["seq_len"] == seq_len and r["impl"] == "sdpa-cudnn"),
                    next(r["ms"] for r in rows if r["seq_len"] == seq_len))
        for r in rows:
            if r["seq_len"] == seq_len:
                print(f"{seq_len:>8} {r['impl']:<22} {r['pattern']:<10} {base / r['ms']:>7.2f}x")
    print("\nmmsparse against FlexAttention on the same mask (time of Flex / time of mmsparse):")
    for seq_len in args.seq_lens:
        for r in rows:
            if r["seq_len"] != seq_len or r["impl"] != "flexattention":
                continue
            ours = next((o for o in rows if o["seq_len"] == seq_len and o["impl"] == "mmsparse"
                         and o["pattern"] == r["pattern"]), None)
            if ours is not None:
                print(f"{seq_len:>8} {r['pattern']:<10} {r['ms'] / ours['ms']:>7.2f}x")
    if args.out:
        with open(args.out, "w") as file:
            json.dump(report, file, indent=2)


if __name__ == "__main__":
    main()
