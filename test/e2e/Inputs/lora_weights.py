"""Writes a model's weights with LoRA adapters for the named linears: the
traced archive's parameters and buffers, plus NAME.lora_A.weight ([rank,
in]) and NAME.lora_B.weight ([out, rank]) for every weight NAME.weight whose
dotted name contains a target, drawn from a seeded normal generator (B not
zero, so that the adapters change the model from the first step). Also
writes the adapters alone (--adapters), which reference.py --lora reads.

Usage: lora_weights.py MODEL.pt --targets a,b --rank R --out W.safetensors
                       --adapters A.safetensors [--seed S]
"""

import argparse
import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "..", "python"))

import merak_safetensors  # noqa: E402


def matches(parts, want):
    """Whether the dotted components `want` appear together in `parts`
    (as --merak-lora matches a target to a weight's name)."""
    return any(parts[i:i + len(want)] == want
               for i in range(len(parts) - len(want) + 1))


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("model")
    p.add_argument("--targets", required=True)
    p.add_argument("--rank", type=int, required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--adapters", required=True)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    module = torch.jit.load(args.model)
    weights = {k: v.detach().clone() for k, v in module.state_dict().items()}
    targets = args.targets.split(",")
    generator = torch.Generator().manual_seed(args.seed)
    adapters = {}
    for name in sorted(weights):
        parts = name.split(".")
        if parts[-1] != "weight" or weights[name].dim() != 2:
            continue
        if not any(matches(parts, t.split(".")) for t in targets):
            continue
        out, inp = weights[name].shape
        prefix = name[:-len(".weight")]
        adapters[prefix + ".lora_A.weight"] = torch.randn(
            args.rank, inp, generator=generator) / inp ** 0.5
        adapters[prefix + ".lora_B.weight"] = torch.randn(
            out, args.rank, generator=generator) * 0.1
    if not adapters:
        sys.exit("lora_weights.py: no weight matches %s" % args.targets)
    weights.update(adapters)
    merak_safetensors.save(weights, args.out)
    merak_safetensors.save(adapters, args.adapters)
    print("lora_weights.py: %d adapters for %d linears"
          % (len(adapters), len(adapters) // 2))


if __name__ == "__main__":
    main()
