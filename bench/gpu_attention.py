"""Benchmark: causal attention on one GPU, merak's kernels vs PyTorch's SDPA.

  python3 bench/gpu_attention.py --kernel-check BIN [--seqs 1024,2048,4096,8192]

on a machine with an NVIDIA GPU and a PyTorch with CUDA (merak-kernel-check
from the runtime built alone, as scripts/gpu-bundle.sh carries it). For
each sequence length, GPT-2 small's attention shape (batch 4, 12 heads of
64, bfloat16, a causal boolean mask), in one invocation on the same GPU:

  * merak-kernel-check --time: masked_attention and its backward in the
    FlashAttention form (FlashAttention.h: the rows' log-sum-exp kept), on
    the register-tile kernels and again on the WMMA ones
    (--flash-kernels=wmma), and, up to --max-probs-seq, in the probabilities form (cuBLASLt GEMMs
    around softmax kernels; the probabilities take batch x heads x T x T);
  * torch.nn.functional.scaled_dot_product_attention(is_causal=True), its
    forward and its backward (autograd), timed with CUDA events.

Each reports the median over --repeats runs after warm-up, the TFLOP/s of
the causal work (forward 2 products, backward 5, over half the square),
and the ratio to SDPA. Cases are written to --out (a JSON file of
test/cuda/cases' format), so the same shapes can be checked with
merak-kernel-check --expected where the full build is.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys


def cases(seq, batch, heads, dim, dtype, form):
    lead = [batch, heads]
    q = "x".join(map(str, lead + [seq, dim])) + "x" + dtype
    lse = "x".join(map(str, lead + [seq])) + "xf32"
    probs = "x".join(map(str, lead + [seq, seq])) + "x" + dtype
    mask = {"type": "%dx%dxi1" % (seq, seq), "init": "tril"}
    attrs = {"scale": dim ** -0.5, "scaleDivides": False}
    saved = lse if form == "flash" else probs
    saved_init = "uniform:1:3" if form == "flash" else "softmax:causal"
    name = "%s-%s-%d" % (form, dtype, seq)
    forward = {"name": "masked_attention/" + name, "op": "masked_attention",
               "attrs": attrs,
               "operands": [{"type": q}, {"type": q}, {"type": q}, mask],
               "results": [q, saved]}
    backward_operands = [{"type": q}, {"type": q}, {"type": q}, {"type": q},
                         mask, {"type": saved, "init": saved_init}]
    if form == "flash":
        backward_operands.append({"type": q})
    backward = {"name": "masked_attention_backward/" + name,
                "op": "masked_attention_backward", "attrs": attrs,
                "operands": backward_operands, "results": [q, q, q]}
    return [forward, backward]


def causal_flops(seq, batch, heads, dim, products):
    return products * 2.0 * batch * heads * seq * seq * dim / 2


def time_sdpa(seq, batch, heads, dim, repeats, warmup):
    import torch
    import torch.nn.functional as F
    q, k, v = (torch.randn(batch, heads, seq, dim, device="cuda",
                           dtype=torch.bfloat16, requires_grad=True)
               for _ in range(3))
    grad = torch.randn(batch, heads, seq, dim, device="cuda",
                       dtype=torch.bfloat16)

    def timed(fn):
        times = []
        for i in range(warmup + repeats):
            start = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            torch.cuda.synchronize()
            start.record()
            fn()
            end.record()
            torch.cuda.synchronize()
            if i >= warmup:
                times.append(start.elapsed_time(end))
        return statistics.median(times)

    def forward():
        with torch.no_grad():
            F.scaled_dot_product_attention(q, k, v, is_causal=True)

    out = F.scaled_dot_product_attention(q, k, v, is_causal=True)

    def backward():
        torch.autograd.grad(out, (q, k, v), grad, retain_graph=True)

    return timed(forward), timed(backward)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kernel-check", required=True,
                        help="merak-kernel-check with the CUDA backend")
    parser.add_argument("--seqs", default="1024,2048,4096,8192")
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--heads", type=int, default=12)
    parser.add_argument("--dim", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--max-probs-seq", type=int, default=4096,
                        help="longest sequence the probabilities form runs "
                        "(its probabilities: batch x heads x T x T)")
    parser.add_argument("--out", default="attention-cases.json")
    parser.add_argument("--device", default="cuda",
                        help="merak-kernel-check's backend (cpu: a dry run "
                        "of merak's side, no SDPA)")
    args = parser.parse_args()
    seqs = [int(s) for s in args.seqs.split(",")]
    shape = (args.batch, args.heads, args.dim)

    all_cases = []
    for seq in seqs:
        all_cases += cases(seq, *shape, "bf16", "flash")
        if seq <= args.max_probs_seq:
            all_cases += cases(seq, *shape, "bf16", "probs")
    with open(args.out, "w") as f:
        json.dump(all_cases, f, indent=0)
    def timed_cases(*extra):
        done = subprocess.run(
            [args.kernel_check, "--cases", args.out, "--device", args.device,
             "--time", str(args.repeats)] + list(extra),
            capture_output=True, text=True)
        if done.returncode != 0:
            sys.stderr.write(done.stdout + done.stderr)
            sys.exit("merak-kernel-check failed")
        times = {}
        for line in done.stdout.splitlines():
            parts = line.split()
            if len(parts) == 4 and parts[0] == "time":
                times[parts[1]] = float(parts[2])
        return times

    merak = timed_cases()
    # The FlashAttention form again on its WMMA kernels.
    for name, ms in timed_cases("--filter", "/flash-",
                                "--flash-kernels", "wmma").items():
        merak[name + "/wmma"] = ms

    sdpa = {}
    if args.device == "cuda":
        import torch
        print("causal attention, batch %d, %d heads of %d, bf16, %s, torch %s"
              % (args.batch, args.heads, args.dim,
                 torch.cuda.get_device_name(), torch.__version__))
        for seq in seqs:
            sdpa[seq] = time_sdpa(seq, *shape, args.repeats, args.warmup)
    print("| tokens | pass | run | ms | TFLOP/s (causal) | ms / SDPA |")
    print("| --- | --- | --- | --- | --- | --- |")
    for seq in seqs:
        for index, (kind, products) in enumerate((("forward", 2),
                                                  ("backward", 5))):
            flops = causal_flops(seq, *shape, products)
            op = ("masked_attention" if kind == "forward"
                  else "masked_attention_backward")
            runs = [("merak flash", "%s/flash-bf16-%d" % (op, seq)),
                    ("merak flash (WMMA)",
                     "%s/flash-bf16-%d/wmma" % (op, seq)),
                    ("merak probabilities", "%s/probs-bf16-%d" % (op, seq))]
            base = sdpa[seq][index] if seq in sdpa else None
            for label, name in runs:
                if name not in merak:
                    continue
                ms = merak[name]
                print("| %d | %s | %s | %.3f | %.1f | %s |"
                      % (seq, kind, label, ms, flops / ms / 1e9,
                         "%.2f" % (ms / base) if base else "-"))
            if base:
                print("| %d | %s | SDPA | %.3f | %.1f | 1.00 |"
                      % (seq, kind, base, flops / base / 1e9))


if __name__ == "__main__":
    main()
