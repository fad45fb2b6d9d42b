//===- Passes.h - passes over the merak dialect ----------------*- C++ -*-===//
#ifndef MERAK_DIALECT_MERAK_TRANSFORMS_PASSES_H
#define MERAK_DIALECT_MERAK_TRANSFORMS_PASSES_H

#include "mlir/Dialect/Mesh/IR/MeshDialect.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/Pass/Pass.h"

namespace merak {

#define GEN_PASS_DECL
#include "merak/Dialect/Merak/Transforms/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "merak/Dialect/Merak/Transforms/Passes.h.inc"

/// Registers --merak-train and the other pass pipelines.
void registerMerakPipelines();

/// Adds --merak-train's passes with `options` (as the pipeline's option
/// string, `{optimizer=adamw lr=0.001 ...}` or empty) to `pm`.
mlir::LogicalResult buildTrainPipeline(mlir::OpPassManager &pm,
                                       llvm::StringRef options);

/// Adds --merak-parallelize's passes with `options` (its option string,
/// `dp=2 tp=2 ...`) to `pm`; bad options are an error.
mlir::LogicalResult buildParallelizePipeline(mlir::OpPassManager &pm,
                                             llvm::StringRef options);

} // namespace merak

#endif // MERAK_DIALECT_MERAK_TRANSFORMS_PASSES_H
