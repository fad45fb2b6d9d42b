//===- DataParallel.cpp - the mesh, batch splitting and ZeRO --------------===//
//
// --merak-mesh declares the device mesh. --merak-data-parallel annotates the
// training step: inputs split along the batch over `dp`, and, for ZeRO,
// optimizer state (and parameters) split over `dp` with the optimizer
// updates running on the shards. Propagation and --merak-spmdize then place
// the gradient reductions and parameter gathers.
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
#define GEN_PASS_DEF_MESH
#define GEN_PASS_DEF_DATAPARALLEL
#include "merak/Dialect/Merak/Transforms/Passes.h.inc"
} // namespace merak

using namespace mlir;
using namespace mlir::mesh;
using namespace merak;

namespace {

struct MeshPass : public merak::impl::MeshBase<MeshPass> {
  using MeshBase::MeshBase;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    SmallVector<std::pair<StringRef, int64_t>> axes;
    for (auto [name, size] : {std::pair<StringRef, int>{"dp", dp},
                              {"ep", ep},
                              {"sp", sp},
                              {"tp", tp}}) {
      if (size < 1) {
        emitError(module.getLoc(), "mesh degree ")
            << name << " must be >= 1, got " << size;
        return signalPassFailure();
      }
      if (size > 1)
        axes.push_back({name, size});
    }
    if (axes.empty())
      axes.push_back({"dp", 1});
    if (MeshOp existing = lookupMesh(module)) {
      bool same = static_cast<int64_t>(axes.size()) ==
                  static_cast<int64_t>(existing.getShape().size());
      for (auto [i, axis] : llvm::enumerate(axes))
        same = same &&
               meshAxisIndex(existing, axis.first) == static_cast<int64_t>(i) &&
               existing.getShape()[i] == axis.second;
      if (!same) {
        existing.emitError("the module already has a different mesh");
        return signalPassFailure();
      }
      return;
    }
    createMesh(module, axes);
  }
};

/// First dimension of `type` (under `split`) whose local size `n` divides.
std::optional<int64_t> divisibleDim(RankedTensorType type, MeshOp mesh,
                                    const SplitAxes &split, int64_t n) {
  for (int64_t d = 0; d < type.getRank(); ++d) {
    int64_t local = type.getDimSize(d) / groupSize(mesh, split[d]);
    if (local % n == 0 && local >= n)
      return d;
  }
  return std::nullopt;
}

