"""mmsparse's side of bench/methods.py: its patterns and configs as adapters of the same interface
as the peers (bench/methods_peers.py), run in the benchmark's own process through the Python
package (`mmsparse.prepare` is the index step, `Plan.run` the attention), so that mmsparse is timed,
probed and measured exactly as every peer is, on the same tensors and the same dense reference.

The CLI is still used for what the package does not do: writing the SYNTHETIC inputs
(`mmsparse generate`), searching configs (`mmsparse search`) and the tile oracle (`mmsparse bench`).
Where the package cannot be imported (not built), `mmsparse run --compare` takes its place
(`CliEntry`: the CLI's own timing and accuracy against its own dense run; slower, since each call
loads the input and measures accuracy on the host).
"""

import json
import os
import subprocess

import methods_peers as peers_lib
import methods_report as report_lib

SHIPPED_METHOD = "mmsparse shipped config"
GIVEN_METHOD = "mmsparse config file"  # configs given with --config-file


def import_mmsparse():
    """The mmsparse package, or the reason it cannot be used."""
    try:
        import mmsparse
    except Exception as error:  # a missing extension is reported, never fatal
        return None, f"{type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}"
    return mmsparse, None


def run_cli(command, timeout_s=None):
    """stdout of a CLI call; a failure or a timeout (seconds, None: none) raises RuntimeError."""
    try:
        result = subprocess.run(command, capture_output=True, text=True,
                                timeout=timeout_s if timeout_s else None)
    except subprocess.TimeoutExpired:
        raise RuntimeError(f"{' '.join(command[:3])} ... timed out after {timeout_s:.0f} s")
    if result.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed:\n{result.stderr[-2000:]}")
    return result.stdout


class MmsparsePattern(peers_lib.Adapter):
    """One mmsparse pattern (its specs swept: windows, vertical/slash counts, vec alphas, ...) for
    every head, through `mmsparse.prepare(q, k, pattern=spec, layout=...)`."""
    family, kernel = "mmsparse", "mmsparse engine"

    # The density counts every computed pair on the host (count_plan_pairs: seconds per plan at
    # 128K, more than the point itself); above this length points go without it.
    density_max_len = 32768

    def __init__(self, module, pattern, specs):
        super().__init__(f"mmsparse {pattern}", specs)
        self.module = module

    def knob(self, setting):
        return setting

    def prepare(self, t, spec):
        return self.module.prepare(t.q, t.k, pattern=spec, layout=t.layout)

    def attend(self, t, plan, v):
        return plan.run(t.q, t.k, v, return_lse=True)

    def describe(self, t, plan):
        return {"density": plan.density()} if t.seq_len <= self.density_max_len else {}


class MmsparseDense(MmsparsePattern):
    """The engine's dense causal attention (a dense plan): mmsparse's own dense bar."""
    family = "dense"

    def __init__(self, module):
        peers_lib.Adapter.__init__(self, "mmsparse dense", ["dense"])
        self.module = module

    def prepare(self, t, setting):
        return self.module.prepare(t.q, t.k)

    def describe(self, t, plan):
        return {}

    def exact_accuracy(self):
        return {"recall": 1.0, "recall_min": 1.0, "recall_source": "dense (every causal pair)",
                "density": 1.0}


class MmsparseConfig(MmsparsePattern):
    """Per-head configs (one point each): the shipped config for this preset and length, configs
    given with --config-file, or configs `mmsparse search` writes at recall targets. A setting is
    (label, path, note, ...); a searched one has path None: `ready` searches it (`search`)."""

    def __init__(self, module, name, settings, search=None):
        peers_lib.Adapter.__init__(self, name, settings)
        self.module, self.search, self._configs = module, search, {}

    def knob(self, setting):
        return setting[0]

    def ready(self, t, setting, timeout_s):
        """Searches the setting's config when it has none yet (its time is not an index time: a
        search is offline); returns the point's note."""
        label, path, note = setting[:3]
        if path is None:
            path = self.search(setting, timeout_s)
        self._configs[label] = self.module.PatternConfig.load(path)
        return note

    def setup(self, t):
        pass  # the engine has no JIT; its first point warms it up like any other

    def prepare(self, t, setting):
        return self.module.prepare(t.q, t.k, config=self._configs[setting[0]], layout=t.layout)


def pattern_groups(module, specs):
    """One adapter per pattern name among the specs, in the order the names first appear."""
    by_pattern = {}
    for spec in specs:
        by_pattern.setdefault(spec.split(":", 1)[0], []).append(spec)
    return [MmsparsePattern(module, name, group) for name, group in by_pattern.items()]


def shipped_config(repo, preset, seq_len, heads_overridden):
    """configs/<preset>-<seq_len>.json when it exists and the input has the preset's own heads
    (the file names head indices; configs/README.md), else None."""
    path = os.path.join(repo, "configs", f"{preset}-{seq_len}.json")
    if not preset or heads_overridden or not os.path.isfile(path):
        return None
    return path


def config_provenance(path):
    """What a config file says it was searched on (its `search.calibration`)."""
    try:
        with open(path) as file:
            calibration = json.load(file).get("search", {}).get("calibration", "unknown")
    except (OSError, ValueError) as error:
        return f"config unreadable: {error}"
    return f"searched earlier on: {calibration}"


def tile_oracle(cli, workload_flags, device, timeout_s):
    """The tile oracle of `mmsparse bench` on the same SYNTHETIC workload (it regenerates the
    same tensors from the same flags); a few sampled rows and tiles keep it to seconds."""
    bench = json.loads(run_cli([cli, "bench", "--device", device, *workload_flags, "--pattern",
                                "dense", "--warmup", "0", "--repeats", "1", "--oracle-rows", "8",
                                "--json", "-", "--quiet"], timeout_s))
    return report_lib.tile_oracle_from_bench(bench)


class CliEntry:
    """Fallback without the package: one `mmsparse run --compare` call for some specs or one
    config, timed and measured by the CLI (docs/methods-bench.md)."""

    repeatable = True

    def __init__(self, args, path, name, specs=(), config=None, label=None, note=None,
                 with_dense=False):
        self.command = [args.mmsparse, "run", "-i", path, "--compare", "--device", args.device,
                        "--warmup", str(args.warmup), "--repeats", str(args.repeats),
                        "--json", "-", "--quiet"]
        for spec in specs:
            self.command += ["--pattern", spec]
        if config:
            self.command += ["--config", config]
        self.name, self.method = name, name
        self.label, self.note, self.with_dense, self.rounds = label, note, with_dense, []

    def setup(self):
        pass

    def run_round(self, point_budget_s):
        report = json.loads(run_cli(self.command, point_budget_s or None))
        points = report_lib.mmsparse_points_from_run(report, self.label)
        if not self.with_dense:
            points = [p for p in points if p["method"] != "mmsparse dense"]
        self.rounds.append(points)

    def points(self):
        points = []
        for index, point in enumerate(self.rounds[0]):
            point = dict(point, note=self.note)
            report_lib.finish_point(point, [r[index]["index_ms"] for r in self.rounds],
                                    [r[index]["attention_ms"] for r in self.rounds])
            points.append(point)
        return points
