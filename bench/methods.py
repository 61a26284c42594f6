#!/usr/bin/env python3
"""Sparse-prefill methods against each other on the same Q/K/V: speed at matched accuracy.

Every method runs on the same tensors: the SYNTHETIC presets written by `mmsparse generate` (or any
safetensors file of q, k, v [1, seq, heads, head_dim] given with --input). For each method and each
setting of its main knob, one point: recall, output error, needles kept, index time, attention time
and their total (docs/methods-bench.md). Methods:

- mmsparse through its CLI (`mmsparse run --compare --json`): per-pattern knobs and configs that
  `mmsparse search` found at several mean-recall targets (searched on another seed of the preset:
  out of sample; on the input itself for --input files, which the point's note says);
- peers (bench/methods_peers.py): MInference's vertical-slash, XAttention and FlexPrefill,
  FlexAttention's A-shape, FlashInfer on XAttention's blocks (--peers flashinfer), dense cuDNN and
  FlashAttention-2 through torch SDPA. A peer whose package is missing is reported and skipped.

Accuracy is measured against one dense reference per input (FlashAttention-2's output and LSE
through torch). Recall = mean over query rows of exp(LSE_method - LSE_dense), averaged over heads,
as the CLI defines it. A kernel that returns no LSE is run once more on the same selection with
probe values: V = 0 except key 0 (always kept by those methods: vertical-slash's forced columns,
FlexPrefill's first block) carrying 1 in channel 0, so out[i, 0] = exp(s_i0 - LSE_method(i)) and
LSE_method(i) = s_i0 - log out[i, 0] ("sentinel probe"; rows where the probe reads 0 are counted and
left out). The same run carries each needle key in a channel of its own, which gives the method's
probability on the needle and from it the needle verdict of docs/report.md.

Timing: every point is timed in each of --rounds rounds, the order rotated from round to round as
bench/peers.py does (its median_ms times each measurement: CUDA events, warm-up, median). A point's
total is the median over rounds of index + attention.

    python3 bench/methods.py --mmsparse build-gpu/tools/cli/mmsparse --out $OUT
    python3 bench/methods_report.py table $OUT/methods.json
"""

import argparse
import datetime
import json
import math
import os
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402
from safetensors import safe_open  # noqa: E402

import methods_peers as peers_lib  # noqa: E402
import methods_report as report_lib  # noqa: E402
from peers import median_ms, relative_error  # noqa: E402  (the timing and error of peers.py)

NEEDLE_KEPT_SHARE = 0.95  # docs/report.md: a needle is kept with >= 95% of its dense mass
PRESETS = ("video-qwen2.5vl-128k", "multi-image", "mixed-interleaved")


