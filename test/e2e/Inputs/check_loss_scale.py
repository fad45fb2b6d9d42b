"""Checks the loss scale of a merak-exec JSONL log against the dynamic
rule: the first step's scale is --init; after a step that overflowed the
scale halves (and, with --same-batches, when every step trains on the same
batch, the next loss is the same: the skipped update changed nothing);
after --window steps in a row without one it doubles; otherwise it stays.
Requires at least one overflow and one doubling, so that both were
exercised.

Usage: check_loss_scale.py LOG --init S --window W [--same-batches]
"""

import argparse
import json
import sys


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("log")
    p.add_argument("--init", type=float, required=True)
    p.add_argument("--window", type=int, required=True)
    p.add_argument("--same-batches", action="store_true",
                   help="every step trains on the same batch")
    args = p.parse_args()
    steps = [json.loads(line) for line in open(args.log) if '"step"' in line]
    steps = [s for s in steps if "loss" in s]
    problems = []
    if not steps or steps[0].get("loss_scale") != args.init:
        problems.append("step 1's scale is %r, not %g"
                        % (steps[0].get("loss_scale") if steps else None,
                           args.init))
    good, overflows, doublings = 0, 0, 0
    for prev, cur in zip(steps, steps[1:]):
        scale, nxt = prev["loss_scale"], cur["loss_scale"]
        if prev.get("overflow"):
            overflows += 1
            good = 0
            want = scale / 2
            if args.same_batches and cur["loss"] != prev["loss"]:
                problems.append("step %d: loss %r after a skipped update, "
                                "step %d had %r" % (cur["step"], cur["loss"],
                                                    prev["step"], prev["loss"]))
        else:
            good += 1
            want = scale
            if good == args.window:
                want, good = scale * 2, 0
                doublings += 1
        if nxt != want:
            problems.append("step %d: scale %g, expected %g" % (cur["step"],
                                                                nxt, want))
    if not overflows or not doublings:
        problems.append("%d overflows and %d doublings: the run exercised "
                        "too little" % (overflows, doublings))
    for text in problems:
        print("FAILED: " + text)
    if problems:
        return 1
    print("OK: %d steps, %d overflows, %d doublings"
          % (len(steps), overflows, doublings))
    return 0


if __name__ == "__main__":
    sys.exit(main())
