"""Benchmark: what LoRA saves. A GPT of the in-tree GPT-2 structure (6
layers, width 512, 8 heads, sequence 256, vocabulary 8,192; real seeded
weights) trained with AdamW on one process, every weight trained against
rank-8 adapters on every linear (`--merak-lora="targets=all-linear"`),
from the same weights and batches, in the same run: merak-exec's peak
memory (the largest number of bytes its allocator held), the state it
keeps (weights, gradients, optimizer state: from the compiled step's
argument and result types), and the median step time after two warm-up
steps, with the LoRA run's ratio to the full one.

    python3 bench/lora_memory.py --build build [--steps 8] [--threads 2]
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

import torch  # noqa: E402


def run(cmd):
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit("%s failed:\n%s" % (" ".join(cmd), done.stderr))
    return done


def state_bytes(step_mlir):
    """Bytes of the step's parameters, optimizer state and gradients (the
    gradients: one per trained parameter, the size of its update)."""
    text = open(step_mlir).read()
    head = text[text.index("func.func @train_step"):]
    head = head[:head.index("{\n")]
    total = 0
    for shape, kind in re.findall(
            r"tensor<([0-9x]+)xf32> \{[^}]*merak\.(param|opt_state) =",
            head):
        n = 1
        for d in shape.split("x"):
            n *= int(d)
        total += 4 * n
    trained = len(re.findall(r"merak\.update_arg", head))
    return total, trained


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--build", default=os.path.join(ROOT, "build"))
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--threads", type=int, default=2)
    args = p.parse_args()
    import merak_safetensors
    import merak_trace
    from models import GPT2, GPT2Config

    class Config(GPT2Config):
        vocab_size = 8192
        block_size = 256
        n_layer = 6
        n_head = 8
        n_embd = 512

    torch.manual_seed(0)
    gpt = GPT2(Config()).train()
    gen = torch.Generator().manual_seed(1)
    batch = 4
    idx = torch.randint(0, Config.vocab_size, (args.steps, batch, 256),
                        generator=gen)
    opt = os.path.join(args.build, "bin", "merak-opt")
    exe = os.path.join(args.build, "bin", "merak-exec")
    with tempfile.TemporaryDirectory() as tmp:
        pt = os.path.join(tmp, "gpt.pt")
        merak_trace.save(gpt, (idx[0], idx[0]), pt)
        data = os.path.join(tmp, "data.safetensors")
        merak_safetensors.save({"idx": idx, "targets": idx.roll(-1, dims=2)},
                               data)
        rows = {}
        for label, lora in (("full", []),
                            ("LoRA", ["--merak-lora=rank=8 alpha=16 "
                                      "targets=all-linear"])):
            step = os.path.join(tmp, label + ".mlir")
            run([opt, pt] + lora + ["--merak-train=optimizer=adamw lr=1e-4",
                                    "-o", step])
            log = os.path.join(tmp, label + ".jsonl")
            run([exe, step, "--init", pt, "--data", data, "--steps",
                 str(args.steps), "--threads", str(args.threads),
                 "--log-jsonl", log])
            records = [json.loads(line) for line in open(log)]
            kept, trained = state_bytes(step)
            rows[label] = {
                "peak": max(r["peak_bytes"] for r in records),
                "state": kept,
                "trained": trained,
                "ms": statistics.median(r["ms"] for r in records[2:]),
                "loss": records[-1]["loss"],
            }
    params = sum(p.numel() for p in gpt.parameters())
    print("GPT (6 layers, width 512, vocabulary 8192, %d parameters), "
          "batch %d x 256, AdamW, %d threads, %d steps"
          % (params, batch, args.threads, args.steps))
    print("%-5s %12s %16s %14s %10s" % ("", "peak MB", "weights+state MB",
                                          "step ms", "last loss"))
    for label, r in rows.items():
        print("%-5s %12.1f %16.1f %14.1f %10.4f"
              % (label, r["peak"] / 1e6, r["state"] / 1e6, r["ms"],
                 r["loss"]))
    full, lora = rows["full"], rows["LoRA"]
    print("LoRA / full: peak %.2f, weights+state %.2f, step time %.2f"
          % (lora["peak"] / full["peak"], lora["state"] / full["state"],
             lora["ms"] / full["ms"]))


if __name__ == "__main__":
    main()
