//===- PipelineInfo.h - the module's pipeline attributes --------*- C++ -*-===//
//
// Reads and writes `merak.pipeline` (what --merak-pipeline-partition and
// --merak-recompute decided) and `merak.pipeline_schedule` (what
// --merak-pipeline-schedule built), shared by the pipeline passes and the
// runtime.
//
//===----------------------------------------------------------------------===//
#ifndef MERAK_ANALYSIS_PIPELINEINFO_H
#define MERAK_ANALYSIS_PIPELINEINFO_H

#include "merak/Analysis/PipelineSchedule.h"

#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/BuiltinOps.h"

#include <optional>
#include <vector>

namespace merak {

/// The partition recorded in `merak.pipeline`.
struct PipelineInfo {
  int64_t pp = 1;
  int64_t virtualStages = 1;
  int64_t stages = 1;
  int64_t layers = 0;
  /// First layer of every stage.
  std::vector<int64_t> stageLayers;
  /// Per stage: true when it recomputes forward activations.
  std::vector<bool> recompute;

  /// Reads the module's `merak.pipeline`, if any (malformed: nullopt and a
  /// diagnostic on the module).
  static std::optional<PipelineInfo> read(mlir::ModuleOp module);
  void write(mlir::ModuleOp module) const;
};

/// `merak.pipeline_schedule` as a builtin dictionary, and back (a
/// diagnostic on `module` and failure when it is malformed).
mlir::DictionaryAttr scheduleToAttr(mlir::MLIRContext *context,
                                    const pipeline::Schedule &schedule);
mlir::FailureOr<pipeline::Schedule> scheduleFromAttr(mlir::ModuleOp module,
                                                     mlir::DictionaryAttr attr);

} // namespace merak

#endif // MERAK_ANALYSIS_PIPELINEINFO_H
