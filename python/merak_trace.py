"""Traces a PyTorch module to a TorchScript archive that Merak can import.

The archive carries an extra file, ``merak/inputs.json``, describing the
forward arguments in order, so the importer knows the names, shapes and
element types of the graph inputs without re-running Python::

    {"inputs": [{"name": "idx", "shape": [2, 16], "dtype": "i64"}, ...]}

Usage::

    import torch
    import merak_trace

    model = MyModel()
    model.train()  # the trace records whatever mode the module is in
    idx = torch.randint(0, 96, (2, 16))
    targets = torch.randint(0, 96, (2, 16))
    merak_trace.save(model, (idx, targets), "model.pt")

Then import ``model.pt`` with the Merak tools.

A machine that only trains (merak-exec built without LibTorch) reads the
initial weights as safetensors: ``save(..., weights="model.safetensors")``,
``save_weights(module_or_archive, "model.safetensors")``, or from a shell
``python3 merak_trace.py weights model.pt model.safetensors``.
"""

import contextlib
import inspect
import json

import torch

__all__ = ["INPUTS_FILE", "DTYPE_NAMES", "describe_inputs", "meta_device",
           "save", "save_weights"]

# Name of the extra file inside the archive, read by the importer.
INPUTS_FILE = "merak/inputs.json"

# Element type spellings; these follow MLIR's builtin type names.
DTYPE_NAMES = {
    torch.float16: "f16",
    torch.bfloat16: "bf16",
    torch.float32: "f32",
    torch.float64: "f64",
    torch.bool: "i1",
    torch.int32: "i32",
    torch.int64: "i64",
}


def _as_tuple(example_inputs):
    if isinstance(example_inputs, torch.Tensor):
        return (example_inputs,)
    return tuple(example_inputs)


def _forward_names(module, count):
    """Positional parameter names of ``module.forward``, or ``None``."""
    try:
        params = inspect.signature(module.forward).parameters.values()
    except (TypeError, ValueError):
        return None
    kinds = (inspect.Parameter.POSITIONAL_ONLY,
             inspect.Parameter.POSITIONAL_OR_KEYWORD)
    names = [p.name for p in params if p.kind in kinds]
    # A *args forward (or a signature shorter than the inputs) gives no
    # usable names; fall back to generated ones rather than guessing.
    if len(names) < count:
        return None
    return names[:count]


def describe_inputs(module, example_inputs, input_names=None):
    """Returns the ``{"inputs": [...]}`` description of the forward inputs."""
    inputs = _as_tuple(example_inputs)
    if input_names is None:
        input_names = _forward_names(module, len(inputs))
        if input_names is None:
            input_names = ["arg%d" % i for i in range(len(inputs))]
    input_names = list(input_names)
    if len(input_names) != len(inputs):
        raise ValueError("got %d input names for %d inputs"
                         % (len(input_names), len(inputs)))
    entries = []
    for name, value in zip(input_names, inputs):
        if not isinstance(value, torch.Tensor):
            raise TypeError("input %r is a %s; only tensors are supported"
                            % (name, type(value).__name__))
        if value.dtype not in DTYPE_NAMES:
            raise TypeError("input %r has unsupported dtype %s"
                            % (name, value.dtype))
        entries.append({"name": str(name),
                        "shape": [int(d) for d in value.shape],
                        "dtype": DTYPE_NAMES[value.dtype]})
    return {"inputs": entries}


# Tensor factories whose results meta_device() places on the meta device.
_FACTORIES = (torch.empty, torch.zeros, torch.ones, torch.full, torch.rand,
              torch.randn, torch.randint, torch.arange, torch.eye,
              torch.tensor, torch.empty_strided, torch.linspace)


