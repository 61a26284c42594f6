#!/usr/bin/env python3
"""Sparse-prefill methods against each other on the same Q/K/V: speed at matched accuracy.

Every method runs on the same tensors: the SYNTHETIC presets written by `mmsparse generate` (or any
safetensors file of q, k, v [1, seq, heads, head_dim] given with --input). For each method and each
setting of its main knob, one point: recall, output error, needles kept, index time, attention time
and their total (docs/methods-bench.md). Methods:

- mmsparse through its Python package in this process (bench/methods_mmsparse.py): per-pattern
  knob sweeps, the shipped config of the preset and length (configs/), configs given with
  --config-file, and configs `mmsparse search` finds at several mean-recall targets (searched on
  seed 1 of a preset: out of sample). Without the package, `mmsparse run --compare` instead;
- peers (bench/methods_peers.py): MInference's vertical-slash, XAttention and FlexPrefill,
  FlexAttention's A-shape, FlashInfer on XAttention's blocks and on mmsparse's plans (--peers
  flashinfer: bench/methods_flashinfer.py), dense cuDNN and
  FlashAttention-2 through torch SDPA. A peer whose package is missing is reported and skipped.

Accuracy is measured against one dense reference per input (FlashAttention-2's output and LSE
through torch), computed once. Recall = mean over query rows of exp(LSE_method - LSE_dense),
averaged over heads, as the CLI defines it. A kernel that returns no LSE is run once more on the
same selection with probe values: V = 0 except key 0 (always kept by those methods) carrying 1 in
channel 0, so out[i, 0] = exp(s_i0 - LSE_method(i)) ("sentinel probe"). The same run carries each
needle key in a channel of its own: the needle verdict of docs/report.md.

Time (bench/methods_schedule.py): entries (a method at one setting) run in order of value, every
method's middle setting first, inside budgets for the run, each input, each method and each point;
each method's JIT warm-up runs once per input before its first point and is recorded apart
(setup_s). Every point is written to methods.json as soon as it is measured, and progress lines
with times go to stdout, so a run cut by a timeout still reports. Round 1 measures every entry;
further rounds (order rotated, as bench/peers.py does) refine the medians while the input's
budget lasts.

    python3 bench/methods.py --mmsparse build-gpu/tools/cli/mmsparse --out $OUT
    python3 bench/methods_report.py table $OUT/methods.json
"""

import datetime
import gc
import json
import math
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402
from safetensors import safe_open  # noqa: E402

import methods_args  # noqa: E402
import methods_flashinfer as flashinfer_lib  # noqa: E402
import methods_mmsparse as mm_lib  # noqa: E402
import methods_peers as peers_lib  # noqa: E402
import methods_report as report_lib  # noqa: E402
import methods_schedule as schedule  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NEEDLE_KEPT_SHARE = 0.95  # docs/report.md: a needle is kept with >= 95% of its dense mass
PRESETS = ("video-qwen2.5vl-128k", "mixed-interleaved", "multi-image")
ERROR_CHUNK_ROWS = 16384  # rows per step of the output error (bounds its fp32 temporaries)
# A file that exists while a peer's package is still being built beside this run
# (scripts/device-methods.sh): a peer found missing then says so.
BUILDING_MARKER_ENV = "METHODS_BUILDING_MARKER"


# --- Inputs ------------------------------------------------------------------------------------

def input_list(args):
    """[(label, preset or None, seq_len or None, path or None)] in order of value."""
    inputs = [(preset, preset, n, None)
              for preset, n in schedule.input_order(args.presets, args.seq_lens)]
    for extra in args.extra:
        preset, _, length = extra.partition(":")
        if not length.isdigit():
            raise SystemExit(f"--extra: expected preset:length, got {extra!r}")
        inputs.append((preset, preset, int(length), None))
    inputs += [(os.path.basename(path), None, None, path) for path in args.input]
    return inputs


def workload_flags(args, preset, seq_len, seed=0):
    """The CLI's workload flags for one preset input: generate, search and bench take the same."""
    flags = ["--preset", preset, "--seq-len", str(seq_len), "--seed", str(seed),
             "--needles", str(args.needles)]
    if args.heads:
        flags += ["--heads", str(args.heads)]
    if args.kv_heads:
        flags += ["--kv-heads", str(args.kv_heads)]
    return flags


