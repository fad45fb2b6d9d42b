//===- LayerPatterns.h - ops that shape Megatron's layers ------*- C++ -*-===//
//
// What tensor parallelism recognises a layer by, shared by the passes that
// find layers (--merak-tensor-parallel) and prepare them
// (--merak-split-fused-projections).
//
//===----------------------------------------------------------------------===//

#ifndef MERAK_DIALECT_MERAK_TRANSFORMS_LAYERPATTERNS_H
#define MERAK_DIALECT_MERAK_TRANSFORMS_LAYERPATTERNS_H

#include "merak/Dialect/Merak/IR/MerakOps.h"

#include <optional>
#include <utility>

namespace merak {

/// Elementwise ops an MLP's hidden activation flows through between its
/// column-parallel and row-parallel linears (activation, gating product,
/// dropout).
inline bool isHiddenElementwise(mlir::Operation *op) {
  return mlir::isa<GeluOp, ReluOp, SiluOp, SigmoidOp, TanhOp, MulOp, DropoutOp>(
      op);
}

/// Arithmetic an activation written out op by op is made of (GELU's tanh
/// form as GPT-J's and GPT-NeoX's code spells it, `0.5 * x * (1 +
/// tanh(c * (x + 0.044715 * x^3)))`). Between an MLP's linears it belongs
/// to the activation only when every operand is the activation itself or
/// a scalar: an addition of a full-width tensor is a residual, not part of
/// the layer.
inline bool isHiddenArithmetic(mlir::Operation *op) {
  return mlir::isa<AddOp, SubOp, DivOp, PowOp>(op);
}

/// The parameter behind a linear's weight `v` (through sharding
/// annotations) and the dimension of it that `v`'s dimension 0 is: 0 for
/// the parameter itself, 1 for a section `select(param, 0, s)` of a fused
/// projection (--merak-split-fused-projections).
std::pair<mlir::Value, int64_t> weightParam(mlir::Value v);

/// A LoRA adapter on a linear (--merak-lora): the layer's output is
/// `out = base + linear(linear(x', down), up) * scale`, `x'` the base's
/// input or a dropout of it. Tensor parallelism splits the adapter with its
/// layer: `up` by rows with a column-parallel base, `down` by columns with
/// a row-parallel one.
struct LoraAdapter {
  LinearOp base, down, up;
  /// The ops of the adapter's branch that read the base's input: `down`,
  /// or the dropout before it.
  mlir::Operation *entry = nullptr;
  mlir::Value out;
};
std::optional<LoraAdapter> loraAdapterOf(LinearOp base);

} // namespace merak

#endif // MERAK_DIALECT_MERAK_TRANSFORMS_LAYERPATTERNS_H
