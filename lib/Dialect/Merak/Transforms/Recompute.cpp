//===- Recompute.cpp - recompute activations instead of keeping them ------===//
//
// Marks the forward ops whose results should not be kept for backward
// (whole layers, Merak's stage-aware share of them, or attention cores) and
// clones them just before the first backward op that reads them; backward
// then reads the clones, so only the inputs of the recomputed regions stay
// alive between forward and backward.
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

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/IRMapping.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"
#include "llvm/ADT/SetVector.h"

#include <cmath>
#include <map>

namespace merak {
#define GEN_PASS_DEF_RECOMPUTE
#include "merak/Dialect/Merak/Transforms/Passes.h.inc"
} // namespace merak

using namespace mlir;
using namespace merak;

namespace {

/// A forward op that may be recomputed: pure (a dropout mask must not be
/// drawn twice) and not a constant (constants are free anyway).
bool isRecomputable(Operation *op) {
  return getForwardId(op) && !isConstantLike(op) && isMemoryEffectFree(op) &&
         !isa<DropoutMaskOp>(op);
}

/// Ops an attention core is made of between its two matmuls.
bool isCoreOp(Operation *op) {
  return isa<AddOp, SubOp, MulOp, DivOp, WhereOp, NotOp, CompareOp, CastOp,
             DropoutOp, SoftmaxOp>(op);
}

struct RecomputePass : public merak::impl::RecomputeBase<RecomputePass> {
  using RecomputeBase::RecomputeBase;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    if (recompute != "none" && recompute != "full" &&
        recompute != "selective") {
      emitError(module.getLoc(),
                "recompute must be none, full or selective, got '")
          << std::string(recompute) << "'";
      return signalPassFailure();
    }
    if (ratio >= 0 && recompute != "full") {
      emitError(module.getLoc(), "recompute-ratio applies to recompute=full");
      return signalPassFailure();
    }
    if (ratio > 1) {
      emitError(module.getLoc(),
                "recompute-ratio must be between 0 and 1, got ")
          << double(ratio);
      return signalPassFailure();
    }
    auto func = module.lookupSymbol<func::FuncOp>(kTrainStepName);
    if (!func || func.getBody().empty()) {
      emitError(module.getLoc(), "no @")
          << kTrainStepName
          << "; build the training step with --merak-train first";
      return signalPassFailure();
    }
    bool hasBackward = false;
    for (Operation &op : func.getBody().front()) {
      if (getRecomputeOf(&op)) {
        op.emitError("@train_step recomputes already");
        return signalPassFailure();
      }
      hasBackward |= getGradOf(&op).has_value();
    }
    if (!hasBackward) {
      emitError(func.getLoc(),
                "@train_step has no backward ops (merak.grad_of); build "
                "it with --merak-train");
      return signalPassFailure();
    }
    if (recompute == "none")
      return;

    std::optional<PipelineInfo> info = PipelineInfo::read(module);
    if (!info && module->hasAttr(kPipelineAttr))
      return signalPassFailure();
    int64_t pp = info ? info->pp : 1;

    CostModel model;
    LayerAnalysis layers(func, model);
    llvm::SetVector<Operation *> marked;
    if (recompute == "full")
      markLayers(layers, pp, marked);
    else
      markAttentionCores(func, layers, marked);
    std::set<int64_t> recomputing = rewrite(func, layers, marked);

    if (info) {
      info->recompute.assign(info->stages, false);
      for (int64_t s : recomputing)
        if (s >= 0 && s < info->stages)
          info->recompute[s] = true;
      info->write(module);
    }
  }

  /// Whole layers: all of them, or with recompute-ratio the first share of
  /// every pipeline rank's layers given by Merak's stage-aware rule.
  void markLayers(const LayerAnalysis &layers, int64_t pp,
                  llvm::SetVector<Operation *> &marked) {
    std::map<int64_t, SmallVector<unsigned>> layersOfStage;
    for (auto [i, layer] : llvm::enumerate(layers.layers())) {
      Operation *first = layers.forwardOps()[layer.begin];
      layersOfStage[getStage(first).value_or(0)].push_back(i);
    }
    for (auto &[stage, indices] : layersOfStage) {
      double share = 1.0;
      if (ratio >= 0) {
        int64_t rank = stage % pp;
        share = rank == pp - 1
                    ? 0.0
                    : 1.0 - (1.0 - ratio) * double(pp - 1) / double(pp - rank);
        share = std::clamp(share, 0.0, 1.0);
      }
      unsigned count = unsigned(std::lround(share * indices.size()));
      for (unsigned k = 0; k < count; ++k) {
        const Layer &layer = layers.layers()[indices[k]];
        for (unsigned p = layer.begin; p < layer.end; ++p)
          if (isRecomputable(layers.forwardOps()[p]))
            marked.insert(layers.forwardOps()[p]);
      }
    }
  }

