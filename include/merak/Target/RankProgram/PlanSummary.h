//===- PlanSummary.h - a partitioned module summarized as JSON -*- C++ -*-===//
//
// What `merak report` draws of a plan: the mesh and every rank's place in
// it, the layers and the pipeline stages holding them, each pipeline rank's
// memory (parameters, gradients, optimizer state, activations), the
// collectives of each layer with their bytes, and the schedule's tasks
// dated by its unit-time simulation. Written by `merak-translate
// --merak-to-plan-summary` as a `merak-plan-v1` JSON document
// (docs/reports.md).
//
//===----------------------------------------------------------------------===//

#ifndef MERAK_TARGET_RANKPROGRAM_PLANSUMMARY_H
#define MERAK_TARGET_RANKPROGRAM_PLANSUMMARY_H

#include "mlir/IR/BuiltinOps.h"
#include "mlir/Support/LogicalResult.h"
#include "llvm/ADT/StringRef.h"

#include <string>

namespace merak::runtime {

/// The summary of `module` (a training step, partitioned or not) as JSON
/// text; `source` names the module. Errors are diagnostics on the module.
mlir::FailureOr<std::string> planSummaryJson(mlir::ModuleOp module,
                                             llvm::StringRef source);

/// Registers `--merak-to-plan-summary` with mlir-translate's registry.
void registerToPlanSummaryTranslation();

} // namespace merak::runtime

#endif // MERAK_TARGET_RANKPROGRAM_PLANSUMMARY_H
