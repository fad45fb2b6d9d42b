"""Checks a merak-exec --trace file: Chrome trace JSON with one process per
rank, compute tasks on thread 0 (forward and backward of every micro-batch
of the rank's stages), transfers on thread 1.

Usage: python3 check_trace.py TRACE --ranks N --microbatches M --steps S
           [--order RANK "TASK TASK ..."] [--in-some-step] [--event NAME]
           [--sends-follow-producers]
--order: the compute tasks of RANK, in every step (with --in-some-step: in
at least one), in exactly this order.
--event: some event has this name (on any rank).
--sends-follow-producers: every send is posted right after the task that
produced what it carries, before the rank's next compute task starts.
"""
import argparse
import collections
import json
import re
import sys


def check_sends(events):
    """Each send X(s,m) -> peer starts after its rank's X(s,m) (F, FK or B)
    ends and before the rank's next compute task begins."""
    errors = []
    compute = collections.defaultdict(list)
    for e in events:
        if e.get("ph") == "X" and e["tid"] == 0:
            compute[(e["pid"], e["args"]["step"])].append(e)
    for tasks in compute.values():
        tasks.sort(key=lambda e: e["ts"])
    for e in events:
        if e.get("ph") != "X" or e["cat"] != "send":
            continue
        m = re.match(r"send (F|B)\((\d+),(\d+)\)", e["name"])
        if not m:
            continue
        tasks = compute[(e["pid"], e["args"]["step"])]
        names = ({"F(%s,%s)" % m.group(2, 3), "FK(%s,%s)" % m.group(2, 3)}
                 if m.group(1) == "F" else {"B(%s,%s)" % m.group(2, 3)})
        k = next((i for i, t in enumerate(tasks) if t["name"] in names), None)
        if k is None:
            errors.append("rank %d: %r has no producer" % (e["pid"], e["name"]))
            continue
        end = tasks[k]["ts"] + tasks[k]["dur"]
        after = tasks[k + 1]["ts"] if k + 1 < len(tasks) else float("inf")
        if not end <= e["ts"] <= after:
            errors.append("rank %d step %d: %r posted at %.0f us, not between "
                          "%s's end (%.0f) and the next task (%.0f)"
                          % (e["pid"], e["args"]["step"], e["name"], e["ts"],
                             tasks[k]["name"], end, after))
    return errors


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("trace")
    p.add_argument("--ranks", type=int, required=True)
    p.add_argument("--microbatches", type=int, required=True)
    p.add_argument("--steps", type=int, required=True)
    p.add_argument("--order", nargs=2, metavar=("RANK", "TASKS"))
    p.add_argument("--in-some-step", action="store_true")
    p.add_argument("--event")
    p.add_argument("--sends-follow-producers", action="store_true")
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
    if args.order:
        rank, want = int(args.order[0]), args.order[1].split()
        compute = sorted((e for e in events if e.get("ph") == "X"
                          and e["pid"] == rank and e["tid"] == 0
                          and e["cat"] != "optimizer"),
                         key=lambda e: e["ts"])
        wrong = []
        for step in range(1, args.steps + 1):
            got = [e["name"] for e in compute if e["args"]["step"] == step]
            if got != want:
                wrong.append("rank %d step %d ran %s, expected %s"
                             % (rank, step, " ".join(got), " ".join(want)))
        if wrong and (not args.in_some_step or len(wrong) == args.steps):
            errors.extend(wrong)
    if args.sends_follow_producers:
        errors.extend(check_sends(events))
    if args.event and not any(e.get("name") == args.event for e in events):
        errors.append("no event named %r" % args.event)
    if errors:
        print("\n".join(errors[:20]), file=sys.stderr)
        return 1
    print("trace OK: %d ranks, %d events" % (args.ranks, len(events)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
