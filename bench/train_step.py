"""Benchmark: one training step of a GPT-2-style model, merak-exec vs PyTorch eager.

Builds the in-tree GPT-2 at a size where a step takes about a second on this
machine, compiles its AdamW training step with merak-opt, and runs, in this
same invocation and with the same thread count:
  * an sgemm (1024^3 fp32 matmul) to measure the machine's GEMM throughput:
    the BLAS PyTorch calls (OpenBLAS), and oneDNN's sgemm, which merak-exec
    runs float32 GEMMs on by default (--gemm=blas runs it on the BLAS too);
  * PyTorch eager: forward, backward, AdamW step (foreach=False), timed per step,
    twice: as it runs by default, and with OMP_WAIT_POLICY=PASSIVE, which
    keeps ATen's idle OpenMP threads from spinning on the cores OpenBLAS's
    threads need (the contention merak-exec avoids by running GEMMs on one
    pool of threads);
  * merak-exec on the same weights and batches.
Each trainer runs in its own process so that peak memory (max RSS) is its own.
It prints step times (median over the timed steps, after warm-up), their ratio,
peak memory of each, and achieved GFLOP/s as a fraction of sgemm GFLOP/s.
"""
import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "python"))
sys.path.insert(0, os.path.join(ROOT, "test", "fixtures"))


def blas_name():
    try:
        target = os.path.realpath("/usr/lib/x86_64-linux-gnu/libblas.so.3")
        return os.path.basename(os.path.dirname(target)) or target
    except OSError:
        return "unknown"


def peak_rss_bytes():
    # VmHWM is this address space's own peak; ru_maxrss would include the
    # parent's peak inherited at fork.
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def make_config(args):
    import models

    class Cfg(models.GPT2Config):
        vocab_size = args.vocab
        block_size = args.seq
        n_layer = args.layers
        n_head = args.heads
        n_embd = args.embd
        dropout = 0.0
    return Cfg()


def step_flops(args, params):
    # 6 * N * tokens for the matmuls of forward + backward, plus attention.
    tokens = args.batch * args.seq
    attn = 12 * args.layers * args.batch * args.seq * args.seq * args.embd
    return 6 * params * tokens + attn


ONEDNN_ISAS = {0x1: "SSE4.1", 0x3: "AVX", 0x7: "AVX2", 0x407: "AVX2-VNNI",
               0x27: "AVX-512", 0x67: "AVX-512", 0xe7: "AVX-512",
               0x3e7: "AVX-512"}


def onednn():
    """oneDNN's C library (the one LibTorch links, which merak-exec's float32
    GEMMs run on by default) through ctypes, or None."""
    import ctypes
    try:
        lib = ctypes.CDLL("libdnnl.so.2")
    except OSError:
        return None
    lib.dnnl_sgemm.argtypes = [
        ctypes.c_char, ctypes.c_char, ctypes.c_int64, ctypes.c_int64,
        ctypes.c_int64, ctypes.c_float, ctypes.c_void_p, ctypes.c_int64,
        ctypes.c_void_p, ctypes.c_int64, ctypes.c_float, ctypes.c_void_p,
        ctypes.c_int64]
    lib.dnnl_get_effective_cpu_isa.restype = ctypes.c_int
    return lib


def gemm_name(gemm):
    """What merak-exec's float32 GEMMs run on under --gemm=`gemm`."""
    lib = onednn() if gemm == "onednn" else None
    if lib is None:
        return f"BLAS ({blas_name()})"
    isa = ONEDNN_ISAS.get(lib.dnnl_get_effective_cpu_isa(), "other")
    return f"oneDNN sgemm ({isa} kernels)"


