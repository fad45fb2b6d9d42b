"""Checks a LoRA run's checkpoint against the weights it started from:
every base tensor unchanged, every adapter trained, and optimizer state for
the adapters alone.

Usage: check_frozen.py INIT.safetensors CHECKPOINT.safetensors
"""

import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "..", "python"))

import merak_safetensors  # noqa: E402


def main():
    init, _ = merak_safetensors.load(sys.argv[1])
    ckpt, _ = merak_safetensors.load(sys.argv[2])
    adapters = [k for k in init if ".lora_" in k]
    base = [k for k in init if ".lora_" not in k and k in ckpt]
    same = [k for k in base if torch.equal(init[k], ckpt[k])]
    trained = [k for k in adapters if not torch.equal(init[k], ckpt[k])]
    state = [k for k in ckpt if k not in init]
    print("base %d/%d unchanged, adapters %d/%d trained, optimizer state "
          "for %d tensors, %s"
          % (len(same), len(base), len(trained), len(adapters), len(state),
             "all of adapters" if all(".lora_" in k for k in state)
             else "some of frozen weights"))


if __name__ == "__main__":
    main()
