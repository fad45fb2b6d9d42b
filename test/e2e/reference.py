"""Trains a traced fixture with PyTorch and logs the loss of every step.

Usage:
    python3 reference.py --model DIR/NAME.pt --data batches.safetensors
                         --steps N --optimizer sgd|adamw --lr LR
                         [--momentum M] [--dampening D] [--nesterov]
                         [--weight-decay WD] [--betas B1 B2] [--eps E]
                         [--threads T] [--dtype float32|float64]
                         [--device cpu|cuda [--no-cudnn]] [--fixture NAME]
                         [--lora ADAPTERS.safetensors --lora-alpha A]
                         [--eval-data val.safetensors --eval-batches M
                          [--eval-every N] --out-eval-jsonl val.jsonl]
                         --out-jsonl losses.jsonl

The TorchScript archive holds the initial weights, so every run starts from
the same point. With --fixture NAME the model that trains is the fixture's
eager module (test/fixtures/trace_all.py), built in Python and given the
archive's weights: a trace fixes what it saw when traced, the device of a
tensor it created (GPT-2's positions) and cuDNN's TF32 setting for its
convolutions, so on a GPU the eager module is PyTorch as a user runs it. Step i feeds slice i-1 of each input to the forward, logs
the loss of that forward ({"step": i, "loss": ...}, the loss before the
update), then runs backward and one optimizer step. The losses are the
reference that merak-exec's log is compared against.

With --lora (and --fixture), each `NAME.lora_A.weight` / `NAME.lora_B.weight`
pair of the file adapts the nn.Linear `NAME` as PEFT's LoRA does: its
output plus `B(A(x)) * alpha / rank`; every other parameter is frozen and
only the adapters train.

With --eval-data, after every N-th step and after the last, the mean loss
of batches 1..M of the validation file (slice k-1 for batch k, in
micro-batches as the training steps) is logged as {"step": i, "val_loss":
x}, under no_grad. A traced module keeps the mode it was traced in, so this
matches merak-exec's evaluations for models without dropout or batch norm.
"""

import argparse
import json
import math
import os
import sys
import time

import torch

sys.dont_write_bytecode = True

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "python"))

import merak_safetensors  # noqa: E402

DTYPES = {"float32": torch.float32, "float64": torch.float64}


def pick_loss(outputs):
    """The only rank-0 floating-point tensor among the outputs."""
    if isinstance(outputs, torch.Tensor):
        outputs = (outputs,)
    found = [o for o in outputs if isinstance(o, torch.Tensor)
             and o.dim() == 0 and o.is_floating_point()]
    if len(found) != 1:
        raise SystemExit("error: expected exactly one scalar floating-point "
                         "output (the loss), found %d among %d outputs"
                         % (len(found), len(outputs)))
    return found[0]


def warn_on_casts(outputs, dtype):
    """Says when the traced graph itself casts back to another float type."""
    if isinstance(outputs, torch.Tensor):
        outputs = (outputs,)

    def name(t):
        return str(t).replace("torch.", "")
    others = sorted({name(o.dtype) for o in outputs
                     if isinstance(o, torch.Tensor) and o.is_floating_point()
                     and o.dtype != dtype})
    if others:
        # e.g. `.float()` in the model, recorded by the trace as a cast.
        print("warning: the model returns %s outputs under --dtype %s: the "
              "trace casts explicitly, so part of it does not run in %s"
              % (", ".join(others), name(dtype), name(dtype)),
              file=sys.stderr)


def eager_fixture(name, traced, device):
    """The fixture ``name``'s eager module in training mode, with every
    parameter and buffer of the traced archive ``traced``."""
    sys.path.insert(0, os.path.join(HERE, "..", "fixtures"))
    import trace_all
    fixtures = {f.name: f for f in trace_all.FIXTURES}
    if name not in fixtures:
        raise SystemExit("error: --fixture: unknown fixture %r; there are: %s"
                         % (name, ", ".join(sorted(fixtures))))
    module = fixtures[name].build()
    # Parameters and buffers by name, non-persistent buffers too (LLaMA's
    # rotary frequencies), which a trace keeps among its attributes.
    def state(m):
        tensors = dict(m.named_parameters())
        tensors.update(dict(m.named_buffers()))
        return tensors
    own, theirs = state(module), state(traced)
    missing = sorted(set(own) - set(theirs))
    if missing:
        raise SystemExit("error: --fixture %s: the archive has no %s"
                         % (name, ", ".join(missing)))
    with torch.no_grad():
        for key, tensor in own.items():
            tensor.copy_(theirs[key])
    return module.to(device).train()


