"""Prints the losses synthetic.mlir should log for merak-exec's synthetic data.

Usage: synthetic.py --seed S --steps N

Step s draws its inputs from torch.Generator().manual_seed(step_seed(S, s, DATA))
in input order: x = torch.randn(4, 5), labels = torch.randint(0, 2, (4,)).
"""

import argparse
import json

import torch

from seeds import DATA, step_seed


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--seed", type=int, required=True)
    parser.add_argument("--steps", type=int, required=True)
    args = parser.parse_args()
    for step in range(1, args.steps + 1):
        g = torch.Generator().manual_seed(step_seed(args.seed, step, DATA))
        x = torch.randn(4, 5, generator=g)
        labels = torch.randint(0, 2, (4,), generator=g)
        loss = x.sum() + labels.float().sum()
        print(json.dumps({"step": step, "loss": loss.item()}))


if __name__ == "__main__":
    main()
