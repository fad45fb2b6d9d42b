"""Traces an MLP with batch norm and dropout and writes PyTorch's training
and evaluation losses under merak-exec's seeding.

Usage: make_eval.py OUT_DIR --seed S --steps N --eval-every E --eval-batches M

OUT_DIR gets mlp.pt (traced in training mode), batches.safetensors (N
steps), val.safetensors (M batches), reference.jsonl (PyTorch's loss per
step with SGD, step s drawing its dropout masks after
torch.manual_seed(step_seed(S, s, DROPOUT)) as merak-exec does) and
reference_eval.jsonl: after every E-th step and after the last, the mean
loss over the M validation batches of the eager model in eval mode (dropout
off, batch norm on its running statistics) holding the trained weights and
statistics, {"step": s, "val_loss": x}.
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
        self.norm = torch.nn.BatchNorm1d(32)
        self.drop = torch.nn.Dropout(0.3)
        self.fc2 = torch.nn.Linear(32, 4)

    def forward(self, x, y):
        h = self.drop(torch.nn.functional.gelu(self.norm(self.fc1(x))))
        return torch.nn.functional.cross_entropy(self.fc2(h), y)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("out")
    parser.add_argument("--seed", type=int, required=True)
    parser.add_argument("--steps", type=int, required=True)
    parser.add_argument("--eval-every", type=int, required=True)
    parser.add_argument("--eval-batches", type=int, required=True)
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)
    torch.manual_seed(0)
    torch.set_num_threads(1)
    x = torch.randn(args.steps, 8, 16)
    y = torch.randint(0, 4, (args.steps, 8))
    vx = torch.randn(args.eval_batches, 8, 16) * 1.5 + 0.5
    vy = torch.randint(0, 4, (args.eval_batches, 8))
    eager = MLP().train()
    with warnings.catch_warnings():
        # The trace check reruns the model and draws other masks.
        warnings.simplefilter("ignore")
        merak_trace.save(eager, (x[0], y[0]), os.path.join(args.out, "mlp.pt"))
    merak_safetensors.save({"x": x, "y": y},
                           os.path.join(args.out, "batches.safetensors"))
    merak_safetensors.save({"x": vx, "y": vy},
                           os.path.join(args.out, "val.safetensors"))
    model = torch.jit.load(os.path.join(args.out, "mlp.pt"))
    opt = torch.optim.SGD(model.parameters(), lr=0.1, foreach=False)
    lines, evals = [], []
    for step in range(1, args.steps + 1):
        torch.manual_seed(step_seed(args.seed, step, DROPOUT))
        loss = model(x[step - 1], y[step - 1])
        opt.zero_grad()
        loss.backward()
        opt.step()
        lines.append(json.dumps({"step": step, "loss": loss.item()}))
        if step % args.eval_every == 0 or step == args.steps:
            eager.load_state_dict(model.state_dict())
            eager.eval()
            with torch.no_grad():
                val = sum(eager(vx[k], vy[k]).item()
                          for k in range(args.eval_batches))
            evals.append(json.dumps(
                {"step": step, "val_loss": val / args.eval_batches}))
    with open(os.path.join(args.out, "reference.jsonl"), "w") as f:
        f.write("\n".join(lines) + "\n")
    with open(os.path.join(args.out, "reference_eval.jsonl"), "w") as f:
        f.write("\n".join(evals) + "\n")


if __name__ == "__main__":
    main()
