"""Archives the importer must refuse or read without aborting.

    hostile_models.py OUT meta-mask       a model traced on the meta device
                                          whose mask is built from shapes
    hostile_models.py OUT meta-constant   ... that captures a meta tensor
    hostile_models.py OUT damage-debug SRC  SRC with every debug_pkl entry
                                          truncated (zip CRCs kept valid)
    hostile_models.py OUT flip-code SRC   SRC with one bit of its first
                                          code entry's deflated data flipped
                                          (CRCs not updated); prints the
                                          entry and its local header offset
"""
import os
import sys
import zipfile

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "..", "..", "python"))
import merak_trace  # noqa: E402


class MaskedMixer(nn.Module):
    """Causal mixing: the mask is computed in forward from the input's shape."""

    def __init__(self, captured=None):
        super().__init__()
        self.embed = nn.Embedding(16, 8)
        self.proj = nn.Linear(8, 8)
        self.captured = captured

    def forward(self, idx, targets):
        t = idx.shape[1]
        h = self.embed(idx)
        mask = torch.tril(torch.ones(t, t, device=idx.device))
        scores = (h @ h.transpose(1, 2)).masked_fill(mask == 0, float("-inf"))
        out = scores.softmax(-1) @ self.proj(h)
        if self.captured is not None:
            out = out * self.captured
        return F.cross_entropy(out.view(-1, 8), targets.view(-1))


def meta_model(out, captured):
    model = MaskedMixer(torch.ones(8, device="meta") if captured else None)
    model = model.to("meta")
    idx = torch.zeros(2, 5, dtype=torch.long, device="meta")
    merak_trace.save(model, (idx, idx.clone()), out, check_trace=False)


def damage_debug(out, src):
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(out, "w") as zout:
        for info in zin.infolist():
            data = zin.read(info)
            if info.filename.endswith(".debug_pkl"):
                data = data[: len(data) // 3]
            zout.writestr(info, data)


def flip_code(out, src):
    """One bit flipped in the middle of the first deflated code entry's
    data, the zip's CRCs left as they were."""
    with open(src, "rb") as f:
        data = bytearray(f.read())
    with zipfile.ZipFile(src) as z:
        info = next(i for i in z.infolist()
                    if "/code/" in i.filename and i.filename.endswith(".py"))
    at = info.header_offset
    name_len = int.from_bytes(data[at + 26:at + 28], "little")
    extra_len = int.from_bytes(data[at + 28:at + 30], "little")
    start = at + 30 + name_len + extra_len
    data[start + info.compress_size // 2] ^= 0x10
    with open(out, "wb") as f:
        f.write(data)
    print(info.filename, at)


def main():
    out, mode = sys.argv[1], sys.argv[2]
    if mode == "meta-mask":
        meta_model(out, captured=False)
    elif mode == "meta-constant":
        meta_model(out, captured=True)
    elif mode == "damage-debug":
        damage_debug(out, sys.argv[3])
    elif mode == "flip-code":
        flip_code(out, sys.argv[3])
    else:
        sys.exit("unknown mode " + mode)


if __name__ == "__main__":
    main()
