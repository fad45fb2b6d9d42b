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

def Lora : Pass<"merak-lora", "mlir::ModuleOp"> {
  let summary = "Low-rank adapters (LoRA) on chosen linear layers, every "
                "other parameter frozen";
  let description = [{
    Runs on the forward program, before `--merak-train`. For every
    `merak.linear` whose weight `W` (`[out, in]`, a `merak.param`, possibly
    through a cast) is a target, adds two parameters, `NAME.lora_A.weight`
    (`[rank, in]`, `merak.init = "kaiming_uniform"`) and
    `NAME.lora_B.weight` (`[out, rank]`, `merak.init = "zeros"`), NAME
    being W's name without `.weight`, and adds
    `linear(linear(dropout(x), A), B) * alpha / rank` to the layer's
    result, as PEFT's LoRA does. Every other parameter gets `merak.frozen`:
    `--merak-autodiff` gives it no gradient, so it has no optimizer state
    and no update; it is still loaded and saved. B starts at zero, so the
    adapted model starts as the base one.

    `targets` is a comma-separated list of names (one or more dotted
    components of the weight's name, e.g. `c_attn` or `attn.c_proj`) and
    categories: `all-linear`, every linear on a weight of its own (not tied
    to another op) except the output head (a linear whose result reaches
    the loss through shape ops alone); `attention`, the projections of the
    attention layers (the linears the query, key and value come from, and
    those reading the attention's result); `mlp`, the linears of the MLPs
    (two linears joined by an activation). Categories are found by the
    program's structure, whatever the layers are called. A target that
    matches no linear is an error that lists the linear weights there are.
  }];
  let options = [
    Option<"funcName", "func", "std::string", /*default=*/"\"forward\"",
           "Name of the forward function">,
    Option<"rank", "rank", "int64_t", /*default=*/"8",
           "The adapters' rank">,
    Option<"alpha", "alpha", "double", /*default=*/"8.0",
           "The adapters' output is scaled by alpha / rank">,
    Option<"dropout", "dropout", "double", /*default=*/"0.0",
           "Dropout on the adapters' input (training mode)">,
    Option<"targets", "targets", "std::string", /*default=*/"\"all-linear\"",
           "Comma-separated: all-linear, attention, mlp, or dotted "
           "weight-name components">
  ];
}

def KvCache : Pass<"merak-kv-cache", "mlir::ModuleOp"> {
  let summary = "The forward program as a text generator's prefill and "
                "decode steps, with a key-value cache";
  let description = [{
    Runs on the forward program of a causal language model traced over its
    whole context (`[batch, L]` token ids). Replaces it with two functions:

    - `@prefill(params..., tokens [B, L])` returns the logits `[B, L, V]`
      and every cache: the keys and values each attention layer reads,
      for all L positions (`merak.kv_cache = "kv.N"` on the results);
    - `@decode(params..., token [B, 1], position, caches...)` runs the
      token at `position` (`tensor<1xi64>`, `merak.position`): it writes
      that position's keys and values into the caches (`merak.update_slice`)
      and returns the logits `[B, 1, V]` and the updated caches.

    Nothing is matched by name or layer pattern. The pass follows the
    token input's positions (dimension 1) through the program: an op that
    keeps positions apart (elementwise ops, linears, norms over features,
    reshapes and permutes that keep the position dimension whole, gathers
    by token) computes one position in @decode; a product whose rows are
    the queries and whose columns are positions too (`q @ k^T`), and the
    product of the attention probabilities with positions (`p @ v`), read
    their right operand as keys: that operand is cached, at the smallest
    value it is reshaped, permuted, broadcast or cast from (so grouped-query
    attention caches its keys before they are repeated over heads). A
    constant computed without the tokens and lined up with the positions
    (a causal mask, position embeddings, rotary tables) is read at the
    position's row. Dropout is dropped (inference). An op that mixes the
    positions in any other way is an error that names it and its line.

    The loss and whatever only it reads (the targets) are left out.
    `merak-exec --generate` runs the pair (docs/generation.md).
  }];
  let options = [
    Option<"funcName", "func", "std::string", /*default=*/"\"forward\"",
           "Name of the forward function">,
    Option<"input", "input", "std::string", /*default=*/"\"idx\"",
           "The token input (merak.input name), [batch, positions] of i64">,
    Option<"logits", "logits", "int64_t", /*default=*/"0",
           "The result holding the logits [batch, positions, vocabulary]">
  ];
}

def MixedPrecision : Pass<"merak-mixed-precision", "mlir::ModuleOp"> {
  let summary = "Compute the forward in bfloat16 or float16 with float32 "
                "master weights";
  let description = [{
    Runs on the forward program, before `--merak-autodiff` (`--merak-train`
    runs it with `precision=bf16`). Parameters, buffers and inputs keep
    their types, so the optimizer updates float32 master weights and
    checkpoints hold float32. Each op computes in the type its
    `precision` field in MerakOps.td names: the matrix products (linear,
    matmul, masked attention, convolution) cast their floating operands to
    the compute type; norms, softmax, sums, means and losses cast theirs to
    float32; every other op takes the widest floating type of its tensor
    operands, a one-element constant following the others (as a Python
    number does in PyTorch). Results return in their original types. The
    gradient follows the casts: each cast's gradient casts back, so every
    parameter's gradient is float32. `compute=fp32` leaves the ops
    unchanged.

    Loss scaling (`loss-scale`; by default `dynamic` with fp16, `none`
    otherwise) is recorded on the forward as `merak.loss_scale = {dynamic,
    init, window}`: `--merak-autodiff` then starts the backward from a
    `merak.loss_scale` argument instead of 1, and `--merak-optimizer`
    unscales the gradients and returns whether one is not finite, so that
    merak-exec skips that step's update. A dynamic scale starts at
    `loss-scale-init`, halves on each skipped step and doubles after
    `loss-scale-window` steps in a row without one; a number is a static
    scale.
  }];
  let options = [
    Option<"funcName", "func", "std::string", /*default=*/"\"forward\"",
           "Name of the forward function">,
    Option<"compute", "compute", "std::string", /*default=*/"\"bf16\"",
           "The compute type of matrix products: bf16, fp16 or fp32">,
    Option<"master", "master", "std::string", /*default=*/"\"fp32\"",
           "The type of the master weights and optimizer state: fp32 (the "
           "only one)">,
    Option<"lossScale", "loss-scale", "std::string", /*default=*/"\"\"",
           "dynamic, none, or a static scale (a positive number); default "
           "dynamic with fp16, none otherwise">,
    Option<"lossScaleInit", "loss-scale-init", "double",
           /*default=*/"65536.0",
           "The first scale of a dynamic loss scale">,
    Option<"lossScaleWindow", "loss-scale-window", "int64_t",
           /*default=*/"2000",
           "Steps without an overflow after which a dynamic scale doubles">
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

//===----------------------------------------------------------------------===//
// Partitioning over a device mesh
//===----------------------------------------------------------------------===//

def Mesh : Pass<"merak-mesh", "mlir::ModuleOp"> {
  let summary = "Declare the device mesh the training step is partitioned on";
  let description = [{
    Adds `mesh.mesh @mesh` with one axis per degree greater than one, in the
    order `dp`, `ep`, `sp`, `tp` (tensor-parallel peers are neighbouring
    ranks),
    and names them in the mesh's `merak.axes` attribute. A module that has a
    mesh already must declare the same axes. With every degree 1 the mesh
    is a single axis of size 1.
  }];
  let options = [
    Option<"dp", "dp", "int", /*default=*/"1", "Data-parallel degree">,
    Option<"ep", "ep", "int", /*default=*/"1",
           "Expert-parallel degree (its ranks also split the batch)">,
    Option<"sp", "sp", "int", /*default=*/"1",
           "Ulysses sequence-parallel degree (its own mesh axis)">,
    Option<"tp", "tp", "int", /*default=*/"1", "Tensor-parallel degree">
  ];
  let dependentDialects = ["mlir::mesh::MeshDialect"];
}

def ExpertParallel : Pass<"merak-expert-parallel", "mlir::ModuleOp"> {
  let summary = "Shard mixture-of-experts weights over the expert-parallel "
                "axis";
  let description = [{
    Finds the experts of `@train_step` by structure: a parameter of rank 3
    or more, `[E, ...]`, that a batched `merak.matmul` multiplies with
    dispatched tokens `[E, N, D]` (one batch entry per expert), as a
    capacity-based mixture-of-experts layer computes all its experts at
    once. Each such parameter (and its optimizer state) is split along
    dimension 0 over mesh axis `ep`, so every rank holds E / ep experts,
    and the tokens are annotated `[E over ep, N over dp]` where the
    experts read them. `--merak-data-parallel` splits the batch over `dp`
    and `ep` together, so the tokens arrive split along N over both axes;
    the partitioner turns the change into one `mesh.all_to_all` over `ep`
    (dispatch), and the combine back into another. Gradients of the other
    parameters are reduced over `dp` and `ep`, those of the experts over
    `dp` alone. An `ep` that does not divide E is an error naming the
    parameter.
  }];
  let options = [
    Option<"ep", "ep", "int", /*default=*/"0",
           "Expert-parallel degree (0: the size of the mesh's ep axis)">
  ];
  let dependentDialects = ["mlir::mesh::MeshDialect"];
}

def DataParallel : Pass<"merak-data-parallel", "mlir::ModuleOp"> {
  let summary = "Split the batch over the data-parallel axis; ZeRO stages";
  let description = [{
    Annotates `@train_step` for data parallelism over mesh axis `dp`
    (created when the module has no mesh): every model input is split along
    its first dimension (over `dp` and then `ep` when the mesh has an
    expert-parallel axis), and the gradients become partial sums that the
    partitioner reduces before the optimizer. Every other argument that no
    earlier pass annotated is replicated.

    `zero` selects DeepSpeed's stages: `1` splits optimizer state over `dp`
    and runs each update on its shard (gradients are all-reduced, then each
    rank updates its slice and the new parameters are all-gathered); `2`
    also keeps gradients sharded (one reduce-scatter instead of the
    all-reduce); `3` also splits the parameters, which are all-gathered
    just before each use and released after it. A tensor is split along its
    first dimension whose local size the `dp` degree divides; one with no
    such dimension stays replicated.
  }];
  let options = [
    Option<"dp", "dp", "int", /*default=*/"0",
           "Data-parallel degree (0: the size of the mesh's dp axis)">,
    Option<"zero", "zero", "int", /*default=*/"0", "ZeRO stage: 0, 1, 2 or 3">
  ];
  let dependentDialects = ["mlir::mesh::MeshDialect"];
}

def SplitFusedProjections
    : Pass<"merak-split-fused-projections", "mlir::ModuleOp"> {
  let summary = "Take fused q/k/v (or gate/up) projections apart for tensor "
                "parallelism";
  let description = [{
    A fused projection is one `linear` whose result is sliced along its last
    dimension into S >= 2 sections of one size N, each reshaped into heads
    (GPT-2's `c_attn(x).split(E, dim=2)`) or each read only by elementwise
    ops (a fused gate and up projection). Tensor parallelism splits every
    section by heads or features, which is not a block of the `[S*N, K]`
    weight. The pass views the weight as `[S, N, K]` (and the bias as
    `[S, N]`) and computes each section with its own `linear` on
    `select(weight, 0, s)`; the parameter keeps its PyTorch layout in
    weights and checkpoints through `merak.stored_shape`. Then
    `--merak-tensor-parallel` splits the view along N: every rank holds and
    updates its heads of q, k and v.

    It changes `@forward` and derives `@train_step` again with the options
    `--merak-train` recorded (`merak.train_options`), only when the recorded
    derivation reproduces the `@train_step` the module has (a step changed
    since is left alone, with a warning). Projections whose section size
    `tp` does not divide, whose weight has other readers, or that are not
    sliced this way are left whole. `--merak-parallelize` runs it when
    `tp > 1`.
  }];
  let options = [
    Option<"tp", "tp", "int", /*default=*/"2",
           "Tensor-parallel degree: only sections it divides are split">
  ];
}

def TensorParallel : Pass<"merak-tensor-parallel", "mlir::ModuleOp"> {
  let summary = "Megatron tensor parallelism, found in the graph structure";
  let description = [{
    Splits the weights of the layers it recognises by their structure in
    the forward ops of `@train_step` over mesh axis `tp` (created when the
    module has no mesh):

    - MLP: `linear` followed by an elementwise chain (activation, dropout,
      a gating product) that reaches one other `linear`: the first linears
      are split by output features (column), the last by input features
      (row); SwiGLU's gate and up projections are both column-split;
    - attention: a projection whose result is reshaped into heads is split
      by heads (column), and the projection of the merged heads by rows;
    - vocabulary: the embedding looked up by a model input is split by
      rows (vocabulary-parallel embedding) and the linear whose logits feed
      `cross_entropy` by classes, so the loss is a parallel cross-entropy
      and the full logits are never gathered.

    A part whose dimension `tp` does not divide (an attention block's
    heads, an MLP's hidden width, a vocabulary or class count) stays whole,
    replicated over tp, with a remark naming it, the parameter and the
    dimension; the other parts are split. `vocab-parallel=false` keeps the
    embedding and the head whole regardless. Propagation and
    `--merak-spmdize` derive the collectives of forward and backward.
  }];
  let options = [
    Option<"tp", "tp", "int", /*default=*/"0",
           "Tensor-parallel degree (0: the size of the mesh's tp axis)">,
    Option<"vocabParallel", "vocab-parallel", "bool", /*default=*/"true",
           "Split the token embedding and the classifier/LM head by "
           "vocabulary (false: keep them whole)">
  ];
  let dependentDialects = ["mlir::mesh::MeshDialect"];
}

def SequenceParallel : Pass<"merak-sequence-parallel", "mlir::ModuleOp"> {
  let summary = "Sequence parallelism: Megatron's or Ulysses'";
  let description = [{
    `megatron`: with tensor parallelism, the activations between the
    tensor-parallel regions (norms, dropouts, residual adds) are split along
    the sequence over `tp`, so the all-reduce after a row-parallel linear
    becomes a reduce-scatter and the input of a column-parallel linear an
    all-gather. `ulysses`: the model inputs are split along the sequence
    over mesh axis `sp`, and attention runs split by heads, with an
    all-to-all on each side of it.
  }];
  let options = [
    Option<"megatron", "megatron", "bool", /*default=*/"false",
           "Megatron sequence parallelism over tp">,
    Option<"ulysses", "ulysses", "bool", /*default=*/"false",
           "Ulysses sequence parallelism over sp">
  ];
  let dependentDialects = ["mlir::mesh::MeshDialect"];
}

def ShardingPropagation : Pass<"merak-sharding-propagation", "mlir::ModuleOp"> {
  let summary = "Complete sharding annotations over a training step";
  let description = [{
    Upstream `--sharding-propagation` driven through the same
    `ShardingInterface` rules, extended for training steps: the sweeps run
    forward first (then backward, then forward), so the batch split of the
    inputs reaches each weight-gradient contraction before the parameter's
    sharding reaches it from the optimizer, and the gradient becomes one
    partial sum instead of gathered operands; and among the options an op
    admits (from every subset of its operands' and users' shardings) the
    one that moves the fewest bytes is taken. A value's own annotation is
    binding; what its users ask for is a hint.
  }];
  let dependentDialects = ["mlir::mesh::MeshDialect"];
}

def Spmdize : Pass<"merak-spmdize", "mlir::ModuleOp"> {
  let summary = "Partition annotated functions into the program of one rank";
  let description = [{
    Every function with `mesh.shard` annotations (as completed by
    `--sharding-propagation`) becomes the program one rank runs: tensor
    types are local shards, each op is rebuilt by its `ShardingInterface`
    `spmdize`, and collectives are inserted where a value's sharding differs
    from what its user expects. Unlike upstream `--mesh-spmdization` it
    handles meshes of any rank, and a partial sum that its user wants split
    along the same axes becomes one `mesh.reduce_scatter` (half the bytes of
    all-reduce then slice). Arguments and results keep their sharding as
    `merak.sharding`; an updated argument's result is returned in the
    argument's sharding, every other result replicated. With `keep-roles`
    the ops built for an op take its role in the training step: the ops
    built for a backward op (its local form, the collectives before it)
    its `merak.grad_of`, and the op computing a forward op's result its
    `merak.id`, so that the pipeline passes can place them.
  }];
  let options = [
    Option<"keepRoles", "keep-roles", "bool", /*default=*/"false",
           "Give the ops built for an op its merak.grad_of / merak.id">
  ];
  let dependentDialects = ["mlir::mesh::MeshDialect"];
}

def GradBuckets : Pass<"merak-grad-buckets", "mlir::ModuleOp"> {
  let summary = "Data-parallel gradient reductions early and in buckets";
  let description = [{
    Runs after `--merak-spmdize`. Every all-reduce over the `dp` mesh axis
    of a gradient (a value computed by a backward op) moves to just after
    the gradient is computed, and neighbouring ones of the same element
    type are packed into flat buckets of about `bucket-mb` megabytes (one
    `mesh.all_reduce` of the concatenated gradients, then slices), so the
    reductions overlap the rest of backward as DDP's do. `bucket-mb=0`
    only moves them. In a pipeline's optimizer functions the all-reduces
    over `dp` of the `merak.grad` arguments (gradients accumulated over
    micro-batches) are packed the same way, each function on its own.

    ZeRO's collectives are packed too, in buckets of about
    `zero-bucket-mb` megabytes: reduce-scatters of gradients along
    dimension 0 (each gradient viewed as `[n, numel / n]`, the views side
    by side, one `mesh.reduce_scatter` of `[n, total / n]`), and the
    all-gathers along dimension 0 of updated shards (the shards side by
    side in one row, one `mesh.all_gather` into `[n, total]`). Their
    buckets are small by default: ZeRO is there to save memory, and a
    bucket's packed copy lives beside the tensors it holds.
  }];
  let options = [
    Option<"bucketMb", "bucket-mb", "double", /*default=*/"25.0",
           "Bucket size in megabytes (0: no packing)">,
    Option<"zeroBucketMb", "zero-bucket-mb", "double", /*default=*/"2.0",
           "Bucket size in megabytes of ZeRO's reduce-scatters and "
           "gathers (0: no packing)">
  ];
}

def CommAlgorithm : Pass<"merak-comm-algorithm", "mlir::ModuleOp"> {
  let summary = "The plan's all-reduce algorithm: ring or tree";
  let description = [{
    Runs on a partitioned module. Records on each `mesh.mesh` how the
    runtime runs the plan's all-reduces (`merak.all_reduce_algorithm`):
    `ring` (each rank sends 2 (n - 1) / n of the tensor in 2 (n - 1)
    steps) or `tree` (2 ceil(log2 n) steps: NCCL's double binary tree,
    Gloo's halving-doubling; the ring's bytes where n is a power of two,
    twice the tensor otherwise). `auto` prices every `mesh.all_reduce` of
    the module both ways with the hardware profile (each step at the
    link's latency, the bytes at the all-reduce's bandwidth:
    `HardwareProfile::allReduceTime`) and takes the cheaper, the ring on a
    tie; `merak.all_reduce_algorithm_reason` says what it compared. The
    other collectives have one algorithm in both libraries (the ring).
  }];
  let options = [
    Option<"algorithm", "algorithm", "std::string", /*default=*/"\"auto\"",
           "ring, tree or auto">,
    Option<"hardware", "hardware", "std::string", /*default=*/"\"\"",
           "Hardware profile (JSON or a Galvatron directory); default: the "
           "documented generic one">,
    Option<"report", "report", "std::string", /*default=*/"\"\"",
           "A plan report (JSON, from the auto search) that gains a "
           "comm_algorithm member with the choice and the comparison">
  ];
}

def SparseEmbeddingGrads : Pass<"merak-sparse-embedding-grads",
                                "mlir::ModuleOp"> {
  let summary = "Reduce embedding gradients by gathering the rows";
  let description = [{
    Runs after `--merak-spmdize`. A sum all-reduce of an `index_backward`
    (an embedding's weight gradient: a batch's activation gradients
    scattered into the rows its ids pick) becomes an `index_backward` of
    the activation gradients and ids all-gathered over the same group: the
    same sum, where the gathered operands take fewer bytes than the table.
    Under data parallelism a rank then moves the group's tokens' rows, not
    the vocabulary.
  }];
  let dependentDialects = ["mlir::mesh::MeshDialect"];
}

def FuseAttention : Pass<"merak-fuse-attention", "mlir::ModuleOp"> {
  let summary = "Fuse masked attention into merak.masked_attention";
  let description = [{
    Runs on the forward program, before `--merak-autodiff`;
    `--merak-train` runs it. The chain a model's masked attention imports
    to, `matmul(q, k^T)`, an optional `mul` or `div` by a one-element
    constant, the mask (`where(not(mask), -inf, .)` or
    `where(mask, ., -inf)` for a boolean one,
    `add` of a float one that needs no gradient), `softmax` over the last
    dimension, an optional dropout of probability 0 and `matmul(., v)`,
    becomes one `merak.masked_attention` (its gradient one
    `merak.masked_attention_backward`). The result is the same; the CPU
    kernel skips the blocks of the products that a causal mask removes.
    Chains whose intermediate values have other readers, or with a dropout
    that is active, stay as they are.

    With `flash=true` the op keeps each query row's log-sum-exp (f32)
    instead of the probabilities, and the backward recomputes them (the
    FlashAttention form): the activations attention keeps for the backward
    are linear in the sequence, not quadratic, for one more product in
    the backward. The CUDA backend runs this form as tiled kernels that
    never write the scores to memory.
  }];
  let options = [
    Option<"flash", "flash", "bool", "false",
           "keep the rows' log-sum-exp instead of the probabilities "
           "(FlashAttention)">,
  ];
}

def HoistBatchCollectives : Pass<"merak-hoist-batch-collectives",
                                 "mlir::ModuleOp"> {
  let summary = "Issue the collectives that read only the batch at the "
                "start of the step, once";
  let description = [{
    Runs after `--merak-spmdize`. A collective whose operand depends only
    on the batch (`merak.input` arguments), on buffers (`merak.buffer`) and
    on constants, such as the all-reduced count of targets a mean
    cross-entropy divides by, or the token ids an embedding's gradient
    gathers, moves with the pure ops that compute its operand to the start
    of its function, in their order; equal copies of them (the forward and
    the backward each count the targets) merge into one. The runtime waits
    for a collective where its result is first used, so the ranks no longer
    meet there in the middle of the step.
  }];
  let dependentDialects = ["mlir::mesh::MeshDialect"];
}

def DeferGradReductions : Pass<"merak-defer-grad-reductions",
                               "mlir::ModuleOp"> {
  let summary = "Move gradient reductions over the mesh to the optimizer "
                "updates";
  let description = [{
    Runs after `--merak-spmdize`, for pipelines. Every sum over mesh axes
    (`mesh.all_reduce`, `mesh.reduce_scatter`) whose result only reaches
    optimizer updates moves past the linear ops between it and the update:
    reshapes, slices, sums, `index_backward` and products with values that
    are the same on every rank of the reduction's group, and past the adds
    that sum contributions reduced the same way (a tied parameter's two
    gradients). A slice over some of its axes turns the all-reduce into a
    reduce-scatter over those and an all-reduce over the rest. The update
    then reads local contributions summed and reduced once, so that a
    pipeline can accumulate the contributions over micro-batches and run
    the reductions once per step.

    With `merge-only`, reductions stay where backward produces them, except
    that the contributions of a sum reduced the same way merge into one
    reduction of their sum: a tied parameter's two gradients (GPT-2's token
    embedding and LM head) are added, then all-reduced once, instead of
    all-reduced each, which halves that parameter's traffic.
    `--merak-parallelize` runs it so without pipelines, where a reduction
    issued early overlaps the rest of backward.
  }];
  let options = [
    Option<"mergeOnly", "merge-only", "bool", /*default=*/"false",
           "Only merge the reductions of a sum's contributions, where the "
           "sum is; move no reduction towards the updates">,
  ];
  let dependentDialects = ["mlir::mesh::MeshDialect"];
}

//===----------------------------------------------------------------------===//
// Pipeline parallelism (docs/pipeline.md)
//===----------------------------------------------------------------------===//

def AutoParallel : Pass<"merak-auto-parallel", "mlir::ModuleOp"> {
  let summary = "Choose a parallel plan for the training step and apply it";
  let description = [{
    Prices plans for `@train_step` over `devices` devices with the cost and
    memory model of lib/Analysis/AutoParallel.h on a hardware profile
    (`hardware=` a profile JSON or a Galvatron hardware directory; the
    documented defaults without it): data, tensor and pipeline degrees,
    ZeRO stage, recomputation, schedule and stage cuts. The traced batch is
    one micro-batch (split over data-parallel ranks); `batch=` samples per
    step make `batch / traced` micro-batches, run by a pipeline (of one
    stage without pipeline parallelism).
    Tensor parallelism is first tried on a copy of the step (tp=2) to learn
    which ops it splits, which dimensions a degree must divide, what it
    all-reduces, and whether the vocabulary splits. The fastest plan that
    fits `memory` GiB per device (the profile's capacity without it) is
    applied with `--merak-parallelize`'s passes; a plan those passes refuse
    is reported and the next one tried. The module gets `merak.auto_plan`
    (the options applied). `report=` writes the plan report as JSON; the
    readable summary goes to standard error unless `quiet`. `compare=`
    prices given plans beside the chosen one (`dp=8 tp=8 pp=16
    microbatches=192;dp=64 pp=16 ...`). No plan that fits is an error
    naming the least memory per device any plan needs.
  }];
  let options = [
    Option<"devices", "devices", "int", /*default=*/"1", "Devices to plan for">,
    Option<"batch", "batch", "int64_t", /*default=*/"0",
           "Samples per step (0: the traced batch); a step runs it as "
           "micro-batches of the traced batch">,
    Option<"memory", "memory", "double", /*default=*/"0",
           "Memory per device in GiB (0: the profile's capacity)">,
    Option<"hardware", "hardware", "std::string", /*default=*/"\"\"",
           "Hardware profile: a JSON file or a Galvatron hardware directory">,
    Option<"report", "report", "std::string", /*default=*/"\"\"",
           "Write the plan report as JSON to this file">,
    Option<"calibration", "calibration", "std::string", /*default=*/"\"\"",
           "Calibrate op times by a one-device run of this step "
           "(merak-exec --profile-json); after a comma, a pipelined run's "
           "profile calibrates the forward share">,
    Option<"maxTp", "max-tp", "int", /*default=*/"0",
           "Largest tensor-parallel degree (0: the devices of one node)">,
    Option<"quiet", "quiet", "bool", /*default=*/"false",
           "Do not print the plan summary">,
    Option<"compare", "compare", "std::string", /*default=*/"\"\"",
           "Also price these plans (--merak-parallelize options, several "
           "separated by ';')">
  ];
  let dependentDialects = ["mlir::mesh::MeshDialect"];
}

def PipelinePartition : Pass<"merak-pipeline-partition", "mlir::ModuleOp"> {
  let summary = "Assign the ops of the training step to pipeline stages";
  let description = [{
    Finds the layers of `@train_step`'s forward pass (the spans between the
    positions where the fewest values are live, each with a contraction)
    and cuts them into `pp * virtual` contiguous stages that balance the
    cost model's forward + backward time, a stage also paying for the
    activation it sends and the gradient it receives. Model chunk `c` runs
    on pipeline rank `c % pp`. With `virtual > 1` every chunk gets the same
    number of layers, as in Megatron, so the layers must be a multiple of
    `pp * virtual`. `stages=a,b,...` gives the first layer of every stage
    but the first instead (layer indices as `report` prints them).

    Every op gets `merak.stage`: a forward op its layer's stage, a backward
    op the stage of the forward op it names in `merak.grad_of`, an
    optimizer update the stage of its parameter (the first stage that reads
    it), a constant the first stage that uses it. A parameter read on
    several stages (a tied embedding and LM head) gets
    `merak.tied = array<i64: ...>` and the adds that sum its gradient over
    those stages `merak.tied_sum`. The module gets `merak.pipeline` (pp,
    virtual, stages, layers, stage_layers). `report` prints the layers and
    every stage's estimated time, parameter and activation bytes.

    A step partitioned by `--merak-spmdize` is cut as is (every stage runs
    on its own copy of the mesh): the ops no pass gave a role (collectives,
    local forms) first join the forward or backward ops around them, and a
    collective resharding a forward value stays in the stage of the op
    that computed it. Parameters split over the `dp` axis (ZeRO-3) are
    refused.
  }];
  let options = [
    Option<"pp", "pp", "int", /*default=*/"1", "Pipeline ranks">,
    Option<"virtualStages", "virtual", "int", /*default=*/"1",
           "Model chunks per rank (interleaved schedules)">,
    ListOption<"stages", "stages", "int64_t",
               "First layer of each stage after the first (manual cut)">,
    Option<"report", "report", "bool", /*default=*/"false",
           "Print layers and per-stage estimates to standard error">
  ];
}

def Recompute : Pass<"merak-recompute", "mlir::ModuleOp"> {
  let summary = "Recompute forward activations in backward instead of "
                "keeping them";
  let description = [{
    Clones forward ops of `@train_step` just before the backward ops that
    read their results (`merak.recompute_of = K` names the original), so
    the forward values are no longer kept from forward to backward: only
    the inputs of the recomputed region are. `recompute=full` recomputes
    whole layers, each from its own input (every pure forward op; never
    `dropout_mask`, whose mask must not change); `selective` only attention
    cores, the region from
    the `Q K^T` matmul through softmax (and its mask, scale, dropout) to
    the matmul with `V`. `recompute-ratio=r` (with `full`) is Merak's
    stage-aware rule: pipeline rank `s` of `P` recomputes the first
    `1 - (1 - r) (P - 1) / (P - s)` of its layers (clamped to [0, 1]) and
    the last rank none. With stages (after `--merak-pipeline-partition`)
    clones keep their stage and `merak.pipeline` records which stages
    recompute.
  }];
  let options = [
    Option<"recompute", "recompute", "std::string", /*default=*/"\"full\"",
           "none, full or selective">,
    Option<"ratio", "recompute-ratio", "double", /*default=*/"-1.0",
           "Merak's stage-aware ratio (0..1; negative: every layer)">
  ];
}

def PipelineOutline : Pass<"merak-pipeline-outline", "mlir::ModuleOp"> {
  let summary = "Outline one function per pipeline stage and phase";
  let description = [{
    Splits a partitioned `@train_step` into `@stage<S>_forward`,
    `@stage<S>_backward_input` (gradients with respect to activations),
    `@stage<S>_backward_weight` (weight gradients, the zero-bubble W) and
    `@stage<S>_optimizer`, plus `@stage<S>_recompute` and
    `@stage<S>_forward_keep` on stages that recompute. Values passed
    between them carry `merak.value = N` (the result and the arguments that
    receive it); a value used several stages later is passed along through
    the stages in between. Weight gradients are results
    `{merak.grad = "name"}` that the runtime accumulates over micro-batches
    and feeds to the optimizer function. In a partitioned step the
    collectives between a gradient and its update (its reductions over the
    mesh, ZeRO's slices and gathers) go to the optimizer function, so they
    run once per step on the accumulated gradient; arguments and results
    keep `@train_step`'s `merak.sharding`. `@train_step` is unchanged; with
    `driver` (default) `@pipeline_step` calls the stage functions in order
    for one micro-batch and computes what `@train_step` does.
  }];
  let options = [
    Option<"driver", "driver", "bool", /*default=*/"true",
           "Add @pipeline_step, a one-micro-batch driver of func.calls">
  ];
}

def PipelineSchedule : Pass<"merak-pipeline-schedule", "mlir::ModuleOp"> {
  let summary = "Attach a verified pipeline schedule to the module";
  let description = [{
    Builds the per-rank task lists of schedule `kind` (`gpipe`, `1f1b`,
    `interleaved-1f1b`, `merak-last-no-recompute`,
    `merak-shifted-critical-path`, `zb-h1`, `dynamic`) for `microbatches`
    micro-batches, with explicit sends and receives, proves that every
    (stage, micro-batch, phase) runs once on its rank and that blocking
    transfers cannot deadlock, and records it as the module attribute
    `merak.pipeline_schedule`. The pipeline comes from `merak.pipeline`
    (set by `--merak-pipeline-partition`), or from `pp` and `virtual` for a
    module without one. `report` prints every rank's compute order.
  }];
  let options = [
    Option<"kind", "kind", "std::string", /*default=*/"\"1f1b\"",
           "Schedule: gpipe, 1f1b, interleaved-1f1b, merak-last-no-recompute, "
           "merak-shifted-critical-path, zb-h1, dynamic">,
    Option<"microbatches", "microbatches", "int", /*default=*/"1",
           "Micro-batches per step">,
    Option<"pp", "pp", "int", /*default=*/"0",
           "Pipeline ranks when the module has no merak.pipeline">,
    Option<"virtualStages", "virtual", "int", /*default=*/"0",
           "Model chunks per rank when the module has no merak.pipeline">,
    Option<"recompute", "recompute", "bool", /*default=*/"false",
           "Without merak.pipeline: every stage recomputes">,
    Option<"report", "report", "bool", /*default=*/"false",
           "Print each rank's compute order to standard error">
  ];
}

def PipelineVerify : Pass<"merak-pipeline-verify", "mlir::ModuleOp"> {
  let summary = "Verify the module's pipeline schedule";
  let description = [{
    Checks `merak.pipeline_schedule` as `--merak-pipeline-schedule` does for
    the schedules it builds: every task on its stage's rank and exactly
    once, F before R before B before W, a send after the task that computes
    each value crossing ranks and a receive before the task that reads it,
    and no deadlock when every send blocks until its receive is posted.
  }];
}

def PipelineInline : Pass<"merak-pipeline-inline", "mlir::ModuleOp"> {
  let summary = "Inline the stage calls of the pipeline driver";
  let description = [{
    Replaces every `func.call` in function `func` (default
    `pipeline_step`) by the body of the single-block function it calls, so
    that `merak-exec --function pipeline_step` can run the outlined stages
    on one process and its losses can be compared with `@train_step`'s.
  }];
  let options = [
    Option<"funcName", "func", "std::string", /*default=*/"\"pipeline_step\"",
           "Function whose calls are inlined">
  ];
}

#endif // MERAK_DIALECT_MERAK_TRANSFORMS_PASSES_TD
