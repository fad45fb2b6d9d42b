//===- RankProgramLowering.h - merak modules as rank programs -*- C++ -*-===//
//
// The compiler's last step: a partitioned module lowered to the runtime's
// `RankPrograms` (what merak-exec runs), and the translation
// `--merak-to-rank-program` that writes them as a rank-program file.
//
//===----------------------------------------------------------------------===//

#ifndef MERAK_TARGET_RANKPROGRAM_RANKPROGRAMLOWERING_H
#define MERAK_TARGET_RANKPROGRAM_RANKPROGRAMLOWERING_H

#include "merak/Runtime/Pipeline.h"
#include "merak/Runtime/Program.h"
#include "merak/Runtime/RankProgramFile.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/Support/LogicalResult.h"

#include "absl/status/statusor.h"

#include <memory>
#include <string>

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

/// Every rank's programs of `module`: the function `entry` (by default
/// `@train_step`, else `@forward`) and, when the module has a pipeline
/// schedule and no entry is named, each pipeline rank's plan. `source`
/// names the module in `RankPrograms::source`. Errors are diagnostics.
mlir::FailureOr<RankPrograms> lowerToRankPrograms(mlir::ModuleOp module,
                                                  llvm::StringRef entry,
                                                  llvm::StringRef source);

/// Parses the module in `path` ("-": standard input) and lowers its step
/// as `lowerToRankPrograms` does; each pipeline rank's plan is lowered when
/// asked for (`CompiledPlan::pipelinePlan`), so a rank lowers only its own.
/// MLIR's diagnostics go to stderr, every line after `linePrefix` and
/// written whole (the ranks of a run share stderr). A failure whose
/// diagnostics were printed has an empty message.
absl::StatusOr<std::unique_ptr<CompiledPlan>>
compileModuleFile(const std::string &path, const std::string &entry,
                  const std::string &linePrefix);

/// Registers `--merak-to-rank-program` with mlir-translate's registry.
void registerToRankProgramTranslation();

} // namespace merak::runtime

#endif // MERAK_TARGET_RANKPROGRAM_RANKPROGRAMLOWERING_H
