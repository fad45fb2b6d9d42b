//===- HoistBatchCollectives.cpp - batch-only collectives first -----------===//
//
// Partitioning leaves each collective where the op it serves stands. Some
// read nothing but the batch: a mean cross-entropy under data parallelism
// divides by the all-reduced count of its targets, once in the forward and
// once in the backward; an embedding's gradient reduced as rows gathers the
// token ids. Where they stand, each is a point at which every rank waits
// for the slowest before it can go on. Their operands are known when the
// step starts, so this pass moves each such collective, with the pure ops
// that compute its operand, to the top of its function and merges equal
// copies; the runtime issues it there and waits where the result is first
// read, by which time it has long arrived.
//
//===----------------------------------------------------------------------===//

#include "merak/Dialect/Merak/IR/AttrNames.h"
#include "merak/Dialect/Merak/Transforms/Passes.h"
#include "merak/Dialect/Merak/Transforms/Resharding.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Mesh/IR/MeshOps.h"
#include "mlir/IR/OperationSupport.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

#include "llvm/ADT/SetVector.h"

namespace merak {
#define GEN_PASS_DEF_HOISTBATCHCOLLECTIVES
#include "merak/Dialect/Merak/Transforms/Passes.h.inc"
} // namespace merak

using namespace mlir;
using namespace merak;

namespace {

struct HoistBatchCollectivesPass
    : public merak::impl::HoistBatchCollectivesBase<HoistBatchCollectivesPass> {
  using HoistBatchCollectivesBase::HoistBatchCollectivesBase;

  void runOnOperation() override {
    for (auto func : getOperation().getOps<func::FuncOp>())
      if (!func.isExternal())
        runOnFunction(func);
  }

  void runOnFunction(func::FuncOp func) {
    Block &entry = func.getBody().front();
    // Values known when the step starts: the batch, the buffers, and the
    // results of pure top-level ops that read only such values.
    DenseSet<Value> known;
    for (BlockArgument arg : entry.getArguments())
      if (func.getArgAttr(arg.getArgNumber(), kInputAttr) ||
          func.getArgAttr(arg.getArgNumber(), kBufferAttr))
        known.insert(arg);
    SmallVector<Operation *> collectives;
    for (Operation &op : entry.without_terminator()) {
      if (op.getNumRegions() != 0 || !isPure(&op) ||
          !llvm::all_of(op.getOperands(),
                        [&](Value v) { return known.contains(v); }))
        continue;
      known.insert(op.getResults().begin(), op.getResults().end());
      if (isCollective(&op))
        collectives.push_back(&op);
    }
    if (collectives.empty())
      return;

    // Each collective with the ops its operands come from, in block order.
    llvm::SetVector<Operation *> cone;
    SmallVector<Operation *> worklist(collectives.begin(), collectives.end());
    while (!worklist.empty()) {
      Operation *op = worklist.pop_back_val();
      if (!cone.insert(op))
        continue;
      for (Value v : op->getOperands())
        if (Operation *def = v.getDefiningOp())
          worklist.push_back(def);
    }
    SmallVector<Operation *> ordered(cone.begin(), cone.end());
    llvm::sort(ordered, [](Operation *a, Operation *b) {
      return a->isBeforeInBlock(b);
    });

    // To the top, in order; an op equal to one already there (same name,
    // attributes and operands, after earlier merges) is replaced by it.
    SmallVector<Operation *> placed;
    Operation *last = nullptr;
    for (Operation *op : ordered) {
      Operation *twin = nullptr;
      for (Operation *p : placed)
        if (OperationEquivalence::isEquivalentTo(
                op, p, OperationEquivalence::IgnoreLocations)) {
          twin = p;
          break;
        }
      if (twin) {
        op->replaceAllUsesWith(twin);
        op->erase();
        continue;
      }
      if (last)
        op->moveAfter(last);
      else
        op->moveBefore(&entry.front());
      last = op;
      placed.push_back(op);
    }
  }
};

} // namespace
