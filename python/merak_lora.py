#!/usr/bin/env python3
"""LoRA adapters of a merak-exec checkpoint (a run compiled with
--merak-lora): export them in PEFT's layout, or merge them into the base
weights.

Usage:
  merak_lora.py export CHECKPOINT OUT_DIR --alpha A [--dropout D]
  merak_lora.py merge WEIGHTS ADAPTER_DIR OUT.safetensors

CHECKPOINT is what `merak-exec --save` wrote: one safetensors file, or the
`.index.json` of a run of several ranks (or the path given to --save, when
the index is beside it). `export` writes OUT_DIR/adapter_model.safetensors
(each `NAME.lora_A.weight` / `NAME.lora_B.weight` as
`base_model.model.NAME.lora_A.weight`, PEFT's names) and
OUT_DIR/adapter_config.json (`r` from the adapters' shape, `lora_alpha`
from --alpha, which must be the --merak-lora alpha the run was compiled
with). `merge` adds `B @ A * lora_alpha / r` to each adapted `NAME.weight`
of WEIGHTS (a checkpoint as above, a safetensors file, or a TorchScript
archive) and writes the merged weights alone: no adapters, no optimizer
state, loadable by `merak-exec --init` and by PyTorch's `load_state_dict`.
"""

import argparse
import json
import os
import sys

import torch

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import merak_safetensors  # noqa: E402

PEFT_PREFIX = "base_model.model."


def fail(message):
    sys.exit("merak_lora.py: error: " + message)


def load_state(path):
    """Every tensor of a checkpoint, a safetensors file or a TorchScript
    archive, whole, by name."""
    if not os.path.exists(path) and os.path.exists(path + ".index.json"):
        path += ".index.json"
    if not os.path.exists(path):
        fail("cannot open " + path)
    if path.endswith(".index.json"):
        return load_sharded(path)
    with open(path, "rb") as f:
        magic = f.read(4)
    if magic == b"PK\x03\x04":
        module = torch.jit.load(path)
        return {k: v.detach().clone() for k, v in module.state_dict().items()}
    tensors, _ = merak_safetensors.load(path)
    return tensors


def load_sharded(index_path):
    """The global tensors of a sharded checkpoint: each from its blocks."""
    with open(index_path) as f:
        index = json.load(f)
    if index.get("format") != "merak-sharded-checkpoint-v1":
        fail("%s is not a merak sharded checkpoint index" % index_path)
    here = os.path.dirname(os.path.abspath(index_path))
    files = {}
    out = {}
    for name, entry in index["tensors"].items():
        tensor = None
        for block in entry["blocks"]:
            if block["file"] not in files:
                files[block["file"]] = merak_safetensors.load(
                    os.path.join(here, block["file"]))[0]
            part = files[block["file"]][name]
            if tensor is None:
                tensor = torch.zeros(entry["shape"], dtype=part.dtype)
            box = tuple(slice(o, o + s) for o, s in zip(block["offsets"],
                                                        block["shape"]))
            tensor[box] = part.reshape(block["shape"])
        # A parameter the program views by section (a fused projection and
        # its adapter) is held in the shape PyTorch gives it.
        if "stored_shape" in entry:
            tensor = tensor.reshape(entry["stored_shape"])
        out[name] = tensor
    return out


def adapters_of(state, source):
    """{NAME: (A, B)} of the adapters in ``state``."""
    pairs = {}
    for key, value in state.items():
        if key.endswith(".lora_A.weight"):
            name = key[:-len(".lora_A.weight")]
            other = name + ".lora_B.weight"
            if other not in state:
                fail("%s has %s but no %s" % (source, key, other))
            pairs[name] = (value, state[other])
    if not pairs:
        fail("%s holds no LoRA adapters (*.lora_A.weight): was the step "
             "compiled with --merak-lora?" % source)
    return pairs


def export(args):
    state = load_state(args.checkpoint)
    pairs = adapters_of(state, args.checkpoint)
    ranks = {a.shape[0] for a, _ in pairs.values()}
    if len(ranks) != 1:
        fail("the adapters have several ranks: %s" % sorted(ranks))
    if not args.alpha > 0:
        fail("--alpha must be above 0")
    os.makedirs(args.out_dir, exist_ok=True)
    tensors = {}
    for name, (a, b) in sorted(pairs.items()):
        tensors[PEFT_PREFIX + name + ".lora_A.weight"] = a.float().contiguous()
        tensors[PEFT_PREFIX + name + ".lora_B.weight"] = b.float().contiguous()
    merak_safetensors.save(tensors, os.path.join(args.out_dir,
                                                 "adapter_model.safetensors"))
    config = {
        "peft_type": "LORA",
        "r": ranks.pop(),
        "lora_alpha": args.alpha,
        "lora_dropout": args.dropout,
        "target_modules": sorted({n.rsplit(".", 1)[-1] for n in pairs}),
        "bias": "none",
        "fan_in_fan_out": False,
        "inference_mode": True,
        "task_type": None,
    }
    with open(os.path.join(args.out_dir, "adapter_config.json"), "w") as f:
        json.dump(config, f, indent=2, sort_keys=True)
        f.write("\n")
    print("merak_lora.py: %d adapters (r=%d, lora_alpha=%g) written to %s"
          % (len(pairs), config["r"], args.alpha, args.out_dir))


def merge(args):
    with open(os.path.join(args.adapter_dir, "adapter_config.json")) as f:
        config = json.load(f)
    if config.get("peft_type") != "LORA":
        fail("%s is not a LoRA adapter" % args.adapter_dir)
    scale = float(config["lora_alpha"]) / float(config["r"])
    adapters, _ = merak_safetensors.load(
        os.path.join(args.adapter_dir, "adapter_model.safetensors"))
    state = load_state(args.weights)
    # The base weights alone: no adapters, no optimizer state.
    merged = {k: v for k, v in state.items()
              if ".lora_" not in k and "/" not in k}
    count = 0
    for key, a in adapters.items():
        if not key.endswith(".lora_A.weight"):
            continue
        name = key[len(PEFT_PREFIX):-len(".lora_A.weight")]
        b = adapters[PEFT_PREFIX + name + ".lora_B.weight"]
        weight = name + ".weight"
        if weight not in merged:
            fail("%s has no %s to merge %s into" % (args.weights, weight,
                                                     key))
        base = merged[weight]
        merged[weight] = (base.float() + (b.float() @ a.float()) * scale).to(
            base.dtype)
        count += 1
    merak_safetensors.save(merged, args.out)
    print("merak_lora.py: merged %d adapters into %s (%d tensors)"
          % (count, args.out, len(merged)))


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="command", required=True)
    e = sub.add_parser("export", help="the adapters in PEFT's layout")
    e.add_argument("checkpoint")
    e.add_argument("out_dir")
    e.add_argument("--alpha", type=float, required=True,
                   help="the --merak-lora alpha the run was compiled with")
    e.add_argument("--dropout", type=float, default=0.0)
    m = sub.add_parser("merge", help="the base weights with the adapters "
                       "merged in")
    m.add_argument("weights")
    m.add_argument("adapter_dir")
    m.add_argument("out")
    args = p.parse_args()
    if args.command == "export":
        export(args)
    else:
        merge(args)


if __name__ == "__main__":
    main()
