"""Checks a merak-plan-v1 summary against what its plan must satisfy.

Usage: check_plan_summary.py SUMMARY.json [--single SINGLE.json]
           [--expect-axis AXIS] [--update-bytes-equal-params]

Checks: ranks = mesh size x pp and every rank has distinct coordinates;
the stages hold every layer once and in order; each pipeline rank's tasks
are dated without overlap, F and R take 1, B 2 (1 when W is split off), W
1, every (stage, micro-batch) has one F and one B, and the bubble is
1 - busy / (pp x makespan); memory figures are non-negative with
parameters summing (over pipeline ranks) to at least SINGLE's; with
--expect-axis, a collective over AXIS exists; with
--update-bytes-equal-params, the update's collectives carry exactly the
parameters' bytes. Prints "plan summary ok: ..." or the first failure.
"""

import argparse
import json
import sys


def fail(message):
    print("plan summary FAILED: %s" % message)
    sys.exit(1)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("summary")
    p.add_argument("--single")
    p.add_argument("--expect-axis", action="append", default=[])
    p.add_argument("--update-bytes-equal-params", action="store_true")
    args = p.parse_args()
    d = json.load(open(args.summary))
    if d.get("format") != "merak-plan-v1":
        fail("format is %r" % d.get("format"))
    size = 1
    for n in d["mesh"]["shape"]:
        size *= n
    pipe = d["pipeline"]
    pp = pipe["pp"] if pipe else 1
    if d["ranks"] != size * pp:
        fail("ranks %d, mesh %d x pp %d" % (d["ranks"], size, pp))
    places = {(e["pipeline_rank"], tuple(e["coords"]))
              for e in d["rank_layout"]}
    if len(places) != d["ranks"]:
        fail("rank coordinates repeat")
    layers = d["layers"]
    if [l["index"] for l in layers] != list(range(len(layers))):
        fail("layers are not numbered in order")
    if pipe:
        held = [i for s in pipe["stages"] for i in s["layers"]]
        if held != list(range(len(layers))):
            fail("stages hold layers %s" % held)
        split = any(t["kind"] == "W" for row in pipe["tasks"] for t in row)
        length = {"F": 1, "FK": 1, "R": 1, "W": 1, "B": 1 if split else 2}
        seen = {}
        busy, makespan = 0.0, 0.0
        for row in pipe["tasks"]:
            end = 0.0
            for t in row:
                if t["start"] < end:
                    fail("tasks overlap on a rank at %s" % t)
                if t["end"] - t["start"] != length[t["kind"]]:
                    fail("%s lasts %g" % (t, t["end"] - t["start"]))
                end = t["end"]
                busy += t["end"] - t["start"]
                key = (t["kind"], t["stage"], t["micro"])
                seen[key] = seen.get(key, 0) + 1
            makespan = max(makespan, end)
        stages = len(pipe["stages"])
        for s in range(stages):
            for m in range(pipe["microbatches"]):
                for kind in ("B",):
                    if seen.get((kind, s, m)) != 1:
                        fail("%s(%d,%d) appears %s times"
                             % (kind, s, m, seen.get((kind, s, m))))
                if seen.get(("F", s, m), 0) + seen.get(("FK", s, m), 0) != 1:
                    fail("F(%d,%d) is missing or repeated" % (s, m))
        bubble = 1 - busy / (pp * makespan)
        if abs(bubble - pipe["bubble"]) > 1e-9:
            fail("bubble %g, the tasks give %g" % (pipe["bubble"], bubble))
    keys = ("parameters", "gradients", "optimizer_state", "activations")
    for m in d["memory"]:
        if any(m[k] < 0 for k in keys):
            fail("negative memory %s" % m)
    params = sum(m["parameters"] for m in d["memory"])
    if args.single:
        single = json.load(open(args.single))
        want = sum(m["parameters"] for m in single["memory"])
        if params < want // size:
            fail("parameters %d, the single-device plan's %d" % (params,
                                                                 want))
    for axis in args.expect_axis:
        if not any(axis in c["axes"] for c in d["collectives"]):
            fail("no collective over %s" % axis)
    if args.update_bytes_equal_params:
        update = sum(c["bytes"] for c in d["collectives"]
                     if c["phase"] == "update")
        if update != params:
            fail("the update moves %d bytes, the parameters are %d"
                 % (update, params))
    print("plan summary ok: %d ranks, %d layers, %d collectives, pp %d%s"
          % (d["ranks"], len(layers), len(d["collectives"]), pp,
             ", bubble %.3f" % pipe["bubble"] if pipe else ""))


if __name__ == "__main__":
    main()
