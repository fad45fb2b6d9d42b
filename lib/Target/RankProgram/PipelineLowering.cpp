//===- PipelineLowering.cpp - one rank's share of a pipeline schedule -----===//
//
// Reads `merak.pipeline_schedule`, checks it with the schedule verifier, and
// lowers the stage functions of one pipeline rank to rank programs. The
// values each stage passes to its neighbours are found from the functions'
// `merak.value` results and arguments, so every rank derives the same
// transfer lists from the same IR.
//
//===----------------------------------------------------------------------===//

#include "merak/Analysis/PipelineAttrNames.h"
#include "merak/Analysis/PipelineInfo.h"
#include "merak/Analysis/PipelineSchedule.h"
#include "merak/Dialect/Merak/IR/AttrNames.h"
#include "merak/Target/RankProgram/RankProgramLowering.h"

#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/Diagnostics.h"

#include <set>

using namespace mlir;

namespace merak::runtime {

namespace {

constexpr StagePhase kPhases[] = {
    StagePhase::Forward,        StagePhase::ForwardKeep,
    StagePhase::Recompute,      StagePhase::BackwardInput,
    StagePhase::BackwardWeight, StagePhase::Optimizer};

PipelineTask::Kind taskKind(pipeline::TaskKind kind) {
  switch (kind) {
  case pipeline::TaskKind::Forward:
    return PipelineTask::Kind::Forward;
  case pipeline::TaskKind::ForwardKeep:
    return PipelineTask::Kind::ForwardKeep;
  case pipeline::TaskKind::Recompute:
    return PipelineTask::Kind::Recompute;
  case pipeline::TaskKind::Backward:
    return PipelineTask::Kind::Backward;
  case pipeline::TaskKind::Weight:
    return PipelineTask::Kind::Weight;
  case pipeline::TaskKind::Send:
    return PipelineTask::Kind::Send;
  case pipeline::TaskKind::Recv:
    return PipelineTask::Kind::Recv;
  }
  return PipelineTask::Kind::Forward;
}

std::string functionName(int64_t stage, StagePhase phase) {
  return "stage" + std::to_string(stage) + "_" + stagePhaseName(phase);
}

/// The `merak.value` ids a function returns, with their types.
std::map<int64_t, Type> returnedValues(func::FuncOp func) {
  std::map<int64_t, Type> result;
  for (unsigned i = 0; i < func.getNumResults(); ++i)
    if (auto n = func.getResultAttrOfType<IntegerAttr>(i, kValueAttr))
      result[n.getInt()] = func.getResultTypes()[i];
  return result;
}

/// The `merak.value` ids a function takes.
std::set<int64_t> takenValues(func::FuncOp func) {
  std::set<int64_t> result;
  for (unsigned i = 0; i < func.getNumArguments(); ++i)
    if (auto n = func.getArgAttrOfType<IntegerAttr>(i, kValueAttr))
      result.insert(n.getInt());
  return result;
}

} // namespace

FailureOr<PipelinePlan> lowerPipeline(ModuleOp module, int64_t pipelineRank) {
  auto dict = module->getAttrOfType<DictionaryAttr>(kPipelineScheduleAttr);
  if (!dict)
    return emitError(module.getLoc())
           << "the module has no " << kPipelineScheduleAttr
           << ": run --merak-pipeline-schedule";
  FailureOr<pipeline::Schedule> schedule = scheduleFromAttr(module, dict);
  if (failed(schedule))
    return failure();
  if (llvm::Error e = pipeline::verifySchedule(*schedule)) {
    InFlightDiagnostic diag = emitError(module.getLoc())
                              << kPipelineScheduleAttr << " is not a valid "
                              << "schedule: ";
    diag << llvm::toString(std::move(e));
    return failure();
  }
  const pipeline::PipelineShape &shape = schedule->shape;
  PipelinePlan plan;
  plan.kind = pipeline::stringifyScheduleKind(schedule->kind).str();
  plan.pp = shape.pp;
  plan.virtualStages = shape.virtualStages;
  plan.stages = shape.stages();
  plan.microbatches = shape.microbatches;
  plan.splitBackward = schedule->splitBackward;
  plan.dynamic = schedule->kind == pipeline::ScheduleKind::Dynamic;
  plan.lossStage = plan.stages - 1;
  if (auto limits = dict.getAs<DenseI64ArrayAttr>("inflight_limit"))
    plan.inflightLimit.assign(limits.asArrayRef().begin(),
                              limits.asArrayRef().end());
  if (llvm::Expected<pipeline::Simulation> sim = pipeline::simulate(*schedule))
    plan.unitTimeBubble = sim->bubble();
  else
    llvm::consumeError(sim.takeError());
  if (pipelineRank < 0 || pipelineRank >= plan.pp)
    return emitError(module.getLoc())
           << "pipeline rank " << pipelineRank << " is outside pp=" << plan.pp;
  plan.rank = pipelineRank;
  for (const pipeline::Task &t : schedule->ranks[pipelineRank]) {
    PipelineTask task;
    task.kind = taskKind(t.kind);
    task.stage = t.stage;
    task.microbatch = t.microbatch;
    task.payload = taskKind(t.payload);
    task.peer = t.peer;
    task.text = t.str();
    plan.tasks.push_back(std::move(task));
  }

  // Every stage's functions: this rank's are lowered; all are read for the
  // transfers.
  std::vector<std::map<StagePhase, func::FuncOp>> byStage(plan.stages);
  for (int64_t s = 0; s < plan.stages; ++s)
    for (StagePhase phase : kPhases)
      if (auto f = module.lookupSymbol<func::FuncOp>(functionName(s, phase)))
        byStage[s][phase] = f;
  for (int64_t s = 0; s < plan.stages; ++s)
    for (StagePhase phase : {StagePhase::Forward, StagePhase::BackwardInput,
                             StagePhase::Optimizer})
      if (!byStage[s].count(phase))
        return emitError(module.getLoc())
               << "the schedule has " << plan.stages << " stages, but @"
               << functionName(s, phase)
               << " is missing: run --merak-pipeline-outline";

  // What crosses from stage s to s + 1 (forward) and s to s - 1 (backward):
  // the values one returns and the other takes.
  auto transfer = [&](int64_t from, int64_t to,
                      std::initializer_list<StagePhase> producers,
                      StageTransfer &out) -> LogicalResult {
    std::map<int64_t, Type> produced;
    for (StagePhase phase : producers) {
      auto it = byStage[from].find(phase);
      if (it != byStage[from].end())
        for (auto &[id, type] : returnedValues(it->second))
          produced[id] = type;
    }
    std::set<int64_t> taken;
    for (auto &[phase, f] : byStage[to])
      for (int64_t id : takenValues(f))
        taken.insert(id);
    for (auto &[id, type] : produced) {
      if (!taken.count(id))
        continue;
      FailureOr<TensorType> t = toTensorType(type);
      if (failed(t))
        return emitError(module.getLoc())
               << "value " << id << " of stage " << from
               << " has a type merak-exec cannot send: " << type;
      out.values.push_back(id);
      out.types.push_back(*t);
    }
    return success();
  };
  plan.forwardSends.resize(plan.stages);
  plan.backwardSends.resize(plan.stages);
  for (int64_t s = 0; s < plan.stages; ++s) {
    if (s + 1 < plan.stages &&
        failed(transfer(s, s + 1,
                        {StagePhase::Forward, StagePhase::ForwardKeep},
                        plan.forwardSends[s])))
      return failure();
    if (s > 0 && failed(transfer(s, s - 1, {StagePhase::BackwardInput},
                                 plan.backwardSends[s])))
      return failure();
  }

  // Tied parameters and where every state tensor lives, from any stage
  // function's arguments.
  for (int64_t s = 0; s < plan.stages; ++s)
    for (auto &[phase, f] : byStage[s])
      for (unsigned i = 0; i < f.getNumArguments(); ++i) {
        for (StringRef role : {kParamAttr, kBufferAttr, kOptStateAttr})
          if (auto name = f.getArgAttrOfType<StringAttr>(i, role))
            plan.stateStage.try_emplace(name.str(), s);
        auto tied = f.getArgAttrOfType<DenseI64ArrayAttr>(i, kTiedAttr);
        auto name = f.getArgAttrOfType<StringAttr>(i, kParamAttr);
        if (tied && name)
          plan.tied[name.str()].assign(tied.asArrayRef().begin(),
                                       tied.asArrayRef().end());
      }

  for (int64_t s = pipelineRank; s < plan.stages; s += plan.pp)
    for (auto &[phase, f] : byStage[s]) {
      FailureOr<Program> program = lowerToProgram(f);
      if (failed(program))
        return failure();
      plan.functions.push_back({s, phase, *std::move(program)});
    }
  return plan;
}

} // namespace merak::runtime
