//===- GradBuckets.cpp - data-parallel gradient reductions in buckets -----===//
//
// After partitioning, each gradient's data-parallel all-reduce sits where
// the optimizer reads it, at the end of the step. This pass moves every
// such reduction to just after its gradient is computed and packs
// neighbouring ones into flat buckets of about `bucket-mb` megabytes: one
// collective per bucket, issued while the rest of backward still runs (the
// runtime waits for a collective only where its result is first used).
//
//===----------------------------------------------------------------------===//

#include "merak/Analysis/CostModel.h"
#include "merak/Dialect/Merak/IR/AttrNames.h"
#include "merak/Dialect/Merak/IR/MerakOps.h"
#include "merak/Dialect/Merak/Transforms/Passes.h"
#include "merak/Dialect/Merak/Transforms/Resharding.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Mesh/IR/MeshOps.h"
#include "mlir/IR/Builders.h"

namespace merak {
#define GEN_PASS_DEF_GRADBUCKETS
#include "merak/Dialect/Merak/Transforms/Passes.h.inc"
} // namespace merak

using namespace mlir;
using namespace mlir::mesh;
using namespace merak;

namespace {

/// Moves `op` to just after the definition of its input.
void hoist(Operation *op) {
  Value in = op->getOperand(0);
  if (auto arg = dyn_cast<BlockArgument>(in))
    op->moveBefore(&arg.getOwner()->front());
  else
    op->moveAfter(in.getDefiningOp());
}

struct GradBucketsPass : public merak::impl::GradBucketsBase<GradBucketsPass> {
  using GradBucketsBase::GradBucketsBase;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    MeshOp mesh = lookupMesh(module);
    if (!mesh)
      return;
    int64_t dpIdx = meshAxisIndex(mesh, "dp");
    if (dpIdx < 0)
      return;
    if (bucketMb < 0) {
      module.emitError("bucket-mb must be >= 0, got ") << double(bucketMb);
      return signalPassFailure();
    }
    for (auto func : module.getOps<func::FuncOp>())
      runOnFunction(func, static_cast<MeshAxis>(dpIdx));
  }

  void runOnFunction(func::FuncOp func, MeshAxis dp) {
    // Gradient reductions: all-reduces over exactly the dp axis of values
    // computed by backward ops, or of the gradients a pipeline's optimizer
    // function takes (`merak.grad` arguments, accumulated over
    // micro-batches).
    auto isGradient = [&](Value v) {
      if (Operation *def = v.getDefiningOp())
        return def->hasAttr(kGradOfAttr);
      auto arg = cast<BlockArgument>(v);
      return arg.getOwner()->isEntryBlock() &&
             func.getArgAttr(arg.getArgNumber(), kGradAttr);
    };
    SmallVector<AllReduceOp> reductions;
    func.walk([&](AllReduceOp op) {
      if (op.getMeshAxes().size() == 1 && op.getMeshAxes()[0] == dp &&
          isGradient(op.getInput()))
        reductions.push_back(op);
    });
    for (AllReduceOp op : reductions)
      hoist(op);
    if (bucketMb == 0 || reductions.size() < 2)
      return;

    // Buckets of neighbouring reductions, in the order backward produces
    // their gradients.
    Block &body = func.getBody().front();
    llvm::sort(reductions, [](AllReduceOp a, AllReduceOp b) {
      return a->isBeforeInBlock(b);
    });
    auto limit = static_cast<int64_t>(bucketMb * 1024 * 1024);
    SmallVector<AllReduceOp> bucket;
    int64_t bytes = 0;
    // The first use of any reduction in the bucket: the bucket's collective
    // must come before it.
    Operation *firstUse = nullptr;
    auto flush = [&] {
      if (bucket.size() > 1)
        pack(bucket);
      bucket.clear();
      bytes = 0;
      firstUse = nullptr;
    };
    for (AllReduceOp op : reductions) {
      if (!bucket.empty() &&
          (op.getReduction() != bucket.front().getReduction() ||
           getElementTypeOrSelf(op.getType()) !=
               getElementTypeOrSelf(bucket.front().getType()) ||
           (firstUse && !op->isBeforeInBlock(firstUse))))
        flush();
      for (Operation *user : op->getUsers()) {
        Operation *u = body.findAncestorOpInBlock(*user);
        if (u && (!firstUse || u->isBeforeInBlock(firstUse)))
          firstUse = u;
      }
      bucket.push_back(op);
      bytes += tensorBytes(op.getInput().getType());
      if (bytes >= limit)
        flush();
    }
    flush();
  }

  /// One flat all-reduce for the whole bucket, after its last gradient.
  void pack(ArrayRef<AllReduceOp> bucket) {
    AllReduceOp last = bucket.back();
    OpBuilder b(last);
    b.setInsertionPointAfter(last);
    Location loc = last.getLoc();
    SmallVector<Value> flat;
    for (AllReduceOp op : bucket) {
      auto t = cast<RankedTensorType>(op.getInput().getType());
      flat.push_back(t.getRank() == 1
                         ? op.getInput()
                         : b.create<ReshapeOp>(
                               loc, op.getInput(),
                               b.getDenseI64ArrayAttr({t.getNumElements()})));
    }
    Value packed = b.create<ConcatOp>(loc, flat, b.getI64IntegerAttr(0));
    Value reduced =
        b.create<AllReduceOp>(loc, packed.getType(), last.getMesh(),
                              last.getMeshAxes(), packed, last.getReduction());
    int64_t offset = 0;
    for (AllReduceOp op : bucket) {
      auto t = cast<RankedTensorType>(op.getType());
      Value part = b.create<SliceOp>(
          loc, reduced, b.getI64IntegerAttr(0), b.getI64IntegerAttr(offset),
          b.getI64IntegerAttr(offset + t.getNumElements()),
          b.getI64IntegerAttr(1));
      offset += t.getNumElements();
      Value shaped = t.getRank() == 1
                         ? part
                         : b.create<ReshapeOp>(
                               loc, part, b.getDenseI64ArrayAttr(t.getShape()));
      op.getResult().replaceAllUsesWith(shaped);
    }
    for (AllReduceOp op : bucket)
      op.erase();
  }
};

} // namespace