struct DataParallelPass
    : public merak::impl::DataParallelBase<DataParallelPass> {
  using DataParallelBase::DataParallelBase;

  /// ZeRO-3: every use of a parameter but its optimizer update reads it
  /// whole (as `whole`), so it is gathered just before that use and
  /// released after it.
  static void gatherBeforeUse(BlockArgument arg, MeshShardingAttr whole) {
    SmallVector<OpOperand *> uses;
    SmallVector<Value> values{arg};
    if (ShardOp s = argAnnotation(arg))
      values.push_back(s.getResult());
    for (Value v : values)
      for (OpOperand &use : v.getUses())
        if (!isa<ShardOp>(use.getOwner()) && !isOptimizerUpdate(use.getOwner()))
          uses.push_back(&use);
    for (OpOperand *use : uses) {
      OpBuilder b(use->getOwner());
      auto gathered = b.create<ShardOp>(use->getOwner()->getLoc(), use->get(),
                                        whole, /*annotate_for_users=*/true);
      use->set(gathered.getResult());
    }
  }

  void runOnOperation() override {
    ModuleOp module = getOperation();
    MLIRContext *ctx = module.getContext();
    if (zero < 0 || zero > 3) {
      emitError(module.getLoc(), "zero must be 0, 1, 2 or 3, got ")
          << int(zero);
      return signalPassFailure();
    }
    auto func = module.lookupSymbol<func::FuncOp>(kTrainStepName);
    if (!func && !generationFunctions(module).empty()) {
      // A text generator: tensor parallelism alone.
      MeshOp existing = lookupMesh(module);
      int64_t dpAxis = existing ? meshAxisIndex(existing, "dp") : -1;
      if (dp > 1 || zero > 0 ||
          (dpAxis >= 0 && existing.getShape()[dpAxis] > 1) ||
          (existing && meshAxisIndex(existing, "sp") >= 0)) {
        emitError(module.getLoc(),
                  "text generation (@prefill, @decode) is partitioned by tp "
                  "alone; drop dp, zero and sp");
        return signalPassFailure();
      }
      return;
    }
    if (!func) {
      emitError(module.getLoc(), "no @")
          << kTrainStepName << "; run --merak-train first";
      return signalPassFailure();
    }
    MeshOp mesh = lookupMesh(module);
    if (!mesh)
      mesh = createMesh(module, {{"dp", dp > 0 ? int64_t(dp) : 1}});
    int64_t axis = meshAxisIndex(mesh, "dp");
    int64_t size = axis < 0 ? 1 : mesh.getShape()[axis];
    if (dp > 0 && dp != size && !(dp == 1 && axis < 0)) {
      mesh.emitError("dp=")
          << int(dp) << " but the mesh's dp axis has size " << size;
      return signalPassFailure();
    }
    FlatSymbolRefAttr meshRef = FlatSymbolRefAttr::get(mesh.getSymNameAttr());
    auto dpAxis = static_cast<MeshAxis>(axis);
    // Expert-parallel ranks split the batch too, after dp.
    int64_t epIdx = meshAxisIndex(mesh, "ep");
    int64_t epSize = epIdx < 0 ? 1 : mesh.getShape()[epIdx];
    Block &body = func.getBody().front();

    auto shardingOf = [&](BlockArgument arg) -> SplitAxes {
      int64_t rank = cast<RankedTensorType>(arg.getType()).getRank();
      ShardOp s = argAnnotation(arg);
      return splitAxesOf(s ? s.getShard() : MeshShardingAttr(), rank);
    };

    // Which arguments get split along a dimension for ZeRO.
    llvm::SmallDenseMap<unsigned, int64_t> zeroSplit;
    for (BlockArgument arg : body.getArguments()) {
      unsigned i = arg.getArgNumber();
      auto type = cast<RankedTensorType>(arg.getType());
      SplitAxes split = shardingOf(arg);
      if (func.getArgAttr(i, kInputAttr) && size * epSize > 1) {
        if (type.getRank() == 0 ||
            type.getDimSize(0) % (size * epSize * groupSize(mesh, split[0])) !=
                0) {
          auto diag = emitError(func.getLoc(), "input ")
                      << func.getArgAttr(i, kInputAttr) << " of type " << type
                      << ": batch dimension 0 is not divisible by dp=" << size;
          if (epSize > 1)
            diag << " x ep=" << epSize;
          return signalPassFailure();
        }
        if (size > 1)
          split[0].push_back(dpAxis);
        if (epSize > 1)
          split[0].push_back(static_cast<MeshAxis>(epIdx));
      } else if (size > 1 &&
                 ((zero >= 1 && func.getArgAttr(i, kOptStateAttr)) ||
                  (zero == 3 && func.getArgAttr(i, kParamAttr)))) {
        if (std::optional<int64_t> d = divisibleDim(type, mesh, split, size)) {
          if (zero == 3 && func.getArgAttr(i, kParamAttr))
            gatherBeforeUse(arg, makeSharding(ctx, meshRef, split));
          split[*d].push_back(dpAxis);
          zeroSplit[i] = *d;
        }
      }
      annotateArg(arg, makeSharding(ctx, meshRef, split));
    }
    if (zero == 0 || size == 1)
      return;

    // Each optimizer update runs on the shard of its state.
    func.walk([&](Operation *op) {
      if (!isOptimizerUpdate(op))
        return;
      // The state operands say how the update is split.
      MeshShardingAttr target;
      for (Value operand : op->getOperands()) {
        auto arg = dyn_cast<BlockArgument>(operand);
        if (!arg) {
          if (auto shard = operand.getDefiningOp<ShardOp>())
            arg = dyn_cast<BlockArgument>(shard.getSrc());
        }
        if (!arg || !zeroSplit.count(arg.getArgNumber()))
          continue;
        target = argAnnotation(arg).getShard();
        break;
      }
      if (!target)
        return;
      for (OpResult r : op->getResults())
        annotateResult(r, target);
      if (zero == 1) {
        // Stage 1 keeps whole gradients (as split as their parameter
        // otherwise): all-reduce, then each rank reads its slice.
        MeshShardingAttr whole = replicated(ctx, meshRef);
        Value param = op->getOperand(0);
        if (auto shard = param.getDefiningOp<ShardOp>())
          param = shard.getSrc();
        if (auto arg = dyn_cast<BlockArgument>(param))
          if (ShardOp s = argAnnotation(arg))
            whole = s.getShard();
        OpBuilder b(op);
        auto full = b.create<ShardOp>(op->getLoc(), op->getOperand(1), whole,
                                      /*annotate_for_users=*/true);
        op->setOperand(1, full);
      }
    });
  }
};

} // namespace
