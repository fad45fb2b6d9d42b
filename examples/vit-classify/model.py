"""A small Vision Transformer for the vit-classify example: patches by a
strided convolution, pre-LN encoder blocks, mean pooling and a linear
classifier; the forward returns the cross-entropy loss."""

import math

import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, width, heads):
        super().__init__()
        self.heads = heads
        self.scale = 1.0 / math.sqrt(width // heads)
        self.norm1 = nn.LayerNorm(width)
        self.qkv = nn.Linear(width, 3 * width)
        self.proj = nn.Linear(width, width)
        self.norm2 = nn.LayerNorm(width)
        self.up = nn.Linear(width, 4 * width)
        self.down = nn.Linear(4 * width, width)

    def forward(self, x):
        b, t, c = x.shape
        d = c // self.heads
        q, k, v = (p.view(b, t, self.heads, d).transpose(1, 2)
                   for p in self.qkv(self.norm1(x)).split(c, dim=2))
        att = F.softmax((q @ k.transpose(-2, -1)) * self.scale, dim=-1)
        y = (att @ v).transpose(1, 2).contiguous().view(b, t, c)
        x = x + self.proj(y)
        return x + self.down(F.gelu(self.up(self.norm2(x))))


class ViT(nn.Module):
    def __init__(self, image=16, patch=4, channels=3, width=64, heads=4,
                 layers=2, classes=4):
        super().__init__()
        self.patches = nn.Conv2d(channels, width, patch, stride=patch)
        count = (image // patch) ** 2
        self.position = nn.Parameter(torch.randn(1, count, width) * 0.02)
        self.blocks = nn.ModuleList([Block(width, heads)
                                     for _ in range(layers)])
        self.norm = nn.LayerNorm(width)
        self.head = nn.Linear(width, classes)

    def forward(self, images, labels):
        x = self.patches(images).flatten(2).transpose(1, 2) + self.position
        for block in self.blocks:
            x = block(x)
        logits = self.head(self.norm(x).mean(dim=1))
        return F.cross_entropy(logits, labels)
