//===- SplitFusedProjections.cpp - fused projections by section ----------===//
//
// GPT-2 computes q, k and v with one linear of weight [3E, E] and slices
// the result; tensor parallelism gives every rank its heads of each, rows
// {q_r, k_r, v_r} of the weight, which is no block of it. Viewed as
// [3, E, E], the same rows are the block [:, r, :] split along dimension 1.
// This pass gives such a parameter that view (the stored tensor keeps its
// shape through merak.stored_shape), computes each section with a linear
// of its own on select(weight, 0, s), and derives @train_step again from
// the changed @forward.
//
//===----------------------------------------------------------------------===//

#include "merak/Dialect/Merak/IR/AttrNames.h"
#include "merak/Dialect/Merak/IR/MerakOps.h"
#include "merak/Dialect/Merak/Transforms/LayerPatterns.h"
#include "merak/Dialect/Merak/Transforms/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/Pass/PassManager.h"

namespace merak {
#define GEN_PASS_DEF_SPLITFUSEDPROJECTIONS
#include "merak/Dialect/Merak/Transforms/Passes.h.inc"
} // namespace merak

using namespace mlir;
using namespace merak;

namespace {

/// One fused projection of @forward: its slices in order of their start.
struct Fused {
  LinearOp linear;
  SmallVector<SliceOp> sections;
};

/// Whether tensor parallelism can split a section by what reads it: every
/// reader reshapes it into heads that `tp` divides (q, k, v), or every
/// reader is elementwise (a gate or up projection).
bool splitBySection(SliceOp section, int64_t tp) {
  if (section->use_empty())
    return false;
  bool heads = true, elementwise = true;
  for (Operation *user : section->getUsers()) {
    auto r = dyn_cast<ReshapeOp>(user);
    std::optional<int64_t> h = r ? r.splitHeads() : std::nullopt;
    heads &= h && *h % tp == 0;
    elementwise &= isHiddenElementwise(user);
  }
  return heads || elementwise;
}

/// The parameter argument `v` is, when the fused linear is its one reader.
BlockArgument soleParam(func::FuncOp func, Value v) {
  auto arg = dyn_cast_or_null<BlockArgument>(v);
  if (!arg || arg.getOwner() != &func.getBody().front() || !arg.hasOneUse() ||
      !func.getArgAttr(arg.getArgNumber(), kParamAttr))
    return {};
  return arg;
}

struct SplitFusedProjectionsPass
    : public merak::impl::SplitFusedProjectionsBase<SplitFusedProjectionsPass> {
  using SplitFusedProjectionsBase::SplitFusedProjectionsBase;

  SmallVector<Fused> find(func::FuncOp forward) {
    SmallVector<Fused> found;
    forward.walk([&](LinearOp l) {
      auto type = cast<RankedTensorType>(l.getType());
      int64_t last = type.getRank() - 1;
      int64_t total = type.getDimSize(last);
      BlockArgument weight = soleParam(forward, l.getWeight());
      if (!weight || (l.getBias() && !soleParam(forward, l.getBias())))
        return;
      Fused f{l, {}};
      for (Operation *user : l->getUsers()) {
        auto s = dyn_cast<SliceOp>(user);
        if (!s || s.getDim() != last || s.getStep() != 1)
          return;
        f.sections.push_back(s);
      }
      llvm::sort(f.sections, [](SliceOp a, SliceOp b) {
        return a.getStart() < b.getStart();
      });
      int64_t count = f.sections.size();
      if (count < 2 || total % count != 0)
        return;
      int64_t size = total / count;
      if (size % tp != 0)
        return;
      for (auto [s, section] : llvm::enumerate(f.sections))
        if (section.getStart() != int64_t(s) * size ||
            section.getEnd() != int64_t(s + 1) * size ||
            !splitBySection(section, tp))
          return;
      found.push_back(f);
    });
    return found;
  }

  /// Gives `arg` the type `[sections, rest...]` of its `[sections * N,
  /// ...]`, recording the stored shape.
  void viewBySection(func::FuncOp forward, BlockArgument arg,
                     int64_t sections) {
    auto type = cast<RankedTensorType>(arg.getType());
    SmallVector<int64_t> shape{sections, type.getDimSize(0) / sections};
    llvm::append_range(shape, type.getShape().drop_front());
    forward.setArgAttr(arg.getArgNumber(), kStoredShapeAttr,
                       DenseI64ArrayAttr::get(&getContext(), type.getShape()));
    arg.setType(RankedTensorType::get(shape, type.getElementType()));
  }

  void rewrite(func::FuncOp forward, Fused &f) {
    LinearOp l = f.linear;
    int64_t count = f.sections.size();
    auto weight = cast<BlockArgument>(l.getWeight());
    auto bias = dyn_cast_or_null<BlockArgument>(l.getBias());
    viewBySection(forward, weight, count);
    if (bias)
      viewBySection(forward, bias, count);
    OpBuilder b(l);
    auto sectionOf = [&](BlockArgument arg, int64_t s) -> Value {
      auto type = cast<RankedTensorType>(arg.getType());
      auto result = RankedTensorType::get(type.getShape().drop_front(),
                                          type.getElementType());
      return b.create<SelectOp>(l.getLoc(), result, arg, b.getI64IntegerAttr(0),
                                b.getI64IntegerAttr(s));
    };
    for (auto [s, section] : llvm::enumerate(f.sections)) {
      Value w = sectionOf(weight, s);
      Value bs = bias ? sectionOf(bias, s) : Value();
      auto linear = b.create<LinearOp>(section.getLoc(), section.getType(),
                                       l.getInput(), w, bs);
      section.getResult().replaceAllUsesWith(linear.getResult());
      section.erase();
    }
    l.erase();
  }

  /// @train_step printed, for comparing derivations.
  static std::string print(func::FuncOp f) {
    std::string text;
    llvm::raw_string_ostream os(text);
    f.print(os);
    return os.str();
  }

  void runOnOperation() override {
    if (tp < 1) {
      getOperation().emitError("tp must be >= 1, got ") << int(tp);
      return signalPassFailure();
    }
    ModuleOp module = getOperation();
    auto forward = module.lookupSymbol<func::FuncOp>("forward");
    auto step = module.lookupSymbol<func::FuncOp>(kTrainStepName);
    if (tp == 1 || !forward || !step || forward.isExternal())
      return;
    SmallVector<Fused> fused = find(forward);
    if (fused.empty())
      return;
    auto recorded = module->getAttrOfType<StringAttr>(kTrainOptionsAttr);
    auto leave = [&](const Twine &why) {
      fused.front().linear.emitWarning()
          << "fused projection left whole (its parameter is replicated under "
             "tp): "
          << why;
    };
    if (!recorded)
      return leave("the module does not record the options --merak-train "
                   "derived @train_step with (merak.train_options)");

    // The recorded options must derive the @train_step the module has; a
    // step changed since (by hand, by other passes) is not derived again.
    OpBuilder b(module.getBody(), module.getBody()->end());
    auto probe = cast<ModuleOp>(b.clone(*module));
    probe->removeAttr(kTrainOptionsAttr);
    probe.lookupSymbol<func::FuncOp>(kTrainStepName).erase();
    OpPassManager derive(ModuleOp::getOperationName());
    if (failed(buildTrainPipeline(derive, recorded.getValue()))) {
      probe.erase();
      return leave(Twine("merak.train_options is not a --merak-train option "
                         "list: ") +
                   recorded.getValue());
    }
    bool same =
        succeeded(runPipeline(derive, probe)) &&
        print(probe.lookupSymbol<func::FuncOp>(kTrainStepName)) == print(step);
    probe.erase();
    if (!same)
      return leave("@train_step is not what --merak-train derives from "
                   "@forward (run --merak-parallelize right after "
                   "--merak-train)");

    for (Fused &f : fused)
      rewrite(forward, f);
    SmallVector<Type> inputs(forward.getBody().getArgumentTypes());
    forward.setType(
        FunctionType::get(&getContext(), inputs, forward.getResultTypes()));
    step.erase();
    OpPassManager again(ModuleOp::getOperationName());
    if (failed(buildTrainPipeline(again, recorded.getValue())) ||
        failed(runPipeline(again, module)))
      return signalPassFailure();
  }
};

} // namespace