def load_input(path, device):
    """q, k, v on `device`, the file's needle task (docs/report.md) or None, and its modality
    layout (JSON text) or None."""
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
    return (q.to(torch.bfloat16), k.to(torch.bfloat16), v.to(torch.bfloat16),
            json.loads(needles) if needles else None, metadata.get("mmsparse.layout"))


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
    """Dense output and LSE of one input (`dense`: flash2_dense on the GPU), computed once and
    reused by every point, and the probe values."""

    def __init__(self, t, needles, dense=flash2_dense):
        out, lse = dense(t)
        # [1, seq, heads, dim] and [1, heads, seq] (natural log)
        self.out, self.lse = out.transpose(1, 2), lse.float()[..., : t.seq_len]
        self.out_norm = self._head_norms(lambda rows: self.out[:, rows])
        self.needle_keys = list(needles["keys"]) if needles else []
        self.question_begin = needles["question_begin"] if needles else None
        self.probe_v = self._probe_values(t)
        self.key0_logits = self.logits(t, slice(None), 0)   # [heads, seq], for the probe

    def _head_norms(self, rows_of):
        """Per head ||x|| of a [1, seq, heads, dim] tensor given by rows_of(slice), summed over
        row chunks so that no fp32 copy of the whole tensor is made."""
        squares = None
        for begin in range(0, self.out.shape[1], ERROR_CHUNK_ROWS):
            chunk = rows_of(slice(begin, begin + ERROR_CHUNK_ROWS)).float()
            part = chunk.square().sum(dim=(0, 1, 3))
            squares = part if squares is None else squares + part
        return squares.sqrt()

    def output_error(self, out):
        """Mean over heads of ||O - O_dense|| / ||O_dense||, out [1, seq, heads, dim]."""
        error = self._head_norms(lambda rows: out[:, rows].float() - self.out[:, rows].float())
        return float((error / self.out_norm).mean())

    def _probe_values(self, t):
        """Zeros, key 0 -> channel 0, needle j -> channel 1 + j (in every KV head)."""
        probe = torch.zeros_like(t.v)
        probe[0, 0, :, 0] = 1.0
        for j, key in enumerate(self.needle_keys[: t.head_dim - 1]):
            if key != 0:
                probe[0, key, :, 1 + j] = 1.0
        return probe

    def logits(self, t, rows, key):
        """scale * q_i . k_key for rows (a slice or an index tensor) of every head: [heads, n]."""
        keys = t.kt_full[0, :, key, :].float()                      # [heads, d]
        return torch.einsum("hnd,hd->hn", t.qt[0, :, rows, :].float(), keys) * t.scale

    def measure(self, t, out, lse, probe_out):
        """Recall, output error and needles of one method's outputs."""
        source = "lse"
        missed = 0
        if lse is None:
            sentinel = probe_out[0, :, :, 0].float().transpose(0, 1)  # [heads, seq]
            missed = int((sentinel <= 0).sum())
            lse = (self.key0_logits - torch.log(sentinel))[None]
            source = "sentinel probe"
        row_recall = torch.exp(lse.float() - self.lse)[0]                # [heads, seq]
        finite = torch.isfinite(row_recall)
        per_head = torch.where(finite, row_recall, 0).sum(-1) / finite.sum(-1).clamp(min=1)
        result = {"recall": float(per_head.mean()),
                  "recall_min": float(torch.where(finite, row_recall, math.inf).min()),
                  "recall_source": source, "output_error": self.output_error(out)}
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

def event_ms(work):
    """One run of `work` timed with CUDA events."""
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    work()
    stop.record()
    stop.synchronize()
    return start.elapsed_time(stop)


def wall_ms(work):
    """One run of `work` on the host clock (the CPU smoke run)."""
    start = time.perf_counter()
    work()
    return 1000.0 * (time.perf_counter() - start)


