"""Benchmark: text generation with the key-value cache against PyTorch
eager. A GPT of the in-tree GPT-2 structure (6 layers, width 512, 8 heads,
a window of 256 positions, vocabulary 8,192; seeded weights, the final
norm's gain sharpened so that greedy choices are not decided by rounding)
generates greedily for 4 prompts of 16 tokens until the window is full
(240 tokens each), in the same run:

- merak-exec --generate (`--merak-kv-cache`: one prefill, then one decode
  step per position against the cache);
- PyTorch eager, the whole sequence recomputed for each token (the fixture
  model has no cache, as most training code), the same threads.

It reports each one's tokens per second, their ratio, and whether the
tokens are the same.

    python3 bench/generate.py --build build [--threads 2] [--new 240]
"""
import argparse
import os
import re
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "python"))
sys.path.insert(0, os.path.join(ROOT, "test", "fixtures"))

import torch  # noqa: E402


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--build", default=os.path.join(ROOT, "build"))
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--new", type=int, default=240)
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
    gpt = GPT2(Config()).eval()
    with torch.no_grad():
        gpt.transformer.ln_f.weight.mul_(20)
    batch, prompt = 4, 16
    gen = torch.Generator().manual_seed(1)
    prompts = torch.randint(0, Config.vocab_size, (batch, prompt),
                            generator=gen)
    opt = os.path.join(args.build, "bin", "merak-opt")
    exe = os.path.join(args.build, "bin", "merak-exec")
    with tempfile.TemporaryDirectory() as tmp:
        pt = os.path.join(tmp, "gpt.pt")
        window = torch.zeros(batch, Config.block_size, dtype=torch.long)
        merak_trace.save(gpt, (window, window), pt, check_trace=False)
        weights = os.path.join(tmp, "w.safetensors")
        merak_safetensors.save(merak_trace.state_tensors(gpt), weights)
        gen_mlir = os.path.join(tmp, "gen.mlir")
        subprocess.run([opt, pt, "--merak-kv-cache", "-o", gen_mlir],
                       check=True)
        prompts_txt = os.path.join(tmp, "prompts.txt")
        with open(prompts_txt, "w") as f:
            for row in prompts.tolist():
                f.write(" ".join(map(str, row)) + "\n")
        cmd = [exe, gen_mlir, "--generate", "--init", weights, "--prompts",
               prompts_txt, "--max-new-tokens", str(args.new), "--threads",
               str(args.threads)]
        start = time.perf_counter()
        done = subprocess.run(cmd, capture_output=True, text=True, check=True)
        merak_wall = time.perf_counter() - start
    lines = done.stdout.splitlines()
    merak_tokens = [list(map(int, l.split(":", 1)[1].split())) for l in lines
                    if l.startswith("prompt")]
    summary = [l for l in lines if l.startswith("generated")][0]
    merak_rate = float(re.search(r"([0-9.]+) tokens/s", summary).group(1))

    torch.set_num_threads(args.threads)
    seqs = prompts.clone()
    start = time.perf_counter()
    with torch.no_grad():
        for _ in range(min(args.new, Config.block_size - prompt)):
            logits, _ = gpt(seqs, torch.zeros_like(seqs))
            seqs = torch.cat([seqs, logits[:, -1].argmax(-1, keepdim=True)],
                             dim=1)
    eager_seconds = time.perf_counter() - start
    eager_tokens = seqs[:, prompt:].tolist()
    total = sum(len(t) for t in eager_tokens)
    eager_rate = total / eager_seconds
    print(summary)
    print("merak-exec --generate: %.1f tokens/s (%.2f s with start-up)"
          % (merak_rate, merak_wall))
    print("PyTorch eager, recomputed per token: %.1f tokens/s (%.2f s)"
          % (eager_rate, eager_seconds))
    print("ratio (merak / eager): %.2f; tokens %s" % (
        merak_rate / eager_rate,
        "equal" if merak_tokens == eager_tokens else "DIFFER"))


if __name__ == "__main__":
    main()
