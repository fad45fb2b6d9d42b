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

#include "mlir/IR/Operation.h"
#include "mlir/IR/Value.h"
#include "llvm/ADT/DenseSet.h"

#include <optional>

namespace mlir::func {
class FuncOp;
} // namespace mlir::func

namespace merak {

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
/// where one feeds B (layer_norm_backward) stays in B.
llvm::DenseSet<mlir::Operation *> weightGradientOps(mlir::func::FuncOp func);

/// Forward ops whose results are the same for every micro-batch and carry
/// no gradient: pure ops computed only from constants, buffers and other
/// such ops (a causal mask from a buffer, rotary-embedding tables). Like
/// constants, every pipeline stage that needs them computes them itself
/// instead of receiving them.
llvm::DenseSet<mlir::Operation *> invariantOps(mlir::func::FuncOp func);

} // namespace merak

#endif // MERAK_ANALYSIS_TRAINSTEP_H
