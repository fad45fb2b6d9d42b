"""Writes N steps of training inputs for a fixture to a safetensors file.

Usage:
    python3 make_batches.py --fixture NAME --fixtures-dir DIR --steps N
                            [--seed S] [--cycle K] --out batches.safetensors

Each forward input NAME.inputs.json lists becomes one tensor of shape
[N] + input_shape; slice i is the batch of step i+1. Step i's inputs come
from the fixture's own generator in trace_all.py, seeded from (S, i), so
token ranges, -100 labels and attention masks match the traced example and
any step can be regenerated on its own. With fresh random tokens every step
a language model has nothing to learn and its loss stays near log(vocab);
--cycle 1 repeats one batch, which the model memorises.
"""

import argparse
import json
import os
import sys

import torch

sys.dont_write_bytecode = True

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "python"))
sys.path.insert(0, os.path.join(HERE, "..", "fixtures"))

import merak_safetensors  # noqa: E402
import merak_trace  # noqa: E402
import trace_all  # noqa: E402

# Format tag in the metadata, so readers can tell batch files from others.
FORMAT = "merak-batches-v1"


def step_seed(seed, step):
    """Generator seed of one step, mixing the run seed and the step.

    PyTorch's CPU generator keeps only the low 32 bits of a seed, so the two
    are combined by a splitmix64 round and folded into 32 bits.
    """
    if not 0 <= seed < 2 ** 31 or not 0 <= step < 2 ** 32:
        raise ValueError("seed must be in [0, 2^31) and step in [0, 2^32)")
    mask = (1 << 64) - 1
    z = ((seed << 32) | step) + 0x9E3779B97F4A7C15 & mask
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & mask
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & mask
    z ^= z >> 31
    return (z ^ (z >> 32)) & 0xFFFFFFFF


def read_inputs(fixtures_dir, name):
    path = os.path.join(fixtures_dir, name + ".inputs.json")
    try:
        with open(path) as f:
            return json.load(f)["inputs"]
    except OSError as e:
        raise SystemExit("error: %s: %s (trace the fixtures with "
                         "test/fixtures/trace_all.py --out DIR)"
                         % (path, e.strerror))


def make_batches(fixture_name, fixtures_dir, steps, seed, cycle=0,
                 microbatches=1):
    """Returns ({input name: [steps] + shape tensor}, input names in order).

    With ``cycle`` K > 0, step i reuses the batch of step i % K. With
    ``microbatches`` M > 1 a step holds M of the traced batches one after
    another along the first dimension (a pipeline's micro-batches); batch k
    of step i is the one numbered i * M + k.
    """
    fixtures = {f.name: f for f in trace_all.FIXTURES}
    if steps < 1:
        raise ValueError("steps must be at least 1")
    if fixture_name not in fixtures:
        raise SystemExit("error: unknown fixture %r; trace_all.py has: %s"
                         % (fixture_name, ", ".join(sorted(fixtures))))
    fixture = fixtures[fixture_name]
    described = read_inputs(fixtures_dir, fixture_name)
    # The batch size the archive was traced with (trace_all.py --batch):
    # every fixture's first input leads with it.
    trace_all.BATCH = described[0]["shape"][0]
    per_input = [[] for _ in described]
    if microbatches < 1:
        raise ValueError("microbatches must be at least 1")
    for index in range(steps * microbatches):
        step, part = divmod(index, microbatches)
        number = (step % cycle if cycle else step) * microbatches + part
        gen = torch.Generator().manual_seed(step_seed(seed, number))
        values = fixture.make_inputs(gen)
        if len(values) != len(described):
            raise SystemExit("error: %s makes %d inputs but %s.inputs.json "
                             "lists %d; retrace the fixtures"
                             % (fixture_name, len(values), fixture_name,
                                len(described)))
        for slot, value, entry in zip(per_input, values, described):
            # The archive was traced for these shapes; a mismatch means the
            # fixtures directory is stale.
            dtype = merak_trace.DTYPE_NAMES.get(value.dtype)
            if list(value.shape) != entry["shape"] or dtype != entry["dtype"]:
                raise SystemExit(
                    "error: input %s is %s %s, but %s.inputs.json says %s %s"
                    % (entry["name"], list(value.shape), dtype, fixture_name,
                       entry["shape"], entry["dtype"]))
            slot.append(value)
    names = [entry["name"] for entry in described]
    tensors = {}
    for name, slot in zip(names, per_input):
        steps_of = [torch.cat(slot[i:i + microbatches])
                    for i in range(0, len(slot), microbatches)]
        tensors[name] = torch.stack(steps_of)
    return tensors, names


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fixture", required=True, help="fixture name")
    parser.add_argument("--fixtures-dir", required=True,
                        help="directory trace_all.py wrote")
    parser.add_argument("--steps", type=int, required=True)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--cycle", type=int, default=0, metavar="K",
                        help="repeat K distinct batches (1: the same batch "
                        "every step, which the model can memorise, so the "
                        "loss falls); default: every step distinct")
    parser.add_argument("--microbatches", type=int, default=1, metavar="M",
                        help="M traced batches per step, concatenated along "
                        "the first dimension (pipeline micro-batches)")
    parser.add_argument("--out", required=True, help="output .safetensors")
    args = parser.parse_args(argv)
    if args.microbatches < 1:
        parser.error("--microbatches must be at least 1")
    if args.steps < 1:
        parser.error("--steps must be at least 1")
    if args.cycle < 0:
        parser.error("--cycle must not be negative")
    if not 0 <= args.seed < 2 ** 31:
        parser.error("--seed must be in [0, 2^31)")
    tensors, names = make_batches(args.fixture, args.fixtures_dir,
                                  args.steps, args.seed, args.cycle,
                                  args.microbatches)
    metadata = {"format": FORMAT, "fixture": args.fixture,
                "steps": str(args.steps), "seed": str(args.seed),
                "cycle": str(args.cycle),
                "microbatches": str(args.microbatches),
                # The file stores tensors by sorted name; this keeps the
                # forward order.
                "inputs": ",".join(names)}
    merak_safetensors.save(tensors, args.out, metadata)
    print("%s: %d steps of %s" % (args.out, args.steps, ", ".join(
        "%s %s %s" % (n, "x".join(map(str, tensors[n].shape)),
                      merak_trace.DTYPE_NAMES[tensors[n].dtype])
        for n in names)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
