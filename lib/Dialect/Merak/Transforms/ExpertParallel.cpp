//===- ExpertParallel.cpp - mixture-of-experts weights over ep ------------===//
//
// --merak-expert-parallel splits the batched expert weights of a
// mixture-of-experts layer over the mesh's `ep` axis and says how the
// experts read their tokens; propagation and --merak-spmdize place the
// all-to-alls that dispatch the tokens and combine the results.
//
//===----------------------------------------------------------------------===//

#include "merak/Analysis/TrainStep.h"
#include "merak/Dialect/Merak/IR/AttrNames.h"
#include "merak/Dialect/Merak/IR/MerakOps.h"
#include "merak/Dialect/Merak/Transforms/Passes.h"
#include "merak/Dialect/Merak/Transforms/Resharding.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Mesh/IR/MeshOps.h"
#include "mlir/IR/Builders.h"

namespace merak {
#define GEN_PASS_DEF_EXPERTPARALLEL
#include "merak/Dialect/Merak/Transforms/Passes.h.inc"
} // namespace merak

using namespace mlir;
using namespace mlir::mesh;
using namespace merak;

namespace {

struct ExpertParallelPass
    : public merak::impl::ExpertParallelBase<ExpertParallelPass> {
  using ExpertParallelBase::ExpertParallelBase;

  /// The parameter `v` reads, through sharding annotations and casts
  /// (mixed precision's bf16 copies of the weights).
  static BlockArgument paramOf(func::FuncOp func, Value v) {
    v = stripShards(v);
    while (auto cast = v.getDefiningOp<CastOp>())
      v = stripShards(cast.getInput());
    auto arg = dyn_cast<BlockArgument>(v);
    if (!arg || arg.getOwner() != &func.getBody().front() ||
        !func.getArgAttr(arg.getArgNumber(), kParamAttr))
      return {};
    return arg;
  }

  /// An expert product: a forward batched matmul `[E, N, D] x [E, D, H]`
  /// whose right operand is a parameter, with the same E on both sides.
  static bool isExpertProduct(MatmulOp m, BlockArgument weight) {
    if (!weight || !getForwardId(m))
      return false;
    auto lhs = cast<RankedTensorType>(m.getLhs().getType());
    auto rhs = cast<RankedTensorType>(weight.getType());
    return rhs.getRank() >= 3 && lhs.getRank() == rhs.getRank() &&
           lhs.getShape().drop_back(2) == rhs.getShape().drop_back(2);
  }

  /// The operand by which the combine reads an expert product's result:
  /// the result followed through reshapes and permutes (each the value's
  /// one forward user) to a matmul that is not itself an expert product.
  static OpOperand *combineOperand(MatmulOp product) {
    Value v = product.getResult();
    for (;;) {
      OpOperand *only = nullptr;
      for (OpOperand &use : v.getUses()) {
        if (!getForwardId(use.getOwner()))
          continue;
        if (only)
          return nullptr;
        only = &use;
      }
      if (!only)
        return nullptr;
      Operation *user = only->getOwner();
      if (isa<ReshapeOp, PermuteOp, CastOp>(user)) {
        v = user->getResult(0);
        continue;
      }
      auto m = dyn_cast<MatmulOp>(user);
      return m && m != product ? only : nullptr;
    }
  }

  /// The matmul that dispatches tokens `t` to the experts: `t`'s
  /// definition followed back through reshapes and permutes.
  static MatmulOp dispatchOf(Value t) {
    Operation *def = stripShards(t).getDefiningOp();
    while (def && isa<ReshapeOp, PermuteOp, CastOp>(def))
      def = stripShards(def->getOperand(0)).getDefiningOp();
    auto m = dyn_cast_or_null<MatmulOp>(def);
    return m && getForwardId(m) ? m : MatmulOp();
  }

  /// The gradient of `forward`'s result as its backward products read
  /// it: the operand of a product with `grad_of = forward` that is not a
  /// transposed operand of `forward`.
  static SmallVector<Value> resultGradients(func::FuncOp func,
                                            MatmulOp forward) {
    SmallVector<Value> found;
    int64_t id = *getForwardId(forward);
    auto isOperandOfForward = [&](Value v) {
      auto t = v.getDefiningOp<PermuteOp>();
      Value src = t ? stripShards(t.getInput()) : Value();
      return src && (src == stripShards(forward.getLhs()) ||
                     src == stripShards(forward.getRhs()));
    };
    func.walk([&](MatmulOp m) {
      if (getGradOf(m) != id)
        return;
      for (Value v : {m.getLhs(), m.getRhs()})
        if (!isOperandOfForward(v) && !llvm::is_contained(found, v))
          found.push_back(v);
    });
    return found;
  }

  void runOnOperation() override {
    ModuleOp module = getOperation();
    MLIRContext *ctx = module.getContext();
    auto func = module.lookupSymbol<func::FuncOp>(kTrainStepName);
    if (!func) {
      emitError(module.getLoc(), "no @")
          << kTrainStepName << "; run --merak-train first";
      return signalPassFailure();
    }
    MeshOp mesh = lookupMesh(module);
    int64_t idx = mesh ? meshAxisIndex(mesh, "ep") : -1;
    int64_t size = idx < 0 ? 1 : mesh.getShape()[idx];
    if (ep > 1 && ep != size) {
      emitError(module.getLoc(), "ep=")
          << int(ep) << " but the mesh has "
          << (idx < 0 ? std::string("no ep axis")
                      : "an ep axis of size " + std::to_string(size))
          << "; run --merak-mesh=\"ep=" << int(ep) << "\" first";
      return signalPassFailure();
    }
    if (size == 1)
      return;
    auto axis = static_cast<MeshAxis>(idx);
    FlatSymbolRefAttr meshRef = FlatSymbolRefAttr::get(mesh.getSymNameAttr());
    int64_t dpIdx = meshAxisIndex(mesh, "dp");
    bool dpSplit = dpIdx >= 0 && mesh.getShape()[dpIdx] > 1;

    llvm::SetVector<BlockArgument> experts;
    llvm::SetVector<Value> tokens;
    SmallVector<MatmulOp> products;
    func.walk([&](MatmulOp m) {
      BlockArgument weight = paramOf(func, m.getRhs());
      if (!isExpertProduct(m, weight))
        return;
      experts.insert(weight);
      tokens.insert(m.getLhs());
      products.push_back(m);
    });
    SmallVector<OpOperand *> combines;
    for (MatmulOp m : products)
      if (OpOperand *c = combineOperand(m))
        combines.push_back(c);
    // The gradient of each product's result, where the backward reads it
    // (`g x W^T` and `lhs^T x g`), split by expert like the result; the
    // gradient of each dispatch's result split by batch like the tokens
    // before it, so that backward mirrors forward: one all-to-all each way.
    llvm::SetVector<Value> resultGrads, dispatchGrads;
    for (MatmulOp m : products)
      for (Value g : resultGradients(func, m))
        resultGrads.insert(g);
    for (Value t : tokens)
      if (MatmulOp d = dispatchOf(t))
        for (Value g : resultGradients(func, d))
          dispatchGrads.insert(g);
    if (experts.empty()) {
      emitError(func.getLoc(), "ep=")
          << size
          << " but the step has no experts: no parameter [E, ...] is "
             "multiplied by dispatched tokens [E, N, D] in a batched "
             "matmul";
      return signalPassFailure();
    }

    for (BlockArgument weight : experts) {
      auto type = cast<RankedTensorType>(weight.getType());
      ShardOp existing = argAnnotation(weight);
      SplitAxes split = splitAxesOf(
          existing ? existing.getShard() : MeshShardingAttr(), type.getRank());
      int64_t local = type.getDimSize(0) / groupSize(mesh, split[0]);
      if (local % size != 0) {
        emitError(func.getLoc(), "expert weight ")
            << func.getArgAttr(weight.getArgNumber(), kParamAttr) << " of type "
            << type << ": " << type.getDimSize(0)
            << " experts are not divisible by ep=" << size;
        return signalPassFailure();
      }
      split[0].push_back(axis);
      annotateArg(weight, makeSharding(ctx, meshRef, split));
    }

    // The experts read their tokens split by expert over ep and by token
    // over dp, where the batch split left them; the gradients of their
    // results are made so once, for both backward products.
    SmallVector<Value> readByExpert(tokens.begin(), tokens.end());
    readByExpert.append(resultGrads.begin(), resultGrads.end());
    for (Value t : readByExpert) {
      auto type = cast<RankedTensorType>(t.getType());
      SplitAxes split(type.getRank());
      split[0].push_back(axis);
      if (dpSplit && type.getDimSize(1) % mesh.getShape()[dpIdx] == 0)
        split[1].push_back(static_cast<MeshAxis>(dpIdx));
      MeshShardingAttr sharding = makeSharding(ctx, meshRef, split);
      if (auto r = dyn_cast<OpResult>(t)) {
        annotateResult(r, sharding);
        continue;
      }
      OpBuilder b(ctx);
      b.setInsertionPointAfterValue(t);
      auto shard = b.create<ShardOp>(t.getLoc(), t, sharding,
                                     /*annotate_for_users=*/true);
      t.replaceAllUsesExcept(shard.getResult(), shard);
    }

    // The combine reads the experts' results split by batch again, as the
    // model's inputs are: the way back is an all-to-all of the results
    // (and of their gradient in backward), not a gather of the batch.
    auto batchSplit = [&](Value v) -> MeshShardingAttr {
      auto type = cast<RankedTensorType>(v.getType());
      SplitAxes split(type.getRank());
      int64_t group = 1;
      if (dpSplit) {
        group = mesh.getShape()[dpIdx];
        split[0].push_back(static_cast<MeshAxis>(dpIdx));
      }
      if (type.getRank() == 0 || type.getDimSize(0) % (group * size) != 0)
        return {};
      split[0].push_back(axis);
      return makeSharding(ctx, meshRef, split);
    };
    for (OpOperand *c : combines) {
      MeshShardingAttr sharding = batchSplit(c->get());
      if (!sharding)
        continue;
      OpBuilder b(c->getOwner());
      auto shard = b.create<ShardOp>(c->getOwner()->getLoc(), c->get(),
                                     sharding, /*annotate_for_users=*/true);
      c->set(shard.getResult());
    }
    for (Value g : dispatchGrads)
      if (MeshShardingAttr sharding = batchSplit(g))
        if (auto r = dyn_cast<OpResult>(g))
          annotateResult(r, sharding);

    // Optimizer state takes the sharding of its expert weight.
    func.walk([&](Operation *op) {
      if (!isOptimizerUpdate(op))
        return;
      auto param = dyn_cast<BlockArgument>(stripShards(op->getOperand(0)));
      if (!param || !experts.contains(param))
        return;
      MeshShardingAttr s = argAnnotation(param).getShard();
      for (Value operand : op->getOperands().drop_front(2)) {
        auto state = dyn_cast<BlockArgument>(stripShards(operand));
        if (state && func.getArgAttr(state.getArgNumber(), kOptStateAttr) &&
            state.getType() == param.getType())
          annotateArg(state, s);
      }
    });
  }
};

} // namespace
