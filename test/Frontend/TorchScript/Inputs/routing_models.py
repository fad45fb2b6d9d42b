"""A small module that uses the ops a mixture-of-experts router needs:
torch.topk (largest and smallest, float and int64, along any dimension),
F.one_hot and torch.cumsum (float, whose gradient is the reversed
cumulative sum, and boolean, counted as int64), with every result feeding
the loss so that both values and gradients are compared with PyTorch's.

routing_models.py MODEL.pt BATCHES.safetensors STEPS
"""
import os
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                    "..", "..")
sys.path.insert(0, os.path.join(ROOT, "python"))
import merak_safetensors  # noqa: E402
import merak_trace  # noqa: E402


class Routing(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(8, 6)
        self.out = nn.Linear(6, 4)

    def forward(self, x, ids):
        s = self.proj(x)  # [B, T, 6]
        top_v, top_i = torch.topk(s, 3, dim=-1)
        low_v, _ = s.topk(2, dim=1, largest=False)
        chosen = F.one_hot(top_i, 6).to(s.dtype)  # [B, T, 3, 6]
        running = torch.cumsum(s, dim=1)
        big = ids > 2
        count = torch.cumsum(big, dim=-1)  # int64
        slot = (count * big).to(s.dtype)
        id_top, id_at = ids.topk(2, dim=-1)
        y = ((chosen * top_v.unsqueeze(-1)).sum(2) + 0.1 * running +
             low_v.mean(1, keepdim=True))
        return (self.out(y).pow(2).mean() + (slot * s.mean(-1)).mean() +
                1e-2 * (id_top + id_at).to(s.dtype).mean())


def main():
    model_path, batches_path, steps = sys.argv[1], sys.argv[2], int(
        sys.argv[3])
    torch.manual_seed(0)
    model = Routing().train()
    x = torch.randn(2, 5, 8)
    ids = torch.randint(0, 6, (2, 5))
    merak_trace.save(model, (x, ids), model_path)
    merak_safetensors.save({
        "x": x.unsqueeze(0).repeat(steps, 1, 1, 1),
        "ids": ids.unsqueeze(0).repeat(steps, 1, 1)}, batches_path)


if __name__ == "__main__":
    main()
