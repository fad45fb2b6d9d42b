//===- Resharding.h - collectives between two shardings ---------*- C++ -*-===//
//
// Helpers over upstream `mesh` shardings shared by the partitioning passes.
//
//===----------------------------------------------------------------------===//

#ifndef MERAK_DIALECT_MERAK_TRANSFORMS_RESHARDING_H
#define MERAK_DIALECT_MERAK_TRANSFORMS_RESHARDING_H

#include "mlir/Dialect/Mesh/IR/MeshOps.h"
#include "mlir/IR/Builders.h"

namespace merak {

/// Mesh axes each tensor dimension is split over, one entry per dimension.
using SplitAxes = llvm::SmallVector<llvm::SmallVector<mlir::mesh::MeshAxis>>;

/// The split axes of `sharding` padded to `rank` dimensions (a null
/// sharding is replicated).
SplitAxes splitAxesOf(mlir::mesh::MeshShardingAttr sharding, int64_t rank);

/// A sharding with trailing unsplit dimensions trimmed, so that equal
/// shardings are equal attributes.
mlir::mesh::MeshShardingAttr
makeSharding(mlir::MLIRContext *ctx, mlir::FlatSymbolRefAttr mesh,
             const SplitAxes &split,
             llvm::ArrayRef<mlir::mesh::MeshAxis> partial = {},
             mlir::mesh::ReductionKind kind = mlir::mesh::ReductionKind::Sum);

/// The fully replicated sharding on `mesh`.
mlir::mesh::MeshShardingAttr replicated(mlir::MLIRContext *ctx,
                                        mlir::FlatSymbolRefAttr mesh);

/// `sharding` in canonical form for a tensor of `rank` dimensions.
mlir::mesh::MeshShardingAttr normalize(mlir::mesh::MeshShardingAttr sharding,
                                       int64_t rank);

bool sameSharding(mlir::mesh::MeshShardingAttr a,
                  mlir::mesh::MeshShardingAttr b, int64_t rank);

/// Number of ranks in a group spanning `axes` of `mesh`.
int64_t groupSize(mlir::mesh::MeshOp mesh,
                  llvm::ArrayRef<mlir::mesh::MeshAxis> axes);

/// The shard of `global` one rank holds under `sharding`; fails with a
/// diagnostic when a split dimension is not divisible.
mlir::FailureOr<mlir::RankedTensorType>
localType(mlir::RankedTensorType global, mlir::mesh::MeshOp mesh,
          mlir::mesh::MeshShardingAttr sharding,
          llvm::function_ref<mlir::InFlightDiagnostic()> emitError);

/// Emits the collectives that turn `local` (a shard under `source`) into its
/// shard under `target`, at the builder's insertion point. `rank` is the
/// tensor rank. A partial sum whose target splits the same axes becomes one
/// `mesh.reduce_scatter`.
mlir::FailureOr<mlir::Value> reshard(mlir::OpBuilder &b, mlir::Location loc,
                                     mlir::mesh::MeshOp mesh, mlir::Value local,
                                     int64_t rank,
                                     mlir::mesh::MeshShardingAttr source,
                                     mlir::mesh::MeshShardingAttr target);

/// `v` without the `mesh.shard` annotations it passes through.
mlir::Value stripShards(mlir::Value v);

/// Whether `op` is one of the mesh collectives a partitioned program holds
/// (`all_reduce`, `all_gather`, `reduce_scatter`, `all_to_all`,
/// `all_slice`), each of one operand.
bool isCollective(mlir::Operation *op);

/// The module's mesh (`@mesh`), or null.
mlir::mesh::MeshOp lookupMesh(mlir::ModuleOp module);

/// Index of the mesh axis named `name` in `merak.axes`, or -1.
int64_t meshAxisIndex(mlir::mesh::MeshOp mesh, llvm::StringRef name);

/// Creates `mesh.mesh @mesh` with the given named axes at the start of the
/// module.
mlir::mesh::MeshOp
createMesh(mlir::ModuleOp module,
           llvm::ArrayRef<std::pair<llvm::StringRef, int64_t>> axes);

/// The result annotation (`mesh.shard` without `annotate_for_users`) of a
/// function argument, or null.
mlir::mesh::ShardOp argAnnotation(mlir::BlockArgument arg);

/// Sets the sharding an argument is defined with, replacing an earlier
/// annotation; every other use of the argument sees the annotated value.
void annotateArg(mlir::BlockArgument arg,
                 mlir::mesh::MeshShardingAttr sharding);

/// Annotates result `result` of its op with `sharding` (replacing an
/// earlier result annotation).
void annotateResult(mlir::OpResult result,
                    mlir::mesh::MeshShardingAttr sharding);

} // namespace merak

#endif // MERAK_DIALECT_MERAK_TRANSFORMS_RESHARDING_H
