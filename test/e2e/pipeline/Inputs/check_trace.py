"""Checks a merak-exec --trace file: Chrome trace JSON with one process per
rank, compute tasks on thread 0 (forward and backward of every micro-batch
of the rank's stages), transfers on thread 1.

Usage: python3 check_trace.py TRACE --ranks N --microbatches M --steps S
"""
import argparse
import collections
import json
import re
import sys


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("trace")
    p.add_argument("--ranks", type=int, required=True)
    p.add_argument("--microbatches", type=int, required=True)
    p.add_argument("--steps", type=int, required=True)
    args = p.parse_args()
    with open(args.trace) as f:
        doc = json.load(f)
    events = doc["traceEvents"]
    names = {e["pid"]: e["args"]["name"] for e in events
             if e.get("ph") == "M" and e["name"] == "process_name"}
    errors = []
    if sorted(names) != list(range(args.ranks)):
        errors.append("process tracks %s, expected ranks 0..%d"
                      % (sorted(names), args.ranks - 1))
    per_rank = collections.defaultdict(collections.Counter)
    for e in events:
        if e.get("ph") != "X":
            continue
        if e["dur"] < 0 or e["ts"] < 0:
            errors.append("negative time in %s" % e)
        comm = e["cat"] in ("send", "recv", "collective")
        if e["tid"] != (1 if comm else 0):
            errors.append("%s on thread %d" % (e["name"], e["tid"]))
        if e["cat"] in ("forward", "backward"):
            m = re.match(r"F?[FB]K?\((\d+),(\d+)\)$", e["name"])
            if not m:
                errors.append("unexpected task name %r" % e["name"])
            per_rank[e["pid"]][e["cat"]] += 1
        else:
            per_rank[e["pid"]][e["cat"]] += 1
    for r in range(args.ranks):
        c = per_rank[r]
        for cat in ("forward", "backward"):
            if c[cat] < args.microbatches * args.steps:
                errors.append("rank %d has %d %s tasks, expected at least %d"
                              % (r, c[cat], cat,
                                 args.microbatches * args.steps))
        if args.ranks > 1 and (c["send"] == 0 or c["recv"] == 0):
            errors.append("rank %d has no transfers" % r)
    if errors:
        print("\n".join(errors[:20]), file=sys.stderr)
        return 1
    print("trace OK: %d ranks, %d events" % (args.ranks, len(events)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