class PeerEntry:
    """One method (a peer's or mmsparse's adapter) at one knob setting: timed each round, measured
    once (the first round)."""

    repeatable = True

    def __init__(self, adapter, setting, t, reference, args, ready_timeout=lambda: None):
        self.adapter, self.setting, self.t, self.reference, self.args = \
            adapter, setting, t, reference, args
        self.name = f"{adapter.name} {adapter.knob(setting)}"
        self.method = adapter.name
        self.ready_timeout, self.note = ready_timeout, None  # () -> seconds or None
        self.measure_ms = event_ms if t.q.device.type == "cuda" else wall_ms
        self.index_ms, self.attention_ms, self.accuracy = [], [], None

    def setup(self):
        self.adapter.setup(self.t)

    def run_round(self, point_budget_s):
        adapter, setting, t, args = self.adapter, self.setting, self.t, self.args
        if self.accuracy is None and hasattr(adapter, "ready"):
            self.note = adapter.ready(t, setting, self.ready_timeout())
        half = point_budget_s / 2  # index and attention timing share the point's budget
        index_ms, _ = schedule.budgeted_median_ms(lambda: adapter.prepare(t, setting),
                                                  self.measure_ms, args.warmup, args.repeats, half)
        state = adapter.prepare(t, setting)
        attention_ms, _ = schedule.budgeted_median_ms(lambda: adapter.attend(t, state, t.v),
                                                      self.measure_ms, args.warmup, args.repeats,
                                                      half)
        if self.accuracy is None:
            self.accuracy = self.measure(state)
        self.index_ms.append(index_ms)
        self.attention_ms.append(attention_ms)

    def measure(self, state):
        adapter, t = self.adapter, self.t
        out, lse = adapter.attend(t, state, t.v)
        exact = adapter.exact_accuracy()
        if exact:
            return dict(exact, output_error=self.reference.output_error(out))
        lse = lse if lse is not None else adapter.lse_for_recall(t, state)
        probe_out, _ = adapter.attend(t, state, self.reference.probe_v)
        accuracy = self.reference.measure(t, out, lse, probe_out)
        accuracy.update(adapter.describe(t, state))
        return accuracy

    def points(self):
        point = report_lib.make_point(method=self.adapter.name, family=self.adapter.family,
                                      knob=self.adapter.knob(self.setting),
                                      kernel=self.adapter.kernel, note=self.note)
        accuracy = dict(self.accuracy or {})
        if accuracy.get("note") and self.note:
            accuracy["note"] = f"{self.note}; {accuracy['note']}"
        point.update(accuracy)
        return [report_lib.finish_point(point, self.index_ms, self.attention_ms)]


class OracleEntry:
    """The tile oracle of the input (`mmsparse bench`), once: the pictures' bound line."""

    repeatable = False
    name = method = "tile oracle"

    def __init__(self, args, preset, seq_len, results, result, budget):
        self.args, self.preset, self.seq_len = args, preset, seq_len
        self.results, self.result, self.budget = results, result, budget

    def setup(self):
        pass

    def run_round(self, point_budget_s):
        timeout = min(self.args.oracle_timeout_s or math.inf, self.budget.remaining())
        levels = mm_lib.tile_oracle(self.args.mmsparse,
                                    workload_flags(self.args, self.preset, self.seq_len),
                                    self.args.device, None if math.isinf(timeout) else timeout)
        self.results.set(self.result, "tile_oracle", levels)

    def points(self):
        return []


# --- One input ---------------------------------------------------------------------------------

def searcher(args, preset, path, scratch):
    """search(setting, timeout_s) -> the config path `mmsparse search` wrote for the setting's
    target (seed 1 of a preset: out of sample; the input itself for a file)."""
    def search(setting, timeout_s):
        target = float(setting[0].split("=", 1)[1])
        config = os.path.join(scratch, f"search-{os.path.basename(path)}-{target}.json")
        source = workload_flags(args, preset, setting[3], seed=1) if preset else ["-i", path]
        mm_lib.run_cli([args.mmsparse, "search", *source, "--device", args.device,
                        "--target-mean-recall", str(target), "-o", config, "--quiet"], timeout_s)
        return config
    return search


def config_settings(args, preset, seq_len, path, shipped):
    """(label, path, note, method) of the configs given for this input: the shipped one
    (SHIPPED_METHOD), those of --config-file (GIVEN_METHOD)."""
    settings = []
    if shipped:
        settings.append((f"configs/{os.path.basename(shipped)}", shipped,
                         mm_lib.config_provenance(shipped), mm_lib.SHIPPED_METHOD))
    for spec in args.config_file:
        where, _, config = spec.partition("=")
        if where == f"{preset or os.path.basename(path)}:{seq_len}":
            settings.append((f"file={os.path.basename(config)}", config,
                             mm_lib.config_provenance(config), mm_lib.GIVEN_METHOD))
    return settings


