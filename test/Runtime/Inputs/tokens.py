"""Writes a token file, or the losses tokens.mlir should print for it.

Usage: tokens.py write FILE
       tokens.py expect FILE --seed S --steps N

`expect` samples step s's windows as merak-exec documents it: a generator
seeded with step_seed(S, s, DATA), start offsets
torch.randint(len(tokens) - 8, (2,)), windows of 9 tokens; idx gets the
first 8 of each, targets the last 8. It prints one JSON line per step with
sum(3 * idx + targets).
"""

import argparse
import json

import numpy as np
import torch

from seeds import DATA, step_seed


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("mode", choices=["write", "expect"])
    parser.add_argument("file")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--steps", type=int, default=1)
    args = parser.parse_args()
    if args.mode == "write":
        tokens = (np.arange(1000) * 7919 % 50257).astype("<u2")
        tokens.tofile(args.file)
        return
    tokens = torch.from_numpy(np.fromfile(args.file, dtype="<u2").astype(np.int64))
    batch, seq_len = 2, 8
    for step in range(1, args.steps + 1):
        g = torch.Generator().manual_seed(step_seed(args.seed, step, DATA))
        starts = torch.randint(len(tokens) - seq_len, (batch,), generator=g)
        idx = torch.stack([tokens[s:s + seq_len] for s in starts])
        targets = torch.stack([tokens[s + 1:s + 1 + seq_len] for s in starts])
        loss = (3 * idx + targets).sum().item()
        print(json.dumps({"step": step, "loss": float(loss)}))


if __name__ == "__main__":
    main()
