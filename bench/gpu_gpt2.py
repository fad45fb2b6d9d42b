"""Benchmark: GPT-2 small training on one GPU, merak-exec vs PyTorch.

Two halves, because the GPU machine has no compiler:

  python3 bench/gpu_gpt2.py prepare --out DIR [--batch 8 --seq 1024]
      (where the full build is) traces GPT-2 small (124 M parameters, the
      in-tree GPT-2 at n_layer 12, n_head 12, n_embd 768, vocab 50257) on
      PyTorch's meta device and compiles its AdamW training step three
      times with merak-opt: float32, bfloat16 matrix products with float32
      master weights (precision=bf16), and the latter with attention in the
      FlashAttention form (flash-attention=true); writes
      DIR/gpt2-small-{fp32,bf16,bf16-flash}.mrp.

  python3 bench/gpu_gpt2.py run --dir DIR --merak-exec BIN [--steps 20]
      (on the GPU machine) builds the same model with PyTorch (seeded
      initialisation), writes its weights and random token batches, and in
      this one invocation times, on the same GPU, batches and weights:
        * merak-exec --device=cuda on each compiled step;
        * PyTorch eager, float32 (TF32 off) and bfloat16 autocast;
        * torch.compile with bfloat16 autocast (unless --no-compile).
      Each reports the median step time after warm-up, tokens/s, and model
      FLOPs utilisation (6 N + 12 L T d FLOPs per token, as PaLM counts
      them, over the GPU's dense bfloat16 peak, --peak-tflops, 989 for an
      H100 SXM), and the ratio of each to merak-exec's bfloat16 run; then
      each kernel family's share of merak-exec's bfloat16 steps (with
      attention in either form; the FlashAttention form also on its WMMA
      kernels, --flash-kernels=wmma), and the 20 ops (by result types) that
      take the most of each, from a `--profile-json` run (each op waited
      for, so the shares are the kernels' own times). A merak-exec run
      that fails is reported and left out of the table.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "python"))
sys.path.insert(0, os.path.join(ROOT, "test", "fixtures"))

import torch  # noqa: E402


def config(args):
    import models

    class Small(models.GPT2Config):
        vocab_size = 50257
        block_size = args.seq
        n_layer = 12
        n_head = 12
        n_embd = 768
        dropout = 0.0
    return Small()


def prepare(args):
    import merak_trace
    import models
    os.makedirs(args.out, exist_ok=True)
    with merak_trace.meta_device():
        model = models.GPT2(config(args))
    idx = torch.zeros(args.batch, args.seq, dtype=torch.long)
    pt = os.path.join(args.out, "gpt2-small.pt")
    merak_trace.save(model, (idx, idx), pt, meta=True)
    opt = os.path.join(args.build, "bin", "merak-opt")
    translate = os.path.join(args.build, "bin", "merak-translate")
    for precision in ("fp32", "bf16", "bf16-flash"):
        mlir = os.path.join(args.out, "gpt2-small-%s.mlir" % precision)
        train = "optimizer=adamw lr=1e-4 weight-decay=0.1"
        if precision.startswith("bf16"):
            train += " precision=bf16"
        if precision.endswith("flash"):
            train += " flash-attention=true"
        subprocess.run([opt, pt, "--merak-train=" + train, "-o", mlir],
                       check=True)
        subprocess.run([translate, mlir, "--merak-to-rank-program", "-o",
                        mlir[:-5] + ".mrp"], check=True)
        os.remove(mlir)
    with open(os.path.join(args.out, "gpt2-small.json"), "w") as f:
        json.dump({"batch": args.batch, "seq": args.seq}, f)
    print("wrote %s/gpt2-small-{fp32,bf16,bf16-flash}.mrp (batch %d, "
          "sequence %d)"
          % (args.out, args.batch, args.seq))


# Op kinds by kernel family (lib/Runtime/CUDA's files); the rest are
# elementwise.
FAMILIES = {
    "GEMM (cuBLASLt)": ("linear", "matmul", "linear_weight_backward"),
    "attention": ("masked_attention", "masked_attention_backward"),
    "normalization": ("layer_norm", "layer_norm_backward", "rms_norm",
                      "softmax", "log_softmax", "softmax_backward"),
    "cross-entropy": ("cross_entropy", "cross_entropy_backward"),
    "optimizer": ("adamw_update", "sgd_update"),
    "embedding and gathers": ("embedding", "index", "index_backward"),
    "shape (views, copies)": ("reshape", "permute", "slice", "select",
                              "concat", "expand", "pad", "roll",
                              "slice_backward"),
    "reductions": ("reduce_sum", "reduce_mean", "reduce_max"),
    "fused (elementwise chains, AdamW groups)": ("fused",),
}


def family_shares(profile):
    """(family, ms per step, share) from a --profile-json file's ops."""
    totals = {}
    for op, entry in profile["ops"].items():
        name = op.split(".", 1)[-1]
        family = next((f for f, ops in FAMILIES.items() if name in ops),
                      "elementwise")
        totals[family] = totals.get(family, 0.0) + entry["ms_per_step"]
    whole = sum(totals.values()) or 1.0
    return sorted(((f, ms, ms / whole) for f, ms in totals.items()),
                  key=lambda row: -row[1])


