"""Writes the inputs of the linear-regression runtime tests and PyTorch's losses.

Usage: make_linreg.py OUT_DIR [--steps N] [--nan-step K]

OUT_DIR gets model.pt (a TorchScript module whose `fc` is nn.Linear(4, 1)),
batches.safetensors (x [N, 8, 4] and y [N, 8, 1]) and reference.jsonl, the
loss of every step when PyTorch trains the same module with
SGD(lr=0.1, momentum=0.9) on the same batches. With --nan-step K, step K's x
holds a NaN; the reference then skips that step's update, as
merak-exec --skip-nonfinite does.
"""

import argparse
import json
import math
import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "..", "python"))
import merak_safetensors  # noqa: E402


class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(4, 1)

    def forward(self, x):
        return self.fc(x)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("out")
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--nan-step", type=int, default=0)
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)
    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = torch.jit.script(Model())
    model.save(os.path.join(args.out, "model.pt"))
    x = torch.randn(args.steps, 8, 4)
    y = torch.randn(args.steps, 8, 1)
    if args.nan_step:
        x[args.nan_step - 1, 0, 0] = float("nan")
    merak_safetensors.save({"x": x, "y": y},
                           os.path.join(args.out, "batches.safetensors"))
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9,
                          foreach=False)
    lines = []
    for step in range(args.steps):
        loss = ((model(x[step]) - y[step]) ** 2).mean()
        opt.zero_grad()
        if math.isfinite(loss.item()):
            loss.backward()
            opt.step()
        lines.append(json.dumps({"step": step + 1, "loss": loss.item()}))
    with open(os.path.join(args.out, "reference.jsonl"), "w") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
