//===- AttrNames.h - names of Merak's discardable attributes ---*- C++ -*-===//
//
// The attributes that tie a function's arguments and results to model state
// (parameters, buffers, optimizer state, inputs) and backward ops to their
// forward ops. Passes write them; merak-exec reads them.
//
//===----------------------------------------------------------------------===//
#ifndef MERAK_DIALECT_MERAK_IR_ATTRNAMES_H
#define MERAK_DIALECT_MERAK_IR_ATTRNAMES_H

#include "llvm/ADT/StringRef.h"

namespace merak {

// Function arguments.
inline constexpr llvm::StringLiteral kParamAttr = "merak.param";
inline constexpr llvm::StringLiteral kBufferAttr = "merak.buffer";
inline constexpr llvm::StringLiteral kInputAttr = "merak.input";
inline constexpr llvm::StringLiteral kOptStateAttr = "merak.opt_state";
inline constexpr llvm::StringLiteral kLrAttr = "merak.lr";
inline constexpr llvm::StringLiteral kStepAttr = "merak.step";
/// On a parameter: frozen (LoRA's base weights). It is loaded and saved as
/// any parameter, but gets no gradient, no optimizer state and no update.
inline constexpr llvm::StringLiteral kFrozenAttr = "merak.frozen";
/// On a parameter: how merak-exec initializes it when the weights it loads
/// lack it: "zeros", or "kaiming_uniform" (PyTorch's nn.Linear default,
/// uniform in +-1/sqrt(fan_in)).
inline constexpr llvm::StringLiteral kInitAttr = "merak.init";
/// The step's loss scale (rank-0 float): the backward starts from it
/// instead of 1, so every gradient comes out multiplied by it. Holds the
/// scaling's configuration, `{dynamic, init, window}`; on @forward (set by
/// --merak-mixed-precision) it asks --merak-autodiff for the argument.
inline constexpr llvm::StringLiteral kLossScaleAttr = "merak.loss_scale";
/// On a parameter (and its optimizer state) whose program shape is a
/// row-major reshape of the tensor as PyTorch holds it: that shape, in
/// which weights are loaded and checkpoints saved.
inline constexpr llvm::StringLiteral kStoredShapeAttr = "merak.stored_shape";
/// Text generation (--merak-kv-cache): on an argument of @decode, the
/// position its token is at (`tensor<1xi64>`); on an argument of @decode
/// and a result of @prefill and @decode, one attention layer's cached keys
/// or values, named.
inline constexpr llvm::StringLiteral kPositionAttr = "merak.position";
inline constexpr llvm::StringLiteral kKvCacheAttr = "merak.kv_cache";

// Function results.
inline constexpr llvm::StringLiteral kBufferUpdateAttr = "merak.buffer_update";
inline constexpr llvm::StringLiteral kLossAttr = "merak.loss";
inline constexpr llvm::StringLiteral kGradAttr = "merak.grad";
inline constexpr llvm::StringLiteral kUpdateArgAttr = "merak.update_arg";
inline constexpr llvm::StringLiteral kGradNormAttr = "merak.grad_norm";
/// A rank-0 float that is 0 when every gradient of the step is finite and
/// NaN otherwise (the sum of `g * 0` over them); with a loss scale.
inline constexpr llvm::StringLiteral kNonFiniteGradsAttr =
    "merak.nonfinite_grads";

// Functions.
inline constexpr llvm::StringLiteral kTrainStepName = "train_step";
inline constexpr llvm::StringLiteral kOptimizerAttr = "merak.optimizer";
/// On the module: the options --merak-train derived @train_step with, so
/// that a pass that changes @forward can derive it again.
inline constexpr llvm::StringLiteral kTrainOptionsAttr = "merak.train_options";
/// On the module: the --merak-parallelize options --merak-auto-parallel
/// chose and applied.
inline constexpr llvm::StringLiteral kAutoPlanAttr = "merak.auto_plan";

// Ops: forward op ids and the forward op a backward op belongs to.
inline constexpr llvm::StringLiteral kIdAttr = "merak.id";
inline constexpr llvm::StringLiteral kGradOfAttr = "merak.grad_of";
inline constexpr llvm::StringLiteral kMicrobatchAttr = "merak.microbatch";

/// Sharding of a partitioned function's argument or result
/// (a `#mesh.shard`); absent when replicated.
inline constexpr llvm::StringLiteral kShardingAttr = "merak.sharding";
/// Names of the mesh axes, on `mesh.mesh`.
inline constexpr llvm::StringLiteral kMeshAxesAttr = "merak.axes";
/// How the runtime runs the mesh's all-reduces ("ring" or "tree"), on
/// `mesh.mesh`, and why (`--merak-comm-algorithm`).
inline constexpr llvm::StringLiteral kAllReduceAlgorithmAttr =
    "merak.all_reduce_algorithm";
inline constexpr llvm::StringLiteral kAllReduceAlgorithmReasonAttr =
    "merak.all_reduce_algorithm_reason";

} // namespace merak

#endif // MERAK_DIALECT_MERAK_IR_ATTRNAMES_H
