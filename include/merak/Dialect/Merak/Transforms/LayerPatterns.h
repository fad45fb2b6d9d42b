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

namespace merak {

/// Elementwise ops an MLP's hidden activation flows through between its
/// column-parallel and row-parallel linears (activation, gating product,
/// dropout).
inline bool isHiddenElementwise(mlir::Operation *op) {
  return mlir::isa<GeluOp, ReluOp, SiluOp, SigmoidOp, TanhOp, MulOp, DropoutOp>(
      op);
}

} // namespace merak

#endif // MERAK_DIALECT_MERAK_TRANSFORMS_LAYERPATTERNS_H
