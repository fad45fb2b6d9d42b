"""Compares the per-step losses of two JSONL training logs.

Usage:
    python3 compare_losses.py A.jsonl B.jsonl [--rtol 1e-4] [--atol 1e-6]
                              [--steps N] [--gap C.jsonl [--gap-factor F]]
                              [--key val_loss]

Each line of a log is {"step": i, "loss": x, ...}, steps consecutive (a
log resumed from a checkpoint may start after 1); a null loss stands for a
non-finite one, and other keys are ignored. Evaluation records
({"step": i, "val_loss": x, ...}) are skipped; with --key val_loss they are
the ones compared (at the same steps in both logs, not consecutive ones).
B is the reference: step i passes when |A_i - B_i| <= max(rtol * |B_i|,
atol). The absolute floor lets a loss that has fallen to about 0 pass.
Prints a table and exits 1 naming the first failing step (a NaN always
fails), or when the logs hold different steps; 2 when a log cannot be read.
With --gap, the tolerance is not given but measured: rtol is F (default 2)
times the largest relative difference of log C from B over the steps (for
example C: PyTorch under autocast, B: PyTorch in float32, A: the program
under test in mixed precision).
"""

import argparse
import json
import math
import sys

# Keeps a loss that has fallen to about 0 in B from demanding an exact match.
ATOL = 1e-6


class LogError(Exception):
    pass


def read_log(path, key="loss"):
    """Returns [(step, loss)] in file order; a null loss reads as NaN.

    `key` is "loss" (step records) or "val_loss" (evaluation records); the
    records of the other kind are skipped.
    """
    other = "val_loss" if key == "loss" else "loss"
    rows = []
    try:
        with open(path) as f:
            lines = f.readlines()
    except OSError as e:
        raise LogError("%s: %s" % (path, e.strerror))
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            entry = json.loads(line)
            if key not in entry and other in entry:
                continue
            step, loss = entry["step"], entry[key]
        except (ValueError, KeyError, TypeError) as e:
            raise LogError("%s:%d: not a {\"step\", \"%s\"} line: %s"
                           % (path, number, key, e))
        if loss is None:
            loss = math.nan
        if (type(step) is not int or isinstance(loss, bool)
                or not isinstance(loss, (int, float))):
            raise LogError("%s:%d: step must be an integer and loss a number "
                           "or null" % (path, number))
        rows.append((step, float(loss)))
    steps = [s for s, _ in rows]
    if not rows:
        raise LogError("%s: no steps" % path)
    first = steps[0]
    if key != "loss":
        if steps != sorted(set(steps)) or first < 1:
            raise LogError("%s: evaluation steps are %s, expected increasing "
                           "steps" % (path, _abbrev(steps)))
        return rows
    if first < 1 or steps != list(range(first, first + len(rows))):
        raise LogError("%s: steps are %s, expected consecutive steps from "
                       "1 or later" % (path, _abbrev(steps)))
    return rows


def _abbrev(values, limit=8):
    if len(values) <= limit:
        return str(values)
    return "[%s, ...]" % ", ".join(map(str, values[:limit]))


def relative_diff(a, b):
    if math.isnan(a) or math.isnan(b):
        return math.nan
    if a == b:  # also equal infinities
        return 0.0
    return abs(a - b) / abs(b) if b else math.inf


def within(a, b, rtol, atol):
    if a == b:
        return True
    return abs(a - b) <= max(rtol * abs(b), atol)  # False for NaN


def compare(rows_a, rows_b, rtol, atol=ATOL, steps=None, out=sys.stdout):
    """Prints the table; returns None on success or the failure message."""
    if rows_a[0][0] != rows_b[0][0]:
        return "the logs start at steps %d and %d" % (rows_a[0][0],
                                                      rows_b[0][0])
    count_a, count_b = len(rows_a), len(rows_b)
    if steps is None:
        if count_a != count_b:
            limit = min(count_a, count_b)
            failure = "the logs hold %d and %d steps" % (count_a, count_b)
        else:
            limit, failure = count_a, None
    else:
        limit = min(steps, count_a, count_b)
        failure = None
        if count_a < steps or count_b < steps:
            failure = ("%d steps requested, the logs hold %d and %d"
                       % (steps, count_a, count_b))
    print("%6s  %-24s %-24s %10s %10s"
          % ("step", "A", "B", "abs.diff", "rel.diff"), file=out)
    first_bad = None
    for (step, a), (step_b, b) in zip(rows_a[:limit], rows_b[:limit]):
        if step != step_b:
            return "the logs hold step %d and step %d in one place" % (step,
                                                                      step_b)
        ok = within(a, b, rtol, atol)
        if not ok and first_bad is None:
            first_bad = (step, a, b)
        print("%6d  %-24r %-24r %10.3e %10.3e%s"
              % (step, a, b, abs(a - b), relative_diff(a, b),
                 "" if ok else "  <-- exceeds tolerance"), file=out)
    if first_bad is not None:
        step, a, b = first_bad
        return ("step %d differs: %r vs %r, relative difference %.3e > "
                "rtol %g (atol %g)"
                % (step, a, b, relative_diff(a, b), rtol, atol))
    return failure


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("a", help="log under test (e.g. merak-exec's)")
    parser.add_argument("b", help="reference log")
    parser.add_argument("--rtol", type=float, default=1e-4,
                        help="relative to B (default 1e-4)")
    parser.add_argument("--atol", type=float, default=ATOL,
                        help="absolute floor (default %g)" % ATOL)
    parser.add_argument("--steps", type=int,
                        help="compare only the first N steps (both logs "
                        "must hold at least N)")
    parser.add_argument("--gap", metavar="C",
                        help="set rtol from log C's largest relative "
                        "difference from B")
    parser.add_argument("--gap-factor", type=float, default=2.0, metavar="F",
                        help="rtol = F * that difference (default 2)")
    parser.add_argument("--key", choices=["loss", "val_loss"],
                        default="loss",
                        help="compare the step records' loss (default) or "
                        "the evaluation records' val_loss")
    args = parser.parse_args(argv)
    if args.rtol < 0 or args.atol < 0:
        parser.error("--rtol and --atol must not be negative")
    if args.steps is not None and args.steps < 1:
        parser.error("--steps must be at least 1")
    try:
        rows_a = read_log(args.a, args.key)
        rows_b = read_log(args.b, args.key)
    except LogError as e:
        print("error: %s" % e, file=sys.stderr)
        return 2
    if args.gap:
        try:
            rows_c = read_log(args.gap, args.key)
        except LogError as e:
            print("error: %s" % e, file=sys.stderr)
            return 2
        reference = dict(rows_b)
        gaps = [relative_diff(c, reference[step]) for step, c in rows_c
                if step in reference]
        if not gaps or any(math.isnan(g) for g in gaps):
            print("error: %s and %s share no finite steps" % (args.gap,
                                                               args.b),
                  file=sys.stderr)
            return 2
        args.rtol = args.gap_factor * max(gaps)
        print("gap of %s from %s: %.3e; rtol %.3e"
              % (args.gap, args.b, max(gaps), args.rtol))
    failure = compare(rows_a, rows_b, args.rtol, args.atol, args.steps)
    if failure:
        print("FAIL: %s (%s vs %s)" % (failure, args.a, args.b),
              file=sys.stderr)
        return 1
    print("OK: %d %s within rtol %g (atol %g)"
          % (args.steps or len(rows_a),
             "steps" if args.key == "loss" else "evaluations", args.rtol,
             args.atol))
    return 0


if __name__ == "__main__":
    sys.exit(main())
