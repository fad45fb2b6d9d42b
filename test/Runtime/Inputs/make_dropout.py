"""Traces an MLP with dropout and writes PyTorch's losses under merak-exec's seeding.

Usage: make_dropout.py OUT_DIR --seed S [--steps N]

OUT_DIR gets mlp.pt (traced in training mode, so dropout is active),
batches.safetensors and reference.jsonl: PyTorch's loss per step with SGD,
where step s draws its dropout masks after
torch.manual_seed(step_seed(S, s, DROPOUT)), the generator seed merak-exec
uses for the masks of step s.
"""

import argparse
import json
import os
import sys
import warnings

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "..", "python"))
import merak_safetensors  # noqa: E402
import merak_trace  # noqa: E402
from seeds import DROPOUT, step_seed  # noqa: E402


class MLP(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(16, 32)
        self.drop = torch.nn.Dropout(0.3)
        self.fc2 = torch.nn.Linear(32, 4)

    def forward(self, x, y):
        h = self.drop(torch.nn.functional.gelu(self.fc1(x)))
        return torch.nn.functional.cross_entropy(self.fc2(h), y)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("out")
    parser.add_argument("--seed", type=int, required=True)
    parser.add_argument("--steps", type=int, default=4)
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)
    torch.manual_seed(0)
    torch.set_num_threads(1)
    x = torch.randn(args.steps, 8, 16)
    y = torch.randint(0, 4, (args.steps, 8))
    with warnings.catch_warnings():
        # The trace check reruns the model and draws other masks.
        warnings.simplefilter("ignore")
        merak_trace.save(MLP().train(), (x[0], y[0]),
                         os.path.join(args.out, "mlp.pt"))
    merak_safetensors.save({"x": x, "y": y},
                           os.path.join(args.out, "batches.safetensors"))
    model = torch.jit.load(os.path.join(args.out, "mlp.pt"))
    opt = torch.optim.SGD(model.parameters(), lr=0.1, foreach=False)
    lines = []
    for step in range(1, args.steps + 1):
        torch.manual_seed(step_seed(args.seed, step, DROPOUT))
        loss = model(x[step - 1], y[step - 1])
        opt.zero_grad()
        loss.backward()
        opt.step()
        lines.append(json.dumps({"step": step, "loss": loss.item()}))
    with open(os.path.join(args.out, "reference.jsonl"), "w") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
