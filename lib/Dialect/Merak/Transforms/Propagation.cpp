//===- Propagation.cpp - sharding propagation over a training step --------===//
//
// Completes `mesh.shard` annotations from a few seeds, through every op's
// ShardingInterface, as upstream --sharding-propagation does, with two
// changes that a training step needs:
//   - sweeps run forward first (then backward, then forward again), so the
//     batch split of the inputs reaches the weight-gradient contractions
//     before the optimizer's view of the parameters reaches them from
//     below: a gradient is then a partial sum reduced once, instead of its
//     operands being gathered;
//   - among the sharding options an op admits (from each subset of its
//     operands' and users' shardings), the one that moves the fewest bytes
//     wins, so conflicting annotations resolve by cost, not by operand
//     order.
// A result's own annotation is binding; what its users want is a hint.
//
//===----------------------------------------------------------------------===//

#include "merak/Dialect/Merak/IR/AttrNames.h"
#include "merak/Dialect/Merak/IR/MerakOps.h"
#include "merak/Dialect/Merak/Transforms/Passes.h"
#include "merak/Dialect/Merak/Transforms/Resharding.h"
#include "merak/Hardware/CollectiveCost.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Mesh/IR/MeshOps.h"
#include "mlir/Dialect/Mesh/Interfaces/ShardingInterface.h"
#include "mlir/IR/Builders.h"

namespace merak {
#define GEN_PASS_DEF_SHARDINGPROPAGATION
#include "merak/Dialect/Merak/Transforms/Passes.h.inc"
} // namespace merak

using namespace mlir;
using namespace mlir::mesh;
using namespace merak;

namespace {

int64_t rankOf(Value v) {
  return cast<RankedTensorType>(v.getType()).getRank();
}

/// Whether `s` splits no dimension of a rank-`rank` tensor.
bool splitsNothing(MeshShardingAttr s, int64_t rank) {
  return llvm::all_of(splitAxesOf(s, rank),
                      [](const auto &a) { return a.empty(); });
}

/// Bytes one rank sends to move a tensor of `type` from `from` to `to`
/// (a null sharding is replicated).
double reshardBytes(MeshOp mesh, RankedTensorType type, MeshShardingAttr from,
                    MeshShardingAttr to) {
  int64_t rank = type.getRank();
  if (!from || sameSharding(from, to, rank))
    return 0;
  SplitAxes src = splitAxesOf(from, rank), dst = splitAxesOf(to, rank);
  double local = static_cast<double>(type.getNumElements()) *
                 ((type.getElementTypeBitWidth() + 7) / 8);
  for (int64_t d = 0; d < rank; ++d)
    local /= static_cast<double>(groupSize(mesh, src[d]));
  double bytes = 0;
  // Partial sums are all-reduced.
  SmallVector<MeshAxis> reduced;
  for (MeshAxis a : from.getPartialAxes())
    if (!to || !llvm::is_contained(to.getPartialAxes(), a))
      reduced.push_back(a);
  if (!reduced.empty())
    bytes += collectiveBytes(CollectiveKind::AllReduce,
                             groupSize(mesh, reduced), local, local);
  // Dropped split axes are gathered; slices are free.
  for (int64_t d = 0; d < rank; ++d) {
    size_t common = 0;
    while (common < src[d].size() && common < dst[d].size() &&
           src[d][common] == dst[d][common])
      ++common;
    SmallVector<MeshAxis> dropped(src[d].begin() + common, src[d].end());
    if (!dropped.empty()) {
      int64_t n = groupSize(mesh, dropped);
      bytes += collectiveBytes(CollectiveKind::AllGather, n, local,
                               local * static_cast<double>(n));
      local *= static_cast<double>(n);
    }
  }
  return bytes;
}

/// Weight of bytes that move a function argument (a parameter, optimizer
/// state): the plan split those to save memory.
constexpr double kArgumentPenalty = 16;

struct Propagator {
  func::FuncOp func;
  MeshOp mesh;
  FlatSymbolRefAttr meshRef;
  llvm::DenseSet<Operation *> decided;

  /// The sharding `v` is defined with, or null.
  MeshShardingAttr defined(Value v) {
    for (Operation *user : v.getUsers())
      if (auto s = dyn_cast<ShardOp>(user); s && !s.getAnnotateForUsers())
        return s.getShard();
    if (auto s = v.getDefiningOp<ShardOp>())
      return s.getShard();
    return nullptr;
  }

  /// What the users of `v` ask for, if they agree.
  MeshShardingAttr wanted(Value v) {
    MeshShardingAttr found;
    for (Operation *user : v.getUsers()) {
      auto s = dyn_cast<ShardOp>(user);
      if (!s)
        continue;
      if (!s.getAnnotateForUsers()) {
        if (MeshShardingAttr w = wanted(s.getResult()))
          return w;
        continue;
      }
      if (found && !sameSharding(found, s.getShard(), rankOf(v)))
        return nullptr;
      found = s.getShard();
    }
    return found;
  }