def mmsparse_entries(args, module, t, reference, preset, path, scratch, remaining_s):
    """(dense entries, config entries, pattern groups, searched entries) of mmsparse on this
    input, through the package (`module`) or, without it, the CLI."""
    seq_len = t.seq_len
    shipped = None if args.no_shipped_config else \
        mm_lib.shipped_config(REPO, preset, seq_len, bool(args.heads or args.kv_heads))
    configs = config_settings(args, preset, seq_len, path, shipped)
    targets = schedule.middle_out(args.search_targets) if seq_len <= args.search_max_len else []
    note = ("searched on seed 1 (out of sample)" if preset
            else "searched on this input (in sample)")
    searched = [(f"target={target:.2f}", None, note, seq_len) for target in targets]
    if module is None:
        config_entries = [mm_lib.CliEntry(args, path, method, config=config, label=label, note=why)
                          for label, config, why, method in configs]
        names = mm_lib.pattern_groups(None, args.mmsparse_patterns)
        groups = [[mm_lib.CliEntry(args, path, adapter.name, specs=adapter.settings,
                                   with_dense=index == 0)] for index, adapter in enumerate(names)]
        return [], config_entries, groups, []   # searched configs need the package
    config_adapters = {method: mm_lib.MmsparseConfig(module, method,
                                                     [c for c in configs if c[3] == method])
                       for method in (mm_lib.SHIPPED_METHOD, mm_lib.GIVEN_METHOD)}
    config_entries = [PeerEntry(config_adapters[setting[3]], setting, t, reference, args)
                      for setting in configs]
    groups = [[PeerEntry(adapter, spec, t, reference, args)
               for spec in schedule.middle_out(adapter.settings)]
              for adapter in mm_lib.pattern_groups(module, args.mmsparse_patterns)]
    search_adapter = mm_lib.MmsparseConfig(module, report_lib.SEARCHED_METHOD, searched,
                                           searcher(args, preset, path, scratch))

    def search_timeout():
        timeout = min(args.search_timeout_s or math.inf, remaining_s())
        return None if math.isinf(timeout) else max(1.0, timeout)
    searched_entries = [PeerEntry(search_adapter, setting, t, reference, args,
                                  ready_timeout=search_timeout) for setting in searched]
    dense = [PeerEntry(mm_lib.MmsparseDense(module), "dense", t, reference, args)]
    return dense, config_entries, groups, searched_entries


class AwaitingBuild:
    """A peer whose CUDA extension compiles beside the benchmark (device-methods.sh): its set-up,
    outside every point's time, waits for the build (at most the input's remaining budget) and
    then loads the peer; a build that fails or outlasts the budget is its set-up's failure, with
    the reason. Everything else is the peer's own."""

    POLL_S = 1.0

    def __init__(self, adapter, marker, remaining_s, sleep=time.sleep):
        self.adapter, self.marker, self.remaining_s, self.sleep = \
            adapter, marker, remaining_s, sleep

    def __getattr__(self, name):
        return getattr(self.adapter, name)

    def setup(self, t):
        deadline = time.monotonic() + self.remaining_s()
        while os.path.exists(self.marker) and time.monotonic() < deadline:
            self.sleep(self.POLL_S)
        if os.path.exists(self.marker):
            raise TimeoutError("MInference's CUDA extension was still compiling when the "
                               "input's budget ran out")
        reason = self.adapter.available()
        if reason:
            raise RuntimeError(f"{reason} (after MInference's CUDA extension build)")
        self.adapter.setup(t)