def parse_pair(text):
    vertical, slash = (int(x) for x in text.split(","))
    return vertical, slash


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mmsparse", required=True, help="path to the mmsparse CLI (CUDA build)")
    parser.add_argument("--out", required=True, help="folder for methods.json and the PNGs")
    parser.add_argument("--presets", nargs="*", default=list(PRESETS),
                        help="SYNTHETIC presets, each at every --seq-lens")
    parser.add_argument("--seq-lens", type=int, nargs="+", default=[32768, 131072])
    parser.add_argument("--extra", action="append", default=[],
                        help="one more preset:length input (repeatable), e.g. multi-image:131072")
    parser.add_argument("--input", action="append", default=[],
                        help="a safetensors file with q, k, v [1, seq, heads, head_dim] "
                             "(repeatable)")
    parser.add_argument("--peers", nargs="*", default=["flex", "minference"],
                        choices=["flex", "minference", "flashinfer"])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--mmsparse-patterns", nargs="*", default=[
        "a-shape:sink=128,local=1024", "a-shape:sink=128,local=4096",
        "vertical-slash:vertical=500,slash=2000", "vertical-slash:vertical=1000,slash=6096",
        "vec:alpha_ppm=30000", "vec:alpha_ppm=100000", "grid"],
        help="mmsparse specs for every head (its per-pattern knobs)")
    parser.add_argument("--search-targets", type=float, nargs="*", default=[0.90, 0.95, 0.98],
                        help="mean-recall targets of `mmsparse search` configs")
    parser.add_argument("--config-file", action="append", default=[], metavar="PRESET:LEN=PATH",
                        help="a config `mmsparse search` wrote earlier, run as a searched-config "
                             "point on that input (repeatable)")
    parser.add_argument("--search-max-len", type=int, default=131072,
                        help="no search above this length (search time grows with it)")
    parser.add_argument("--vs-counts", type=parse_pair, nargs="*",
                        default=[(100, 800), (500, 2000), (1000, 6096), (3000, 12000)],
                        help="MInference vertical,slash counts")
    parser.add_argument("--xattn-thresholds", type=float, nargs="*", default=[0.8, 0.9, 0.95])
    parser.add_argument("--flexprefill-gammas", type=float, nargs="*", default=[0.9, 0.95, 0.99])
    parser.add_argument("--flex-locals", type=int, nargs="*", default=[1024, 4096, 16384])
    parser.add_argument("--budget-s", type=float, default=0,
                        help="start no new input after this many seconds (0: no limit); the inputs "
                             "left are listed under not_run")
    parser.add_argument("--no-plots", action="store_true")
    parser.add_argument("--heads", type=int, default=0,
                        help="query heads of the presets (0: theirs)")
    parser.add_argument("--kv-heads", type=int, default=0,
                        help="KV heads of the presets (0: theirs)")
    parser.add_argument("--device", default="cuda", choices=["cuda", "cpu"],
                        help="cpu: a smoke run at small lengths (mmsparse's CLI on its CPU "
                             "backend, the report and pictures; every peer needs CUDA and is "
                             "skipped)")
    args = parser.parse_args(argv)
    for name in ("warmup", "repeats", "rounds"):
        minimum = 0 if name == "warmup" else 1
        if getattr(args, name) < minimum:
            parser.error(f"--{name} must be at least {minimum}, got {getattr(args, name)}")
    for target in args.search_targets:
        if not 0.0 < target <= 1.0:
            parser.error(f"--search-targets must be in (0, 1], got {target}")
    for spec in args.config_file:
        where, _, path = spec.partition("=")
        if ":" not in where or not path:
            parser.error(f"--config-file: expected PRESET:LEN=PATH, got {spec!r}")
        if not os.path.isfile(path):
            parser.error(f"--config-file: no file {path!r}")
    return args


# --- Inputs ------------------------------------------------------------------------------------

def input_list(args):
    """[(label, preset or None, seq_len or None, path or None)] in run order."""
    inputs = [(preset, preset, n, None) for n in args.seq_lens for preset in args.presets]
    for extra in args.extra:
        preset, _, length = extra.partition(":")
        if not length.isdigit():
            raise SystemExit(f"--extra: expected preset:length, got {extra!r}")
        inputs.append((preset, preset, int(length), None))
    inputs += [(os.path.basename(path), None, None, path) for path in args.input]
    return inputs


def workload_flags(args, preset, seq_len, seed=0):
    """The CLI's workload flags for one preset input: generate, search and bench take the same."""
    flags = ["--preset", preset, "--seq-len", str(seq_len), "--seed", str(seed)]
    if args.heads:
        flags += ["--heads", str(args.heads)]
    if args.kv_heads:
        flags += ["--kv-heads", str(args.kv_heads)]
    return flags


def run_cli(command):
    result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed:\n{result.stderr[-2000:]}")
    return result.stdout


def load_input(path, device):
    """q, k, v on `device` and the file's needle task (docs/report.md) or None."""
    with safe_open(path, "pt") as file:
        metadata = file.metadata() or {}
        names = set(file.keys())
        prefix = "" if "q" in names else "layers.0."
        q, k, v = (file.get_tensor(prefix + name).to(device) for name in ("q", "k", "v"))
    if metadata.get("mmsparse.causal", "1") != "1":
        raise SystemExit(f"{path}: non-causal attention; the peers compared here are causal")
    if q.dim() != 4 or q.shape[0] != 1:
        raise SystemExit(f"{path}: q must be [1, seq, heads, head_dim], got {list(q.shape)}")
    needles = metadata.get("mmsparse.needles")
    return q.to(torch.bfloat16), k.to(torch.bfloat16), v.to(torch.bfloat16), \
        (json.loads(needles) if needles else None)


# --- Accuracy ----------------------------------------------------------------------------------

