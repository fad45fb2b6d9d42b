"""Token files and the validation windows merak-exec takes from them.

Usage:
    windows.py tokens OUT.bin --count N --vocab V [--seed S]
    windows.py batches TOKENS.bin OUT.safetensors --batches M --batch B
                       --seq-len L

`tokens` writes N random uint16 tokens below V. `batches` writes what
merak-exec --eval-tokens feeds evaluation batch k (1-based): windows
(k - 1) * B + b of the ones starting at multiples of L, each L + 1 tokens,
wrapping after the last whole one; `idx` holds a window's first L tokens
and `targets` its last L, as int64 [M, B, L] (an --eval-data file).
"""

import argparse
import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "..", "..", "python"))
import merak_safetensors  # noqa: E402


def main():
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(dest="command", required=True)
    t = sub.add_parser("tokens")
    t.add_argument("out")
    t.add_argument("--count", type=int, required=True)
    t.add_argument("--vocab", type=int, required=True)
    t.add_argument("--seed", type=int, default=0)
    b = sub.add_parser("batches")
    b.add_argument("tokens")
    b.add_argument("out")
    b.add_argument("--batches", type=int, required=True)
    b.add_argument("--batch", type=int, required=True)
    b.add_argument("--seq-len", type=int, required=True)
    args = parser.parse_args()
    if args.command == "tokens":
        gen = torch.Generator().manual_seed(args.seed)
        tokens = torch.randint(0, args.vocab, (args.count,), generator=gen)
        with open(args.out, "wb") as f:
            f.write(tokens.to(torch.int32).numpy().astype("<u2").tobytes())
        return 0
    with open(args.tokens, "rb") as f:
        raw = f.read()
    tokens = torch.tensor(list(memoryview(raw).cast("H")), dtype=torch.int64)
    length = args.seq_len
    count = (len(tokens) - 1) // length
    idx = torch.empty(args.batches, args.batch, length, dtype=torch.int64)
    targets = torch.empty_like(idx)
    for k in range(args.batches):
        for j in range(args.batch):
            start = ((k * args.batch + j) % count) * length
            idx[k, j] = tokens[start:start + length]
            targets[k, j] = tokens[start + 1:start + length + 1]
    merak_safetensors.save({"idx": idx, "targets": targets}, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