def peer_entries(args, adapters, t, reference, results, result, remaining_s):
    """(dense entries, sweep groups, late groups) of the peers that can run here; a MInference
    peer whose CUDA extension is still compiling is a late group (AwaitingBuild: run after every
    other sweep); the others that cannot run are listed under `skipped` with the reason."""
    dense, groups, late = [], [], []
    building = os.environ.get(BUILDING_MARKER_ENV)
    for adapter in adapters:
        reason = adapter.available() if args.device == "cuda" else "needs a CUDA device"
        compiling = building and os.path.exists(building) and adapter.family == "minference"
        if reason and compiling:
            entries = [PeerEntry(AwaitingBuild(adapter, building, remaining_s), setting, t,
                                 reference, args)
                       for setting in schedule.middle_out(adapter.settings)]
            late.append(entries)
            continue
        if reason:
            results.skip(result, adapter.name, reason)
            continue
        entries = [PeerEntry(adapter, setting, t, reference, args)
                   for setting in schedule.middle_out(adapter.settings)]
        (dense if adapter.family == "dense" else groups).append(entries)
    return dense, groups, late


def flashinfer_plan_entries(args, module, t, reference, preset, path, results, result):
    """FlashInfer on mmsparse's plans (bench/methods_flashinfer.py) as one sweep group, or none
    (listed under `skipped` with the reason)."""
    if "flashinfer" not in args.peers:
        return []
    adapter_name = flashinfer_lib.METHOD
    reason = "needs the mmsparse Python package" if module is None else None
    reason = reason or ("needs a CUDA device" if args.device != "cuda" else None)
    shipped = None if args.no_shipped_config else \
        mm_lib.shipped_config(REPO, preset, t.seq_len, bool(args.heads or args.kv_heads))
    settings = flashinfer_lib.settings_for_input(
        args, config_settings(args, preset, t.seq_len, path, shipped))
    adapter = None if reason else flashinfer_lib.FlashInferOnPlans(module, settings,
                                                                   args.flashinfer_block)
    reason = reason or adapter.available() or (None if settings else "no plan to feed it")
    if reason:
        results.skip(result, adapter_name, reason)
        return []
    return [[PeerEntry(adapter, setting, t, reference, args) for setting in settings]]


def ordered_entries(dense, configs, mm_groups, peer_groups, oracle, searched, late=()):
    """Entries by value: dense (the ratio's denominator), mmsparse's configs for this input, one
    point of every method (mmsparse's patterns and the peers alternating), the tile oracle, the
    rest of every sweep round-robin, the late groups (peers still being built) round-robin, then
    the searched configs."""
    groups = []
    for index in range(max(len(mm_groups), len(peer_groups))):
        groups += [g[index] for g in (mm_groups, peer_groups) if index < len(g)]
    sweeps = schedule.interleave(groups)
    first, rest = sweeps[: len(groups)], sweeps[len(groups):]
    dense_entries = [entries[0] for entries in dense]
    return dense_entries + configs + first + ([oracle] if oracle else []) + rest + \
        schedule.interleave(list(late)) + searched


def finite_or_none(seconds):
    return None if math.isinf(seconds) else round(seconds, 1)


def run_input(args, adapters, module, spec, scratch, results, budget, log):
    """Every entry of one input, its points written as they come."""
    label, preset, seq_len, path = spec
    result = results.begin_input({"label": label, "seq_len": seq_len, "synthetic": bool(preset),
                                  "path": path, "budget_s": finite_or_none(budget.remaining())})
    start = time.monotonic()
    log(f"{label} {seq_len or ''}: preparing the input (budget "
        f"{finite_or_none(budget.remaining())} s)")
    if preset:
        path = os.path.join(scratch, f"{preset}-{seq_len}.safetensors")
        mm_lib.run_cli([args.mmsparse, "generate", *workload_flags(args, preset, seq_len),
                        "-o", path])
        results.setup_time(result, "input: mmsparse generate", time.monotonic() - start)
    start = time.monotonic()
    q, k, v, needles, layout_text = load_input(path, args.device)
    t = peers_lib.Tensors(q, k, v)
    t.layout = module.Layout.from_json(layout_text) if module and layout_text else None
    reference = Reference(t, needles, flash2_dense if args.device == "cuda" else math_dense)
    peers_lib.synchronize(t)
    results.setup_time(result, "input: load + dense reference", time.monotonic() - start)
    for key, value in (("seq_len", t.seq_len), ("heads", t.heads), ("kv_heads", t.kv_heads),
                       ("head_dim", t.head_dim), ("needles", len(reference.needle_keys))):
        result[key] = value
    log(f"{label} {t.seq_len}: input ready ({t.heads} heads, {t.kv_heads} KV heads, "
        f"{len(reference.needle_keys)} needles); {budget.remaining():.0f} s left")
    mm_dense, configs, mm_groups, searched = mmsparse_entries(args, module, t, reference, preset,
                                                              path, scratch, budget.remaining)
    dense, peer_groups, late = peer_entries(args, adapters, t, reference, results, result,
                                            budget.remaining)
    peer_groups += flashinfer_plan_entries(args, module, t, reference, preset, path, results,
                                           result)
    dense += [[entry] for entry in mm_dense]
    oracle = OracleEntry(args, preset, t.seq_len, results, result, budget) if preset else None
    entries = ordered_entries(dense, configs, mm_groups, peer_groups, oracle, searched, late)
    schedule.run_entries(entries, results, result, budget,
                         schedule.MethodLedger(args.method_budget_s), args.rounds, log,
                         args.point_budget_s)
    results.set(result, "complete", True)
    log(f"{label} {t.seq_len}: done, {len(result['points'])} points")