def flash2_dense(t):
    """Dense causal attention with its LSE: FlashAttention-2 through torch, K/V expanded.
    Returns out [1, heads, seq, dim] and lse [1, heads, seq] (natural log)."""
    out, lse = torch.ops.aten._scaled_dot_product_flash_attention(
        t.qt, t.kt_full, t.vt_full, 0.0, True, False)[:2]
    return out, lse


def math_dense(t):
    """The same in fp32 from the full score matrix: the CPU smoke run's reference (small
    lengths)."""
    scores = torch.einsum("bhqd,bhkd->bhqk", t.qt.float(), t.kt_full.float()) * t.scale
    rows = torch.arange(t.seq_len, device=scores.device)
    scores.masked_fill_(rows[None, :] > rows[:, None], -math.inf)
    lse = torch.logsumexp(scores, dim=-1)
    out = torch.einsum("bhqk,bhkd->bhqd", torch.exp(scores - lse[..., None]), t.vt_full.float())
    return out.to(t.q.dtype), lse


class Reference:
    """Dense output and LSE of one input (`dense`: flash2_dense on the GPU), and the probes."""

    def __init__(self, t, needles, dense=flash2_dense):
        out, lse = dense(t)
        # [1, seq, heads, dim] and [1, heads, seq] (natural log)
        self.out, self.lse = out.transpose(1, 2), lse.float()[..., : t.seq_len]
        self.needle_keys = list(needles["keys"]) if needles else []
        self.question_begin = needles["question_begin"] if needles else None
        self.probe_v = self._probe_values(t)

    def _probe_values(self, t):
        """Zeros, key 0 -> channel 0, needle j -> channel 1 + j (in every KV head)."""
        probe = torch.zeros_like(t.v)
        probe[0, 0, :, 0] = 1.0
        for j, key in enumerate(self.needle_keys[: t.head_dim - 1]):
            if key != 0:
                probe[0, key, :, 1 + j] = 1.0
        return probe

    def logits(self, t, rows, key):
        """scale * q_i . k_key for rows [n] of every head: [heads, n] fp32."""
        keys = t.kt_full[0, :, key, :].float()                      # [heads, d]
        return torch.einsum("hnd,hd->hn", t.qt[0, :, rows, :].float(), keys) * t.scale

    def measure(self, t, out, lse, probe_out):
        """Recall, output error and needles of one method's outputs."""
        all_rows = torch.arange(t.seq_len, device=t.q.device)
        source = "lse"
        missed = 0
        if lse is None:
            sentinel = probe_out[0, :, :, 0].float().transpose(0, 1)  # [heads, seq]
            missed = int((sentinel <= 0).sum())
            lse = (self.logits(t, all_rows, 0) - torch.log(sentinel))[None]
            source = "sentinel probe"
        row_recall = torch.exp(lse.float() - self.lse)[0]                # [heads, seq]
        finite = torch.isfinite(row_recall)
        per_head = torch.where(finite, row_recall, 0).sum(-1) / finite.sum(-1).clamp(min=1)
        errors = [relative_error(out[0, :, h], self.out[0, :, h]) for h in range(t.heads)]
        result = {"recall": float(per_head.mean()),
                  "recall_min": float(torch.where(finite, row_recall, math.inf).min()),
                  "recall_source": source, "output_error": sum(errors) / len(errors)}
        if missed:
            result["note"] = f"sentinel probe read 0 on {missed} (head, row) pairs, left out"
        result.update(self.needles(t, lse, probe_out))
        return result

    def needles(self, t, lse, probe_out):
        """docs/report.md's verdict: needle n is kept when sum over heads and question rows of the
        kept dense probability >= 95% of its dense probability. Kept probability of (i, n) = the
        method's probability on n times its row recall (= the dense probability where computed)."""
        if not self.needle_keys:
            return {}
        rows = torch.arange(self.question_begin, t.seq_len, device=t.q.device)
        recall = torch.exp(lse.float()[0][:, rows] - self.lse[0][:, rows])   # [heads, rows]
        kept = 0
        for j, key in enumerate(self.needle_keys[: t.head_dim - 1]):
            dense = torch.exp(self.logits(t, rows, key) - self.lse[0][:, rows])
            method = probe_out[0, rows, :, 1 + j].float().transpose(0, 1)
            kept += int(float((method * recall).sum()) >= NEEDLE_KEPT_SHARE * float(dense.sum()))
        return {"needles_kept": kept, "needles": len(self.needle_keys)}


