"""Benchmark: start-up of merak-exec from a module (.mlir) and from its
rank-program file (.mrp), and of the runtime built alone.

Compiles a fixture's AdamW step under a plan (by default ViT-B/16, the
largest test model, on 8 ranks: dp=2 x tp=2 x pp=2), writes the .mrp with
merak-translate, and in this one invocation measures, round after round,
three ways to start: the full merak-exec on the .mlir (parse and lower on
every rank), the full merak-exec on the .mrp, and the runtime-only
merak-exec (build/runtime-only: no libMLIR or libLLVM to load) on the
.mrp. Medians of:
  * one process listing rank 0's programs (`--print-program`), wall time
    (loading the executable and its libraries included);
  * 8 ranks running one step (`--nproc 8 --steps 1 --profile`): rank 0's
    own report of when its programs were ready and when its first step
    began (after its process started), and the whole run's wall time.
"""
import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run(cmd):
    """Runs `cmd`; returns its wall time and standard output."""
    start = time.perf_counter()
    result = subprocess.run(cmd, capture_output=True, text=True)
    elapsed = time.perf_counter() - start
    if result.returncode != 0:
        sys.stderr.write(result.stdout + result.stderr)
        raise SystemExit("error: %s failed" % " ".join(cmd[:2]))
    return elapsed, result.stdout


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
                         "--merak-to-rank-program", "-o", mrp])[0]
        microbatches = 1
        for word in args.plan.split():
            if word.startswith("microbatches="):
                microbatches = int(word.split("=")[1])
        run(["/usr/bin/python3",
             os.path.join(ROOT, "test", "e2e", "make_batches.py"),
             "--fixture", args.fixture, "--fixtures-dir", fixtures,
             "--steps", "1", "--seed", "0", "--cycle", "1",
             "--microbatches", str(microbatches), "--out", batches])
        full = os.path.join(bin_dir, "merak-exec")
        alone = os.path.join(args.build, "runtime-only", "bin", "merak-exec")
        ways = [("full merak-exec, .mlir", full, plan),
                ("full merak-exec, .mrp", full, mrp)]
        if os.path.exists(alone):
            ways.append(("runtime-only merak-exec, .mrp", alone, mrp))
        rows = {name: {"list": [], "ready": [], "first": [], "run": []}
                for name, _, _ in ways}
        pattern = re.compile(r"start-up: programs ready after ([0-9.]+) ms"
                             r".*first step began after ([0-9.]+) ms")
        for _ in range(args.rounds):
            for name, exe, path in ways:
                rows[name]["list"].append(
                    run([exe, path, "--print-program"])[0])
                wall, out = run(
                    [exe, path, "--nproc", str(args.ranks), "--init", model,
                     "--data", batches, "--steps", "1", "--threads", "1",
                     "--profile"])
                found = pattern.search(out)
                if not found:
                    raise SystemExit("error: no start-up line in:\n" + out)
                rows[name]["ready"].append(float(found.group(1)) / 1e3)
                rows[name]["first"].append(float(found.group(2)) / 1e3)
                rows[name]["run"].append(wall)
        print("%s under \"%s\" on %d ranks, %d cores, %d rounds (medians)"
              % (args.fixture, args.plan, args.ranks, os.cpu_count(),
                 args.rounds))
        print("  plan.mlir %.2f MB, plan.mrp %.2f MB (merak-translate %.2f s)"
              % (os.path.getsize(plan) / 1e6, os.path.getsize(mrp) / 1e6,
                 compile_s))
        print("  %-32s %12s %14s %14s %12s" % (
            "", "list (1 proc)", "ready (rank 0)", "first step at",
            "run (wall)"))
        for name, _, _ in ways:
            r = rows[name]
            print("  %-32s %11.2fs %13.3fs %13.2fs %11.2fs" % (
                name, statistics.median(r["list"]),
                statistics.median(r["ready"]), statistics.median(r["first"]),
                statistics.median(r["run"])))


if __name__ == "__main__":
    main()