class _ContiguousGrad(torch.autograd.Function):
    """Identity whose backward hands on a contiguous gradient."""

    @staticmethod
    def forward(ctx, x):
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        return grad.contiguous()


# PyTorch 1.13's CPU backwards of two ops misread a gradient that is not
# contiguous (measured on this machine's Debian build): float32 `gelu`
# (approximate="none") gives a zero gradient when the incoming one is a
# transposed broadcast (`gelu(x).transpose(1, 2).mean(1)`), and
# `group_norm` a wrong one when it has channels-last strides (float64
# too). The eager reference (--eager) hands both a contiguous gradient; the
# forward is unchanged. merak-exec computes these gradients right either
# way (test/e2e/audio/speech-models.test).
_gelu = torch.nn.functional.gelu


def _gelu_contiguous_grad(x, approximate="none"):
    return _ContiguousGrad.apply(_gelu(x, approximate=approximate))


def _group_norm_forward(self, x):
    y = torch.nn.functional.group_norm(x, self.num_groups, self.weight,
                                       self.bias, self.eps)
    return _ContiguousGrad.apply(y)


def eager_module(spec, traced, device):
    """``FILE.py:EXPRESSION``: the module EXPRESSION builds with FILE's
    names, in training mode, with every parameter and buffer of the traced
    archive ``traced`` (a model outside the fixtures, run eagerly)."""
    path, _, expression = spec.partition(":")
    if not expression:
        raise SystemExit("error: --eager takes FILE.py:EXPRESSION, not %r"
                         % spec)
    torch.nn.GroupNorm.forward = _group_norm_forward
    torch.nn.functional.gelu = _gelu_contiguous_grad
    sys.path.insert(0, os.path.dirname(os.path.abspath(path)))
    scope = {"__name__": "eager_module", "__file__": os.path.abspath(path)}
    with open(path) as f:
        exec(compile(f.read(), path, "exec"), scope)
    module = eval(expression, scope)
    own = dict(module.named_parameters())
    own.update(dict(module.named_buffers()))
    theirs = dict(traced.named_parameters())
    theirs.update(dict(traced.named_buffers()))
    missing = sorted(set(own) - set(theirs))
    if missing:
        raise SystemExit("error: --eager %s: the archive has no %s"
                         % (spec, ", ".join(missing)))
    with torch.no_grad():
        for key, tensor in own.items():
            tensor.copy_(theirs[key])
    return module.to(device).train()


class LoraLinear(torch.nn.Module):
    """An nn.Linear plus a low-rank update, ``B(A(x)) * scale``."""

    def __init__(self, base, a, b, scale):
        super().__init__()
        self.base = base
        self.lora_A = torch.nn.Parameter(a.clone())
        self.lora_B = torch.nn.Parameter(b.clone())
        self.scale = scale

    def forward(self, x):
        update = torch.nn.functional.linear(
            torch.nn.functional.linear(x, self.lora_A), self.lora_B)
        return self.base(x) + update * self.scale


def add_lora(module, path, alpha, device):
    """Adapts the linears named in ``path``'s LoRA weights; returns the
    adapters' parameters (the only ones that train)."""
    tensors, _ = merak_safetensors.load(path)
    for p in module.parameters():
        p.requires_grad_(False)
    trainable = []
    for key in sorted(tensors):
        if not key.endswith(".lora_A.weight"):
            continue
        name = key[:-len(".lora_A.weight")]
        a, b = tensors[key], tensors[name + ".lora_B.weight"]
        parent, _, attr = name.rpartition(".")
        owner = module.get_submodule(parent) if parent else module
        base = getattr(owner, attr)
        if not isinstance(base, torch.nn.Linear):
            raise SystemExit("error: --lora: %s is not an nn.Linear" % name)
        wrapped = LoraLinear(base, a.to(device), b.to(device),
                             alpha / a.shape[0])
        setattr(owner, attr, wrapped)
        trainable += [wrapped.lora_A, wrapped.lora_B]
    if not trainable:
        raise SystemExit("error: --lora: %s holds no *.lora_A.weight" % path)
    return trainable


def forward_names(module):
    """Names of the forward arguments, in order, without ``self``."""
    if not hasattr(module, "forward") or not hasattr(module.forward,
                                                     "schema"):
        import inspect
        return list(inspect.signature(module.forward).parameters)
    return [a.name for a in module.forward.schema.arguments][1:]


