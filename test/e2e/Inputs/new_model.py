"""A model outside the fixtures, traced as a user would: an MLP-Mixer."""
import os
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..")
sys.path.insert(0, os.path.join(ROOT, "python"))
import merak_safetensors  # noqa: E402
import merak_trace  # noqa: E402


class MixerBlock(nn.Module):
    def __init__(self, tokens, channels):
        super().__init__()
        self.norm1 = nn.LayerNorm(channels)
        self.token_mlp = nn.Sequential(nn.Linear(tokens, 2 * tokens), nn.GELU(),
                                       nn.Linear(2 * tokens, tokens))
        self.norm2 = nn.LayerNorm(channels)
        self.channel_mlp = nn.Sequential(nn.Linear(channels, 2 * channels),
                                         nn.SiLU(), nn.Linear(2 * channels, channels))

    def forward(self, x):
        y = self.norm1(x).transpose(1, 2)
        x = x + self.token_mlp(y).transpose(1, 2)
        return x + self.channel_mlp(self.norm2(x))


class Mixer(nn.Module):
    def __init__(self, image=16, patch=4, channels=24, classes=7):
        super().__init__()
        self.patch = patch
        tokens = (image // patch) ** 2
        self.stem = nn.Conv2d(3, channels, patch, stride=patch)
        self.blocks = nn.Sequential(*[MixerBlock(tokens, channels) for _ in range(2)])
        self.norm = nn.LayerNorm(channels)
        self.head = nn.Linear(channels, classes)

    def forward(self, images, labels):
        x = self.stem(images).flatten(2).transpose(1, 2)
        x = self.blocks(x)
        logits = self.head(torch.tanh(self.norm(x).mean(dim=1)))
        return logits, F.cross_entropy(logits, labels, label_smoothing=0.1)


def main():
    """new_model.py MODEL.pt BATCHES.safetensors STEPS [MICROBATCHES]: traces
    at batch 4; a step holds MICROBATCHES batches of 4 (default 1)."""
    model_path, batches_path, steps = sys.argv[1], sys.argv[2], int(sys.argv[3])
    micro = int(sys.argv[4]) if len(sys.argv) > 4 else 1
    torch.manual_seed(0)
    model = Mixer().train()
    gen = torch.Generator().manual_seed(1)
    images = torch.randn(steps, 4 * micro, 3, 16, 16, generator=gen)
    labels = torch.randint(0, 7, (steps, 4 * micro), generator=gen)
    merak_trace.save(model, (images[0, :4], labels[0, :4]), model_path)
    merak_safetensors.save({"images": images, "labels": labels}, batches_path)


if __name__ == "__main__":
    main()
