//===- DeferGradReductions.cpp - gradient reductions at the update --------===//
//
// After --merak-spmdize a gradient's reduction over the mesh (the
// data-parallel all-reduce, a reduce-scatter for ZeRO) sits wherever
// propagation found it cheapest: before an index_backward, before the add
// that sums a tied parameter's gradients, before a slice. A pipeline runs
// backward once per micro-batch but the optimizer once per step, and the
// reductions are linear, so they belong after the sum over micro-batches:
// just before the update. This pass moves each reduction whose result only
// reaches optimizer updates past the linear ops between it and the update,
// so that the update reads local contributions summed, then reduced.
//
// With `merge-only` (plans without pipelines, where a reduction issued early
// overlaps the rest of backward) only the reductions of a sum's
// contributions merge into one reduction of the sum, where the sum is.
//
//===----------------------------------------------------------------------===//

#include "merak/Analysis/TrainStep.h"
#include "merak/Dialect/Merak/IR/AttrNames.h"
#include "merak/Dialect/Merak/IR/MerakOps.h"
#include "merak/Dialect/Merak/Transforms/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Mesh/IR/MeshDialect.h"
#include "mlir/Dialect/Mesh/IR/MeshOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/IRMapping.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"
#include "llvm/ADT/SetVector.h"
#include "llvm/ADT/TypeSwitch.h"

namespace merak {
#define GEN_PASS_DEF_DEFERGRADREDUCTIONS
#include "merak/Dialect/Merak/Transforms/Passes.h.inc"
} // namespace merak

using namespace mlir;
using namespace mlir::mesh;
using namespace merak;

namespace {

using AxisMask = uint64_t;

AxisMask maskOf(ArrayRef<MeshAxis> axes) {
  AxisMask m = 0;
  for (MeshAxis a : axes)
    m |= AxisMask(1) << a;
  return m;
}

/// The mesh axes along which a value may differ between ranks: an
/// argument's split axes, widened by slices, narrowed by reductions and
/// gathers. Ops with side effects (random masks) may differ everywhere.
struct Variation {
  func::FuncOp func;
  llvm::DenseMap<Value, AxisMask> cache;

  AxisMask of(Value v) {
    auto it = cache.find(v);
    if (it != cache.end())
      return it->second;
    AxisMask m = compute(v);
    cache[v] = m;
    return m;
  }

