"""Builds the GPT-2 fixture at a given shape on PyTorch's meta device
(merak_trace.meta_device(): no weights, no memory) and traces it.

meta_gpt.py OUT.pt LAYERS WIDTH HEADS SEQUENCE VOCABULARY BATCH
"""
import os
import sys

import torch

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..")
sys.path.insert(0, os.path.join(ROOT, "python"))
sys.path.insert(0, os.path.join(ROOT, "test", "fixtures"))
import merak_trace  # noqa: E402
from models import GPT2, GPT2Config  # noqa: E402


def main():
    out = sys.argv[1]
    layers, width, heads, seq, vocab, batch = (int(a) for a in sys.argv[2:8])

    class Config(GPT2Config):
        vocab_size = vocab
        block_size = seq
        n_layer = layers
        n_head = heads
        n_embd = width

    with merak_trace.meta_device():
        model = GPT2(Config())
    assert all(p.is_meta for p in model.parameters())
    idx = torch.zeros(batch, seq, dtype=torch.long)
    merak_trace.save(model, (idx, idx), out, meta=True)


if __name__ == "__main__":
    main()
