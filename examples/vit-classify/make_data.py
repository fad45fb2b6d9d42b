"""Writes the vit-classify example's data: 16x16 RGB images of four kinds of
pattern (horizontal, vertical or diagonal stripes, a checkerboard) at random
phases, periods and colours, with noise, labelled 0-3.

Usage: python3 make_data.py [--out DIR] [--steps 300] [--eval-batches 8]
                            [--batch 16] [--seed 0]

DIR (default: this directory) gets train.safetensors (`images` [steps,
batch, 3, 16, 16] f32, `labels` [steps, batch] i64: step s reads slice
s - 1) and val.safetensors (`--eval-batches` batches drawn apart).
"""

import argparse
import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "python"))
import merak_safetensors  # noqa: E402


def patterns(count, gen, size=16):
    labels = torch.randint(0, 4, (count,), generator=gen)
    ys = torch.arange(size).view(size, 1).float()
    xs = torch.arange(size).view(1, size).float()
    images = torch.empty(count, 3, size, size)
    for i in range(count):
        period = float(torch.randint(3, 7, (1,), generator=gen))
        phase = float(torch.rand(1, generator=gen)) * period
        kind = int(labels[i])
        if kind == 0:
            wave = torch.sin(2 * torch.pi * (ys + phase) / period)
        elif kind == 1:
            wave = torch.sin(2 * torch.pi * (xs + phase) / period)
        elif kind == 2:
            wave = torch.sin(2 * torch.pi * (xs + ys + phase) / period)
        else:
            wave = (torch.sin(2 * torch.pi * (xs + phase) / period) *
                    torch.sin(2 * torch.pi * (ys + phase) / period))
        colour = torch.rand(3, 1, 1, generator=gen) * 2 - 1
        noise = torch.randn(3, size, size, generator=gen) * 0.3
        images[i] = colour * wave.expand(size, size) + noise
    return images, labels


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default=HERE)
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--eval-batches", type=int, default=8)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    os.makedirs(args.out, exist_ok=True)
    gen = torch.Generator().manual_seed(args.seed)
    for name, count in (("train", args.steps), ("val", args.eval_batches)):
        images, labels = patterns(count * args.batch, gen)
        merak_safetensors.save(
            {"images": images.view(count, args.batch, 3, 16, 16),
             "labels": labels.view(count, args.batch)},
            os.path.join(args.out, name + ".safetensors"))
        print("%s: %d batches of %d" % (os.path.join(args.out, name +
                                                     ".safetensors"),
                                        count, args.batch))


if __name__ == "__main__":
    main()
