//===- PipelineAttrNames.h - attributes of pipeline parallelism -*- C++ -*-===//
//
// The discardable attributes the pipeline passes write and the runtime
// reads: stage assignment, tied parameters, recomputation, the outlined
// stage functions and the schedule. docs/pipeline.md describes each.
//
//===----------------------------------------------------------------------===//
#ifndef MERAK_ANALYSIS_PIPELINEATTRNAMES_H
#define MERAK_ANALYSIS_PIPELINEATTRNAMES_H

#include "llvm/ADT/StringRef.h"

namespace merak {

// Ops of @train_step.
/// Pipeline stage (0 .. pp * virtual - 1) of an op.
inline constexpr llvm::StringLiteral kStageAttr = "merak.stage";
/// On a recomputed copy of a forward op: the `merak.id` of the original.
inline constexpr llvm::StringLiteral kRecomputeOfAttr = "merak.recompute_of";
/// On the adds that sum a tied parameter's gradient over its owners.
inline constexpr llvm::StringLiteral kTiedSumAttr = "merak.tied_sum";

// Arguments of @train_step and of the stage functions, optimizer updates.
/// Stages sharing a parameter (array<i64>): their gradients are summed.
inline constexpr llvm::StringLiteral kTiedAttr = "merak.tied";

// The module.
/// Partition summary: pp, virtual, stages, layers, stage_layers, recompute.
inline constexpr llvm::StringLiteral kPipelineAttr = "merak.pipeline";
/// The schedule: kind, microbatches, per-rank programs.
inline constexpr llvm::StringLiteral kPipelineScheduleAttr =
    "merak.pipeline_schedule";

// Outlined stage functions.
/// Pipeline rank of a stage function.
inline constexpr llvm::StringLiteral kRankAttr = "merak.rank";
/// Phase of a stage function: forward, forward_keep, recompute,
/// backward_input, backward_weight, optimizer.
inline constexpr llvm::StringLiteral kPhaseAttr = "merak.phase";
/// The values `merak.phase` takes.
inline constexpr llvm::StringLiteral kPhaseNames[] = {
    "forward",        "forward_keep",    "recompute",
    "backward_input", "backward_weight", "optimizer"};
/// On arguments and results: the identity of a value passed between stage
/// functions of the same micro-batch.
inline constexpr llvm::StringLiteral kValueAttr = "merak.value";
/// On @pipeline_step: the one-micro-batch driver calling the stage functions.
inline constexpr llvm::StringLiteral kPipelineDriverName = "pipeline_step";

} // namespace merak

#endif // MERAK_ANALYSIS_PIPELINEATTRNAMES_H