  AxisMask compute(Value v) {
    if (auto arg = dyn_cast<BlockArgument>(v)) {
      auto sharding = func.getArgAttrOfType<MeshShardingAttr>(
          arg.getArgNumber(), kShardingAttr);
      AxisMask m = 0;
      if (sharding)
        for (MeshAxesAttr axes : sharding.getSplitAxes())
          m |= maskOf(axes.asArrayRef());
      return m;
    }
    Operation *def = v.getDefiningOp();
    AxisMask in = 0;
    for (Value operand : def->getOperands())
      in |= of(operand);
    return TypeSwitch<Operation *, AxisMask>(def)
        .Case<AllReduceOp, AllGatherOp>(
            [&](auto op) { return in & ~maskOf(op.getMeshAxes()); })
        .Case<AllSliceOp, ReduceScatterOp, AllToAllOp>(
            [&](auto op) { return in | maskOf(op.getMeshAxes()); })
        .Default([&](Operation *op) {
          if (op->getName().getDialectNamespace() ==
                  MeshDialect::getDialectNamespace() ||
              !isMemoryEffectFree(op))
            return ~AxisMask(0);
          return in;
        });
  }
};

struct DeferGradReductionsPass
    : public merak::impl::DeferGradReductionsBase<DeferGradReductionsPass> {
  using DeferGradReductionsBase::DeferGradReductionsBase;

  void runOnOperation() override {
    for (auto func : getOperation().getOps<func::FuncOp>())
      if (!func.getBody().empty())
        runOnFunction(func);
  }

  /// True when every use of `v` reaches optimizer updates (not as the
  /// parameter) through ops this pass can move a reduction past, or through
  /// collectives.
  static bool onlyFeedsUpdates(Value v, unsigned depth = 0) {
    if (v.use_empty() || depth > 64)
      return false;
    for (OpOperand &use : v.getUses()) {
      Operation *user = use.getOwner();
      if (isOptimizerUpdate(user)) {
        if (use.getOperandNumber() == 0)
          return false;
        continue;
      }
      bool carries = isa<ReshapeOp, PermuteOp, SliceOp, ReduceSumOp, AddOp,
                         SubOp, NegOp, IndexBackwardOp, AllSliceOp>(user) ||
                     isSumReduction(user) ||
                     (isa<MulOp, DivOp>(user) && use.getOperandNumber() == 0) ||
                     (isa<MulOp>(user) && use.getOperandNumber() == 1);
      if (!carries || (isa<IndexBackwardOp>(user) && use.getOperandNumber()))
        return false;
      for (Value r : user->getResults())
        if (!onlyFeedsUpdates(r, depth + 1))
          return false;
    }
    return true;
  }

  /// The one op all uses of `v` belong to, or null.
  static Operation *soleUser(Value v) {
    Operation *user = nullptr;
    for (Operation *u : v.getUsers()) {
      if (user && u != user)
        return nullptr;
      user = u;
    }
    return user;
  }

  /// A sum over mesh axes: an all-reduce or a reduce-scatter.
  static bool isSumReduction(Operation *op) {
    if (auto r = dyn_cast<AllReduceOp>(op))
      return r.getReduction() == ReductionKind::Sum;
    if (auto r = dyn_cast<ReduceScatterOp>(op))
      return r.getReduction() == ReductionKind::Sum;
    return false;
  }

  static ArrayRef<MeshAxis> axesOf(Operation *op) {
    if (auto r = dyn_cast<AllReduceOp>(op))
      return r.getMeshAxes();
    return cast<ReduceScatterOp>(op).getMeshAxes();
  }

  /// The same reduction (mesh, axes, scattered dimension).
  static bool sameReduction(Operation *a, Operation *b) {
    if (a->getName() != b->getName() || axesOf(a) != axesOf(b))
      return false;
    if (auto ra = dyn_cast<AllReduceOp>(a))
      return ra.getMesh() == cast<AllReduceOp>(b).getMesh();
    auto ra = cast<ReduceScatterOp>(a), rb = cast<ReduceScatterOp>(b);
    return ra.getMesh() == rb.getMesh() &&
           ra.getScatterAxis() == rb.getScatterAxis();
  }

  /// The other operand of a binary `user` of `v`.
  static Value otherOperand(Operation *user, Value v) {
    return user->getOperand(0) == v ? user->getOperand(1) : user->getOperand(0);
  }

  /// AS(x + y) = AS(x) + AS(y): a slice of a sum of gradient contributions
  /// (a tied parameter's) slices each contribution instead, so that what is
  /// accumulated and summed over stages is only the slice.
  void sliceContributions(func::FuncOp func) {
    SmallVector<AllSliceOp> work;
    func.walk([&](AllSliceOp op) { work.push_back(op); });
    while (!work.empty()) {
      AllSliceOp slice = work.pop_back_val();
      auto sum = slice.getInput().getDefiningOp<AddOp>();
      if (!sum || !sum->hasOneUse() || !onlyFeedsUpdates(slice.getResult()))
        continue;
      OpBuilder b(slice);
      IRMapping mapping;
      SmallVector<AllSliceOp> parts;
      for (Value operand : sum->getOperands()) {
        if (mapping.contains(operand))
          continue;
        auto part = b.create<AllSliceOp>(
            slice.getLoc(), slice.getType(), slice.getMesh(),
            slice.getMeshAxes(), operand, slice.getSliceAxisAttr().getValue());
        mapping.map(operand, part.getResult());
        parts.push_back(part);
      }
      Operation *clone = b.clone(*sum, mapping);
      clone->getResult(0).setType(slice.getType());
      slice.getResult().replaceAllUsesWith(clone->getResult(0));
      slice.erase();
      sum->erase();
      llvm::append_range(work, parts);
    }
  }

  void runOnFunction(func::FuncOp func) {
    if (!mergeOnly)
      sliceContributions(func);
    Variation variation;
    variation.func = func;
    // Until nothing moves: a move can let another reduction move (the two
    // contributions of a sum reach the same form one after the other).
    for (bool changed = true; changed;) {
      changed = false;
      SmallVector<Operation *> reductions;
      func.walk([&](Operation *op) {
        if (isSumReduction(op))
          reductions.push_back(op);
      });
      llvm::DenseSet<Operation *> erased;
      for (Operation *op : reductions) {
        if (erased.contains(op) || op->use_empty() ||
            !onlyFeedsUpdates(op->getResult(0)))
          continue;
        Operation *user = soleUser(op->getResult(0));
        if (!user || isOptimizerUpdate(user))
          continue;
        llvm::SmallSetVector<Operation *, 2> inputs;
        for (Value operand : user->getOperands())
          if (Operation *def = operand.getDefiningOp())
            inputs.insert(def);
        Operation *moved = nullptr;
        if (isa<AddOp, SubOp>(user))
          moved = deferPastSum(op, user);
        else if (mergeOnly)
          continue;
        else if (isSumReduction(user))
          moved = swapForSum(op, user);
        else if (isa<AllReduceOp>(op))
          moved = deferAllReduce(cast<AllReduceOp>(op), user, variation);
        if (!moved)
          continue;
        // The user and the reductions it read are replaced.
        changed = true;
        erased.insert(user);
        user->erase();
        for (Operation *def : inputs)
          if (isSumReduction(def) && def->use_empty()) {
            erased.insert(def);
            def->erase();
          }
      }
    }
    if (!mergeOnly)
      releaseToOptimizer(func);
  }

  /// The collectives now right before an update belong to the optimizer
  /// step, not to the backward op --merak-spmdize built them for: they lose
  /// its `merak.grad_of`.
  void releaseToOptimizer(func::FuncOp func) {
    func.walk([&](Operation *update) {
      if (!isOptimizerUpdate(update))
        return;
      Value v = getUpdateGradient(update);
      Operation *last = update;
      while (Operation *def = v.getDefiningOp()) {
        if (def->getNumOperands() != 1 ||
            def->getName().getDialectNamespace() !=
                MeshDialect::getDialectNamespace() ||
            llvm::any_of(def->getUsers(), [&](Operation *user) {
              return user != last && !isOptimizerUpdate(user);
            }))
          break;
        def->removeAttr(kGradOfAttr);
        def->removeAttr(kIdAttr);
        last = def;
        v = def->getOperand(0);
      }
    });
  }

  /// Moves `r` (a sum over mesh axes A) past its only user; returns the
  /// reduction now nearer the update, or null when the user does not allow
  /// it.
  Operation *deferAllReduce(AllReduceOp r, Operation *user,
                            Variation &variation) {
    Value x = r.getInput();
    ArrayRef<MeshAxis> axes = r.getMeshAxes();
    AxisMask a = maskOf(axes);
    OpBuilder b(user);
    Location loc = user->getLoc();
    auto reduce = [&](Value v, ArrayRef<MeshAxis> over) -> Operation * {
      return b.create<AllReduceOp>(loc, v.getType(), r.getMesh(), over, v,
                                   r.getReduction());
    };
    auto replace = [&](Operation *oldOp, Operation *newOp) {
      oldOp->getResult(0).replaceAllUsesWith(newOp->getResult(0));
      return newOp;
    };
    // f(AR(x)) = AR(f(x)) for an op linear in that operand whose other
    // operands are the same on every rank of the group.
    auto commute = [&]() -> Operation * {
      IRMapping mapping;
      mapping.map(r.getResult(), x);
      Operation *clone = b.clone(*user, mapping);
      return replace(user, reduce(clone->getResult(0), axes));
    };
    auto sameOnGroup = [&](Value v) { return (variation.of(v) & a) == 0; };

    // Which ops are linear in which operand is declared with the op
    // (`linearIn` in MerakOps.td).
    if (user->getNumResults() == 1) {
      bool linear = true, seen = false;
      for (OpOperand &use : user->getOpOperands()) {
        if (use.get() == r.getResult()) {
          linear &= !seen && isLinearIn(user, use.getOperandNumber());
          seen = true;
        } else {
          linear &= sameOnGroup(use.get());
        }
      }
      if (seen && linear)
        return commute();
    }
    if (auto slice = dyn_cast<AllSliceOp>(user)) {
      if (slice.getMesh() != r.getMesh())
        return nullptr;
      ArrayRef<MeshAxis> over = slice.getMeshAxes();
      AxisMask s = maskOf(over);
      // A slice over other axes commutes.
      if ((s & a) == 0)
        return commute();
      // A slice over some of the axes: reduce-scatter over those, then
      // all-reduce over the rest (AS_B AR_A = AR_{A\B} RS_B).
      if ((s & ~a) != 0)
        return nullptr;
      SmallVector<MeshAxis> rest;
      for (MeshAxis axis : axes)
        if (!llvm::is_contained(over, axis))
          rest.push_back(axis);
      Operation *scatter = b.create<ReduceScatterOp>(
          loc, slice.getType(), r.getMesh(), over, x, r.getReduction(),
          slice.getSliceAxisAttr().getValue());
      Operation *last =
          rest.empty() ? scatter : reduce(scatter->getResult(0), rest);
      replace(user, last);
      return last;
    }
    return nullptr;
  }

  /// R(x) + R(y) = R(x + y) (or -) for the same reduction R of inputs of
  /// the same type.
  Operation *deferPastSum(Operation *r, Operation *sum) {
    Value other = otherOperand(sum, r->getResult(0));
    Operation *r2 = other.getDefiningOp();
    if (!r2 || r2 == r || !isSumReduction(r2) || !sameReduction(r, r2) ||
        r2->getOperand(0).getType() != r->getOperand(0).getType() ||
        soleUser(r2->getResult(0)) != sum)
      return nullptr;
    OpBuilder b(sum);
    IRMapping mapping;
    mapping.map(r->getResult(0), r->getOperand(0));
    mapping.map(r2->getResult(0), r2->getOperand(0));
    Operation *local = b.clone(*sum, mapping);
    local->getResult(0).setType(r->getOperand(0).getType());
    IRMapping outer;
    outer.map(r->getOperand(0), local->getResult(0));
    Operation *moved = b.clone(*r, outer);
    sum->getResult(0).replaceAllUsesWith(moved->getResult(0));
    return moved;
  }

  /// Two reductions over different axes commute: Y(X(x)) = X(Y(x)). `x`
  /// moves outward past `y` only when that lets it reach a sum whose other
  /// operand is reduced the same way (a tied parameter's contributions),
  /// so the two never swap back and forth.
  Operation *swapForSum(Operation *x, Operation *y) {
    if ((maskOf(axesOf(x)) & maskOf(axesOf(y))) != 0 ||
        (isa<ReduceScatterOp>(x) && isa<ReduceScatterOp>(y)) ||
        !y->getResult(0).hasOneUse())
      return nullptr;
    Operation *sum = *y->getUsers().begin();
    if (!isa<AddOp, SubOp>(sum))
      return nullptr;
    Operation *other = otherOperand(sum, y->getResult(0)).getDefiningOp();
    if (!other || !isSumReduction(other) || !sameReduction(other, x) ||
        soleUser(other->getResult(0)) != sum)
      return nullptr;
    Value in = x->getOperand(0);
    OpBuilder b(y);
    IRMapping inner;
    inner.map(x->getResult(0), in);
    Operation *first = b.clone(*y, inner);
    if (isa<AllReduceOp>(y))
      first->getResult(0).setType(in.getType());
    if (other->getOperand(0).getType() != first->getResult(0).getType()) {
      first->erase();
      return nullptr;
    }
    IRMapping outer;
    outer.map(in, first->getResult(0));
    Operation *second = b.clone(*x, outer);
    second->getResult(0).setType(y->getResult(0).getType());
    y->getResult(0).replaceAllUsesWith(second->getResult(0));
    return second;
  }
};

} // namespace
