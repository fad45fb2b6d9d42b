//===- PipelinePartition.cpp - ops of the training step to stages ---------===//
//
// Cuts @train_step's layers (lib/Analysis/Layers.h) into pipeline stages
// balanced by the cost model, and gives every op its stage: forward ops by
// layer, backward ops by the forward op they differentiate, optimizer
// updates by their parameter. Parameters read on several stages are tied.
//
//===----------------------------------------------------------------------===//

#include "merak/Analysis/CostModel.h"
#include "merak/Analysis/Layers.h"
#include "merak/Analysis/PipelineAttrNames.h"
#include "merak/Analysis/PipelineInfo.h"
#include "merak/Analysis/TrainStep.h"
#include "merak/Dialect/Merak/IR/AttrNames.h"
#include "merak/Dialect/Merak/IR/MerakOps.h"
#include "merak/Dialect/Merak/Transforms/Passes.h"
#include "merak/Dialect/Merak/Transforms/Resharding.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Mesh/IR/MeshDialect.h"
#include "mlir/Dialect/Mesh/IR/MeshOps.h"
#include "mlir/IR/Builders.h"
#include "llvm/ADT/SetVector.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/raw_ostream.h"

#include <set>

namespace merak {
#define GEN_PASS_DEF_PIPELINEPARTITION
#include "merak/Dialect/Merak/Transforms/Passes.h.inc"
} // namespace merak

using namespace mlir;
using namespace merak;

namespace {

std::string microseconds(double seconds) {
  return llvm::formatv("{0:f3}", seconds * 1e6).str();
}

struct PipelinePartitionPass
    : public merak::impl::PipelinePartitionBase<PipelinePartitionPass> {
  using PipelinePartitionBase::PipelinePartitionBase;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    auto func = module.lookupSymbol<func::FuncOp>(kTrainStepName);
    if (!func && !generationFunctions(module).empty()) {
      emitError(module.getLoc(), "text generation (@prefill, @decode) is "
                                 "partitioned by tp alone; drop the pipeline "
                                 "options");
      return signalPassFailure();
    }
    if (!func || func.getBody().empty()) {
      emitError(module.getLoc(), "no @")
          << kTrainStepName
          << "; build the training step with --merak-train first";
      return signalPassFailure();
    }
    if (failed(partition(module, func)))
      signalPassFailure();
  }

  LogicalResult checkStep(func::FuncOp func) {
    for (unsigned i = 0; i < func.getNumResults(); ++i)
      if (func.getResultAttr(i, kGradNormAttr))
        return emitError(
            func.getLoc(),
            "clip-grad-norm needs the gradient norm over every stage, which "
            "pipeline parallelism does not compute yet; build the step "
            "without clip-grad-norm");
      else if (func.getResultAttr(i, kNonFiniteGradsAttr))
        return emitError(
            func.getLoc(),
            "loss scaling needs to know whether a gradient of any stage "
            "overflowed, which pipeline parallelism does not compute yet; "
            "build the step with loss-scale=none (bf16 needs none)");
    bool hasBackward = false;
    for (Operation &op : func.getBody().front()) {
      if (op.hasAttr(kMicrobatchAttr))
        return op.emitError(
            "the step accumulates gradients over micro-batches inside "
            "@train_step; pipeline schedules run micro-batches themselves: "
            "build the step with microbatches=1");
      if (op.hasAttr(kRecomputeOfAttr))
        return op.emitError("partition before --merak-recompute");
      hasBackward |= getGradOf(&op).has_value();
    }
    if (!hasBackward)
      return emitError(func.getLoc(),
                       "@train_step has no backward ops (merak.grad_of); "
                       "build it with --merak-train");
    return success();
  }

  /// A step partitioned over a mesh (--merak-parallelize) is cut as is:
  /// every stage runs on its own copy of the mesh. Parameters split over
  /// the data-parallel axis (ZeRO-3) would be gathered before every use in
  /// every micro-batch; that is refused, as DeepSpeed refuses ZeRO-3 with
  /// pipelines.
  LogicalResult checkSharding(ModuleOp module, func::FuncOp func) {
    mesh::MeshOp meshOp = lookupMesh(module);
    int64_t dp = meshOp ? meshAxisIndex(meshOp, "dp") : -1;
    if (dp < 0)
      return success();
    for (unsigned i = 0; i < func.getNumArguments(); ++i) {
      auto name = func.getArgAttrOfType<StringAttr>(i, kParamAttr);
      auto sharding =
          func.getArgAttrOfType<mesh::MeshShardingAttr>(i, kShardingAttr);
      if (!name || !sharding)
        continue;
      for (mesh::MeshAxesAttr axes : sharding.getSplitAxes())
        if (llvm::is_contained(axes.asArrayRef(), mesh::MeshAxis(dp)))
          return emitError(func.getLoc(), "parameter '")
                 << name.getValue()
                 << "' is split over the data-parallel mesh axis (ZeRO-3): "
                    "pipeline stages would gather it before every use in "
                    "every micro-batch; use zero=0, 1 or 2 with pipelines";
    }
    return success();
  }