# --- Timed entries ------------------------------------------------------------------------------

class PeerEntry:
    """One peer at one knob setting: timed each round, measured once."""

    def __init__(self, adapter, setting):
        self.adapter, self.setting = adapter, setting
        self.name = f"{adapter.name} {adapter.knob(setting)}"
        self.index_ms, self.attention_ms, self.accuracy, self.error = [], [], None, None

    def run_round(self, t, reference, args):
        adapter, setting = self.adapter, self.setting
        self.index_ms.append(median_ms(lambda: adapter.prepare(t, setting), args.warmup,
                                       args.repeats))
        state = adapter.prepare(t, setting)
        self.attention_ms.append(median_ms(lambda: adapter.attend(t, state, t.v), args.warmup,
                                           args.repeats))
        if self.accuracy is None:
            out, lse = adapter.attend(t, state, t.v)
            lse = lse if lse is not None else adapter.lse_for_recall(t, state)
            probe_out, _ = adapter.attend(t, state, reference.probe_v)
            self.accuracy = reference.measure(t, out, lse, probe_out)
            del out, probe_out
        del state

    def points(self):
        point = report_lib.make_point(method=self.adapter.name, family=self.adapter.family,
                                      knob=self.adapter.knob(self.setting),
                                      kernel=self.adapter.kernel)
        point.update(self.accuracy or {})
        return [report_lib.finish_point(point, self.index_ms, self.attention_ms)]


class MmsparseEntry:
    """One `mmsparse run --compare` call: every pattern spec, or one config."""

    def __init__(self, args, path, specs=(), config=None, label=None, note=None):
        self.command = [args.mmsparse, "run", "-i", path, "--compare", "--device", args.device,
                        "--warmup", str(args.warmup), "--repeats", str(args.repeats),
                        "--json", "-", "--quiet"]
        for spec in specs:
            self.command += ["--pattern", spec]
        if config:
            self.command += ["--config", config]
        self.label, self.note, self.rounds = label, note, []
        self.name = f"{report_lib.SEARCHED_METHOD} {label}" if label else "mmsparse patterns"
        self.error = None

    def run_round(self, t, reference, args):
        self.rounds.append(report_lib.mmsparse_points_from_run(json.loads(run_cli(self.command)),
                                                               self.label))

    def points(self):
        points = []
        for index, point in enumerate(self.rounds[0]):
            point = dict(point, note=self.note)
            report_lib.finish_point(point, [r[index]["index_ms"] for r in self.rounds],
                                    [r[index]["attention_ms"] for r in self.rounds])
            points.append(point)
        return points


def mmsparse_entries(args, path, preset, seq_len, scratch, skipped):
    """The pattern sweep and one searched config per recall target (searched on seed 1 of a
    preset: out of sample; on the input itself for a file). A failed search goes to `skipped`."""
    entries = []
    if args.mmsparse_patterns:
        entries.append(MmsparseEntry(args, path, specs=args.mmsparse_patterns))
    for spec in args.config_file:
        where, _, config = spec.partition("=")
        if where == f"{preset or os.path.basename(path)}:{seq_len}":
            entries.append(MmsparseEntry(args, path, config=config,
                                         label=f"file={os.path.basename(config)}",
                                         note=config_provenance(config)))
    if seq_len > args.search_max_len:
        return entries
    for target in args.search_targets:
        config = os.path.join(scratch, f"search-{os.path.basename(path)}-{target}.json")
        source = workload_flags(args, preset, seq_len, seed=1) if preset else ["-i", path]
        try:
            run_cli([args.mmsparse, "search", *source, "--device", args.device,
                     "--target-mean-recall", str(target), "-o", config, "--quiet"])
        except RuntimeError as error:
            skipped[f"mmsparse search@{target:.2f}"] = f"search failed: {str(error)[-300:]}"
            continue
        note = ("searched on seed 1 (out of sample)" if preset
                else "searched on this input (in sample)")
        entries.append(MmsparseEntry(args, path, config=config, label=f"target={target:.2f}",
                                     note=note))
    return entries


def config_provenance(path):
    """What a config file says it was searched on (its `search.calibration`)."""
    try:
        with open(path) as file:
            calibration = json.load(file).get("search", {}).get("calibration", "unknown")
    except (OSError, ValueError) as error:
        return f"config unreadable: {error}"
    return f"searched earlier on: {calibration}"