  /// Attention cores: from the matmul producing the scores through the ops
  /// between it and softmax (scale, mask) and after it (dropout) to the
  /// matmul with V, all within one layer.
  void markAttentionCores(func::FuncOp func, const LayerAnalysis &layers,
                          llvm::SetVector<Operation *> &marked) {
    // A fused core is one op.
    func.walk([&](MaskedAttentionOp attention) {
      if (isRecomputable(attention))
        marked.insert(attention);
    });
    func.walk([&](SoftmaxOp softmax) {
      if (!getForwardId(softmax))
        return;
      int layer = layers.layerOf(softmax);
      auto sameLayer = [&](Operation *op) {
        return op && getForwardId(op) && layers.layerOf(op) == layer;
      };
      llvm::SetVector<Operation *> region;
      region.insert(softmax);
      // Up to the scores matmul.
      bool foundScores = false;
      SmallVector<Operation *> work = {softmax.getInput().getDefiningOp()};
      while (!work.empty() && region.size() < 32) {
        Operation *op = work.pop_back_val();
        if (!sameLayer(op) || region.contains(op))
          continue;
        if (isa<MatmulOp>(op)) {
          region.insert(op);
          foundScores = true;
          continue;
        }
        if (!isCoreOp(op))
          continue;
        region.insert(op);
        for (Value operand : op->getOperands())
          work.push_back(operand.getDefiningOp());
      }
      // Down to the matmul with V, through a single chain of users.
      bool foundContext = false;
      Operation *op = softmax;
      while (region.size() < 48) {
        // Forward users in the layer; a dropout mask only reads the type.
        llvm::SmallSetVector<Operation *, 2> users;
        for (Operation *user : op->getUsers())
          if (sameLayer(user) && !isa<DropoutMaskOp>(user))
            users.insert(user);
        if (users.size() != 1)
          break;
        Operation *next = users.front();
        if (isa<MatmulOp>(next)) {
          region.insert(next);
          foundContext = true;
          break;
        }
        if (!isCoreOp(next))
          break;
        region.insert(next);
        op = next;
      }
      if (!foundScores || !foundContext)
        return;
      for (Operation *r : region)
        if (isRecomputable(r))
          marked.insert(r);
    });
  }

  /// Clones marked ops before the backward ops that read them, each layer
  /// from its own inputs (the checkpoints). Returns the stages that now
  /// recompute.
  std::set<int64_t> rewrite(func::FuncOp func, const LayerAnalysis &layers,
                            const llvm::SetVector<Operation *> &marked) {
    std::set<int64_t> stages;
    llvm::DenseMap<Operation *, Operation *> clones;
    OpBuilder b(func.getContext());
    std::function<Operation *(Operation *)> cloneOf = [&](Operation *op) {
      if (Operation *done = clones.lookup(op))
        return done;
      IRMapping mapping;
      // A value of another layer (or stage) is a checkpoint: kept, not
      // recomputed.
      for (Value operand : op->getOperands())
        if (Operation *def = operand.getDefiningOp())
          if (marked.contains(def) && getStage(def) == getStage(op) &&
              layers.layerOf(def) == layers.layerOf(op))
            mapping.map(operand,
                        cloneOf(def)->getResult(
                            cast<OpResult>(operand).getResultNumber()));
      Operation *clone = b.clone(*op, mapping);
      clone->removeAttr(kIdAttr);
      clone->setAttr(kRecomputeOfAttr, b.getI64IntegerAttr(*getForwardId(op)));
      stages.insert(getStage(op).value_or(0));
      clones[op] = clone;
      return clone;
    };
    SmallVector<Operation *> backward;
    for (Operation &op : func.getBody().front())
      if (getGradOf(&op))
        backward.push_back(&op);
    for (Operation *op : backward)
      for (OpOperand &operand : op->getOpOperands()) {
        Operation *def = operand.get().getDefiningOp();
        // Another stage's backward reads the value it received instead.
        if (!def || !marked.contains(def) || getStage(def) != getStage(op))
          continue;
        b.setInsertionPoint(op);
        operand.set(cloneOf(def)->getResult(
            cast<OpResult>(operand.get()).getResultNumber()));
      }
    return stages;
  }
};

} // namespace
