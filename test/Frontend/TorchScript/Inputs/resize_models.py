"""Small traced models for the importer's resize and loss lowerings.

resize_models.py resize|losses MODEL.pt [BATCHES.safetensors STEPS]

- resize: a 1x1 conv, then F.interpolate in every mode the importer takes
  (nearest by 2 and to 7x5, nearest-exact, bilinear with and without
  align_corners, up by 1.5 and down to 3x2), each compared with its own
  target by F.mse_loss; the loss is their sum, so training it checks the
  values and the gradients of every resize;
- losses: F.mse_loss with a target that broadcasts, and per-pixel
  cross-entropy with reduction="none".
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

# (keyword arguments of F.interpolate, output size) per resize.
RESIZES = [
    (dict(scale_factor=2.0, mode="nearest"), (8, 8)),
    (dict(size=(7, 5), mode="nearest"), (7, 5)),
    (dict(size=(7, 5), mode="nearest-exact"), (7, 5)),
    (dict(size=(7, 5), mode="bilinear", align_corners=False), (7, 5)),
    (dict(size=(7, 5), mode="bilinear", align_corners=True), (7, 5)),
    (dict(scale_factor=1.5, mode="bilinear", align_corners=False), (6, 6)),
    (dict(size=(3, 2), mode="bilinear", align_corners=False), (3, 2)),
]


class Resize(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(2, 3, 1)

    def forward(self, x, target0, target1, target2, target3, target4,
                target5, target6):
        targets = (target0, target1, target2, target3, target4, target5,
                   target6)
        h = self.conv(x)
        losses = [F.mse_loss(F.interpolate(h, **kwargs), target)
                  for (kwargs, _), target in zip(RESIZES, targets)]
        return torch.stack(losses).sum()


class Losses(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(2, 3, 1)

    def forward(self, x, target, labels):
        h = self.conv(x)
        return (F.mse_loss(h, target),
                F.cross_entropy(h, labels, reduction="none"))


def main():
    kind, model_path = sys.argv[1], sys.argv[2]
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(1)
    if kind == "losses":
        x = torch.randn(2, 2, 4, 4, generator=gen)
        target = torch.randn(1, 3, 4, 4, generator=gen)
        labels = torch.randint(0, 3, (2, 4, 4), generator=gen)
        merak_trace.save(Losses().train(), (x, target, labels), model_path)
        return
    steps = int(sys.argv[4])
    inputs = {"x": torch.randn(steps, 2, 2, 4, 4, generator=gen)}
    for i, (_, size) in enumerate(RESIZES):
        inputs["target%d" % i] = torch.randn(steps, 2, 3, *size,
                                             generator=gen)
    merak_trace.save(Resize().train(),
                     tuple(t[0] for t in inputs.values()), model_path)
    merak_safetensors.save(inputs, sys.argv[3])


if __name__ == "__main__":
    main()
