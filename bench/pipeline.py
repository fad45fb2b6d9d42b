"""Benchmark: pipeline schedules on local ranks, measured against their formulas.

Builds the in-tree GPT-2 with enough blocks that the stages dominate the run,
compiles its AdamW training step, partitions it into pp stages (pp x 2 chunks
for interleaved 1F1B) and, in this one invocation, runs every schedule kind
with merak-exec on pp local ranks. Per kind it prints:
  * the bubble fraction merak-exec measured from its trace (steps after the
    first), beside the textbook formula: (p-1)/(m+p-1) for GPipe and 1F1B,
    that divided by v for interleaved 1F1B, about a third of 1F1B for ZB-H1;
    and the schedule's own unit-time simulation;
  * the median step time;
  * peak memory above the state (activations and transfers) per stage.
Then `dynamic` against `1f1b` when one stage is made 30 % slower at a random
half of the steps (merak-exec --pipeline-delay), the case dynamic scheduling
is for.

With --p2p, only 1f1b with its transfers over Gloo (TCP loopback),
through shared memory (merak-exec --p2p=shm), in NCCL's protocol on
Gloo (--p2p=gloo-channels: a channel per direction, a header before each
transfer, receives matched by tag by the link's thread; what that protocol
costs over plain Gloo) and in the protocol --p2p=shm runs between GPUs on
rings in /dev/shm (--p2p=shm-channels), alternating, --repeat times each:
the median step
time of each, its ratio to Gloo's, and the time the ranks spent waiting in
receives (from the trace).

On a machine with fewer cores than ranks the ranks share cores, which
inflates every task's wall time and the measured bubble; the header prints
the cores.
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "python"))
sys.path.insert(0, os.path.join(ROOT, "test", "fixtures"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

KINDS = ["gpipe", "1f1b", "interleaved-1f1b", "zb-h1",
         "merak-last-no-recompute", "merak-shifted-critical-path", "dynamic"]


def formula(kind, p, m, v):
    base = (p - 1) / (m + p - 1)
    if kind == "interleaved-1f1b":
        return base / v
    if kind == "zb-h1":
        return base / 3
    if kind in ("gpipe", "1f1b", "dynamic"):
        return base
    return None  # Merak's schedules: recomputation changes the work


def run(cmd, **kw):
    result = subprocess.run(cmd, capture_output=True, text=True, **kw)
    if result.returncode != 0:
        sys.stderr.write(result.stdout + result.stderr)
        raise SystemExit("error: %s failed" % " ".join(cmd[:2]))
    return result.stdout


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--build", required=True, help="the build directory")
    p.add_argument("--pp", type=int, default=4)
    p.add_argument("--microbatches", type=int, default=8)
    p.add_argument("--layers", type=int, default=8)
    p.add_argument("--embd", type=int, default=256)
    p.add_argument("--heads", type=int, default=8)
    p.add_argument("--seq", type=int, default=64)
    p.add_argument("--batch", type=int, default=4, help="per micro-batch")
    p.add_argument("--vocab", type=int, default=512)
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--delay", default="1:0.3:0.5",
                   help="--pipeline-delay for the dynamic comparison")
    p.add_argument("--p2p", action="store_true",
                   help="compare Gloo, shared-memory and gloo-channels transfers only")
    p.add_argument("--repeat", type=int, default=3,
                   help="with --p2p: runs of each transport")
    args = p.parse_args()
    with tempfile.TemporaryDirectory(prefix="merak-bench-pipeline-") as work:
        return measure(args, work)


def measure(args, work):
    """Traces the model into `work`, compiles each schedule and runs it."""
    import torch
    import merak_safetensors
    import merak_trace
    import models
    import train_step  # the same GPT-2 configuration as bench-train-step

    torch.manual_seed(0)
    model = models.GPT2(train_step.make_config(args)).train()
    m, pp = args.microbatches, args.pp
    gen = torch.Generator().manual_seed(0)
    shape = (args.steps, m * args.batch, args.seq)
    idx = torch.randint(0, args.vocab, shape, generator=gen)
    tgt = torch.randint(0, args.vocab, shape, generator=gen)
    model_path = os.path.join(work, "gpt2.pt")
    merak_trace.save(model, (idx[0, :args.batch], tgt[0, :args.batch]),
                     model_path)
    data = os.path.join(work, "batches.safetensors")
    merak_safetensors.save({"idx": idx, "targets": tgt}, data)
    bin_dir = os.path.join(args.build, "bin")
    opt, exe = os.path.join(bin_dir, "merak-opt"), os.path.join(
        bin_dir, "merak-exec")
    step = os.path.join(work, "step.mlir")
    run([opt, model_path, "--merak-train=optimizer=adamw lr=1e-3", "-o",
         step])
    out = subprocess.run([opt, step,
                          "--merak-pipeline-partition=pp=%d report" % pp,
                          "-o", os.devnull], capture_output=True, text=True)
    found = re.search(r"(\d+) layers", out.stderr)
    layers = int(found.group(1)) if found else 2 * args.layers + 1

    params = sum(t.numel() for t in model.parameters())
    print("GPT-2-style: %d blocks (%d pipeline layers), %.1fM parameters, "
          "micro-batch %dx%d, pp=%d, m=%d; %d cores, 1 thread per rank"
          % (args.layers, layers, params / 1e6, args.batch, args.seq, pp, m,
             os.cpu_count()))

    def plan(kind, virtual=1, extra=()):
        path = os.path.join(work, "%s.mlir" % kind)
        part = "pp=%d" % pp
        if virtual > 1:
            n = pp * virtual
            cuts = [round(i * layers / n) for i in range(1, n)]
            part += " virtual=%d stages=%s" % (virtual,
                                              ",".join(map(str, cuts)))
        run([opt, step, "--merak-pipeline-partition=" + part, *extra,
             "--merak-pipeline-outline",
             "--merak-pipeline-schedule=kind=%s microbatches=%d" % (kind, m),
             "-o", path])
        return path

    def train(path, tag, extra=()):
        log = os.path.join(work, tag + ".jsonl")
        if os.path.exists(log):
            os.remove(log)
        text = run([exe, path, "--nproc", str(pp), "--init", model_path,
                    "--data", data, "--steps", str(args.steps),
                    "--threads", "1", "--log-jsonl", log, *extra])
        with open(log) as f:
            ms = [json.loads(line)["ms"] for line in f][1:]
        bubble = re.search(r"bubble ([0-9.]+)% measured .*schedule "
                           r"([0-9.]+)%", text)
        act = re.search(r"activations, transfers\) per rank \(MB\):(.*)",
                        text)
        return {"ms": statistics.median(ms),
                "mean_ms": statistics.mean(ms),
                "bubble": float(bubble.group(1)) / 100,
                "unit": float(bubble.group(2)) / 100,
                "act": [float(x) for x in act.group(1).split()]}

    if args.p2p:
        return compare_transfers(args, plan, train, work)

    print()
    print("%-28s %9s %9s %9s %10s  %s" % ("kind", "measured", "formula",
                                          "unit-time", "step ms",
                                          "activation MB per stage"))
    results = {}
    for kind in KINDS:
        virtual = 2 if kind == "interleaved-1f1b" else 1
        extra = ()
        if kind.startswith("merak-"):
            extra = ("--merak-recompute=recompute=full recompute-ratio=0.5",)
        r = train(plan(kind, virtual, extra), kind)
        results[kind] = r
        f = formula(kind, pp, m, virtual)
        print("%-28s %8.1f%% %9s %8.1f%% %10.1f  %s"
              % (kind + (" (v=2)" if virtual > 1 else ""), 100 * r["bubble"],
                 "%.1f%%" % (100 * f) if f is not None else "-",
                 100 * r["unit"], r["ms"],
                 " ".join("%.2f" % a for a in r["act"])))

    print()
    print("one stage 30%% slower at random steps (--pipeline-delay %s):"
          % args.delay)
    slow = {}
    for kind in ("1f1b", "dynamic"):
        slow[kind] = train(plan(kind), kind + "-slow",
                           ("--pipeline-delay", args.delay))
        print("  %-8s mean step %.1f ms (bubble %.1f%%)"
              % (kind, slow[kind]["mean_ms"], 100 * slow[kind]["bubble"]))
    print("  dynamic / 1f1b step time: %.3f"
          % (slow["dynamic"]["mean_ms"] / slow["1f1b"]["mean_ms"]))
    return 0


def receive_wait_ms(trace_path):
    """Mean per rank and step (after the first) of the time spent waiting
    in `recv` events."""
    with open(trace_path) as f:
        events = json.load(f)
    events = events.get("traceEvents", events)
    total, ranks, steps = 0.0, set(), set()
    for e in events:
        step = e.get("args", {}).get("step", 0)
        if e.get("ph") != "X" or step <= 1:
            continue
        ranks.add(e.get("pid"))
        steps.add(step)
        if e.get("cat") == "recv":
            total += e.get("dur", 0) / 1000.0
    return total / max(len(ranks), 1) / max(len(steps), 1)


def compare_transfers(args, plan, train, work):
    path = plan("1f1b")
    transports = ("gloo", "shm", "gloo-channels", "shm-channels")
    times = {t: [] for t in transports}
    waits = {t: [] for t in transports}
    for i in range(args.repeat):
        for transport in transports:
            trace = os.path.join(work, "%s-%d.trace.json" % (transport, i))
            r = train(path, "%s-%d" % (transport, i),
                      ("--p2p", transport, "--trace", trace))
            times[transport].append(r["ms"])
            waits[transport].append(receive_wait_ms(trace))
    print()
    print("1f1b transfers, %d runs each (median step ms over steps after "
          "the first; receive wait per rank and step):" % args.repeat)
    for transport in transports:
        print("  %-13s step %8.1f ms   receive wait %7.2f ms   runs %s"
              % (transport, statistics.median(times[transport]),
                 statistics.median(waits[transport]),
                 " ".join("%.1f" % t for t in times[transport])))
    for transport in transports[1:]:
        print("  %s / gloo step time: %.3f"
              % (transport, statistics.median(times[transport]) /
                 statistics.median(times["gloo"])))
    return 0


if __name__ == "__main__":
    sys.exit(main())
