"""Writes a two-layer MLP training step, unsharded or as one rank's SPMD
program on a dp x tp mesh, plus its initial weights and batches.

Usage:
    mlp.py module OUT.mlir [--dp D --tp T]   # no --dp/--tp: unsharded
    mlp.py data OUT_DIR [--steps N] [--hidden H]
                                              # model.pt, batches.safetensors

The model is out = relu(x W1^T) W2^T with a mean squared error and SGD with
momentum 0.9; global shapes x [8, 4], W1 [8, 4], W2 [2, 8], y [8, 2]. The
SPMD program is Megatron's column/row pair on tp with the batch on dp, and
reaches it through every collective merak-exec runs:

    x    [B/dp, D/tp]  --all_to_all(tp, split 0, concat 1)-->  [B/dp/tp, D]
         --all_gather(tp, dim 0)-->  [B/dp, D]
    pre = x W1_local^T (column parallel),  h = relu(pre)
    h W2_local^T (row parallel, partial over tp)
         --reduce_scatter(tp, dim 0)-->  out [B/dp/tp, O]
    loss = all_reduce(average over dp, tp) of the local mean
    backward: d out --all_gather(tp)-->, weight gradients --all_reduce(dp)-->

With dp or tp of 1 the collectives over that axis are identities.
"""

import argparse
import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "..", "..", "python"))
import merak_safetensors  # noqa: E402

B, D, H, O = 8, 4, 8, 2


class Model(torch.nn.Module):
    def __init__(self, hidden=H):
        super().__init__()
        self.fc1 = torch.nn.Linear(D, hidden, bias=False)
        self.fc2 = torch.nn.Linear(hidden, O, bias=False)

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x)))


def t(*shape):
    return "tensor<%sxf32>" % "x".join(str(s) for s in shape)


SGD = ('{dampening = 0.0 : f64, momentum = 0.9 : f64, nesterov = false, '
       'weight_decay = 0.0 : f64}')


