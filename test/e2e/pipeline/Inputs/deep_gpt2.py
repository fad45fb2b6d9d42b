"""Traces a deeper GPT-2-style model (4 blocks: 9 pipeline layers) and writes
its batches, for pipelines of 4 ranks with 2 model chunks each.

Usage: python3 deep_gpt2.py --out DIR --steps N --microbatches M
Writes DIR/gpt2_deep.pt (traced at the micro-batch shape 2x16) and
DIR/batches.safetensors (idx and targets, [N, 2*M, 16]).
"""
import argparse
import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..", "..", "..", "..")
sys.path.insert(0, os.path.join(ROOT, "python"))
sys.path.insert(0, os.path.join(ROOT, "test", "fixtures"))

import merak_safetensors  # noqa: E402
import merak_trace  # noqa: E402
import models  # noqa: E402


class DeepConfig(models.GPT2Config):
    n_layer = 4


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--microbatches", type=int, default=8)
    args = p.parse_args()
    torch.manual_seed(0)
    model = models.GPT2(DeepConfig()).train()
    cfg = DeepConfig()
    gen = torch.Generator().manual_seed(1)
    shape = (args.steps, 2 * args.microbatches, cfg.block_size)
    idx = torch.randint(0, cfg.vocab_size, shape, generator=gen)
    # One batch repeated, which the model memorises: the loss falls.
    idx[:] = idx[0].clone()
    targets = torch.roll(idx, -1, dims=2)
    os.makedirs(args.out, exist_ok=True)
    merak_trace.save(model, (idx[0, :2], targets[0, :2]),
                     os.path.join(args.out, "gpt2_deep.pt"))
    merak_safetensors.save({"idx": idx, "targets": targets},
                           os.path.join(args.out, "batches.safetensors"),
                           {"inputs": "idx,targets"})
    return 0


if __name__ == "__main__":
    sys.exit(main())
