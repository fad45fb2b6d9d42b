//===- TrainStep.cpp - structure of a training step -----------------------===//

#include "merak/Analysis/TrainStep.h"
#include "merak/Analysis/PipelineAttrNames.h"
#include "merak/Dialect/Merak/IR/AttrNames.h"
#include "merak/Dialect/Merak/IR/MerakOps.h"

#include "merak/Analysis/CostModel.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Mesh/IR/MeshDialect.h"
#include "mlir/Dialect/Mesh/IR/MeshOps.h"
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
  return op->hasTrait<merak::trait::OptimizerUpdate>();
}
Value merak::getUpdatedParam(Operation *update) {
  return update->getOperand(0);
}
Value merak::getUpdateGradient(Operation *update) {
  return update->getOperand(1);
}

bool merak::isUntagged(Operation *op) {
  return !getForwardId(op) && !getGradOf(op) && !getRecomputeOf(op) &&
         !isOptimizerUpdate(op) && !isConstantLike(op) &&
         !op->hasTrait<OpTrait::IsTerminator>();
}

namespace {
/// An op that may carry a gradient (or a parameter) to an optimizer update
/// without computing anything: a collective or a reshape of one operand.
bool isCarrier(Operation *op) {
  return op->getNumOperands() == 1 && op->getNumResults() == 1 &&
         (op->getName().getDialectNamespace() ==
              mesh::MeshDialect::getDialectNamespace() ||
          isa<merak::ReshapeOp>(op));
}
} // namespace

llvm::DenseSet<Operation *> merak::optimizerStepOps(func::FuncOp func) {
  llvm::DenseSet<Operation *> ops;
  if (func.getBody().empty())
    return ops;
  Block &body = func.getBody().front();
  // Before the updates: users come after their definitions, so one
  // backward walk sees every user first.
  for (Operation &op : llvm::reverse(body.without_terminator())) {
    if (!isUntagged(&op) || !isCarrier(&op) || op.use_empty())
      continue;
    if (llvm::all_of(op.getUsers(), [&](Operation *user) {
          return isOptimizerUpdate(user) || ops.contains(user);
        }))
      ops.insert(&op);
  }
  // A slice of a gradient computed in backward shrinks it without
  // communicating: it stays with backward, so the gradient the optimizer
  // step starts from is as small as the update allows.
  for (Operation &op : body.without_terminator()) {
    if (!ops.contains(&op) || !isa<mesh::AllSliceOp>(op))
      continue;
    // (Not the slice of a sum: the sum may add contributions of several
    // stages, which the runtime adds before the optimizer step.)
    Operation *def = op.getOperand(0).getDefiningOp();
    if (def && !ops.contains(def) && !isOptimizerUpdate(def) &&
        !isConstantLike(def) && !isa<merak::AddOp>(def))
      ops.erase(&op);
  }
  // After them.
  for (Operation &op : body.without_terminator()) {
    if (!isUntagged(&op) || ops.contains(&op))
      continue;
    if (llvm::any_of(op.getOperands(), [&](Value v) {
          Operation *def = v.getDefiningOp();
          return def && (isOptimizerUpdate(def) || ops.contains(def));
        }))
      ops.insert(&op);
  }
  return ops;
}

Value merak::getUpdatedParamSource(Operation *update) {
  Value v = getUpdatedParam(update);
  while (Operation *def = v.getDefiningOp()) {
    if (!isCarrier(def))
      break;
    v = def->getOperand(0);
  }
  return v;
}

Value merak::getUpdateGradientSource(
    Operation *update, const llvm::DenseSet<Operation *> &optimizerOps) {
  Value g = getUpdateGradient(update);
  while (Operation *def = g.getDefiningOp()) {
    if (!optimizerOps.contains(def))
      break;
    g = def->getOperand(0);
  }
  return g;
}