def make_optimizer(args, params):
    if args.optimizer == "sgd":
        return torch.optim.SGD(
            params, lr=args.lr, momentum=args.momentum,
            dampening=args.dampening, nesterov=args.nesterov,
            weight_decay=args.weight_decay, foreach=False)
    return torch.optim.AdamW(
        params, lr=args.lr, betas=tuple(args.betas), eps=args.eps,
        weight_decay=args.weight_decay, foreach=False)


def run(args):
    torch.set_num_threads(args.threads)
    dtype = DTYPES[args.dtype]
    device = torch.device(args.device)
    if device.type == "cuda":
        # Full float32 matrix products and convolutions (no TF32), and
        # deterministic kernels, as merak-exec's CUDA backend runs them.
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
        torch.backends.cudnn.deterministic = True
        torch.backends.cudnn.benchmark = False
        # Without cuDNN, convolutions and batch norm run PyTorch's own
        # kernels (convolutions as im2col and cuBLAS GEMMs): no Winograd or
        # FFT algorithm, whose float32 results lose digits.
        torch.backends.cudnn.enabled = not args.no_cudnn
    module = torch.jit.load(args.model, map_location=device)
    if args.fixture:
        module = eager_fixture(args.fixture, module, device)
    elif args.eager:
        module = eager_module(args.eager, module, device)
    if dtype != torch.float32:
        # Converts floating parameters and buffers only; masks and counters
        # keep their types.
        module.to(dtype)
    if args.lora:
        params = add_lora(module, args.lora, args.lora_alpha, device)
    else:
        params = list(module.parameters())
    optimizer = make_optimizer(args, params)

    data, _ = merak_safetensors.load(args.data)
    names = forward_names(module)
    missing = [n for n in names if n not in data]
    if missing:
        raise SystemExit("error: %s has no tensor for input(s) %s (it has %s)"
                         % (args.data, ", ".join(missing),
                            ", ".join(sorted(data))))
    available = min(data[n].shape[0] for n in names)
    if available < args.steps:
        raise SystemExit("error: %s holds %d steps, %d requested"
                         % (args.data, available, args.steps))

    eval_data = None
    if args.eval_data:
        eval_data, _ = merak_safetensors.load(args.eval_data)
        held = min(eval_data[n].shape[0] for n in names)
        if held < args.eval_batches:
            raise SystemExit("error: %s holds %d batches, %d requested"
                             % (args.eval_data, held, args.eval_batches))

    def micro_batches(source, index):
        inputs = []
        for name in names:
            x = source[name][index].to(device)
            inputs.append(x.to(dtype) if x.is_floating_point() else x)
        # Micro-batches: the step's loss is their mean, and so is the
        # gradient (each micro-batch's loss scaled by 1/M).
        if any(len(x) % args.microbatches for x in inputs):
            raise SystemExit("error: --microbatches %d does not divide the "
                             "batch" % args.microbatches)
        return [list(chunks) for chunks in zip(
            *(x.chunk(args.microbatches) for x in inputs))]

    def evaluate():
        total = 0.0
        with torch.no_grad():
            for k in range(args.eval_batches):
                parts = micro_batches(eval_data, k)
                total += sum(pick_loss(module(*part)).item()
                             for part in parts) / len(parts)
        return total / args.eval_batches

    losses, evals = [], []
    never_grad = set(id(p) for p in params)
    for step in range(args.steps):
        parts = micro_batches(data, step)
        total = 0.0
        for part in parts:
            if args.autocast:
                with torch.autocast(device.type, dtype=torch.bfloat16):
                    outputs = module(*part)
            else:
                outputs = module(*part)
            loss = pick_loss(outputs)
            if step == 0 and not args.autocast:
                warn_on_casts(outputs, dtype)
            (loss / args.microbatches).backward()
            total += loss.item()
        loss = torch.tensor(total / args.microbatches)
        never_grad -= set(id(p) for p in params if p.grad is not None)
        optimizer.step()
        # set_to_none: a parameter without a gradient is skipped by the
        # optimizer (no weight decay, no moments), the same on every step.
        optimizer.zero_grad(set_to_none=True)
        losses.append(loss.item())
        done = step + 1
        if eval_data is not None and (
                (args.eval_every and done % args.eval_every == 0)
                or done == args.steps):
            evals.append({"step": done, "val_loss": evaluate()})
    if never_grad:
        unused = [n for n, p in module.named_parameters()
                  if id(p) in never_grad]
        print("note: %d parameter(s) never got a gradient and were not "
              "updated: %s" % (len(unused), ", ".join(unused)),
              file=sys.stderr)
    return losses, evals


