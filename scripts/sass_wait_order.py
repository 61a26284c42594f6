#!/usr/bin/env python3
"""Where the wgmma kernels wait, in their SASS: checks of the chunk loop without a GPU.

The consumer loop of every wgmma kernel waits twice per chunk: for the chunk's scores
(`WARPGROUP.DEPBAR.LE gsb0, 0x1`) and for the previous chunk's P·V (`... gsb0, 0x0`).

The check that fails a build: no P·V wait may be reached through a branch on a warp vote
(VOTE.ALL/ANY). `wgmma.wait_group` is .aligned, so the four warps of a warpgroup must run the same
wait, and a per-warp decision lets them run different ones (compute-sanitizer synccheck reports
it on a GPU as a "Warpgroup MMA sequence error"). A warpgroup-wide decision (bar.red) passes.

What it reports: the float instructions (FFMA, FADD, FMUL, MUFU) between a scores wait and the next
P·V wait, about 200 when the softmax sits between them (66 exponentials, their multiply-adds and
sums per thread) and a handful when ptxas scheduled the P·V wait ahead of it. The kernels accept
the latter because the only legal way to keep the softmax between the waits, a warpgroup barrier
per chunk, cost more than the overlap (measurements in docs/history/perf-notes.md);
`--require-overlap` fails a kernel without the gap, for experiments that try to win it back.

    python3 scripts/sass_wait_order.py build/bench/mmsparse_engine_bench [--cuobjdump PATH]
        [--require-overlap]

Exit status 1 when a kernel has a P·V wait behind a per-warp branch, or (with --require-overlap)
no scores wait followed by a softmax-sized gap.
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


def gaps_after_scores_waits(instructions):
    """Per scores wait: (its index, the instructions after it up to the next wait of any kind)."""
    for i, instruction in enumerate(instructions):
        if SCORES_WAIT not in instruction:
            continue
        gap = []
        for following in instructions[i + 1:]:
            if ANY_WAIT in following:
                break
            gap.append(following)
        yield i, gap


def float_ops_between_waits(instructions):
    """Per scores wait: the float instructions up to the next wait of any kind."""
    return [sum(any(op in g for op in FLOAT_OPS) for g in gap)
            for _, gap in gaps_after_scores_waits(instructions)]


def guard_and_destination(instruction):
    """(the predicate guarding `instruction` or None, its first operand: the destination)."""
    guard = None
    if instruction.startswith("@"):
        guard, instruction = instruction.split(None, 1)
        guard = guard.lstrip("@!")
    parts = instruction.split(None, 1)
    destination = parts[1].split(",")[0].strip() if len(parts) > 1 else None
    return guard, parts[0], destination


def writes(instruction, predicate):
    """Whether `instruction` sets `predicate`: as its destination, or as a barrier reduction's
    answer (BAR.RED returns the warpgroup's verdict in its predicate operand, listed last)."""
    _, opcode, destination = guard_and_destination(instruction)
    if opcode.startswith("BAR.RED"):
        return instruction.rstrip().split(",")[-1].strip().lstrip("!") == predicate
    return destination == predicate


def waits_behind_warp_votes(instructions):
    """Per scores wait: whether the last conditional branch before the next wait tests a warp vote."""
    verdicts = []
    for i, gap in gaps_after_scores_waits(instructions):
        branches = [j for j, g in enumerate(gap)
                    if g.startswith("@") and guard_and_destination(g)[1] == "BRA"]
        if not branches:
            verdicts.append(False)
            continue
        predicate = guard_and_destination(gap[branches[-1]])[0]
        # The predicate's last writer, looked for before the scores wait too (set there, it still
        # decides the branch); none when it comes from outside the function's straight line.
        before_branch = instructions[:i + 1] + gap[:branches[-1]]
        writer = next((g for g in reversed(before_branch) if writes(g, predicate)), None)
        verdicts.append(writer is not None and guard_and_destination(writer)[1].startswith("VOTE"))
    return verdicts


# The wgmma attention kernels: one CTA per tile, and persistent CTAs on a tile queue.
WGMMA_KERNELS = ("wgmma_attention_kernel", "wgmma_persistent_attention_kernel")


def check(sass, require_overlap=False):
    """Per wgmma attention kernel in `sass` (cuobjdump -sass text): (name, fails, gaps, per_warp)."""
    results = []
    for name, instructions in kernels(sass):
        if not any(kernel in name for kernel in WGMMA_KERNELS):
            continue
        gaps = float_ops_between_waits(instructions)
        overlapped = any(gap >= SOFTMAX_MIN_FLOAT_OPS for gap in gaps)
        per_warp = any(waits_behind_warp_votes(instructions))
        fails = per_warp or (require_overlap and not overlapped)
        results.append((name, fails, gaps, per_warp))
    return results


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("binary", help="an executable, library or cubin holding the wgmma kernels")
    parser.add_argument("--cuobjdump", default="cuobjdump", help="the cuobjdump to run")
    parser.add_argument("--require-overlap", action="store_true",
                        help="also fail a kernel whose softmax is not between the two waits")
    args = parser.parse_args()
    try:
        result = subprocess.run([args.cuobjdump, "-sass", args.binary], capture_output=True, text=True)
    except FileNotFoundError:
        sys.exit(f"--cuobjdump {args.cuobjdump}: no such program (scripts/install-sass-tools.sh installs one)")
    if result.returncode != 0:
        sys.exit(f"{args.cuobjdump} -sass {args.binary} failed:\n{result.stderr}")
    results = check(result.stdout, args.require_overlap)
    for name, fails, gaps, per_warp in results:
        note = "  P·V wait behind a per-warp branch (.aligned)" if per_warp else ""
        verdict = "FAIL" if fails else "ok  "
        print(f"{verdict} float instructions between the waits {gaps}{note}  {name}")
    if not results:
        sys.exit(f"no wgmma attention kernel in {args.binary}")
    sys.exit(1 if any(fails for _, fails, _, _ in results) else 0)


if __name__ == "__main__":
    main()
