//===- PipelineInfo.cpp - the module's pipeline attributes ----------------===//

#include "merak/Analysis/PipelineInfo.h"
#include "merak/Analysis/PipelineAttrNames.h"

#include "mlir/IR/Builders.h"
#include "llvm/Support/FormatVariadic.h"

using namespace mlir;
using namespace merak;
using namespace merak::pipeline;

std::optional<PipelineInfo> PipelineInfo::read(ModuleOp module) {
  auto dict = module->getAttrOfType<DictionaryAttr>(kPipelineAttr);
  if (!dict)
    return std::nullopt;
  PipelineInfo info;
  auto getInt = [&](StringRef name, int64_t &out) {
    if (auto attr = dict.getAs<IntegerAttr>(name)) {
      out = attr.getInt();
      return true;
    }
    return false;
  };
  if (!getInt("pp", info.pp) || !getInt("virtual", info.virtualStages) ||
      !getInt("stages", info.stages) || info.pp < 1 || info.virtualStages < 1 ||
      info.stages != info.pp * info.virtualStages) {
    emitError(module.getLoc())
        << kPipelineAttr
        << " needs integers pp >= 1, virtual >= 1 and stages "
           "= pp * virtual";
    return std::nullopt;
  }
  getInt("layers", info.layers);
  if (auto firsts = dict.getAs<DenseI64ArrayAttr>("stage_layers"))
    info.stageLayers.assign(firsts.asArrayRef().begin(),
                            firsts.asArrayRef().end());
  if (auto flags = dict.getAs<DenseBoolArrayAttr>("recompute"))
    info.recompute.assign(flags.asArrayRef().begin(), flags.asArrayRef().end());
  info.recompute.resize(info.stages, false);
  return info;
}

void PipelineInfo::write(ModuleOp module) const {
  Builder b(module.getContext());
  SmallVector<NamedAttribute> entries = {
      b.getNamedAttr("pp", b.getI64IntegerAttr(pp)),
      b.getNamedAttr("virtual", b.getI64IntegerAttr(virtualStages)),
      b.getNamedAttr("stages", b.getI64IntegerAttr(stages)),
      b.getNamedAttr("layers", b.getI64IntegerAttr(layers)),
      b.getNamedAttr("stage_layers", b.getDenseI64ArrayAttr(stageLayers))};
  if (llvm::is_contained(recompute, true)) {
    SmallVector<bool> flags(recompute.begin(), recompute.end());
    entries.push_back(
        b.getNamedAttr("recompute", b.getDenseBoolArrayAttr(flags)));
  }
  module->setAttr(kPipelineAttr, b.getDictionaryAttr(entries));
}

DictionaryAttr merak::scheduleToAttr(MLIRContext *context,
                                     const Schedule &schedule) {
  Builder b(context);
  const PipelineShape &shape = schedule.shape;
  SmallVector<Attribute> ranks;
  for (const auto &program : schedule.ranks) {
    SmallVector<Attribute> tasks;
    for (const Task &t : program)
      tasks.push_back(b.getStringAttr(t.str()));
    ranks.push_back(b.getArrayAttr(tasks));
  }
  SmallVector<bool> recompute(shape.recompute.begin(), shape.recompute.end());
  recompute.resize(shape.stages(), false);
  SmallVector<NamedAttribute> entries = {
      b.getNamedAttr("kind",
                     b.getStringAttr(stringifyScheduleKind(schedule.kind))),
      b.getNamedAttr("microbatches", b.getI64IntegerAttr(shape.microbatches)),
      b.getNamedAttr("pp", b.getI64IntegerAttr(shape.pp)),
      b.getNamedAttr("virtual", b.getI64IntegerAttr(shape.virtualStages)),
      b.getNamedAttr("stages", b.getI64IntegerAttr(shape.stages())),
      b.getNamedAttr("split_backward", b.getBoolAttr(schedule.splitBackward)),
      b.getNamedAttr("recompute", b.getDenseBoolArrayAttr(recompute)),
      b.getNamedAttr("recompute_after_gradient",
                     b.getBoolAttr(schedule.recomputeAfterGradient)),
      b.getNamedAttr("ranks", b.getArrayAttr(ranks))};
  if (!schedule.priority.empty()) {
    entries.push_back(
        b.getNamedAttr("priority", b.getStringAttr(schedule.priority)));
    SmallVector<int64_t> limits(schedule.inflightLimit.begin(),
                                schedule.inflightLimit.end());
    entries.push_back(
        b.getNamedAttr("inflight_limit", b.getDenseI64ArrayAttr(limits)));
  }
  return b.getDictionaryAttr(entries);
}

FailureOr<Schedule> merak::scheduleFromAttr(ModuleOp module,
                                            DictionaryAttr dict) {
  auto error = [&]() {
    return emitError(module.getLoc()) << kPipelineScheduleAttr << ": ";
  };
  Schedule schedule;
  auto kindName = dict.getAs<StringAttr>("kind");
  std::optional<ScheduleKind> kind =
      kindName ? parseScheduleKind(kindName.getValue()) : std::nullopt;
  if (!kind) {
    error() << "needs a known kind";
    return failure();
  }
  schedule.kind = *kind;
  auto getInt = [&](StringRef name, int &out) {
    auto attr = dict.getAs<IntegerAttr>(name);
    if (!attr)
      return false;
    out = int(attr.getInt());
    return true;
  };
  PipelineShape &shape = schedule.shape;
  if (!getInt("microbatches", shape.microbatches) || !getInt("pp", shape.pp) ||
      !getInt("virtual", shape.virtualStages)) {
    error() << "needs integers microbatches, pp and virtual";
    return failure();
  }
  if (shape.pp < 1 || shape.virtualStages < 1 || shape.microbatches < 1) {
    error() << "pp, virtual and microbatches must be at least 1";
    return failure();
  }
  if (auto split = dict.getAs<BoolAttr>("split_backward"))
    schedule.splitBackward = split.getValue();
  if (auto after = dict.getAs<BoolAttr>("recompute_after_gradient"))
    schedule.recomputeAfterGradient = after.getValue();
  if (auto flags = dict.getAs<DenseBoolArrayAttr>("recompute"))
    shape.recompute.assign(flags.asArrayRef().begin(),
                           flags.asArrayRef().end());
  shape.recompute.resize(shape.stages(), false);
  if (auto priority = dict.getAs<StringAttr>("priority"))
    schedule.priority = priority.str();
  auto ranks = dict.getAs<ArrayAttr>("ranks");
  if (!ranks) {
    error() << "needs ranks, one array of tasks per rank";
    return failure();
  }
  for (auto [r, rank] : llvm::enumerate(ranks)) {
    auto tasks = dyn_cast<ArrayAttr>(rank);
    if (!tasks) {
      error() << "rank " << r << " is not an array of tasks";
      return failure();
    }
    std::vector<Task> program;
    for (Attribute task : tasks) {
      auto text = dyn_cast<StringAttr>(task);
      std::optional<Task> parsed =
          text ? Task::parse(text.getValue()) : std::nullopt;
      if (!parsed) {
        error() << "rank " << r << ": cannot read task " << task;
        return failure();
      }
      program.push_back(*parsed);
    }
    schedule.ranks.push_back(std::move(program));
  }
  return schedule;
}
