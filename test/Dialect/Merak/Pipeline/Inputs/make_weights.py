"""Writes random weights for the parameters of an MLIR test model.

Usage: python3 make_weights.py MODEL.mlir OUT.safetensors [--seed S]
Every argument `%name: tensor<AxBxf32> {merak.param = "name"}` of the
model's @forward gets a normal(0, 0.5) tensor of its shape.
"""
import argparse
import os
import re
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "..",
                                "..", "..", "python"))
import merak_safetensors  # noqa: E402

PARAM = re.compile(r'tensor<([0-9x]+)xf32>\s*\{merak\.param = "([^"]+)"\}')


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("model")
    parser.add_argument("out")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    torch.manual_seed(args.seed)
    with open(args.model) as f:
        text = f.read()
    tensors = {}
    for shape, name in PARAM.findall(text):
        dims = [int(d) for d in shape.split("x")]
        tensors[name] = torch.randn(dims) * 0.5
    merak_safetensors.save(tensors, args.out)


if __name__ == "__main__":
    main()
