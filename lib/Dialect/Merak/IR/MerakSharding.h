//===- MerakSharding.h - loop spaces of merak ops for sharding -*- C++ -*-===//
//
// Internal to the merak dialect library. Every merak op describes its
// iteration space once, as a `LoopSpace` (loops, indexing maps, which loops
// may be split, which loops leave a result partial); the ShardingInterface
// external model in MerakSharding.cpp derives propagation, annotation and
// spmdization from it. docs/dialect.md ("Sharding rules") lists the rules.
//
//===----------------------------------------------------------------------===//
#ifndef MERAK_LIB_DIALECT_MERAK_IR_MERAKSHARDING_H
#define MERAK_LIB_DIALECT_MERAK_IR_MERAKSHARDING_H

#include "mlir/Dialect/Mesh/IR/MeshOps.h"
#include "mlir/Dialect/Utils/StructuredOpsUtils.h"
#include "mlir/IR/AffineMap.h"
#include "llvm/ADT/SmallVector.h"

#include <optional>

namespace mlir {
class MLIRContext;
class Operation;
} // namespace mlir

namespace merak {

/// The iteration space of one op, einsum style.
struct LoopSpace {
  struct Loop {
    mlir::utils::IteratorType type = mlir::utils::IteratorType::parallel;
    /// For reduction loops. `generic` marks a reduction that never makes a
    /// result partial: either the loop is never split (softmax, norms) or
    /// the op's spmdize completes it with collectives (cross_entropy's
    /// class loop).
    mlir::mesh::ReductionKind kind = mlir::mesh::ReductionKind::Sum;
    /// False for loops that propagation never splits and spmdize rejects
    /// when split (softmax's dim, normalized dims, windows, ...).
    bool splittable = true;
  };

  llvm::SmallVector<Loop> loops;
  /// One map per operand, then one per result, from the loops to the
  /// tensor's dimensions. Result maps are projected permutations; operand
  /// maps may hold constant 0 (a broadcast or non-major reshape dimension)
  /// or a window expression (convolution, pooling), never split.
  llvm::SmallVector<mlir::AffineMap> maps;
  /// Per result, the loops that leave it partial when split: the
  /// non-generic reduction loops absent from its map.
  llvm::SmallVector<llvm::SmallVector<unsigned>> partialLoops;

  unsigned numLoops() const { return loops.size(); }
  llvm::SmallVector<mlir::utils::IteratorType> iteratorTypes() const;
  llvm::SmallVector<mlir::mesh::ReductionKind> reductionKinds() const;
};

/// The loop space of a merak op; nullopt for an op without a rule (the
/// unit test fails for such an op).
std::optional<LoopSpace> getLoopSpace(mlir::Operation *op);

/// Attaches the ShardingInterface external model to every merak op; called
/// from MerakDialect::initialize.
void attachShardingInterface(mlir::MLIRContext *ctx);

} // namespace merak

#endif // MERAK_LIB_DIALECT_MERAK_IR_MERAKSHARDING_H
