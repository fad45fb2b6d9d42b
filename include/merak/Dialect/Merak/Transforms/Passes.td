//===- Passes.td - passes over the merak dialect -------------------------===//

#ifndef MERAK_DIALECT_MERAK_TRANSFORMS_PASSES_TD
#define MERAK_DIALECT_MERAK_TRANSFORMS_PASSES_TD

include "mlir/Pass/PassBase.td"

//===----------------------------------------------------------------------===//
// Reports
//===----------------------------------------------------------------------===//

def ModelSummary : Pass<"merak-model-summary", "mlir::ModuleOp"> {
  let summary = "Print parameter counts and an op histogram of each function";
  let description = [{
    For every function: the number of parameter and buffer arguments and
    their element counts (the sum PyTorch's `sum(p.numel())` gives), the
    model inputs with their types, the number of results, and a histogram of
    the ops in its body, most frequent first. The IR is left unchanged. The
    report goes to standard error, or to the file named by `output`.
  }];
  let options = [
    Option<"output", "output", "std::string", /*default=*/"\"-\"",
           "File to write the summary to ('-' for standard error)">
  ];
}

//===----------------------------------------------------------------------===//
// Training step
//===----------------------------------------------------------------------===//

def Autodiff : Pass<"merak-autodiff", "mlir::ModuleOp"> {
  let summary = "Append the backward pass: a training step returning the "
                "loss and the gradient of every parameter";
  let description = [{
    Clones the forward function (`func`, default `forward`) into
    `@train_step` and appends, in the same body, the vector-Jacobian
    products of its ops in reverse order (each op's rule comes from its
    `GradientOpInterface`). The loss is the forward's only rank-0 floating
    result, or result `loss-result`. `@train_step` returns the loss
    (`{merak.loss}`), the gradient of every `merak.param` argument in
    argument order (`{merak.grad = "name"}`; a parameter the loss does not
    depend on gets none, as PyTorch leaves its `.grad` unset, and so the
    optimizer leaves it unchanged) and the buffer updates of the forward
    (`{merak.update_arg = N}`, N the buffer's argument). Every forward op
    gets `merak.id = K`; every op built for its gradient gets
    `merak.grad_of = K`, so later passes can assign stages and recompute by
    forward op. A training-mode `dropout` with `p > 0` becomes
    `x * dropout_mask(x)` so that backward reuses the mask. An op without a
    gradient rule on the path from a parameter to the loss is an error that
    names the op and its location.
  }];
  let options = [
    Option<"funcName", "func", "std::string", /*default=*/"\"forward\"",
           "Name of the forward function">,
    Option<"lossResult", "loss-result", "int", /*default=*/"-1",
           "Index of the loss among the forward's results (-1: the only "
           "rank-0 floating result)">
  ];
}

def GradAccumulation : Pass<"merak-grad-accumulation", "mlir::ModuleOp"> {
  let summary = "Accumulate gradients over micro-batches inside the "
                "training step";
  let description = [{
    Makes `@train_step` (as built by `--merak-autodiff`, before
    `--merak-optimizer`) take `microbatches` micro-batches at once: every
    `merak.input` argument becomes `microbatches` times larger along
    dimension 0, and the step runs its forward and backward once per slice
    of that dimension, in order. The model must have been imported at the
    micro-batch shape. The loss becomes the mean of the micro-batch losses
    and each gradient the mean of the micro-batch gradients, which is what
    PyTorch computes when each micro-batch's `loss / M` is back-propagated
    into the same `.grad`. Buffer updates chain: micro-batch `i` sees the
    buffers written by micro-batch `i - 1`, and the last one's are returned.
    Ops of micro-batch `i` carry `merak.microbatch = i`.
  }];
  let options = [
    Option<"microbatches", "microbatches", "int", /*default=*/"1",
           "Number of micro-batches per step">
  ];
}

def Optimizer : Pass<"merak-optimizer", "mlir::ModuleOp"> {
  let summary = "Insert optimizer updates into the training step";
  let description = [{
    Rewrites `@train_step` (as built by `--merak-autodiff`) so that it
    returns new parameters instead of gradients. Adds one argument per piece
    of optimizer state (`{merak.opt_state = "name/exp_avg"}`,
    `/exp_avg_sq` for AdamW, `/momentum_buffer` for SGD with momentum), the
    learning rate (rank-0 f32, `{merak.lr}`; a runtime value so schedules
    can drive it) and the 1-based step (rank-0 i64, `{merak.step}`). Each
    gradient result becomes the parameter's new value and new state values
    follow, each marked `{merak.update_arg = N}`. With `clip-grad-norm > 0`
    the gradients are first scaled by `min(1, max_norm / (norm + 1e-6))`
    where `norm` is their global 2-norm (`torch.nn.utils.clip_grad_norm_`),
    and the norm is returned as an extra result `{merak.grad_norm}`. The
    configuration is recorded as the function attribute `merak.optimizer`.
  }];
  let options = [
    Option<"optimizer", "optimizer", "std::string", /*default=*/"\"sgd\"",
           "sgd or adamw">,
    Option<"lr", "lr", "double", /*default=*/"1e-3",
           "Learning rate recorded as the default of the lr argument">,
    Option<"momentum", "momentum", "double", /*default=*/"0.0",
           "SGD momentum">,
    Option<"dampening", "dampening", "double", /*default=*/"0.0",
           "SGD dampening">,
    Option<"nesterov", "nesterov", "bool", /*default=*/"false",
           "SGD Nesterov momentum">,
    Option<"weightDecay", "weight-decay", "double", /*default=*/"-1.0",
           "Weight decay (default: 0 for SGD, 0.01 for AdamW as in PyTorch)">,
    Option<"beta1", "beta1", "double", /*default=*/"0.9", "AdamW beta1">,
    Option<"beta2", "beta2", "double", /*default=*/"0.999", "AdamW beta2">,
    Option<"eps", "eps", "double", /*default=*/"1e-8", "AdamW epsilon">,
    Option<"clipGradNorm", "clip-grad-norm", "double", /*default=*/"0.0",
           "Clip the global gradient norm to this value (0: off)">
  ];
}

#endif // MERAK_DIALECT_MERAK_TRANSFORMS_PASSES_TD