unsigned merak::tagUntaggedOps(func::FuncOp func) {
  if (func.getBody().empty())
    return 0;
  Block &body = func.getBody().front();
  llvm::DenseSet<Operation *> optimizer = optimizerStepOps(func);
  llvm::DenseMap<Operation *, unsigned> position;
  int64_t nextId = 0;
  for (Operation &op : body) {
    position[&op] = position.size();
    if (std::optional<int64_t> id = getForwardId(&op))
      nextId = std::max(nextId, *id + 1);
  }
  auto untagged = [&](Operation *op) {
    return isUntagged(op) && !optimizer.contains(op);
  };

  // Ops whose results only reach backward ops (the local form of a loss's
  // backward reads forward values only), with the `merak.grad_of` of their
  // first backward user.
  llvm::DenseMap<Operation *, int64_t> backwardBound;
  for (Operation &op : llvm::reverse(body.without_terminator())) {
    if (!untagged(&op) || op.use_empty())
      continue;
    Operation *first = nullptr;
    std::optional<int64_t> gradOf;
    bool onlyBackward = true;
    for (Operation *user : op.getUsers()) {
      std::optional<int64_t> g = getGradOf(user);
      if (!g) {
        auto it = backwardBound.find(user);
        if (it != backwardBound.end())
          g = it->second;
      }
      if (!g) {
        onlyBackward = false;
        break;
      }
      if (!first || position[user] < position[first]) {
        first = user;
        gradOf = g;
      }
    }
    if (onlyBackward && gradOf)
      backwardBound[&op] = *gradOf;
  }

  Builder b(func.getContext());
  unsigned tagged = 0;
  for (Operation &op : body.without_terminator()) {
    if (!untagged(&op))
      continue;
    std::optional<int64_t> gradOf;
    // (Constants may carry the tag of whichever op canonicalization merged
    // them with; they say nothing.)
    for (Value operand : op.getOperands())
      if (Operation *def = operand.getDefiningOp())
        if (!isConstantLike(def) && (gradOf = getGradOf(def)))
          break;
    if (!gradOf) {
      auto it = backwardBound.find(&op);
      if (it != backwardBound.end())
        gradOf = it->second;
    }
    if (gradOf)
      op.setAttr(kGradOfAttr, b.getI64IntegerAttr(*gradOf));
    else
      op.setAttr(kIdAttr, b.getI64IntegerAttr(nextId++));
    ++tagged;
  }
  return tagged;
}

llvm::DenseSet<Operation *> merak::weightGradientOps(
    func::FuncOp func,
    llvm::function_ref<std::optional<int64_t>(Operation *)> groupOf) {
  llvm::DenseSet<Operation *> weight;
  auto group = [&](Operation *op) {
    return groupOf ? groupOf(op) : getStage(op);
  };
  if (func.getBody().empty())
    return weight;
  Block &body = func.getBody().front();
  llvm::DenseSet<Operation *> optimizer = optimizerStepOps(func);
  // Users come after their definitions in the block, so one backward walk
  // decides every op after all of its users.
  for (Operation &op : llvm::reverse(body)) {
    if (!getGradOf(&op) || getRecomputeOf(&op) || op.getNumResults() == 0)
      continue;
    std::optional<int64_t> stage = group(&op);
    bool onlyWeights = true;
    for (OpOperand &use : op.getUses()) {
      Operation *user = use.getOwner();
      if (isa<func::ReturnOp>(user) || user->hasAttr(kTiedSumAttr) ||
          optimizer.contains(user))
        continue;
      // (SGD without momentum reads the gradient as its buffer too.)
      if (isOptimizerUpdate(user) && use.getOperandNumber() != 0)
        continue;
      if (weight.contains(user) && group(user) == stage)
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

llvm::SmallVector<func::FuncOp, 2> merak::generationFunctions(ModuleOp module) {
  auto prefill = module.lookupSymbol<func::FuncOp>("prefill");
  auto decode = module.lookupSymbol<func::FuncOp>("decode");
  if (!prefill || !decode)
    return {};
  return {prefill, decode};
}
