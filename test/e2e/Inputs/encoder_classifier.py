"""A model outside the fixtures, written as a PyTorch user would: a
TransformerEncoder over token embeddings with a 5-class head (a head no
tensor-parallel degree splits)."""
import os
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..")
sys.path.insert(0, os.path.join(ROOT, "python"))
import merak_safetensors  # noqa: E402
import merak_trace  # noqa: E402


class EncoderClassifier(nn.Module):
    def __init__(self, vocab=64, width=32, heads=4, layers=2, classes=5):
        super().__init__()
        self.embed = nn.Embedding(vocab, width)
        layer = nn.TransformerEncoderLayer(width, heads, dim_feedforward=64,
                                           dropout=0.0, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, layers)
        self.head = nn.Linear(width, classes)

    def forward(self, tokens, labels):
        x = self.encoder(self.embed(tokens))
        logits = self.head(x.mean(dim=1))
        return logits, F.cross_entropy(logits, labels)


def main():
    """encoder_classifier.py MODEL.pt BATCHES.safetensors STEPS [BATCH]:
    traces at BATCH sequences of 8 tokens (default 4)."""
    model_path, batches_path, steps = sys.argv[1], sys.argv[2], int(sys.argv[3])
    batch = int(sys.argv[4]) if len(sys.argv) > 4 else 4
    torch.manual_seed(0)
    model = EncoderClassifier().train()
    gen = torch.Generator().manual_seed(1)
    tokens = torch.randint(0, 64, (steps, batch, 8), generator=gen)
    labels = torch.randint(0, 5, (steps, batch), generator=gen)
    merak_trace.save(model, (tokens[0], labels[0]), model_path)
    merak_safetensors.save({"tokens": tokens, "labels": labels}, batches_path)


if __name__ == "__main__":
    main()