def tile_oracle(args, preset, seq_len):
    """The tile oracle of `mmsparse bench` on the same SYNTHETIC workload (presets only)."""
    if not preset:
        return []
    try:
        bench = json.loads(run_cli([args.mmsparse, "bench", "--device", args.device,
                                    *workload_flags(args, preset, seq_len), "--pattern", "dense",
                                    "--warmup", "1", "--repeats", "1", "--json", "-", "--quiet"]))
    except RuntimeError as error:
        print(f"tile oracle of {preset} {seq_len} failed: {error}", flush=True)
        return []
    return report_lib.tile_oracle_from_bench(bench)


def run_input(args, adapters, label, preset, seq_len, path, scratch):
    if preset:
        path = os.path.join(scratch, f"{preset}-{seq_len}.safetensors")
        run_cli([args.mmsparse, "generate", *workload_flags(args, preset, seq_len), "-o", path])
    q, k, v, needles = load_input(path, args.device)
    t = peers_lib.Tensors(q, k, v)
    reference = Reference(t, needles, flash2_dense if args.device == "cuda" else math_dense)
    skipped = {}
    entries = []
    for adapter in adapters:
        reason = adapter.available() if args.device == "cuda" else "needs a CUDA device"
        if reason:
            skipped[adapter.name] = reason
            continue
        entries += [PeerEntry(adapter, setting) for setting in adapter.settings]
    entries += mmsparse_entries(args, path, preset, t.seq_len, scratch, skipped)
    for round_index in range(args.rounds if entries else 0):
        shift = round_index % len(entries)
        for entry in entries[shift:] + entries[:shift]:
            if entry.error:
                continue
            try:
                entry.run_round(t, reference, args)
            except Exception as error:  # one failing point must not lose the others
                entry.error = f"{type(error).__name__}: {str(error)[:300]}"
                print(f"  failed: {entry.name}: {entry.error}", flush=True)
        print(f"{label} {t.seq_len}: round {round_index + 1}/{args.rounds} done", flush=True)
    points, failed = [], {}
    for entry in entries:
        if entry.error:
            failed[entry.name] = entry.error
        else:
            points += entry.points()
    result = {"label": label, "seq_len": t.seq_len, "synthetic": bool(preset), "path": path,
              "heads": t.heads, "kv_heads": t.kv_heads, "head_dim": t.head_dim,
              "needles": len(reference.needle_keys), "points": points,
              "tile_oracle": tile_oracle(args, preset, t.seq_len), "skipped": skipped,
              "failed": failed}
    del q, k, v, t, reference
    torch.cuda.empty_cache()
    return result


def main(argv=None):
    args = parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    torch.manual_seed(0)
    adapters = peers_lib.build_adapters(args)
    gpu = torch.cuda.get_device_name(0) if args.device == "cuda" else "none (CPU smoke run)"
    report = {"gpu": gpu, "date": datetime.date.today().isoformat(),
              "command": " ".join(sys.argv), "versions": peers_lib.installed_versions(),
              "flash_attn_4": peers_lib.fa4_status(), "rounds": args.rounds,
              "warmup": args.warmup, "repeats": args.repeats, "inputs": [], "not_run": []}
    start = time.monotonic()
    with tempfile.TemporaryDirectory() as scratch:
        for label, preset, seq_len, path in input_list(args):
            if args.budget_s and time.monotonic() - start > args.budget_s:
                report["not_run"].append(f"{label} {seq_len or ''}".strip())
                print(f"{label} {seq_len or ''}: not run (--budget-s {args.budget_s:g} spent)")
                continue
            result = run_input(args, adapters, label, preset, seq_len, path, scratch)
            report["inputs"].append(result)
            with open(os.path.join(args.out, "methods.json"), "w") as file:
                json.dump(report, file, indent=1)  # after every input: a late failure keeps these
            if not args.no_plots:
                picture = os.path.join(args.out, report_lib.picture_name(result))
                report_lib.plot_input(result, picture, report_lib.title_note(report, result))
    with open(os.path.join(args.out, "methods.json"), "w") as file:
        json.dump(report, file, indent=1)
    sys.stdout.write(report_lib.markdown_table(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
