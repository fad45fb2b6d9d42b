//===- ProgramLowering.h - a merak function as a rank program -*- C++ -*-===//
#ifndef MERAK_RUNTIME_PROGRAMLOWERING_H
#define MERAK_RUNTIME_PROGRAMLOWERING_H

#include "merak/Runtime/Pipeline.h"
#include "merak/Runtime/Program.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/Support/LogicalResult.h"

namespace merak::runtime {

/// Lowers `func` to a planned program. Unsupported ops, argument roles and
/// malformed training signatures are reported as diagnostics on the op or
/// function (every unsupported op, not just the first).
mlir::FailureOr<Program> lowerToProgram(mlir::func::FuncOp func);

/// The element type and shape of a ranked tensor type merak-exec can hold.
mlir::FailureOr<TensorType> toTensorType(mlir::Type type);

/// Pipeline rank `pipelineRank`'s share of a module scheduled by
/// `--merak-pipeline-schedule`: the schedule (verified), its task list, its
/// stage functions lowered, and every stage's transfers. Errors are
/// diagnostics on the module.
mlir::FailureOr<PipelinePlan> lowerPipeline(mlir::ModuleOp module,
                                            int64_t pipelineRank);

} // namespace merak::runtime

#endif // MERAK_RUNTIME_PROGRAMLOWERING_H
