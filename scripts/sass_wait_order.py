#!/usr/bin/env python3
"""Where the wgmma kernels wait, in their SASS: a check of the chunk loop's overlap without a GPU.

The consumer loop of every wgmma kernel waits twice per chunk: for the chunk's scores
(`WARPGROUP.DEPBAR.LE gsb0, 0x1`) and for the previous chunk's P·V (`... gsb0, 0x0`). The softmax
belongs between the two, so that it runs while that P·V completes. ptxas may schedule the second
wait ahead of the softmax even where the source puts it after (docs/perf-notes.md, v16); this
script shows where it went. For each wgmma attention kernel it prints the float instructions (FFMA,
FADD, FMUL, MUFU) between a scores wait and the next P·V wait: about 200 when the softmax sits
between them (66 exponentials, their multiply-adds and sums per thread), a handful when it does not.

    python3 scripts/sass_wait_order.py build/bench/mmsparse_engine_bench [--cuobjdump PATH]

Exit status 1 when a kernel has no scores wait followed by a softmax-sized gap.
"""

import argparse
import re
import subprocess
import sys

SCORES_WAIT = "WARPGROUP.DEPBAR.LE gsb0, 0x1"
ANY_WAIT = "WARPGROUP.DEPBAR.LE gsb0"
FLOAT_OPS = ("FFMA", "FADD", "FMUL", "MUFU")
# A softmax of one 128-key chunk issues 64 exponentials per thread plus their multiply-adds and sums;
# fewer than this many float instructions between the waits means it was moved past the second one.
SOFTMAX_MIN_FLOAT_OPS = 128


def kernels(sass):
    for section in sass.split("Function : ")[1:]:
        name = section.split("\n", 1)[0].strip()
        instructions = [m.group(1).strip() for m in re.finditer(r"/\*[0-9a-f]{4,}\*/\s+(.*?);", section)]
        yield name, instructions


def float_ops_between_waits(instructions):
    """Per scores wait: the float instructions up to the next wait of any kind."""
    gaps = []
    for i, instruction in enumerate(instructions):
        if SCORES_WAIT not in instruction:
            continue
        count = 0
        for following in instructions[i + 1:]:
            if ANY_WAIT in following:
                break
            count += any(op in following for op in FLOAT_OPS)
        gaps.append(count)
    return gaps


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("binary", help="an executable, library or cubin holding the wgmma kernels")
    parser.add_argument("--cuobjdump", default="cuobjdump", help="the cuobjdump to run")
    args = parser.parse_args()
    try:
        result = subprocess.run([args.cuobjdump, "-sass", args.binary], capture_output=True, text=True)
    except FileNotFoundError:
        sys.exit(f"--cuobjdump {args.cuobjdump}: no such program (scripts/install-sass-tools.sh installs one)")
    if result.returncode != 0:
        sys.exit(f"{args.cuobjdump} -sass {args.binary} failed:\n{result.stderr}")
    checked, failed = 0, 0
    for name, instructions in kernels(result.stdout):
        if "wgmma_attention_kernel" not in name:
            continue
        gaps = float_ops_between_waits(instructions)
        overlapped = any(gap >= SOFTMAX_MIN_FLOAT_OPS for gap in gaps)
        checked += 1
        failed += not overlapped
        print(f"{'ok  ' if overlapped else 'FAIL'} float instructions between the waits {gaps}  {name}")
    if checked == 0:
        sys.exit(f"no wgmma attention kernel in {args.binary}")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
