"""Benchmark: start-up of merak-exec from a module (.mlir) and from its
rank-program file (.mrp).

Compiles a fixture's AdamW step under a plan (by default ViT-B/16, the
largest test model, on 8 ranks: dp=2 x tp=2 x pp=2), writes the .mrp with
merak-translate, and in this one invocation measures, alternating the two
inputs, the median of:
  * one process reading the plan and listing rank 0's programs
    (`--print-program`): parsing and lowering the module against reading
    the file;
  * a whole run of one step on all ranks (`--nproc N --steps 1`), whose
    difference is what every rank spends before its first step.
Prints the file sizes, both medians and their ratio, and the cores.
"""
import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run(cmd):
    start = time.perf_counter()
    result = subprocess.run(cmd, capture_output=True, text=True)
    elapsed = time.perf_counter() - start
    if result.returncode != 0:
        sys.stderr.write(result.stdout + result.stderr)
        raise SystemExit("error: %s failed" % " ".join(cmd[:2]))
    return elapsed


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--build", required=True, help="the build directory")
    p.add_argument("--fixture", default="vit_b_16")
    p.add_argument("--plan", default="dp=2 tp=2 pp=2 microbatches=4 "
                                     "schedule=1f1b")
    p.add_argument("--ranks", type=int, default=8)
    p.add_argument("--rounds", type=int, default=3)
    args = p.parse_args()

    bin_dir = os.path.join(args.build, "bin")
    fixtures = os.path.join(args.build, "test", "fixtures")
    model = os.path.join(fixtures, args.fixture + ".pt")
    with tempfile.TemporaryDirectory() as tmp:
        step = os.path.join(tmp, "step.mlir")
        plan = os.path.join(tmp, "plan.mlir")
        mrp = os.path.join(tmp, "plan.mrp")
        batches = os.path.join(tmp, "batches.safetensors")
        run([os.path.join(bin_dir, "merak-opt"), model,
             "--merak-train=optimizer=adamw lr=1e-3", "-o", step])
        run([os.path.join(bin_dir, "merak-opt"), step,
             "--merak-parallelize=" + args.plan, "-o", plan])
        compile_s = run([os.path.join(bin_dir, "merak-translate"), plan,
                         "--merak-to-rank-program", "-o", mrp])
        microbatches = 1
        for word in args.plan.split():
            if word.startswith("microbatches="):
                microbatches = int(word.split("=")[1])
        run(["/usr/bin/python3",
             os.path.join(ROOT, "test", "e2e", "make_batches.py"),
             "--fixture", args.fixture, "--fixtures-dir", fixtures,
             "--steps", "1", "--seed", "0", "--cycle", "1",
             "--microbatches", str(microbatches), "--out", batches])
        exe = os.path.join(bin_dir, "merak-exec")
        listing = {"mlir": [], "mrp": []}
        whole = {"mlir": [], "mrp": []}
        for _ in range(args.rounds):
            for kind, path in (("mlir", plan), ("mrp", mrp)):
                listing[kind].append(run([exe, path, "--print-program"]))
                whole[kind].append(run(
                    [exe, path, "--nproc", str(args.ranks), "--init", model,
                     "--data", batches, "--steps", "1", "--threads", "1"]))
        print("%s under \"%s\" on %d ranks, %d cores, %d rounds"
              % (args.fixture, args.plan, args.ranks, os.cpu_count(),
                 args.rounds))
        print("  plan.mlir %.1f MB, plan.mrp %.1f MB (merak-translate %.2f s)"
              % (os.path.getsize(plan) / 1e6, os.path.getsize(mrp) / 1e6,
                 compile_s))
        for name, table in (("one process, --print-program", listing),
                            ("%d ranks, one step" % args.ranks, whole)):
            a = statistics.median(table["mlir"])
            b = statistics.median(table["mrp"])
            print("  %-32s .mlir %7.2f s   .mrp %7.2f s   ratio %.2f   "
                  "saved %.2f s" % (name, a, b, b / a, a - b))


if __name__ == "__main__":
    main()
