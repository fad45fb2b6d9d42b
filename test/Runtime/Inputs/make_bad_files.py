"""Writes the malformed checkpoints and batch files of errors.test.

Usage: make_bad_files.py OUT_DIR (next to make_linreg.py's files)
"""

import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "..", "python"))
import merak_safetensors  # noqa: E402


def main():
    out = sys.argv[1]
    save = lambda name, tensors: merak_safetensors.save(
        tensors, os.path.join(out, name))
    save("no_bias.safetensors", {"fc.weight": torch.zeros(1, 4)})
    save("bad_weight.safetensors", {"fc.weight": torch.zeros(4, 1),
                                    "fc.bias": torch.zeros(1)})
    save("int_weight.safetensors", {"fc.weight": torch.zeros(1, 4,
                                                             dtype=torch.long),
                                    "fc.bias": torch.zeros(1)})
    save("no_y.safetensors", {"x": torch.zeros(4, 8, 4)})
    save("bad_y.safetensors", {"x": torch.zeros(4, 8, 4),
                               "y": torch.zeros(4, 8, 2)})
    save("f64_y.safetensors", {"x": torch.zeros(4, 8, 4),
                               "y": torch.zeros(4, 8, 1, dtype=torch.float64)})
    with open(os.path.join(out, "truncated.safetensors"), "wb") as f:
        f.write(b"\x40\x00\x00\x00\x00\x00\x00\x00{\"x\":")


if __name__ == "__main__":
    main()