def write_jsonl(path, losses):
    # null for a non-finite loss, as merak-exec writes it: NaN is not JSON.
    text = "".join(json.dumps({"step": i + 1, "loss": loss
                               if math.isfinite(loss) else None}) + "\n"
                   for i, loss in enumerate(losses))
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, path)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True, help="traced .pt archive")
    parser.add_argument("--data", required=True, help="batches .safetensors")
    parser.add_argument("--steps", type=int, required=True)
    parser.add_argument("--device", default="cpu",
                        help="where PyTorch trains: cpu (default) or cuda")
    parser.add_argument("--no-cudnn", action="store_true",
                        help="--device cuda: PyTorch's own kernels in place "
                        "of cuDNN's (torch.backends.cudnn.enabled = False)")
    parser.add_argument("--fixture", metavar="NAME",
                        help="train the fixture's eager module with the "
                        "archive's weights instead of the trace")
    parser.add_argument("--eager", metavar="FILE.py:EXPRESSION",
                        help="train the module EXPRESSION builds (with "
                        "FILE's names) eagerly, with the archive's weights")
    parser.add_argument("--optimizer", choices=["sgd", "adamw"],
                        required=True)
    parser.add_argument("--lr", type=float, required=True)
    parser.add_argument("--momentum", type=float, default=0.0,
                        help="SGD (default 0)")
    parser.add_argument("--dampening", type=float, default=0.0,
                        help="SGD (default 0)")
    parser.add_argument("--nesterov", action="store_true", help="SGD")
    parser.add_argument("--weight-decay", type=float, default=None,
                        help="default: 0 for sgd, 0.01 for adamw "
                        "(PyTorch's defaults)")
    parser.add_argument("--betas", type=float, nargs=2, default=[0.9, 0.999],
                        metavar=("B1", "B2"), help="AdamW (default 0.9 0.999)")
    parser.add_argument("--eps", type=float, default=1e-8,
                        help="AdamW (default 1e-8)")
    parser.add_argument("--threads", type=int, default=1,
                        help="torch.set_num_threads (default 1)")
    parser.add_argument("--dtype", choices=sorted(DTYPES), default="float32",
                        help="run the model and optimizer in this type")
    parser.add_argument("--autocast", choices=["bfloat16"], default=None,
                        help="run the forward under torch.autocast on the "
                             "CPU in this type (float32 weights)")
    parser.add_argument("--lora", metavar="ADAPTERS",
                        help="safetensors of NAME.lora_A.weight / "
                        "NAME.lora_B.weight pairs: train those adapters on "
                        "the frozen model (needs --fixture)")
    parser.add_argument("--lora-alpha", type=float, default=8.0,
                        help="the adapters' scale is alpha / rank")
    parser.add_argument("--microbatches", type=int, default=1, metavar="M",
                        help="split each step's batch into M micro-batches "
                        "and accumulate their gradients (default 1)")
    parser.add_argument("--eval-data", help="validation batches .safetensors")
    parser.add_argument("--eval-every", type=int, default=0, metavar="N")
    parser.add_argument("--eval-batches", type=int, default=8, metavar="M")
    parser.add_argument("--out-eval-jsonl")
    parser.add_argument("--out-jsonl", required=True)
    args = parser.parse_args(argv)
    if args.eval_data and not args.out_eval_jsonl:
        parser.error("--eval-data needs --out-eval-jsonl")
    if args.weight_decay is None:
        args.weight_decay = 0.01 if args.optimizer == "adamw" else 0.0
    if args.steps < 1:
        parser.error("--steps must be at least 1")
    if args.lora and not args.fixture:
        parser.error("--lora needs --fixture (the eager module's linears)")
    if args.microbatches < 1:
        parser.error("--microbatches must be at least 1")
    if args.nesterov and (args.momentum <= 0 or args.dampening != 0):
        parser.error("--nesterov needs --momentum > 0 and --dampening 0")

    start = time.perf_counter()
    losses, evals = run(args)
    elapsed = time.perf_counter() - start
    write_jsonl(args.out_jsonl, losses)
    if args.out_eval_jsonl:
        with open(args.out_eval_jsonl, "w") as f:
            f.write("".join(json.dumps(e) + "\n" for e in evals))
    print("%s: %d steps, loss %.6g -> %.6g, %.2f s"
          % (args.out_jsonl, len(losses), losses[0], losses[-1], elapsed),
          file=sys.stderr)
    bad = [i + 1 for i, loss in enumerate(losses) if not math.isfinite(loss)]
    if bad:
        print("error: loss is not finite at step(s) %s"
              % ", ".join(map(str, bad)), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