  LogicalResult partition(ModuleOp module, func::FuncOp func) {
    if (pp < 1)
      return emitError(module.getLoc(), "pp must be at least 1, got ")
             << int(pp);
    if (virtualStages < 1)
      return emitError(module.getLoc(), "virtual must be at least 1, got ")
             << int(virtualStages);
    if (failed(checkStep(func)) || failed(checkSharding(module, func)))
      return failure();
    // After --merak-spmdize: collectives and local forms join the forward
    // or backward ops around them.
    tagUntaggedOps(func);

    CostModel model;
    LayerAnalysis layers(func, model);
    unsigned numLayers = layers.layers().size();
    unsigned numStages = unsigned(pp) * unsigned(virtualStages);
    if (numLayers == 0)
      return emitError(func.getLoc(),
                       "@train_step has no forward ops to partition");
    if (numStages > numLayers) {
      if (virtualStages == 1)
        return emitError(func.getLoc(), "pp=")
               << int(pp) << " is larger than the number of layers ("
               << numLayers << "): every stage needs at least one layer";
      return emitError(func.getLoc(), "pp=")
             << int(pp) << " x virtual=" << int(virtualStages) << " = "
             << numStages << " stages, but the model has only " << numLayers
             << " layers";
    }

    // The first layer of every stage.
    SmallVector<unsigned> firsts;
    if (!stages.empty()) {
      if (stages.size() != numStages - 1)
        return emitError(module.getLoc(), "stages= gives ")
               << stages.size() << " boundaries; pp=" << int(pp)
               << " x virtual=" << int(virtualStages) << " needs "
               << numStages - 1
               << " (the first layer of every stage but the first)";
      firsts.push_back(0);
      for (int64_t first : stages) {
        if (first <= int64_t(firsts.back()) || first >= int64_t(numLayers))
          return emitError(module.getLoc(),
                           "stages= must be increasing layer indices "
                           "between 1 and ")
                 << numLayers - 1 << ", got " << first;
        firsts.push_back(unsigned(first));
      }
    } else if (virtualStages > 1) {
      // Interleaving assumes equal model chunks (Megatron).
      if (numLayers % numStages != 0)
        return emitError(func.getLoc(), "virtual=")
               << int(virtualStages) << " does not divide the " << numLayers
               << " layers into pp x virtual = " << numStages
               << " equal model chunks (interleaved schedules need equal "
                  "chunks; give stages= to cut by hand)";
      for (unsigned s = 0; s < numStages; ++s)
        firsts.push_back(s * (numLayers / numStages));
    } else {
      SmallVector<double> times, cuts;
      for (const Layer &layer : layers.layers()) {
        times.push_back(layer.forwardTime + layer.backwardTime);
        cuts.push_back(double(layer.outBytes));
      }
      firsts = balanceStages(times, cuts, numStages);
    }
    SmallVector<int64_t> stageOfLayer(numLayers, 0);
    for (unsigned s = 0; s < numStages; ++s) {
      unsigned end = s + 1 < numStages ? firsts[s + 1] : numLayers;
      for (unsigned l = firsts[s]; l < end; ++l)
        stageOfLayer[l] = s;
    }

    assignStages(func, layers, stageOfLayer);

    PipelineInfo info;
    info.pp = pp;
    info.virtualStages = virtualStages;
    info.stages = numStages;
    info.layers = numLayers;
    info.stageLayers.assign(firsts.begin(), firsts.end());
    info.write(module);

    if (report)
      printReport(func, layers, firsts);
    return success();
  }

