"""Benchmark: data and tensor parallelism on local ranks.

In one invocation, on a GPT-2-style model traced for the run:
  * dp=2 on 2 ranks: merak-exec (--merak-parallelize="dp=2", Gloo) against
    PyTorch DistributedDataParallel with the Gloo backend on 2 processes,
    same weights, same global batches, same threads per rank, AdamW;
    median step time of each and their ratio. merak-exec runs twice: as it
    runs by default (float32 GEMMs on oneDNN's sgemm, with kernels for the
    CPU's widest vector instructions) and with --gemm=blas (the BLAS
    PyTorch's eager GEMMs call), so the ratio splits into what the GEMM
    library gives and what the rest of the compiled step gives;
  * tp=2: the bytes each rank sends per step in the partitioned program,
    counted from the collectives of the plan (ring algorithms: all-reduce
    2(n-1)/n of the tensor, all-gather and reduce-scatter (n-1)/n of the
    whole, all-to-all (n-1)/n), against Megatron's analytical figure for the
    same model: (4 L + 2) all-reduces of the [B, T, H] activation (two per
    layer forward, two backward, the vocabulary-parallel embedding forward
    and the head's input gradient backward) plus 3 of one value per token
    (the parallel cross-entropy).
"""
import argparse
import json
import os
import re
import socket
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "python"))
sys.path.insert(0, os.path.join(ROOT, "test", "fixtures"))
sys.path.insert(0, os.path.join(ROOT, "bench"))

from train_step import blas_name, gemm_name, make_config  # noqa: E402


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def ddp_child(args, work, rank, world, port):
    """One DDP rank: trains on its slice of every global batch. With port 0,
    the same rank's work alone: the model without DDP and no
    communication (the compute the rank does, for --decompose)."""
    import time
    import torch
    import torch.distributed as dist
    import models
    import merak_safetensors
    torch.set_num_threads(args.threads)
    distributed = port != 0
    if distributed:
        dist.init_process_group("gloo",
                                init_method=f"tcp://127.0.0.1:{port}",
                                rank=rank, world_size=world)
    traced = torch.jit.load(os.path.join(work, "gpt2.pt"))
    model = models.GPT2(make_config(args)).train()
    model.load_state_dict(dict(traced.state_dict()))
    ddp = model
    if distributed:
        # Gloo cannot broadcast the boolean attention-mask buffers; they
        # are constants anyway.
        model._ddp_params_and_buffers_to_ignore = [
            name for name, buf in model.named_buffers()
            if buf.dtype == torch.bool]
        ddp = torch.nn.parallel.DistributedDataParallel(
            model, broadcast_buffers=False)
    opt = torch.optim.AdamW(ddp.parameters(), lr=1e-3, weight_decay=0.1,
                            foreach=False)
    batches, _ = merak_safetensors.load(
        os.path.join(work, "batches.safetensors"))
    local = args.batch // world
    times, losses = [], []
    for i in range(args.steps):
        idx = batches["idx"][i][rank * local:(rank + 1) * local]
        tgt = batches["targets"][i][rank * local:(rank + 1) * local]
        if distributed:
            dist.barrier()
        t0 = time.perf_counter()
        _, loss = ddp(idx, tgt)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        times.append((time.perf_counter() - t0) * 1e3)
        mean = loss.detach().clone()
        if distributed:
            dist.all_reduce(mean)
        losses.append(mean.item() / world)
    if rank == 0 or not distributed:
        print(json.dumps({"ms": times, "loss": losses}))
    if distributed:
        dist.destroy_process_group()


TENSOR = re.compile(r"tensor<((?:\d+x)*)(f32|f16|bf16|i64|i32)>")
WIDTH = {"f32": 4, "f16": 2, "bf16": 2, "i64": 8, "i32": 4}


