"""Compares the losses of two JSONL logs step by step.

Usage: check_losses.py ACTUAL EXPECTED [--rtol R] [--steps A-B]

Every step of ACTUAL (or of the range A-B) must be in EXPECTED with a loss
within R relative (default 0: identical); NaN matches NaN or null. Prints
"losses match: N steps" or the first difference, exiting 1.
"""

import argparse
import json
import math
import sys


def read(path):
    losses = {}
    with open(path) as f:
        for line in f:
            if line.strip():
                entry = json.loads(line)
                if "val_loss" in entry:
                    continue  # an evaluation record
                loss = entry.get("loss")
                losses[entry["step"]] = math.nan if loss is None else loss
    return losses


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("actual")
    parser.add_argument("expected")
    parser.add_argument("--rtol", type=float, default=0.0)
    parser.add_argument("--steps")
    args = parser.parse_args()
    actual, expected = read(args.actual), read(args.expected)
    steps = sorted(actual)
    if args.steps:
        first, last = map(int, args.steps.split("-"))
        steps = list(range(first, last + 1))
    for step in steps:
        if step not in actual or step not in expected:
            print("step %d missing" % step)
            return 1
        a, e = actual[step], expected[step]
        if math.isnan(a) and math.isnan(e):
            continue
        if not abs(a - e) <= args.rtol * abs(e):
            print("step %d: %r vs %r" % (step, a, e))
            return 1
    print("losses match: %d steps" % len(steps))
    return 0


if __name__ == "__main__":
    sys.exit(main())