@contextlib.contextmanager
def meta_device():
    """Builds modules with their parameters and buffers on PyTorch's meta
    device: shapes and types only, no memory and no initialisation, so a
    model of any size (GPT-3's 175 billion parameters) is built in seconds::

        with merak_trace.meta_device():
            model = GPT(config)
        merak_trace.save(model, (idx, targets), "gpt.pt", meta=True)

    The archive then holds no weights; Merak imports it, builds the training
    step and plans it (``--merak-parallelize="auto ..."``), and training
    reads its weights from elsewhere (``merak-exec --init``).
    """
    device_context = getattr(torch.device("meta"), "__enter__", None)
    if device_context is not None:
        # PyTorch 2: the device is a context manager itself.
        with torch.device("meta"):
            yield
        return
    from torch.overrides import TorchFunctionMode

    class _Meta(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            kwargs = dict(kwargs or {})
            if func in _FACTORIES:
                kwargs["device"] = "meta"
            return func(*args, **kwargs)

    with _Meta():
        yield


@contextlib.contextmanager
def _pre_hooks_in_forward(module):
    """``torch.jit.trace`` compiles a module's forward pre-hooks with
    TorchScript, which a hook object such as ``nn.utils.weight_norm``'s
    ``WeightNorm`` does not survive ("'WeightNorm' object has no attribute
    '__name__'"). Within this context each pre-hook that is not a plain
    function runs at the start of its module's forward instead, so the trace
    records what it computes (weight norm's ``g * v / ||v||`` from the
    ``_g`` and ``_v`` parameters, which stay the parameters) like any other
    op."""
    moved = []
    for sub in module.modules():
        hooks = sub._forward_pre_hooks
        objects = [(k, h) for k, h in hooks.items() if not inspect.isfunction(h)
                   and not inspect.ismethod(h)]
        if not objects:
            continue
        for key, _ in objects:
            del hooks[key]
        forward = sub.forward

        def hooked(*args, _sub=sub, _forward=forward, _objects=objects):
            for _, hook in _objects:
                result = hook(_sub, args)
                if result is not None:
                    args = result if isinstance(result, tuple) else (result,)
            return _forward(*args)
        sub.forward = hooked
        moved.append((sub, objects))
    try:
        yield
    finally:
        for sub, objects in moved:
            del sub.forward
            for key, hook in objects:
                sub._forward_pre_hooks[key] = hook


def save(module, example_inputs, path, input_names=None, check_trace=True,
         weights=None, meta=False):
    """Traces ``module`` on ``example_inputs`` and saves it to ``path``.

    ``example_inputs`` is a tensor or a tuple of tensors in forward-argument
    order. ``input_names`` defaults to the parameter names of
    ``module.forward``. The module is traced in its current train/eval mode.
    ``weights``, when given, is a path where the parameters and buffers are
    also written as safetensors (see ``save_weights``).
    ``meta=True`` traces a module built under ``meta_device()`` on inputs
    moved to the meta device: nothing is computed, the trace is not checked
    and no weights can be written.
    Returns the traced ``torch.jit.ScriptModule``.
    """
    inputs = _as_tuple(example_inputs)
    if meta:
        if weights is not None:
            raise ValueError("a module on the meta device has no weights to "
                             "save")
        inputs = tuple(t.to("meta") for t in inputs)
        check_trace = False
    description = describe_inputs(module, inputs, input_names)
    with _pre_hooks_in_forward(module):
        traced = torch.jit.trace(module, inputs, check_trace=check_trace)
    torch.jit.save(traced, str(path),
                   _extra_files={INPUTS_FILE: json.dumps(description)})
    if weights is not None:
        save_weights(traced, weights)
    return traced


def state_tensors(module):
    """Every parameter and buffer of ``module`` by qualified name, a tensor
    tied under several names under each of them, as merak-exec reads them
    from a TorchScript archive."""
    tensors = {}
    for prefix, sub in module.named_modules():
        for kind in ("_parameters", "_buffers"):
            for name, t in getattr(sub, kind).items():
                if t is not None:
                    key = prefix + "." + name if prefix else name
                    tensors[key] = t.detach().contiguous()
    return tensors


def save_weights(module, path):
    """Writes the parameters and buffers of ``module`` (a module, or the
    path of a TorchScript archive) to ``path`` as safetensors, the initial
    weights ``merak-exec --init`` reads on any build."""
    import merak_safetensors
    if isinstance(module, (str, bytes)) or hasattr(module, "__fspath__"):
        module = torch.jit.load(str(module), map_location="cpu")
    merak_safetensors.save(state_tensors(module), str(path))


if __name__ == "__main__":
    import sys
    if len(sys.argv) != 4 or sys.argv[1] != "weights":
        sys.exit("usage: python3 merak_trace.py weights MODEL.pt "
                 "OUT.safetensors")
    save_weights(sys.argv[2], sys.argv[3])