def flops_per_token(cfg, params):
    return 6 * params + 12 * cfg.n_layer * cfg.block_size * cfg.n_embd


def time_pytorch(model, batches, steps, warmup, autocast, compiled):
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.1,
                            fused=True)
    run = torch.compile(model) if compiled else model
    times, losses = [], []
    for step in range(warmup + steps):
        idx, targets = batches[step % len(batches)]
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=autocast):
            _, loss = run(idx, targets)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(loss.item())
        torch.cuda.synchronize()
        if step >= warmup:
            times.append(time.perf_counter() - t0)
    return statistics.median(times), losses[-1]


def run(args):
    import merak_safetensors
    import merak_trace
    import models
    with open(os.path.join(args.dir, "gpt2-small.json")) as f:
        shape = json.load(f)
    args.batch, args.seq = shape["batch"], shape["seq"]
    cfg = config(args)
    torch.manual_seed(0)
    model = models.GPT2(cfg)
    params = sum(p.numel() for p in model.parameters())
    weights = os.path.join(args.dir, "gpt2-small.safetensors")
    merak_trace.save_weights(model, weights)
    gen = torch.Generator().manual_seed(0)
    count = args.steps + args.warmup
    idx = torch.randint(0, cfg.vocab_size, (count, args.batch, args.seq),
                        generator=gen)
    targets = torch.randint(0, cfg.vocab_size, (count, args.batch, args.seq),
                            generator=gen)
    data = os.path.join(args.dir, "gpt2-small-batches.safetensors")
    merak_safetensors.save({"idx": idx, "targets": targets}, data)

    tokens = args.batch * args.seq
    per_token = flops_per_token(cfg, params)
    rows = []

    def add(name, seconds, last_loss):
        tflops = per_token * tokens / seconds / 1e12
        rows.append((name, seconds, tokens / seconds,
                     100 * tflops / args.peak_tflops, last_loss))

    # The bf16 step also without fused kernels (--fuse-elementwise=off:
    # neither elementwise chains, AdamW groups nor casts folded into the
    # loss and the norms) and without staged GEMMs (--gemm-staging=false:
    # the head's products on the logits' odd rows): what each is worth;
    # and with attention in the FlashAttention form, on the register-tile
    # kernels (the default) and on the WMMA ones (--flash-kernels=wmma).
    runs = (("fp32", "auto", True, "registers"),
            ("bf16", "auto", True, "registers"),
            ("bf16", "off", True, "registers"),
            ("bf16", "auto", False, "registers"),
            ("bf16-flash", "auto", True, "registers"),
            ("bf16-flash", "auto", True, "wmma"))
    for precision, fuse, staging, flash in runs:
        label = "merak-exec %s%s%s%s" % (
            precision, ", unfused" if fuse == "off" else "",
            "" if staging else ", GEMMs not staged",
            ", WMMA kernels" if flash == "wmma" else "")
        log = os.path.join(args.dir, "merak-%s-%s-%d-%s.jsonl"
                           % (precision, fuse, staging, flash))
        if os.path.exists(log):
            os.remove(log)
        done = subprocess.run(
            [args.merak_exec,
             os.path.join(args.dir, "gpt2-small-%s.mrp" % precision),
             "--device=cuda", "--init", weights, "--data", data,
             "--steps", str(count), "--log-jsonl", log,
             "--fuse-elementwise=" + fuse,
             "--gemm-staging=" + ("true" if staging else "false"),
             "--flash-kernels=" + flash],
            stdout=subprocess.DEVNULL)
        if done.returncode != 0:
            print("%s failed with status %d" % (label, done.returncode),
                  file=sys.stderr)
            continue
        with open(log) as f:
            records = [json.loads(line) for line in f if '"ms"' in line]
        ms = [r["ms"] for r in records]
        add(label, statistics.median(ms[args.warmup:]) / 1000,
            records[-1].get("loss", float("nan")))

    model = model.cuda()
    batches = [(idx[i].cuda(), targets[i].cuda()) for i in range(count)]
    # Each PyTorch run trains a fresh copy of the same weights, so that the
    # last losses are comparable.
    initial = {k: v.clone() for k, v in model.state_dict().items()}

    def pytorch(autocast, compiled):
        model.load_state_dict(initial)
        return time_pytorch(model, batches, args.steps, args.warmup,
                            autocast, compiled)

    add("PyTorch eager fp32", *pytorch(False, False))
    add("PyTorch eager bf16 autocast", *pytorch(True, False))
    if not args.no_compile:
        add("torch.compile bf16 autocast", *pytorch(True, True))

    base = dict((r[0], r[1]) for r in rows).get("merak-exec bf16", rows[0][1])
    print("GPT-2 small, %d parameters, batch %d x %d tokens, %s, torch %s"
          % (params, args.batch, args.seq, torch.cuda.get_device_name(),
             torch.__version__))
    print("| run | step (ms) | tokens/s | MFU (%% of %g TFLOP/s) | step time / merak-exec bf16 | loss at step %d |"
          % (args.peak_tflops, count))
    print("| --- | --- | --- | --- | --- | --- |")
    for name, seconds, tps, mfu, last_loss in rows:
        print("| %s | %.1f | %.0f | %.1f | %.2f | %.5f |"
              % (name, seconds * 1000, tps, mfu, seconds / base, last_loss))
    sys.stdout.flush()

    # Where each bf16 step's time goes: --profile-json waits for each op,
    # so the shares are the kernels' own times.
    profiles = {}
    for precision in ("bf16", "bf16-flash"):
        profile_path = os.path.join(args.dir,
                                    "merak-%s-profile.json" % precision)
        done = subprocess.run(
            [args.merak_exec,
             os.path.join(args.dir, "gpt2-small-%s.mrp" % precision),
             "--device=cuda", "--init", weights, "--data", data,
             "--steps", str(min(count, args.warmup + 3)),
             "--profile-json", profile_path],
            stdout=subprocess.DEVNULL)
        if done.returncode != 0:
            print("merak-exec %s --profile-json failed" % precision,
                  file=sys.stderr)
            continue
        with open(profile_path) as f:
            profiles[precision] = json.load(f)

    for precision, profile in profiles.items():
        print()
        print("| kernel family (merak-exec %s, --profile) | ms per step | share |"
              % precision)
        print("| --- | --- | --- |")
        for family, ms, share in family_shares(profile):
            print("| %s | %.1f | %.0f %% |" % (family, ms, 100 * share))
        print()
        print("| op and result types (merak-exec %s, --profile) | calls per step | ms per step |"
              % precision)
        print("| --- | --- | --- |")
        for entry in profile.get("top_shapes", [])[:20]:
            print("| %s | %g | %.2f |" % (entry["op"], entry["calls_per_step"],
                                          entry["ms_per_step"]))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("prepare")
    p.add_argument("--out", required=True)
    p.add_argument("--build", default=os.path.join(ROOT, "build"))
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--seq", type=int, default=1024)
    r = sub.add_parser("run")
    r.add_argument("--dir", required=True)
    r.add_argument("--merak-exec", required=True)
    r.add_argument("--steps", type=int, default=10)
    r.add_argument("--warmup", type=int, default=3)
    r.add_argument("--peak-tflops", type=float, default=989.0)
    r.add_argument("--no-compile", action="store_true")
    args = parser.parse_args()
    if args.command == "prepare":
        prepare(args)
    else:
        run(args)


if __name__ == "__main__":
    main()