  void assignStages(func::FuncOp func, const LayerAnalysis &layers,
                    ArrayRef<int64_t> stageOfLayer) {
    Builder b(func.getContext());
    Block &body = func.getBody().front();
    for (Operation &op : body) {
      op.removeAttr(kStageAttr);
      op.removeAttr(kTiedSumAttr);
      op.removeAttr(kTiedAttr);
    }
    for (unsigned i = 0; i < func.getNumArguments(); ++i)
      func.removeArgAttr(i, kTiedAttr);

    auto setStage = [&](Operation *op, int64_t stage) {
      op->setAttr(kStageAttr, b.getI64IntegerAttr(stage));
    };
    llvm::DenseMap<int64_t, int64_t> stageOfId;
    for (Operation *op : layers.forwardOps()) {
      int64_t stage = stageOfLayer[layers.layerOf(op)];
      // A collective resharding a forward value runs with the op that
      // computed it (spmdize puts it just before the value's reader).
      if (isCollective(op))
        if (Operation *def = op->getOperand(0).getDefiningOp())
          if (getForwardId(def))
            if (std::optional<int64_t> s = getStage(def))
              stage = *s;
      setStage(op, stage);
      stageOfId[*getForwardId(op)] = stage;
    }

    // The stages that read each parameter in forward; the first owns it.
    llvm::DenseMap<Value, std::set<int64_t>> readers;
    for (BlockArgument arg : func.getArguments()) {
      if (!func.getArgAttr(arg.getArgNumber(), kParamAttr))
        continue;
      for (Operation *user : arg.getUsers())
        if (std::optional<int64_t> stage = getStage(user))
          if (getForwardId(user))
            readers[arg].insert(*stage);
    }

    llvm::DenseSet<Operation *> optimizerOps = optimizerStepOps(func);
    for (Operation &op : body) {
      if (op.hasAttr(kStageAttr))
        continue;
      if (std::optional<int64_t> of = getGradOf(&op)) {
        auto it = stageOfId.find(*of);
        if (it != stageOfId.end())
          setStage(&op, it->second);
      } else if (isOptimizerUpdate(&op)) {
        auto it = readers.find(getUpdatedParamSource(&op));
        setStage(&op, it == readers.end() ? 0 : *it->second.begin());
      } else if (optimizerOps.contains(&op)) {
        // After an update (a gather of the new shard): the update's stage.
        for (Value operand : op.getOperands())
          if (Operation *def = operand.getDefiningOp())
            if (std::optional<int64_t> stage = getStage(def))
              setStage(&op, *stage);
      }
    }
    // Constants and anything else: the first stage among their users.
    for (Operation &op : llvm::reverse(body.without_terminator())) {
      if (op.hasAttr(kStageAttr))
        continue;
      std::optional<int64_t> first;
      for (Operation *user : op.getUsers())
        if (std::optional<int64_t> stage = getStage(user))
          first = first ? std::min(*first, *stage) : *stage;
      setStage(&op, first.value_or(0));
    }

    // Tied parameters: mark them, their updates, and the adds that sum
    // their gradients over stages.
    auto ret = cast<func::ReturnOp>(body.getTerminator());
    for (auto &[param, stageSet] : readers) {
      if (stageSet.size() < 2)
        continue;
      // A frozen parameter has no gradient to sum: each stage that reads
      // it loads its own copy, which never changes.
      if (auto frozen = dyn_cast<BlockArgument>(param);
          frozen && func.getArgAttr(frozen.getArgNumber(), kFrozenAttr))
        continue;
      SmallVector<int64_t> owners(stageSet.begin(), stageSet.end());
      auto arg = cast<BlockArgument>(param);
      func.setArgAttr(arg.getArgNumber(), kTiedAttr,
                      b.getDenseI64ArrayAttr(owners));
      for (Operation &user : body)
        if (isOptimizerUpdate(&user) && getUpdatedParamSource(&user) == param) {
          user.setAttr(kTiedAttr, b.getDenseI64ArrayAttr(owners));
          markTiedSums(getUpdateGradientSource(&user, optimizerOps),
                       owners.front());
        }
      auto name = func.getArgAttr(arg.getArgNumber(), kParamAttr);
      for (OpOperand &operand : ret->getOpOperands())
        if (func.getResultAttr(operand.getOperandNumber(), kGradAttr) == name)
          markTiedSums(operand.get(), owners.front());
    }
  }

