"""Traces small models that exercise the importer's error paths and options."""
import os
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "..", "..", "python"))
import merak_trace  # noqa: E402


class Unsupported(nn.Module):
    """Uses two ops the importer does not know, on separate source lines."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def forward(self, x):
        y = torch.cumprod(self.fc(x), dim=1)
        return F.hardswish(y) + torch.cumprod(x, dim=0)


class Plain(nn.Module):
    """A model saved with torch.jit.save, without recorded input shapes."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 3)

    def forward(self, x):
        return self.fc(x).relu()


class InPlace(nn.Module):
    """In-place ops on activations and a buffer; a constant mask written in place."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)
        self.register_buffer("steps", torch.zeros((), dtype=torch.long))

    def forward(self, x):
        self.steps.add_(1)
        h = self.fc(x)
        h.relu_()
        mask = torch.zeros(4, 4)
        mask[1:3, 0:2] = 1.0
        h += mask[1]
        return h.sum()


class Scripted(nn.Module):
    """A scripted module: its branches depend only on attributes."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)
        self.use_gelu = True

    def forward(self, x):
        h = self.fc(x)
        if self.use_gelu:
            h = F.gelu(h)
        else:
            h = torch.relu(h)
        if self.training:
            h = F.dropout(h, 0.0, True)
        return h


class DataDependent(nn.Module):
    """A scripted module that branches on tensor data."""

    def forward(self, x):
        if bool(x.sum() > 0):
            return x * 2.0
        return x


class NormArgmaxIndex(nn.Module):
    """Vector norms, argmax and indexing by several tensors."""

    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(10, 4)

    def forward(self, ids, x):
        h = self.emb(ids)                               # [2, 5, 4]
        last = h[torch.arange(2), ids.argmax(dim=-1)]   # [2, 4]
        corners = x[[-1, 0], [1, -2]]                   # [2]
        return (last / last.norm(dim=-1, keepdim=True)
                + torch.norm(x, p=2, dim=1)[:2, None]
                + torch.linalg.vector_norm(x, dim=-1)[:2, None]
                + corners[:, None] + ids.argmax().float())


class PythonNumbers(nn.Module):
    """Python numbers meeting rank-0 float32 tensors: a loss accumulated
    from 0.0, scaled by an int and shifted by a float."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x, y):
        loss = 0.0
        for target in (y, y * 0.5):
            loss = loss + F.mse_loss(self.fc(x), target)
        return loss * 2 + 1.5


def save_scripted(module, example, out):
    """Scripts `module` and records its input shapes like merak_trace.save."""
    scripted = torch.jit.script(module)
    spec = merak_trace.describe_inputs(module, example)
    import json
    scripted.save(out, _extra_files={"merak/inputs.json": json.dumps(spec)})


def main():
    out = sys.argv[1]
    kind = sys.argv[2]
    torch.manual_seed(0)
    if kind == "unsupported":
        merak_trace.save(Unsupported(), (torch.randn(2, 8),), out)
    elif kind == "plain":
        torch.jit.trace(Plain(), (torch.randn(2, 4),)).save(out)
    elif kind == "inplace":
        merak_trace.save(InPlace(), (torch.randn(2, 4),), out, check_trace=False)
    elif kind == "normargmax":
        ids = torch.randint(0, 10, (2, 5))
        merak_trace.save(NormArgmaxIndex(), (ids, torch.randn(3, 4)), out)
    elif kind == "numbers":
        merak_trace.save(PythonNumbers(), (torch.randn(2, 4), torch.randn(2, 4)), out)
    elif kind == "scripted":
        save_scripted(Scripted().train(), (torch.randn(2, 4),), out)
    elif kind == "datadependent":
        save_scripted(DataDependent(), (torch.randn(2, 4),), out)
    elif kind.startswith("torchvision:"):
        import torchvision
        name = kind.split(":", 1)[1]
        model = getattr(torchvision.models, name)(weights=None, num_classes=10)
        if hasattr(model, "aux_logits"):
            model.aux_logits = False
            model.aux1 = model.aux2 = None
        merak_trace.save(model.train(), (torch.randn(2, 3, 64, 64),), out, check_trace=False)
    else:
        raise SystemExit(f"unknown model kind {kind}")


if __name__ == "__main__":
    main()