def sgemm_gflops(threads, library="blas"):
    """The best 1024^3 fp32 matmul rate on `threads` threads: torch.mm (the
    BLAS PyTorch calls) or oneDNN's sgemm (what merak-exec calls)."""
    import torch
    torch.set_num_threads(threads)
    a = torch.randn(1024, 1024)
    b = torch.randn(1024, 1024)
    c = torch.empty(1024, 1024)
    lib = onednn() if library == "onednn" else None
    if library == "onednn" and lib is None:
        return float("nan")

    def mm():
        if lib is None:
            torch.mm(a, b, out=c)
        else:
            lib.dnnl_sgemm(b"N", b"N", 1024, 1024, 1024, 1.0, a.data_ptr(),
                           1024, b.data_ptr(), 1024, 0.0, c.data_ptr(), 1024)
    for _ in range(3):
        mm()
    # The best of five rounds: the machine's rate, not its noise.
    reps, dt = 10, float("inf")
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(reps):
            mm()
        dt = min(dt, (time.perf_counter() - t0) / reps)
    return 2 * 1024 ** 3 / dt / 1e9


def run_eager(args, work):
    """Child process: PyTorch eager training; prints a JSON summary."""
    import torch
    import models
    import merak_safetensors
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    model = torch.jit.load(os.path.join(work, "gpt2.pt"))  # same weights
    eager = models.GPT2(make_config(args)).train()
    eager.load_state_dict({k: v for k, v in model.state_dict().items()})
    batches, _ = merak_safetensors.load(os.path.join(work, "batches.safetensors"))
    opt = torch.optim.AdamW(eager.parameters(), lr=1e-3, weight_decay=0.1,
                            foreach=False)
    times, losses = [], []
    for i in range(args.steps):
        t0 = time.perf_counter()
        _, loss = eager(batches["idx"][i], batches["targets"][i])
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        times.append((time.perf_counter() - t0) * 1e3)
        losses.append(loss.item())
    rss = peak_rss_bytes()
    print(json.dumps({"ms": times, "loss": losses, "max_rss_bytes": rss}))


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--build", required=True, help="Merak build directory")
    p.add_argument("--threads", type=int, default=os.cpu_count())
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--embd", type=int, default=512)
    p.add_argument("--heads", type=int, default=8)
    p.add_argument("--vocab", type=int, default=8192)
    p.add_argument("--seq", type=int, default=256)
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--gemm", choices=("onednn", "blas"), default="onednn",
                   help="merak-exec's GEMM library (its --gemm)")
    p.add_argument("--json", help="also write the results here")
    p.add_argument("--eager-child", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.eager_child:
        return run_eager(args, args.eager_child)

    import torch
    import models
    import merak_safetensors
    import merak_trace

    work = tempfile.mkdtemp(prefix="merak-bench-")
    torch.manual_seed(0)
    model = models.GPT2(make_config(args)).train()
    params = sum(p.numel() for p in model.parameters())
    gen = torch.Generator().manual_seed(0)
    idx = torch.randint(0, args.vocab, (args.steps, args.batch, args.seq),
                        generator=gen)
    tgt = torch.randint(0, args.vocab, (args.steps, args.batch, args.seq),
                        generator=gen)
    merak_trace.save(model, (idx[0], tgt[0]), os.path.join(work, "gpt2.pt"))
    merak_safetensors.save({"idx": idx, "targets": tgt},
                           os.path.join(work, "batches.safetensors"))
    bin_dir = os.path.join(args.build, "bin")
    subprocess.run([os.path.join(bin_dir, "merak-opt"),
                    os.path.join(work, "gpt2.pt"),
                    "--merak-train=optimizer=adamw lr=1e-3 weight-decay=0.1",
                    "-o", os.path.join(work, "step.mlir")], check=True)

    gemm = sgemm_gflops(args.threads)
    merak_gemm = sgemm_gflops(args.threads, args.gemm)

    def run_eager_child(extra_env):
        child = subprocess.run(
            [sys.executable, __file__, "--build", args.build,
             "--eager-child", work]
            + [f"--{k}={getattr(args, k)}" for k in
               ("threads", "steps", "layers", "embd", "heads", "vocab", "seq",
                "batch")],
            check=True, capture_output=True, text=True,
            env={**os.environ, **extra_env})
        return json.loads(child.stdout.strip().splitlines()[-1])

    eager = run_eager_child({})
    passive = run_eager_child({"OMP_WAIT_POLICY": "PASSIVE"})

    log = os.path.join(work, "merak.jsonl")
    subprocess.run([os.path.join(bin_dir, "merak-exec"),
                    os.path.join(work, "step.mlir"),
                    "--init", os.path.join(work, "gpt2.pt"),
                    "--data", os.path.join(work, "batches.safetensors"),
                    "--steps", str(args.steps), "--threads", str(args.threads),
                    "--gemm", args.gemm, "--log-jsonl", log], check=True,
                   stdout=subprocess.DEVNULL)
    with open(log) as f:
        merak = [json.loads(line) for line in f]

    w = args.warmup
    merak_ms = statistics.median(r["ms"] for r in merak[w:])
    eager_ms = statistics.median(eager["ms"][w:])
    passive_ms = statistics.median(passive["ms"][w:])
    merak_rss = max(r["max_rss_bytes"] for r in merak)
    flops = step_flops(args, params)
    max_diff = max(abs(a["loss"] - b) / abs(b)
                   for a, b in zip(merak, eager["loss"]))
    result = {
        "blas": blas_name(), "threads": args.threads, "params": params,
        "tokens_per_step": args.batch * args.seq,
        "sgemm_gflops": gemm, "merak_gemm": gemm_name(args.gemm),
        "merak_sgemm_gflops": merak_gemm,
        "eager_step_ms": eager_ms, "merak_step_ms": merak_ms,
        "step_time_ratio": merak_ms / eager_ms,
        "eager_passive_step_ms": passive_ms,
        "step_time_ratio_vs_passive": merak_ms / passive_ms,
        "eager_peak_rss_mb": eager["max_rss_bytes"] / 2 ** 20,
        "merak_peak_rss_mb": merak_rss / 2 ** 20,
        "merak_peak_tensor_mb": max(r["peak_bytes"] for r in merak) / 2 ** 20,
        "eager_gflops": flops / eager_ms / 1e6,
        "merak_gflops": flops / merak_ms / 1e6,
        "max_rel_loss_diff": max_diff,
    }
    print(f"BLAS: {result['blas']}, threads: {args.threads}, "
          f"model: {params / 1e6:.1f} M parameters, "
          f"{result['tokens_per_step']} tokens per step")
    print(f"merak-exec GEMMs: {result['merak_gemm']}; PyTorch's: BLAS "
          f"({result['blas']})")
    print(f"sgemm 1024^3:        {gemm:8.1f} GFLOP/s (BLAS), "
          f"{merak_gemm:.1f} GFLOP/s (merak-exec's)")
    print(f"PyTorch eager step:  {eager_ms:8.1f} ms  "
          f"{result['eager_gflops']:6.1f} GFLOP/s "
          f"({result['eager_gflops'] / gemm:4.0%} of sgemm)  "
          f"peak RSS {result['eager_peak_rss_mb']:7.1f} MB")
    print(f"eager, OMP passive:  {passive_ms:8.1f} ms  "
          f"{flops / passive_ms / 1e6:6.1f} GFLOP/s "
          f"({flops / passive_ms / 1e6 / gemm:4.0%} of sgemm)  "
          f"peak RSS {passive['max_rss_bytes'] / 2 ** 20:7.1f} MB")
    print(f"merak-exec step:     {merak_ms:8.1f} ms  "
          f"{result['merak_gflops']:6.1f} GFLOP/s "
          f"({result['merak_gflops'] / merak_gemm:4.0%} of its sgemm)  "
          f"peak RSS {result['merak_peak_rss_mb']:7.1f} MB "
          f"(tensors {result['merak_peak_tensor_mb']:.1f} MB)")
    print(f"step-time ratio merak/eager: {result['step_time_ratio']:.3f}  "
          f"(losses agree within {max_diff:.1e} relative)")
    print(f"step-time ratio merak/eager with OMP_WAIT_POLICY=PASSIVE: "
          f"{result['step_time_ratio_vs_passive']:.3f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=2)


if __name__ == "__main__":
    sys.exit(main())