  /// The stages whose backward ops contribute to gradient `g`, marking the
  /// adds that combine contributions of different stages.
  std::set<int64_t> markTiedSums(Value g, int64_t owner) {
    Operation *def = g.getDefiningOp();
    if (!def)
      return {};
    if (isa<AddOp>(def) && getGradOf(def)) {
      std::set<int64_t> lhs = markTiedSums(def->getOperand(0), owner);
      std::set<int64_t> rhs = markTiedSums(def->getOperand(1), owner);
      lhs.insert(rhs.begin(), rhs.end());
      if (lhs.size() > 1) {
        Builder b(def->getContext());
        def->setAttr(kTiedSumAttr, b.getUnitAttr());
        def->setAttr(kStageAttr, b.getI64IntegerAttr(owner));
      }
      return lhs;
    }
    if (std::optional<int64_t> stage = getStage(def))
      return {*stage};
    return {};
  }

  void printReport(func::FuncOp func, const LayerAnalysis &layers,
                   ArrayRef<unsigned> firsts) {
    llvm::raw_ostream &os = llvm::errs();
    unsigned numLayers = layers.layers().size();
    os << "merak-pipeline-partition: " << numLayers << " layers, pp=" << int(pp)
       << " virtual=" << int(virtualStages) << ", " << firsts.size()
       << " stages\n";
    os << llvm::formatv("{0,-6}{1,-12}{2,12}{3,12}{4,12}{5,12}{6,12}\n",
                        "layer", "ids", "fwd(us)", "bwd(us)", "params(B)",
                        "saved(B)", "out(B)");
    for (auto [i, layer] : llvm::enumerate(layers.layers()))
      os << llvm::formatv(
          "{0,-6}{1,-12}{2,12}{3,12}{4,12}{5,12}{6,12}\n", i,
          llvm::formatv("{0}-{1}", layer.firstId, layer.lastId).str(),
          microseconds(layer.forwardTime), microseconds(layer.backwardTime),
          layer.paramBytes, layer.savedBytes, layer.outBytes);

    // Per stage: time, distinct parameters, activations kept per
    // micro-batch (forward values read by its backward), bytes sent.
    unsigned numStages = firsts.size();
    SmallVector<double> time(numStages, 0);
    SmallVector<int64_t> params(numStages, 0), kept(numStages, 0),
        sent(numStages, 0);
    for (unsigned s = 0; s < numStages; ++s) {
      unsigned end = s + 1 < numStages ? firsts[s + 1] : numLayers;
      for (unsigned l = firsts[s]; l < end; ++l)
        time[s] +=
            layers.layers()[l].forwardTime + layers.layers()[l].backwardTime;
      if (s + 1 < numStages)
        sent[s] = layers.layers()[end - 1].outBytes;
    }
    llvm::DenseSet<std::pair<int64_t, Value>> counted;
    llvm::DenseSet<Operation *> invariant = invariantOps(func);
    Block &body = func.getBody().front();
    for (Operation &op : body) {
      std::optional<int64_t> stage = getStage(&op);
      if (!stage || !getForwardId(&op) || isConstantLike(&op) ||
          invariant.contains(&op))
        continue;
      for (Value operand : op.getOperands()) {
        auto arg = dyn_cast<BlockArgument>(operand);
        if (arg && func.getArgAttr(arg.getArgNumber(), kParamAttr) &&
            counted.insert({*stage, operand}).second)
          params[*stage] += tensorBytes(operand.getType());
      }
      for (Value result : op.getResults()) {
        std::set<int64_t> keepers;
        for (Operation *user : result.getUsers())
          if (getGradOf(user) || getRecomputeOf(user))
            if (std::optional<int64_t> s = getStage(user))
              keepers.insert(*s);
        for (int64_t s : keepers)
          kept[s] += tensorBytes(result.getType());
      }
    }
    os << llvm::formatv("{0,-6}{1,-6}{2,-10}{3,12}{4,12}{5,16}{6,12}\n",
                        "stage", "rank", "layers", "time(us)", "params(B)",
                        "activations(B)", "send(B)");
    for (unsigned s = 0; s < numStages; ++s) {
      unsigned end = s + 1 < numStages ? firsts[s + 1] : numLayers;
      os << llvm::formatv("{0,-6}{1,-6}{2,-10}{3,12}{4,12}{5,16}{6,12}\n", s,
                          s % pp,
                          llvm::formatv("{0}-{1}", firsts[s], end - 1).str(),
                          microseconds(time[s]), params[s], kept[s], sent[s]);
    }
  }
};

} // namespace