def module(dp, tp):
    """The training step; dp = tp = None gives the unsharded program."""
    spmd = dp is not None
    dp, tp = (dp or 1), (tp or 1)
    b, bt, h = B // dp, B // dp // tp, H // tp
    lines = []
    if spmd:
        lines.append('mesh.mesh @mesh(shape = %dx%d) {merak.axes = ["dp", "tp"]}'
                     % (dp, tp))

    def shard(axes):
        if not spmd:
            return ""
        return ", merak.sharding = #mesh.shard<@mesh, %s>" % axes

    x_local = t(b, D // tp) if spmd else t(B, D)
    y_local = t(bt, O) if spmd else t(B, O)
    lines.append(
        "func.func @train_step(\n"
        '    %%w1: %s {merak.param = "fc1.weight"%s},\n'
        '    %%w2: %s {merak.param = "fc2.weight"%s},\n'
        '    %%m1: %s {merak.opt_state = "fc1.weight/momentum_buffer"%s},\n'
        '    %%m2: %s {merak.opt_state = "fc2.weight/momentum_buffer"%s},\n'
        '    %%x: %s {merak.input = "x"%s},\n'
        '    %%y: %s {merak.input = "y"%s},\n'
        "    %%lr: tensor<f32> {merak.lr}, %%step: tensor<i64> {merak.step})\n"
        "    -> (tensor<f32> {merak.loss},\n"
        "        %s {merak.update_arg = 0 : i64%s},\n"
        "        %s {merak.update_arg = 1 : i64%s},\n"
        "        %s {merak.update_arg = 2 : i64%s},\n"
        "        %s {merak.update_arg = 3 : i64%s}) {"
        % (t(h, D), shard("[[1]]"), t(O, h), shard("[[], [1]]"),
           t(h, D), shard("[[1]]"), t(O, h), shard("[[], [1]]"),
           x_local, shard("[[0], [1]]"), y_local, shard("[[0, 1]]"),
           t(h, D), shard("[[1]]"), t(O, h), shard("[[], [1]]"),
           t(h, D), shard("[[1]]"), t(O, h), shard("[[], [1]]")))
    body = []
    if spmd:
        body += [
            "%%xa = mesh.all_to_all %%x on @mesh mesh_axes = [1] split_axis = 0 "
            "concat_axis = 1 : %s -> %s" % (x_local, t(bt, D)),
            "%%xg = mesh.all_gather %%xa on @mesh mesh_axes = [1] gather_axis = 0 "
            ": %s -> %s" % (t(bt, D), t(b, D)),
        ]
        x = "%xg"
    else:
        x = "%x"
    body += [
        "%%pre = merak.linear %s, %%w1 : (%s, %s) -> %s"
        % (x, t(b, D), t(h, D), t(b, h)),
        "%%h = merak.relu %%pre : %s" % t(b, h),
        "%%outp = merak.linear %%h, %%w2 : (%s, %s) -> %s"
        % (t(b, h), t(O, h), t(b, O)),
    ]
    if spmd:
        body.append(
            "%%out = mesh.reduce_scatter %%outp on @mesh mesh_axes = [1] "
            "scatter_axis = 0 : %s -> %s" % (t(b, O), t(bt, O)))
        out = "%out"
    else:
        out = "%outp"
    body += [
        "%%diff = merak.sub %s, %%y : (%s, %s) -> %s"
        % (out, t(bt, O), t(bt, O), t(bt, O)),
        "%%sq = merak.mul %%diff, %%diff : (%s, %s) -> %s"
        % (t(bt, O), t(bt, O), t(bt, O)),
        "%%lloss = merak.reduce_mean %%sq {dims = array<i64>} : (%s) -> tensor<f32>"
        % t(bt, O),
    ]
    if spmd:
        body.append("%loss = mesh.all_reduce %lloss on @mesh mesh_axes = [0, 1] "
                    "reduction = <average> : tensor<f32> -> tensor<f32>")
    else:
        body.append("%loss = merak.cast %lloss : tensor<f32> -> tensor<f32>")
    # d loss / d out = 2 (out - y) / (B * O) on every element.
    body += [
        "%%c = merak.constant dense<%f> : tensor<f32>" % (2.0 / (B * O)),
        "%%g = merak.mul %%diff, %%c : (%s, tensor<f32>) -> %s"
        % (t(bt, O), t(bt, O)),
    ]
    if spmd:
        body.append("%%gg = mesh.all_gather %%g on @mesh mesh_axes = [1] "
                    "gather_axis = 0 : %s -> %s" % (t(bt, O), t(b, O)))
        g = "%gg"
    else:
        g = "%g"
    body += [
        "%%gt = merak.permute %s {permutation = array<i64: 1, 0>} : (%s) -> %s"
        % (g, t(b, O), t(O, b)),
        "%%dw2l = merak.matmul %%gt, %%h : (%s, %s) -> %s"
        % (t(O, b), t(b, h), t(O, h)),
        "%%dh = merak.matmul %s, %%w2 : (%s, %s) -> %s"
        % (g, t(b, O), t(O, h), t(b, h)),
        "%zero = merak.constant dense<0.0> : tensor<f32>",
        "%%pos = merak.compare <gt>, %%pre, %%zero : (%s, tensor<f32>) -> "
        "tensor<%dx%dxi1>" % (t(b, h), b, h),
        "%%mask = merak.cast %%pos : tensor<%dx%dxi1> -> %s" % (b, h, t(b, h)),
        "%%dpre = merak.mul %%dh, %%mask : (%s, %s) -> %s"
        % (t(b, h), t(b, h), t(b, h)),
        "%%dpt = merak.permute %%dpre {permutation = array<i64: 1, 0>} : "
        "(%s) -> %s" % (t(b, h), t(h, b)),
        "%%dw1l = merak.matmul %%dpt, %s : (%s, %s) -> %s"
        % (x, t(h, b), t(b, D), t(h, D)),
    ]
    if spmd:
        body += [
            "%%dw1 = mesh.all_reduce %%dw1l on @mesh mesh_axes = [0] : %s -> %s"
            % (t(h, D), t(h, D)),
            "%%dw2 = mesh.all_reduce %%dw2l on @mesh mesh_axes = [0] : %s -> %s"
            % (t(O, h), t(O, h)),
        ]
        dw1, dw2 = "%dw1", "%dw2"
    else:
        dw1, dw2 = "%dw1l", "%dw2l"
    body += [
        "%%nw1, %%nm1 = merak.sgd_update %%w1, %s, %%m1, %%lr, %%step %s : "
        "(%s, %s, %s, tensor<f32>, tensor<i64>) -> (%s, %s)"
        % (dw1, SGD, t(h, D), t(h, D), t(h, D), t(h, D), t(h, D)),
        "%%nw2, %%nm2 = merak.sgd_update %%w2, %s, %%m2, %%lr, %%step %s : "
        "(%s, %s, %s, tensor<f32>, tensor<i64>) -> (%s, %s)"
        % (dw2, SGD, t(O, h), t(O, h), t(O, h), t(O, h), t(O, h)),
        "return %%loss, %%nw1, %%nw2, %%nm1, %%nm2 : tensor<f32>, %s, %s, %s, %s"
        % (t(h, D), t(O, h), t(h, D), t(O, h)),
    ]
    lines += ["  " + line for line in body]
    lines.append("}")
    return "\n".join(lines) + "\n"


def data(out, steps, hidden):
    """Weights (hidden width `hidden`; another than H tests errors) and
    `steps` batches."""
    os.makedirs(out, exist_ok=True)
    torch.manual_seed(0)
    torch.jit.script(Model(hidden)).save(os.path.join(out, "model.pt"))
    merak_safetensors.save({"x": torch.randn(steps, B, D),
                            "y": torch.randn(steps, B, O)},
                           os.path.join(out, "batches.safetensors"))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("what", choices=["module", "data"])
    parser.add_argument("out")
    parser.add_argument("--dp", type=int)
    parser.add_argument("--tp", type=int)
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--hidden", type=int, default=H)
    args = parser.parse_args()
    if args.what == "module":
        with open(args.out, "w") as f:
            f.write(module(args.dp, args.tp))
    else:
        data(args.out, args.steps, args.hidden)


if __name__ == "__main__":
    main()
