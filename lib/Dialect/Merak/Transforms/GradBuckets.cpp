//===- GradBuckets.cpp - data-parallel gradient reductions in buckets -----===//
//
// After partitioning, each gradient's data-parallel all-reduce sits where
// the optimizer reads it, at the end of the step. This pass moves every
// such reduction to just after its gradient is computed and packs
// neighbouring ones into flat buckets of about `bucket-mb` megabytes: one
// collective per bucket, issued while the rest of backward still runs (the
// runtime waits for a collective only where its result is first used).
// ZeRO's reduce-scatters of gradients and gathers of updated shards are
// packed the same way.
//
//===----------------------------------------------------------------------===//

#include "merak/Analysis/CostModel.h"
#include "merak/Analysis/TrainStep.h"
#include "merak/Dialect/Merak/IR/AttrNames.h"
#include "merak/Dialect/Merak/IR/MerakOps.h"
#include "merak/Dialect/Merak/Transforms/Passes.h"
#include "merak/Dialect/Merak/Transforms/Resharding.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Mesh/IR/MeshOps.h"
#include "mlir/IR/Builders.h"
#include "llvm/Support/Format.h"

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

/// Reshapes `v` to `shape` unless it has it.
Value reshaped(OpBuilder &b, Location loc, Value v, ArrayRef<int64_t> shape) {
  if (cast<RankedTensorType>(v.getType()).getShape() == shape)
    return v;
  return b.create<ReshapeOp>(loc, v, b.getDenseI64ArrayAttr(shape));
}

/// The slice [offset, offset + size) of `v` along `dim`.
Value sliceOf(OpBuilder &b, Location loc, Value v, int64_t dim, int64_t offset,
              int64_t size) {
  return b.create<SliceOp>(
      loc, v, b.getI64IntegerAttr(dim), b.getI64IntegerAttr(offset),
      b.getI64IntegerAttr(offset + size), b.getI64IntegerAttr(1));
}

struct GradBucketsPass : public merak::impl::GradBucketsBase<GradBucketsPass> {
  using GradBucketsBase::GradBucketsBase;