def plot(args, report, result, log):
    if args.no_plots:
        return
    try:
        picture = os.path.join(args.out, report_lib.picture_name(result))
        report_lib.plot_input(result, picture, report_lib.title_note(report, result))
    except Exception as error:  # e.g. no matplotlib: the JSON is the result, pictures redraw
        log(f"picture of {result['label']} not drawn: {type(error).__name__}: {error}")


def main(argv=None):
    args = methods_args.parse_args(argv, __doc__, PRESETS)
    os.makedirs(args.out, exist_ok=True)
    torch.manual_seed(0)
    log = schedule.Progress()
    adapters = peers_lib.build_adapters(args)
    module, why = mm_lib.import_mmsparse() if args.mmsparse_api != "cli" else \
        (None, "--mmsparse-api cli")
    if module is None and args.mmsparse_api == "python":
        raise SystemExit(f"--mmsparse-api python: the package cannot be imported ({why})")
    gpu = torch.cuda.get_device_name(0) if args.device == "cuda" else "none (CPU smoke run)"
    report = {"gpu": gpu, "date": datetime.date.today().isoformat(),
              "command": " ".join(sys.argv), "versions": peers_lib.installed_versions(),
              "flash_attn_4": peers_lib.fa4_status(), "rounds": args.rounds,
              "warmup": args.warmup, "repeats": args.repeats,
              "mmsparse_api": "python package" if module else f"CLI ({why})",
              "budgets_s": {"run": args.budget_s, "method": args.method_budget_s,
                            "point": args.point_budget_s}}
    results = schedule.ResultsFile(os.path.join(args.out, "methods.json"), report)
    log(f"methods bench on {gpu}; mmsparse via {report['mmsparse_api']}")
    run_budget = schedule.Budget(args.budget_s, "run budget")
    inputs = input_list(args)
    with tempfile.TemporaryDirectory() as scratch:
        for index, spec in enumerate(inputs):
            name = f"{spec[0]} {spec[2] or ''}".strip()
            if run_budget.spent_reason():
                results.not_run(name)
                log(f"{name}: not run ({run_budget.spent_reason()})")
                continue
            weights = [schedule.input_weight(s[2], first=(i == 0))
                       for i, s in enumerate(inputs) if i >= index]
            share = schedule.input_shares(weights, run_budget.remaining())
            budget = run_budget.child(share, "input budget")
            try:
                run_input(args, adapters, module, spec, scratch, results, budget, log)
            except Exception as error:  # e.g. out of memory: the next input still runs
                results.report["inputs"][-1]["error"] = f"{type(error).__name__}: {error}"[:500]
                results.write()
                log(f"{name}: failed: {type(error).__name__}: {str(error)[:300]}")
            if results.report["inputs"]:
                plot(args, report, results.report["inputs"][-1], log)
            for file in os.listdir(scratch):
                if file.endswith(".safetensors"):
                    os.remove(os.path.join(scratch, file))
            gc.collect()  # the input's tensors, before the next input allocates its own
            if args.device == "cuda":
                torch.cuda.empty_cache()
    sys.stdout.write(report_lib.markdown_table(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
