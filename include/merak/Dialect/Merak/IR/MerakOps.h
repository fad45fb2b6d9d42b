//===- MerakOps.h - ops of the merak dialect -------------------*- C++ -*-===//
#ifndef MERAK_DIALECT_MERAK_IR_MERAKOPS_H
#define MERAK_DIALECT_MERAK_IR_MERAKOPS_H

#include "merak/Dialect/Merak/IR/MerakDialect.h"
#include "merak/Interfaces/GradientOpInterface.h"
#include "mlir/Bytecode/BytecodeOpInterface.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/Interfaces/InferTypeOpInterface.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

#include "merak/Dialect/Merak/IR/MerakEnums.h.inc"

namespace merak::trait {
/// An optimizer's update of one parameter (`Merak_OptimizerUpdate` in
/// MerakOps.td): operand 0 is the parameter, operand 1 its gradient, and
/// result 0 the updated parameter; the others are its state.
template <typename ConcreteType>
class OptimizerUpdate
    : public mlir::OpTrait::TraitBase<ConcreteType, OptimizerUpdate> {};
} // namespace merak::trait

#define GET_ATTRDEF_CLASSES
#include "merak/Dialect/Merak/IR/MerakAttrs.h.inc"

#define GET_OP_CLASSES
#include "merak/Dialect/Merak/IR/MerakOps.h.inc"

namespace merak {
/// Broadcasts two shapes with NumPy rules. On failure returns the index of
/// the first disagreeing dimension (counted in `lhs`'s numbering from the
/// left of the broadcast result) through `badDim`.
bool broadcastShapes(llvm::ArrayRef<int64_t> lhs, llvm::ArrayRef<int64_t> rhs,
                     llvm::SmallVectorImpl<int64_t> &result,
                     int64_t *badDim = nullptr);

/// Whether `op` is linear in its operand `operand` when the others are held
/// fixed (`linearIn` in MerakOps.td): then a sum over ranks pending on that
/// operand may be taken after the op instead.
bool isLinearIn(mlir::Operation *op, unsigned operand);

/// Floating-point operations per result element of an op with no cost rule
/// of its own (`elementFlops` in MerakOps.td; 1 for ops of other dialects).
double elementFlops(mlir::Operation *op);

/// The element type an op computes in under mixed precision (`precision` in
/// MerakOps.td).
enum class PrecisionPolicy {
  Compute, // the low-precision compute type (matrix products)
  Fp32,    // float32 (norms, softmax, sums, losses)
  Promote, // the widest floating type of its tensor operands
};
PrecisionPolicy precisionPolicy(mlir::Operation *op);
} // namespace merak

#endif // MERAK_DIALECT_MERAK_IR_MERAKOPS_H
