"""Plans GPT-3 175B with --merak-parallelize="auto ..." and reports how
long the search takes and what it finds.

The model is the GPT-2 fixture at GPT-3 175B's shape (96 layers, width
12,288, 96 heads, sequence 2,048, vocabulary 51,200), built on PyTorch's
meta device (shapes only) and traced in a few seconds. A step trains on
1,536 sequences as micro-batches of the traced batch, so the model is
traced at 8, 16, 32 and 64 sequences (192 to 24 micro-batches) and the
search runs on each; the best plan over them is reported.
Its training step (AdamW, bfloat16 compute) is planned for 8, 64, 512 and
1,024 devices of the documented DGX A100 profile (profiles/dgx-a100.json:
data-sheet figures, not measurements), and Megatron-LM's published
configuration for this model on 1,024 A100s (tp=8, pp=16, dp=8,
interleaved, activation recomputation) is priced beside the chosen plan
under the same profile.

Usage: python3 bench/auto_parallel.py --build build [--json out.json]
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "python"))
sys.path.insert(0, os.path.join(ROOT, "test", "fixtures"))

MEGATRON = ("dp=8 tp=8 pp=16 microbatches=192 schedule=interleaved-1f1b "
            "virtual=2 recompute=full")
# Megatron-LM's reported throughput for this model on 1,024 A100s
# (Narayanan et al., SC'21, Table 1): 138 TFLOP/s per GPU, counting the
# forward pass recomputation repeats (96 B s l h^2 ... instead of 72): 103.5
# TFLOP/s of the model's own FLOPs.
MEGATRON_TFLOPS = 138.0 * 72 / 96


def model_flops(batch, seq, layers, width, vocab):
    """FLOPs of one training step without recomputation (forward and
    backward), by the formula Megatron-LM's paper uses without its
    recomputation term: 72 B s l h^2 (1 + s / 6h + V / 12 l h)."""
    return 72 * batch * seq * layers * width ** 2 * (
        1 + seq / (6 * width) + vocab / (12 * layers * width))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--build", required=True)
    parser.add_argument("--json", help="write the figures here")
    parser.add_argument("--devices", default="8,64,512,1024")
    args = parser.parse_args()
    import torch
    import merak_trace
    from models import GPT2, GPT2Config

    class GPT3(GPT2Config):
        vocab_size = 51200
        block_size = 2048
        n_layer = 96
        n_head = 96
        n_embd = 12288

    batch = 1536
    merak_opt = os.path.join(args.build, "bin", "merak-opt")
    profile = os.path.join(ROOT, "profiles", "dgx-a100.json")
    out = {"model": "GPT-3 175B shape", "batch": batch, "runs": []}
    traced = [8, 16, 32, 64]
    with tempfile.TemporaryDirectory() as tmp:
        steps = {}
        for micro in traced:
            start = time.time()
            with merak_trace.meta_device():
                model = GPT2(GPT3())
            idx = torch.zeros(micro, GPT3.block_size, dtype=torch.long)
            archive = os.path.join(tmp, "gpt3-%d.pt" % micro)
            merak_trace.save(model, (idx, idx), archive, meta=True)
            out.setdefault("trace_seconds", time.time() - start)
            out.setdefault("archive_bytes", os.path.getsize(archive))
            steps[micro] = os.path.join(tmp, "step-%d.mlir" % micro)
            start = time.time()
            subprocess.run([merak_opt, archive, "--merak-train=optimizer=adamw "
                            "precision=bf16", "-o", steps[micro]], check=True)
            out.setdefault("import_and_train_seconds", time.time() - start)
        print("GPT-3 175B shape on the meta device: traced in %.1f s into "
              "%.1f MB; imported and its training step built in %.1f s"
              % (out["trace_seconds"], out["archive_bytes"] / 1e6,
                 out["import_and_train_seconds"]))
        flops = model_flops(batch, GPT3.block_size, GPT3.n_layer,
                            GPT3.n_embd, GPT3.vocab_size)
        print("%8s %6s %10s %10s %12s %12s  %s" % (
            "devices", "micro", "search(s)", "total(s)", "step(s)",
            "TFLOP/s/GPU", "plan"))
        for devices in [int(d) for d in args.devices.split(",")]:
            for micro in traced:
                report = os.path.join(tmp, "plan-%d-%d.json" % (devices, micro))
                options = ("auto devices=%d batch=%d hardware=%s report=%s "
                           "quiet" % (devices, batch, profile, report))
                if devices == 1024 and micro == 8:
                    options += " compare={%s}" % MEGATRON
                start = time.time()
                done = subprocess.run(
                    [merak_opt, steps[micro], "--merak-parallelize=" + options,
                     "-o", os.devnull], capture_output=True, text=True)
                total = time.time() - start
                with open(report) as f:
                    plan = json.load(f)
                row = {"devices": devices, "traced_batch": micro,
                       "search_seconds": plan["search_seconds"],
                       "total_seconds": total,
                       "evaluated": plan["evaluated"]}
                if "plan" in plan:
                    seconds = plan["plan"]["predicted"]["step_seconds"]
                    row.update(plan=plan["plan"]["options"],
                               step_seconds=seconds,
                               tflops_per_gpu=flops / seconds / devices / 1e12,
                               memory_bytes=plan["plan"]["memory"]
                               ["total_bytes"])
                    print("%8d %6d %10.3f %10.1f %12.2f %12.1f  %s" % (
                        devices, micro, row["search_seconds"], total, seconds,
                        row["tflops_per_gpu"], row["plan"][:70]))
                else:
                    row["error"] = plan.get("error", done.stderr.strip())
                    print("%8d %6d %10.3f %10.1f %12s %12s  none fits: least "
                          "%.0f GiB per device" % (
                              devices, micro, row["search_seconds"], total,
                              "-", "-", plan["least_memory_bytes"] / 2 ** 30))
                for c in plan.get("compared", []):
                    seconds = c["predicted"]["step_seconds"]
                    row["megatron"] = {
                        "plan": c["options"], "step_seconds": seconds,
                        "tflops_per_gpu": flops / seconds / devices / 1e12,
                        "memory_bytes": c["memory"]["total_bytes"],
                        "published_tflops_per_gpu": MEGATRON_TFLOPS}
                    print("%8s %6s %10s %10s %12.2f %12.1f  Megatron-LM's plan "
                          "(published: %.1f TFLOP/s per GPU without "
                          "recomputation's FLOPs)" % (
                              "", "", "", "", seconds,
                              row["megatron"]["tflops_per_gpu"],
                              MEGATRON_TFLOPS))
                out["runs"].append(row)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=2)


if __name__ == "__main__":
    main()