  /// Partial sums stay partial through ops that are linear in them: a sum
  /// or difference of partial sums over the same axes, split alike, and a
  /// reshape or permute of a partial sum that is not split. The reduction
  /// is left to the readers of the result: one all-reduce where each
  /// operand would take one (the input gradients of q, k and v projections
  /// summed).
  bool keepsPartialSum(Operation *op, ArrayRef<MeshShardingAttr> operands) {
    if (!isa<AddOp, SubOp, ReshapeOp, PermuteOp>(op) ||
        defined(op->getResult(0)))
      return false;
    MeshShardingAttr first = operands[0];
    if (!first || first.getPartialAxes().empty() ||
        first.getPartialType() != ReductionKind::Sum)
      return false;
    Value result = op->getResult(0);
    bool unsplit = splitsNothing(first, rankOf(op->getOperand(0)));
    MeshShardingAttr target;
    if (isa<ReshapeOp, PermuteOp>(op)) {
      if (!unsplit)
        return false;
      target =
          makeSharding(op->getContext(), meshRef, SplitAxes(rankOf(result)),
                       first.getPartialAxes(), ReductionKind::Sum);
    } else {
      for (auto [v, s] : llvm::zip(op->getOperands(), operands))
        if (v.getType() != result.getType() || !s ||
            !sameSharding(s, first, rankOf(v)))
          return false;
      target = first;
    }
    decided.insert(op);
    annotateResult(cast<OpResult>(result), normalize(target, rankOf(result)));
    return true;
  }

  LogicalResult visit(Operation *op, int sweep) {
    if (decided.contains(op) || isa<ShardOp>(op) ||
        op->hasTrait<OpTrait::IsTerminator>())
      return success();
    auto iface = dyn_cast<ShardingInterface>(op);
    if (!iface)
      return op->emitOpError("has no sharding rule (ShardingInterface)");

    // Binding and optional shardings.
    SmallVector<MeshShardingAttr> operandHints, resultMust, resultHints;
    for (Value v : op->getOperands())
      operandHints.push_back(defined(v));
    if (keepsPartialSum(op, operandHints))
      return success();
    bool anyMust = false;
    for (Value r : op->getResults()) {
      MeshShardingAttr d = defined(r);
      resultMust.push_back(d);
      resultHints.push_back(d ? MeshShardingAttr() : wanted(r));
      anyMust |= static_cast<bool>(d);
    }
    if (!anyMust && llvm::none_of(operandHints, [](auto s) { return s; }) &&
        llvm::none_of(resultHints, [](auto s) { return s; }))
      return success(); // nothing known yet
    // An index_backward's table rows are a loop of its result only: they
    // are split only if its users ask, and in the first (forward) sweep
    // they have not spoken yet. Deciding then would scatter into the whole
    // table and slice it for them (an embedding's gradient under a
    // vocabulary split: the whole table on every rank), which moves no
    // bytes but wastes the work and the memory. Only where its operands
    // are whole (tensor parallelism, Megatron sequence parallelism after
    // its gather): with a batch split, the users' sharding would make the
    // cheapest option gather the batch, which is
    // --merak-sparse-embedding-grads' choice to make, not propagation's.
    if (sweep == 0 && isa<IndexBackwardOp>(op) && !resultMust[0] &&
        !resultHints[0] &&
        llvm::all_of(llvm::zip(op->getOperands(), operandHints), [](auto p) {
          auto [v, s] = p;
          return !s ||
                 (s.getPartialAxes().empty() && splitsNothing(s, rankOf(v)));
        }))
      return success();

    // Candidate options: every subset of the optional shardings (the
    // binding ones always in), as long as that stays small.
    SmallVector<std::pair<bool, unsigned>> optional; // (isResult, index)
    for (auto [i, s] : llvm::enumerate(operandHints))
      if (s)
        optional.push_back({false, unsigned(i)});
    for (auto [i, s] : llvm::enumerate(resultHints))
      if (s)
        optional.push_back({true, unsigned(i)});
    unsigned bits = std::min<unsigned>(optional.size(), 8);
    std::optional<ShardingOption> best;
    SmallVector<MeshShardingAttr> bestAnnotations;
    double bestCost = 0;
    for (unsigned mask = (1u << bits); mask-- > 0;) {
      SmallVector<MeshShardingAttr> operands(op->getNumOperands()),
          results(resultMust);
      for (unsigned k = 0; k < optional.size(); ++k) {
        bool keep = k >= bits || (mask >> k) & 1;
        if (!keep)
          continue;
        auto [isResult, i] = optional[k];
        (isResult ? results[i] : operands[i]) =
            isResult ? resultHints[i] : operandHints[i];
      }
      FailureOr<ShardingOption> option =
          iface.getShardingOption(operands, results);
      if (failed(option) || option->empty)
        continue;
      FailureOr<SmallVector<MeshShardingAttr>> ann =
          iface.getShardingAnnotations(*option);
      if (failed(ann) ||
          ann->size() != op->getNumOperands() + op->getNumResults())
        continue;
      // A binding result annotation must be what the option produces.
      bool consistent = true;
      for (auto [i, r] : llvm::enumerate(op->getResults()))
        if (resultMust[i] &&
            !sameSharding(resultMust[i], (*ann)[op->getNumOperands() + i],
                          rankOf(r)))
          consistent = false;
      if (!consistent)
        continue;
      double cost = 0;
      for (auto [i, v] : llvm::enumerate(op->getOperands())) {
        double bytes = reshardBytes(mesh, cast<RankedTensorType>(v.getType()),
                                    operandHints[i], (*ann)[i]);
        // Parameters and optimizer state are split to save memory; moving
        // them is a last resort.
        if (isa<BlockArgument>(stripShards(v)))
          bytes *= kArgumentPenalty;
        cost += bytes;
      }
      for (auto [i, r] : llvm::enumerate(op->getResults()))
        if (resultHints[i])
          cost +=
              reshardBytes(mesh, cast<RankedTensorType>(r.getType()),
                           (*ann)[op->getNumOperands() + i], resultHints[i]);
      if (!best || cost < bestCost) {
        best = *option;
        bestAnnotations = *ann;
        bestCost = cost;
      }
    }
    if (!best)
      return success(); // try again in a later sweep

    // Record the choice: result annotations, and operand annotations where
    // the operand arrives in another sharding (or has none yet).
    decided.insert(op);
    for (auto [i, r] : llvm::enumerate(op->getResults()))
      if (!resultMust[i])
        annotateResult(
            cast<OpResult>(r),
            normalize(bestAnnotations[op->getNumOperands() + i], rankOf(r)));
    OpBuilder b(op);
    for (OpOperand &use : op->getOpOperands()) {
      MeshShardingAttr target =
          normalize(bestAnnotations[use.getOperandNumber()], rankOf(use.get()));
      if (operandHints[use.getOperandNumber()] &&
          sameSharding(operandHints[use.getOperandNumber()], target,
                       rankOf(use.get())))
        continue;
      auto s = b.create<ShardOp>(op->getLoc(), use.get(), target,
                                 /*annotate_for_users=*/true);
      use.set(s.getResult());
    }
    return success();
  }

