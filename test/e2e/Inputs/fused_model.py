"""A decoder with fused projections, traced as a user would: q, k and v
from one linear (split into three), and the MLP's gate and up projections
from one linear (chunked in two), as Phi-3 writes them."""
import math
import os
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..")
sys.path.insert(0, os.path.join(ROOT, "python"))
import merak_safetensors  # noqa: E402
import merak_trace  # noqa: E402


class RMSNorm(nn.Module):
    def __init__(self, d, eps=1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d))

    def forward(self, x):
        return self.weight * x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)


class Block(nn.Module):
    def __init__(self, d, heads, hidden, seq):
        super().__init__()
        self.heads = heads
        self.norm1 = RMSNorm(d)
        self.qkv_proj = nn.Linear(d, 3 * d, bias=False)
        self.o_proj = nn.Linear(d, d, bias=False)
        self.norm2 = RMSNorm(d)
        self.gate_up_proj = nn.Linear(d, 2 * hidden, bias=False)
        self.down_proj = nn.Linear(hidden, d, bias=False)
        self.register_buffer("mask", torch.full((seq, seq), float("-inf")).triu(1))

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.qkv_proj(self.norm1(x)).split(C, dim=-1)
        q, k, v = [t.view(B, T, self.heads, C // self.heads).transpose(1, 2)
                   for t in (q, k, v)]
        att = q @ k.transpose(-2, -1) / math.sqrt(C // self.heads) + self.mask
        y = (F.softmax(att, dim=-1) @ v).transpose(1, 2).reshape(B, T, C)
        x = x + self.o_proj(y)
        gate, up = self.gate_up_proj(self.norm2(x)).chunk(2, dim=-1)
        return x + self.down_proj(F.silu(gate) * up)


class Decoder(nn.Module):
    def __init__(self, vocab=64, d=32, heads=4, hidden=64, seq=16, layers=2):
        super().__init__()
        self.embed = nn.Embedding(vocab, d)
        self.blocks = nn.ModuleList([Block(d, heads, hidden, seq) for _ in range(layers)])
        self.norm = RMSNorm(d)
        self.lm_head = nn.Linear(d, vocab, bias=False)

    def forward(self, idx, targets):
        x = self.embed(idx)
        for b in self.blocks:
            x = b(x)
        logits = self.lm_head(self.norm(x))
        return F.cross_entropy(logits.flatten(0, 1), targets.flatten())


def main():
    """fused_model.py MODEL.pt BATCHES.safetensors STEPS: traces at batch 4."""
    model_path, batches_path, steps = sys.argv[1], sys.argv[2], int(sys.argv[3])
    torch.manual_seed(0)
    model = Decoder().train()
    gen = torch.Generator().manual_seed(1)
    idx = torch.randint(0, 64, (steps, 4, 16), generator=gen)
    targets = torch.randint(0, 64, (steps, 4, 16), generator=gen)
    merak_trace.save(model, (idx[0], targets[0]), model_path)
    merak_safetensors.save({"idx": idx, "targets": targets}, batches_path)


if __name__ == "__main__":
    main()
