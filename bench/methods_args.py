"""The command line of bench/methods.py: its options and the checks argparse cannot make alone."""

import argparse
import os


def parse_pair(text):
    """"vertical,slash" -> (vertical, slash)."""
    vertical, slash = (int(x) for x in text.split(","))
    return vertical, slash


def parse_args(argv, description, presets):
    """The command line of bench/methods.py (its docstring is `description`), checked."""
    parser = argparse.ArgumentParser(description=description,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mmsparse", required=True, help="path to the mmsparse CLI (CUDA build)")
    parser.add_argument("--out", required=True, help="folder for methods.json and the PNGs")
    parser.add_argument("--presets", nargs="*", default=list(presets),
                        help="SYNTHETIC presets: the first at every --seq-lens, then the others")
    parser.add_argument("--seq-lens", type=int, nargs="+", default=[32768, 131072])
    parser.add_argument("--extra", action="append", default=[],
                        help="one more preset:length input (repeatable), e.g. multi-image:131072")
    parser.add_argument("--input", action="append", default=[],
                        help="a safetensors file with q, k, v [1, seq, heads, head_dim] "
                             "(repeatable)")
    parser.add_argument("--peers", nargs="*", default=["flex", "minference"],
                        choices=["flex", "minference", "flashinfer"])
    parser.add_argument("--mmsparse-api", default="auto", choices=["auto", "python", "cli"],
                        help="mmsparse through its Python package (auto: when importable) or its "
                             "CLI")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--needles", type=int, default=4,
                        help="needles planted in the SYNTHETIC inputs (the bench's needle task)")
    parser.add_argument("--mmsparse-patterns", nargs="*", default=[
        "vertical-slash:vertical=500,slash=2000", "vertical-slash:vertical=1000,slash=6096",
        "vertical-slash:vertical=2000,slash=12000", "grid", "a-shape:sink=128,local=4096",
        "a-shape:sink=128,local=16384", "vec:alpha_ppm=30000", "vec:alpha_ppm=100000"],
        help="mmsparse specs for every head (its per-pattern knobs), one method per pattern")
    parser.add_argument("--no-shipped-config", action="store_true",
                        help="leave out configs/<preset>-<len>.json where it exists")
    parser.add_argument("--search-targets", type=float, nargs="*", default=[0.90, 0.95, 0.98],
                        help="mean-recall targets of `mmsparse search` configs")
    parser.add_argument("--search-timeout-s", type=float, default=90,
                        help="stop a search after this many seconds (its point then fails)")
    parser.add_argument("--config-file", action="append", default=[], metavar="PRESET:LEN=PATH",
                        help="a config `mmsparse search` wrote earlier, run as a searched-config "
                             "point on that input (repeatable)")
    parser.add_argument("--search-max-len", type=int, default=32768,
                        help="no search above this length (search time grows with it)")
    parser.add_argument("--vs-counts", type=parse_pair, nargs="*",
                        default=[(100, 800), (500, 2000), (1000, 6096), (3000, 12000)],
                        help="MInference vertical,slash counts")
    parser.add_argument("--xattn-thresholds", type=float, nargs="*", default=[0.8, 0.9, 0.95])
    parser.add_argument("--flexprefill-gammas", type=float, nargs="*", default=[0.9, 0.95, 0.99])
    parser.add_argument("--flashinfer-specs", nargs="*", default=None,
                        help="mmsparse specs whose plans FlashInfer runs (--peers flashinfer; "
                             "default: the vertical-slash ones of --mmsparse-patterns), beside the "
                             "input's configs (shipped, --config-file)")
    # 128: at 131072 tokens FlashInfer's variable block-sparse plan over 64-blocks asked for
    # 28 GiB more than the benchmark's tensors left on an 80 GB H100 (28 heads); 128 is also the
    # engine's query tile at head_dim 128 and XAttention's block.
    parser.add_argument("--flashinfer-block", type=int, default=128,
                        help="block size (rows = columns) of the plans' block maps for FlashInfer")
    parser.add_argument("--flex-locals", type=int, nargs="*", default=[1024, 4096, 16384])
    parser.add_argument("--budget-s", type=float, default=0,
                        help="the whole run's time (0: no limit): no entry starts after it; each "
                             "input gets a share of what is left; inputs never started are listed "
                             "under not_run")
    parser.add_argument("--method-budget-s", type=float, default=0,
                        help="one method's time on one input, its JIT warm-up excluded (0: no "
                             "limit): its remaining settings are skipped after it")
    parser.add_argument("--point-budget-s", type=float, default=0,
                        help="one point's timed runs (0: no limit): fewer repeats when they would "
                             "overrun it (at least one)")
    parser.add_argument("--oracle-timeout-s", type=float, default=60)
    parser.add_argument("--no-plots", action="store_true")
    parser.add_argument("--heads", type=int, default=0,
                        help="query heads of the presets (0: theirs)")
    parser.add_argument("--kv-heads", type=int, default=0,
                        help="KV heads of the presets (0: theirs)")
    parser.add_argument("--device", default="cuda", choices=["cuda", "cpu"],
                        help="cpu: a smoke run at small lengths (mmsparse on its CPU backend, the "
                             "report and pictures; every peer needs CUDA and is skipped)")
    args = parser.parse_args(argv)
    check_args(parser, args)
    return args


def check_args(parser, args):
    """Values argparse cannot check alone: minimums, ranges, --config-file paths."""
    for name in ("warmup", "repeats", "rounds"):
        minimum = 0 if name == "warmup" else 1
        if getattr(args, name) < minimum:
            parser.error(f"--{name} must be at least {minimum}, got {getattr(args, name)}")
    for name in ("budget_s", "method_budget_s", "point_budget_s", "search_timeout_s",
                 "oracle_timeout_s"):
        if getattr(args, name) < 0:
            parser.error(f"--{name.replace('_', '-')} must be >= 0, got {getattr(args, name)}")
    if args.flashinfer_block < 1:
        parser.error(f"--flashinfer-block must be at least 1, got {args.flashinfer_block}")
    for target in args.search_targets:
        if not 0.0 < target <= 1.0:
            parser.error(f"--search-targets must be in (0, 1], got {target}")
    for spec in args.config_file:
        where, _, path = spec.partition("=")
        if ":" not in where or not path:
            parser.error(f"--config-file: expected PRESET:LEN=PATH, got {spec!r}")
        if not os.path.isfile(path):
            parser.error(f"--config-file: no file {path!r}")