  LogicalResult run() {
    Block &block = func.getBody().front();
    for (int sweep = 0; sweep < 3; ++sweep) {
      SmallVector<Operation *> ops;
      for (Operation &op : block)
        ops.push_back(&op);
      if (sweep == 1)
        std::reverse(ops.begin(), ops.end());
      for (Operation *op : ops)
        if (failed(visit(op, sweep)))
          return failure();
    }
    return success();
  }
};

struct ShardingPropagationPass
    : public merak::impl::ShardingPropagationBase<ShardingPropagationPass> {
  void runOnOperation() override {
    ModuleOp module = getOperation();
    MeshOp mesh = lookupMesh(module);
    if (!mesh)
      return;
    for (auto func : module.getOps<func::FuncOp>()) {
      bool annotated = false;
      func.walk([&](ShardOp) { annotated = true; });
      if (!annotated)
        continue;
      if (!func.getBody().hasOneBlock()) {
        emitError(func.getLoc(),
                  "only single-block functions can be partitioned");
        return signalPassFailure();
      }
      Propagator p{
          func, mesh, FlatSymbolRefAttr::get(mesh.getSymNameAttr()), {}};
      if (failed(p.run()))
        return signalPassFailure();
      // A text generator's cache argument is defined with the sharding its
      // update is computed with (split by heads under tp), so that no rank
      // gathers or slices the cache at the step's boundary.
      for (BlockArgument arg : func.getArguments()) {
        if (!func.getArgAttr(arg.getArgNumber(), kKvCacheAttr) ||
            argAnnotation(arg))
          continue;
        for (Operation *user : arg.getUsers()) {
          Operation *reader = user;
          if (auto s = dyn_cast<ShardOp>(user))
            reader = s->hasOneUse() ? *s->getUsers().begin() : nullptr;
          auto update = dyn_cast_or_null<UpdateSliceOp>(reader);
          if (!update)
            continue;
          if (MeshShardingAttr s = p.defined(update.getResult()))
            annotateArg(arg, s);
          break;
        }
      }
    }
  }
};

} // namespace
