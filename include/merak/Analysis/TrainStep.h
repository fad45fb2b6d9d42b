//===- TrainStep.h - structure of a training step --------------*- C++ -*-===//
//
// Reads what --merak-autodiff, --merak-optimizer and the pipeline passes
// record on the ops of @train_step: which op is forward (`merak.id`),
// backward (`merak.grad_of`), a recomputed copy (`merak.recompute_of`) or
// an optimizer update, its stage, and which backward ops only compute
// weight gradients.
//
//===----------------------------------------------------------------------===//
#ifndef MERAK_ANALYSIS_TRAINSTEP_H
#define MERAK_ANALYSIS_TRAINSTEP_H

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/Operation.h"
#include "mlir/IR/Value.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/STLFunctionalExtras.h"
#include "llvm/ADT/SmallVector.h"

#include <optional>

namespace mlir::func {
class FuncOp;
} // namespace mlir::func

namespace merak {

/// @prefill and @decode, the text generator --merak-kv-cache makes, when
/// `module` has both; else empty.
llvm::SmallVector<mlir::func::FuncOp, 2>
generationFunctions(mlir::ModuleOp module);

/// `merak.id` of a forward op.
std::optional<int64_t> getForwardId(mlir::Operation *op);
/// `merak.grad_of` of a backward op.
std::optional<int64_t> getGradOf(mlir::Operation *op);
/// `merak.recompute_of` of a recomputed copy of a forward op.
std::optional<int64_t> getRecomputeOf(mlir::Operation *op);
/// `merak.stage` of an op.
std::optional<int64_t> getStage(mlir::Operation *op);

/// True for merak.sgd_update and merak.adamw_update.
bool isOptimizerUpdate(mlir::Operation *op);
/// The parameter an optimizer update reads (operand 0).
mlir::Value getUpdatedParam(mlir::Operation *update);
/// The gradient an optimizer update reads (operand 1).
mlir::Value getUpdateGradient(mlir::Operation *update);

/// The backward ops of `func` whose results only feed weight gradients:
/// every user is another such op of the same stage, an optimizer update's
/// gradient operand, the function's return or a tied-gradient sum. They
/// form the W pass of the zero-bubble split; every other backward op is in
/// B (gradients with respect to activations). An op with several results
/// where one feeds B (layer_norm_backward) stays in B. `groupOf` replaces
/// the stage (`merak.stage`) as what "the same stage" compares: the cost
/// model groups by layer, as if every layer boundary were a stage cut.
llvm::DenseSet<mlir::Operation *> weightGradientOps(
    mlir::func::FuncOp func,
    llvm::function_ref<std::optional<int64_t>(mlir::Operation *)> groupOf =
        nullptr);

/// True for an op that no pass gave a role: not forward (`merak.id`),
/// backward (`merak.grad_of`), a recomputed copy, an optimizer update, a
/// constant or a terminator. After --merak-spmdize these are the mesh
/// collectives and the ops of the local forms that partitioning built.
bool isUntagged(mlir::Operation *op);

/// The untagged ops of a training step that belong to its optimizer step:
/// unary collectives and reshapes whose results only reach optimizer updates
/// (a gradient's data-parallel all-reduce or reduce-scatter once
/// --merak-defer-grad-reductions has moved it there, a ZeRO slice of a
/// parameter), and the ops reading an update's results (ZeRO's gather of
/// the updated shard). Pipelines run them once per step with the updates.
llvm::DenseSet<mlir::Operation *> optimizerStepOps(mlir::func::FuncOp func);

/// The parameter argument `update` changes: its parameter operand before
/// the collectives and reshapes that slice it (ZeRO's shard).
mlir::Value getUpdatedParamSource(mlir::Operation *update);

/// The gradient `update` reads before the ops of `optimizerOps` reshard it:
/// its gradient operand with the optimizer step's collectives stripped.
mlir::Value
getUpdateGradientSource(mlir::Operation *update,
                        const llvm::DenseSet<mlir::Operation *> &optimizerOps);

/// Gives every untagged op of a training step outside optimizerStepOps()
/// the role of the ops around it, so that layer detection, the cost model,
/// stage assignment and outlining treat it like them: an op reading a
/// backward value, or whose results only reach backward ops, joins backward
/// (`merak.grad_of` of that value's op or of its first backward user);
/// every other op becomes a forward op with a fresh `merak.id`. Returns the
/// number of ops tagged.
unsigned tagUntaggedOps(mlir::func::FuncOp func);

/// Forward ops whose results are the same for every micro-batch and carry
/// no gradient: pure ops computed only from constants, buffers and other
/// such ops (a causal mask from a buffer, rotary-embedding tables). Like
/// constants, every pipeline stage that needs them computes them itself
/// instead of receiving them.
llvm::DenseSet<mlir::Operation *> invariantOps(mlir::func::FuncOp func);

} // namespace merak

#endif // MERAK_ANALYSIS_TRAINSTEP_H