  /// The dp group's size.
  int64_t n = 1;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    MeshOp mesh = lookupMesh(module);
    if (!mesh)
      return;
    int64_t dpIdx = meshAxisIndex(mesh, "dp");
    if (dpIdx < 0)
      return;
    for (auto [name, mb] : {std::pair<StringRef, double>{"bucket-mb", bucketMb},
                            {"zero-bucket-mb", zeroBucketMb}})
      if (mb < 0) {
        std::string value;
        llvm::raw_string_ostream(value) << llvm::format("%g", mb);
        emitError(module.getLoc()) << name << " must be >= 0, got " << value;
        return signalPassFailure();
      }
    n = mesh.getShape()[dpIdx];
    for (auto func : module.getOps<func::FuncOp>())
      runOnFunction(func, static_cast<MeshAxis>(dpIdx));
  }

  void runOnFunction(func::FuncOp func, MeshAxis dp) {
    // Gradient reductions: all-reduces (and ZeRO's reduce-scatters) over
    // exactly the dp axis of values computed by backward ops, or of the
    // gradients a pipeline's optimizer function takes (`merak.grad`
    // arguments, accumulated over micro-batches).
    auto isGradient = [&](Value v) {
      if (Operation *def = v.getDefiningOp())
        return def->hasAttr(kGradOfAttr);
      auto arg = cast<BlockArgument>(v);
      return arg.getOwner()->isEntryBlock() &&
             func.getArgAttr(arg.getArgNumber(), kGradAttr);
    };
    auto overDp = [&](ArrayRef<MeshAxis> axes) {
      return axes.size() == 1 && axes[0] == dp;
    };
    SmallVector<AllReduceOp> reductions;
    SmallVector<ReduceScatterOp> scatters;
    SmallVector<AllGatherOp> gathers, paramGathers;
    func.walk([&](Operation *op) {
      if (auto r = dyn_cast<AllReduceOp>(op);
          r && overDp(r.getMeshAxes()) && isGradient(r.getInput()))
        reductions.push_back(r);
      // ZeRO 2 and 3: a gradient reduce-scattered into the rank's shard
      // along dimension 0.
      if (auto r = dyn_cast<ReduceScatterOp>(op);
          r && overDp(r.getMeshAxes()) && r.getScatterAxis() == 0 &&
          isGradient(r.getInput()))
        scatters.push_back(r);
      // ZeRO 1 and 2: an updated shard gathered along dimension 0 for the
      // next step (not ZeRO-3's gathers of a parameter before its use).
      if (auto g = dyn_cast<AllGatherOp>(op);
          g && overDp(g.getMeshAxes()) && g.getGatherAxis() == 0 &&
          g.getInput().getDefiningOp() &&
          isOptimizerUpdate(g.getInput().getDefiningOp()))
        gathers.push_back(g);
      // ZeRO-3: a parameter gathered right before its use. These are not
      // moved; only gathers standing together before the same readers
      // (a weight and its bias) share a bucket.
      if (auto g = dyn_cast<AllGatherOp>(op);
          g && overDp(g.getMeshAxes()) && g.getGatherAxis() == 0)
        if (auto arg = dyn_cast<BlockArgument>(g.getInput());
            arg && arg.getOwner()->isEntryBlock() &&
            func.getArgAttr(arg.getArgNumber(), kParamAttr))
          paramGathers.push_back(g);
    });
    for (AllReduceOp op : reductions)
      hoist(op);
    for (ReduceScatterOp op : scatters)
      hoist(op);
    Block &body = func.getBody().front();
    bucketize<AllReduceOp>(
        body, reductions, bucketMb,
        [](AllReduceOp a, AllReduceOp b) {
          return a.getReduction() == b.getReduction();
        },
        [&](ArrayRef<AllReduceOp> bucket) { packReductions(bucket); });
    bucketize<ReduceScatterOp>(
        body, scatters, zeroBucketMb,
        [](ReduceScatterOp a, ReduceScatterOp b) {
          return a.getReduction() == b.getReduction();
        },
        [&](ArrayRef<ReduceScatterOp> bucket) { packScatters(bucket); });
    for (auto *list : {&gathers, &paramGathers})
      bucketize<AllGatherOp>(
          body, *list, zeroBucketMb,
          [](AllGatherOp, AllGatherOp) { return true; },
          [&](ArrayRef<AllGatherOp> bucket) { packGathers(bucket); });
  }

  /// Packs neighbouring collectives of `ops` (in block order) into buckets
  /// of about `mb` megabytes of operands (0: none), one element type and
  /// `compatible` with each other, each placed where its last member is
  /// and before the first use of any member's result.
  template <typename OpT>
  void bucketize(Block &body, SmallVector<OpT> ops, double mb,
                 llvm::function_ref<bool(OpT, OpT)> compatible,
                 llvm::function_ref<void(ArrayRef<OpT>)> pack) {
    if (mb == 0 || ops.size() < 2)
      return;
    llvm::sort(ops, [](OpT a, OpT b) { return a->isBeforeInBlock(b); });
    auto limit = static_cast<int64_t>(mb * 1024 * 1024);
    SmallVector<OpT> bucket;
    int64_t bytes = 0;
    // The first use of any result in the bucket: the bucket's collective
    // must come before it.
    Operation *firstUse = nullptr;
    auto flush = [&] {
      if (bucket.size() > 1)
        pack(bucket);
      bucket.clear();
      bytes = 0;
      firstUse = nullptr;
    };
    for (OpT op : ops) {
      if (!bucket.empty() &&
          (!compatible(op, bucket.front()) ||
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

  /// One collective for the whole bucket, after its last member: each
  /// member's operand reshaped to `rowShape(width)` (its `width` elements
  /// in the layout the collective needs), the rows concatenated along
  /// `dim`, `collective` applied to them, and each member's part sliced
  /// back along `dim` and reshaped to its result.
  template <typename OpT>
  void packBucket(
      ArrayRef<OpT> bucket, int64_t dim, llvm::function_ref<int64_t(OpT)> width,
      llvm::function_ref<SmallVector<int64_t>(int64_t)> rowShape,
      llvm::function_ref<Value(OpBuilder &, OpT, Value, int64_t)> collective) {
    OpT last = bucket.back();
    OpBuilder b(last);
    b.setInsertionPointAfter(last);
    Location loc = last.getLoc();
    SmallVector<Value> rows;
    int64_t total = 0;
    for (OpT op : bucket) {
      rows.push_back(reshaped(b, loc, op.getInput(), rowShape(width(op))));
      total += width(op);
    }
    Value packed = b.create<ConcatOp>(loc, rows, b.getI64IntegerAttr(dim));
    Value done = collective(b, last, packed, total);
    int64_t offset = 0;
    for (OpT op : bucket) {
      Value part = sliceOf(b, loc, done, dim, offset, width(op));
      offset += width(op);
      auto t = cast<RankedTensorType>(op.getType());
      op.getResult().replaceAllUsesWith(reshaped(b, loc, part, t.getShape()));
    }
    for (OpT op : bucket)
      op.erase();
  }

  static int64_t resultElements(Operation *op) {
    return cast<RankedTensorType>(op->getResult(0).getType()).getNumElements();
  }

  /// One flat all-reduce of the gradients side by side.
  void packReductions(ArrayRef<AllReduceOp> bucket) {
    packBucket<AllReduceOp>(
        bucket, 0, [](AllReduceOp op) { return resultElements(op); },
        [](int64_t w) { return SmallVector<int64_t>{w}; },
        [](OpBuilder &b, AllReduceOp last, Value packed, int64_t) -> Value {
          return b.create<AllReduceOp>(last.getLoc(), packed.getType(),
                                       last.getMesh(), last.getMeshAxes(),
                                       packed, last.getReduction());
        });
  }

  /// One reduce-scatter. Each gradient viewed as `[n, numel / n]` has rank
  /// r's shard (its dimension-0 block r) as row r; the views side by side
  /// make one `[n, total / n]` tensor whose row r, reduce-scattered to rank
  /// r, holds every shard of that rank.
  void packScatters(ArrayRef<ReduceScatterOp> bucket) {
    packBucket<ReduceScatterOp>(
        bucket, 1, [](ReduceScatterOp op) { return resultElements(op); },
        [&](int64_t w) {
          return SmallVector<int64_t>{n, w};
        },
        [](OpBuilder &b, ReduceScatterOp last, Value packed,
           int64_t total) -> Value {
          auto mine = RankedTensorType::get(
              {1, total}, getElementTypeOrSelf(last.getType()));
          return b.create<ReduceScatterOp>(last.getLoc(), mine, last.getMesh(),
                                           last.getMeshAxes(), packed,
                                           last.getReduction(), APInt(64, 0));
        });
  }

  /// One all-gather: the shards side by side as one row, gathered into
  /// `[n, total]`, whose columns of each shard are the dimension-0 blocks
  /// of its tensor in rank order.
  void packGathers(ArrayRef<AllGatherOp> bucket) {
    packBucket<AllGatherOp>(
        bucket, 1,
        [](AllGatherOp op) {
          return cast<RankedTensorType>(op.getInput().getType())
              .getNumElements();
        },
        [](int64_t w) {
          return SmallVector<int64_t>{1, w};
        },
        [&](OpBuilder &b, AllGatherOp last, Value packed,
            int64_t total) -> Value {
          auto all = RankedTensorType::get(
              {n, total}, getElementTypeOrSelf(last.getType()));
          return b.create<AllGatherOp>(last.getLoc(), all, last.getMesh(),
                                       last.getMeshAxes(), packed,
                                       APInt(64, 0));
        });
  }
};

} // namespace
