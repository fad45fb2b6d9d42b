//===- TrainStep.cpp - structure of a training step -----------------------===//

#include "merak/Analysis/TrainStep.h"
#include "merak/Analysis/PipelineAttrNames.h"
#include "merak/Dialect/Merak/IR/AttrNames.h"
#include "merak/Dialect/Merak/IR/MerakOps.h"

#include "merak/Analysis/CostModel.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

using namespace mlir;

namespace {
std::optional<int64_t> intAttr(Operation *op, StringRef name) {
  if (auto attr = op->getAttrOfType<IntegerAttr>(name))
    return attr.getInt();
  return std::nullopt;
}
} // namespace

std::optional<int64_t> merak::getForwardId(Operation *op) {
  return intAttr(op, kIdAttr);
}
std::optional<int64_t> merak::getGradOf(Operation *op) {
  return intAttr(op, kGradOfAttr);
}
std::optional<int64_t> merak::getRecomputeOf(Operation *op) {
  return intAttr(op, kRecomputeOfAttr);
}
std::optional<int64_t> merak::getStage(Operation *op) {
  return intAttr(op, kStageAttr);
}

bool merak::isOptimizerUpdate(Operation *op) {
  return isa<SgdUpdateOp, AdamwUpdateOp>(op);
}
Value merak::getUpdatedParam(Operation *update) {
  return update->getOperand(0);
}
Value merak::getUpdateGradient(Operation *update) {
  return update->getOperand(1);
}

llvm::DenseSet<Operation *> merak::weightGradientOps(func::FuncOp func) {
  llvm::DenseSet<Operation *> weight;
  if (func.getBody().empty())
    return weight;
  Block &body = func.getBody().front();
  // Users come after their definitions in the block, so one backward walk
  // decides every op after all of its users.
  for (Operation &op : llvm::reverse(body)) {
    if (!getGradOf(&op) || getRecomputeOf(&op) || op.getNumResults() == 0)
      continue;
    std::optional<int64_t> stage = getStage(&op);
    bool onlyWeights = true;
    for (OpOperand &use : op.getUses()) {
      Operation *user = use.getOwner();
      if (isa<func::ReturnOp>(user) || user->hasAttr(kTiedSumAttr))
        continue;
      // (SGD without momentum reads the gradient as its buffer too.)
      if (isOptimizerUpdate(user) && use.getOperandNumber() != 0)
        continue;
      if (weight.contains(user) && getStage(user) == stage)
        continue;
      onlyWeights = false;
      break;
    }
    if (onlyWeights && !op.use_empty())
      weight.insert(&op);
  }
  return weight;
}

llvm::DenseSet<Operation *> merak::invariantOps(func::FuncOp func) {
  llvm::DenseSet<Operation *> invariant;
  if (func.getBody().empty())
    return invariant;
  Block &body = func.getBody().front();
  bool hasIds = llvm::any_of(
      body, [](Operation &op) { return getForwardId(&op).has_value(); });
  for (Operation &op : body.without_terminator()) {
    if (isConstantLike(&op) || op.getNumOperands() == 0 ||
        (hasIds && !getForwardId(&op)) || !isMemoryEffectFree(&op) ||
        isa<DropoutMaskOp>(op))
      continue;
    bool fixed = llvm::all_of(op.getOperands(), [&](Value v) {
      if (auto arg = dyn_cast<BlockArgument>(v))
        return arg.getOwner() == &body &&
               func.getArgAttr(arg.getArgNumber(), kBufferAttr);
      Operation *def = v.getDefiningOp();
      return isConstantLike(def) || invariant.contains(def);
    });
    if (fixed)
      invariant.insert(&op);
  }
  return invariant;
}