def collective_bytes(plan, axis, size):
    """Bytes one rank sends per step in the collectives over mesh `axis`."""
    total = 0.0
    counts = {}
    for line in open(plan):
        m = re.search(r"mesh\.(all_reduce|all_gather|reduce_scatter|all_to_all)"
                      r" .* mesh_axes = \[([0-9, ]*)\]", line)
        if not m or m.group(2).strip() != str(axis):
            continue
        kind = m.group(1)
        types = TENSOR.findall(line.split(":")[-1])
        if len(types) < 2:
            continue
        def nbytes(t):
            n = 1
            for d in t[0].split("x"):
                if d:
                    n *= int(d)
            return n * WIDTH[t[1]]
        src, dst = nbytes(types[0]), nbytes(types[1])
        frac = (size - 1) / size
        total += {"all_reduce": 2 * frac * src,
                  "all_gather": frac * dst,
                  "reduce_scatter": frac * src,
                  "all_to_all": frac * src}[kind]
        counts[kind] = counts.get(kind, 0) + 1
    return total, counts


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--build", required=True, help="Merak build directory")
    p.add_argument("--threads", type=int, default=1,
                   help="threads per rank")
    p.add_argument("--steps", type=int, default=16)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--rounds", type=int, default=2,
                   help="runs of each trainer, alternated; the step time "
                        "is the median over all of them")
    p.add_argument("--decompose", action="store_true",
                   help="also time each trainer's per-rank work alone (2 "
                        "processes at once, each on its half of the batch, "
                        "no communication), to split the dp=2 step into "
                        "compute and what communication adds")
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--embd", type=int, default=256)
    p.add_argument("--heads", type=int, default=8)
    p.add_argument("--vocab", type=int, default=8192)
    p.add_argument("--seq", type=int, default=128)
    p.add_argument("--batch", type=int, default=8, help="global batch")
    p.add_argument("--json", help="also write the results here")
    p.add_argument("--ddp-child", nargs=4, help=argparse.SUPPRESS)
    args = p.parse_args()
    # OpenBLAS starts its own threads regardless of torch.set_num_threads or
    # --threads; pin it so that both trainers use the threads they are given.
    os.environ["OPENBLAS_NUM_THREADS"] = str(args.threads)
    if args.ddp_child:
        work, rank, world, port = args.ddp_child
        return ddp_child(args, work, int(rank), int(world), int(port))

    import torch
    import models
    import merak_safetensors
    import merak_trace

    work = tempfile.mkdtemp(prefix="merak-bench-dp-")
    torch.manual_seed(0)
    model = models.GPT2(make_config(args)).train()
    params = sum(q.numel() for q in model.parameters())
    gen = torch.Generator().manual_seed(0)
    shape = (args.steps, args.batch, args.seq)
    idx = torch.randint(0, args.vocab, shape, generator=gen)
    tgt = torch.randint(0, args.vocab, shape, generator=gen)
    merak_trace.save(model, (idx[0], tgt[0]), os.path.join(work, "gpt2.pt"))
    merak_safetensors.save({"idx": idx, "targets": tgt},
                           os.path.join(work, "batches.safetensors"))
    bin_dir = os.path.join(args.build, "bin")

    def plan(parallel, name):
        out = os.path.join(work, name)
        subprocess.run([os.path.join(bin_dir, "merak-opt"),
                        os.path.join(work, "gpt2.pt"),
                        "--merak-train=optimizer=adamw lr=1e-3 weight-decay=0.1",
                        f"--merak-parallelize={parallel}", "-o", out],
                       check=True)
        return out

    common = [f"--{k}={getattr(args, k)}" for k in
              ("threads", "steps", "layers", "embd", "heads", "vocab", "seq",
               "batch")]

    def ddp_run(port):
        """Two eager ranks: DDP over Gloo, or (port 0) each alone."""
        procs = [subprocess.Popen(
            [sys.executable, __file__, "--build", args.build, "--ddp-child",
             work, str(r), "2", str(port)] + common,
            stdout=subprocess.PIPE, text=True) for r in range(2)]
        outs = [pr.communicate()[0] for pr in procs]
        if any(pr.returncode for pr in procs):
            sys.exit("PyTorch run failed")
        # Under DDP only rank 0 reports (the losses are the group's).
        return [json.loads(o.strip().splitlines()[-1]) for o in outs
                if o.strip()]

    def merak_run(plan_path, nproc, data, init, gemm="onednn"):
        """merak-exec on `nproc` ranks; with nproc 1, two single-rank runs
        at once. Returns each run's log records."""
        runs = 1 if nproc > 1 else 2
        logs = [os.path.join(work, f"run{i}.jsonl") for i in range(runs)]
        for log in logs:
            # --log-jsonl appends; each round reads only its own steps.
            if os.path.exists(log):
                os.remove(log)
        procs = [subprocess.Popen(
            [os.path.join(bin_dir, "merak-exec"), plan_path] +
            (["--nproc", str(nproc)] if nproc > 1 else []) +
            ["--init", init, "--data", data, "--steps", str(args.steps),
             "--threads", str(args.threads), "--gemm", gemm,
             "--log-jsonl", log],
            stdout=subprocess.DEVNULL) for log in logs]
        if any(pr.wait() for pr in procs):
            sys.exit("merak-exec failed")
        out = []
        for log in logs:
            with open(log) as f:
                out.append([json.loads(line) for line in f])
        return out

    w = args.warmup
    dp_plan = plan("dp=2", "dp2.mlir")
    ddp_ms, merak_ms, blas_ms, max_diff = [], [], [], 0.0
    for _ in range(args.rounds):
        # PyTorch DDP, 2 processes; then merak-exec, dp=2 on 2 ranks, with
        # each GEMM library.
        ddp = ddp_run(free_port())[0]
        ddp_ms += ddp["ms"][w:]
        for gemm, times in (("onednn", merak_ms), ("blas", blas_ms)):
            merak = merak_run(dp_plan, 2,
                              os.path.join(work, "batches.safetensors"),
                              os.path.join(work, "gpt2.pt"), gemm)[0]
            times += [r["ms"] for r in merak[w:]]
            max_diff = max([max_diff] + [abs(a["loss"] - b) / abs(b)
                                         for a, b in zip(merak, ddp["loss"])])
    merak_ms = statistics.median(merak_ms)
    blas_ms = statistics.median(blas_ms)
    ddp_ms = statistics.median(ddp_ms)

    alone = None
    if args.decompose:
        # Each rank's work alone, two processes at once on the same cores:
        # eager on its half of the batch, and merak-exec on the step traced
        # at half the batch, without partitioning.
        local = args.batch // 2
        merak_trace.save(model, (idx[0][:local], tgt[0][:local]),
                         os.path.join(work, "gpt2-local.pt"))
        merak_safetensors.save({"idx": idx[:, :local],
                                "targets": tgt[:, :local]},
                               os.path.join(work, "local.safetensors"))
        local_plan = os.path.join(work, "local.mlir")
        subprocess.run([os.path.join(bin_dir, "merak-opt"),
                        os.path.join(work, "gpt2-local.pt"),
                        "--merak-train=optimizer=adamw lr=1e-3 "
                        "weight-decay=0.1", "-o", local_plan], check=True)
        eager_alone, merak_alone = [], []
        for _ in range(args.rounds):
            for r in ddp_run(0):
                eager_alone += r["ms"][w:]
            for log in merak_run(local_plan, 1,
                                 os.path.join(work, "local.safetensors"),
                                 os.path.join(work, "gpt2-local.pt")):
                merak_alone += [r["ms"] for r in log[w:]]
        alone = {"eager": statistics.median(eager_alone),
                 "merak": statistics.median(merak_alone)}

    # tp=2 communication volume.
    tp_plan = plan("tp=2", "tp2.mlir")
    measured, counts = collective_bytes(tp_plan, 0, 2)
    b, t, h, n = args.batch, args.seq, args.embd, 2
    ring = 2 * (n - 1) / n
    megatron = ((4 * args.layers + 2) * ring * b * t * h * 4
                + 3 * ring * b * t * 4)

    result = {
        "blas": blas_name(), "threads_per_rank": args.threads,
        "params": params, "global_batch": args.batch, "seq": args.seq,
        "merak_gemm": gemm_name("onednn"),
        "ddp_step_ms": ddp_ms, "merak_dp2_step_ms": merak_ms,
        "dp2_step_time_ratio": merak_ms / ddp_ms,
        "merak_dp2_blas_step_ms": blas_ms,
        "dp2_step_time_ratio_blas": blas_ms / ddp_ms,
        "dp2_max_rel_loss_diff": max_diff,
        "steps_timed": (args.steps - w) * args.rounds,
        "tp2_bytes_per_rank": measured, "tp2_collectives": counts,
        "megatron_bytes_per_rank": megatron,
        "tp2_volume_ratio": measured / megatron,
    }
    print(f"BLAS: {result['blas']}, {args.threads} thread(s) per rank, "
          f"model: {params / 1e6:.1f} M parameters, global batch "
          f"{args.batch} x {args.seq} tokens")
    print(f"GEMMs: PyTorch on the BLAS; merak-exec on {result['merak_gemm']}"
          f" (and on the BLAS with --gemm=blas)")
    print(f"dp=2  PyTorch DDP (Gloo):  {ddp_ms:8.1f} ms per step")
    print(f"dp=2  merak-exec (Gloo):   {merak_ms:8.1f} ms per step  "
          f"(losses agree within {max_diff:.1e} relative)")
    print(f"dp=2  merak-exec --gemm=blas: {blas_ms:5.1f} ms per step")
    print(f"dp=2  step-time ratio merak/DDP: {result['dp2_step_time_ratio']:.3f}"
          f"  (medians of {result['steps_timed']} steps each); with "
          f"--gemm=blas {result['dp2_step_time_ratio_blas']:.3f}")
    if alone:
        result["eager_rank_alone_ms"] = alone["eager"]
        result["merak_rank_alone_ms"] = alone["merak"]
        print(f"per-rank work alone (2 processes, no communication): "
              f"eager {alone['eager']:.1f} ms, merak-exec "
              f"{alone['merak']:.1f} ms (ratio "
              f"{alone['merak'] / alone['eager']:.3f})")
        print(f"what data parallelism adds: DDP "
              f"{ddp_ms - alone['eager']:+.1f} ms, merak-exec "
              f"{merak_ms - alone['merak']:+.1f} ms")
    print(f"tp=2  bytes sent per rank per step: {measured / 2**20:.2f} MiB "
          f"({', '.join(f'{v} {k}' for k, v in sorted(counts.items()))})")
    print(f"tp=2  Megatron analytical:          {megatron / 2**20:.2f} MiB  "
          f"(ratio {result['tp2_volume_ratio']:.2f})")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=2)


if __name__ == "__main__":
    sys.exit(main())
