//===- Autodiff.cpp - reverse-mode differentiation of the forward --------===//
//
// Builds `@train_step`: the forward body followed by its backward pass, in
// one function, so that partitioning passes see forward and backward
// together. The per-op rules come from GradientOpInterface.
//
//===----------------------------------------------------------------------===//

#include "merak/Dialect/Merak/IR/AttrNames.h"
#include "merak/Dialect/Merak/IR/MerakOps.h"
#include "merak/Dialect/Merak/Transforms/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/DenseSet.h"

namespace merak {
#define GEN_PASS_DEF_AUTODIFF
#include "merak/Dialect/Merak/Transforms/Passes.h.inc"
} // namespace merak

using namespace mlir;
using namespace merak;

namespace {

bool isFloatTensor(Type t) {
  auto rt = dyn_cast<RankedTensorType>(t);
  return rt && isa<FloatType>(rt.getElementType());
}

/// `g`, a gradient accumulated by additions, as one concatenation when
/// every term is the `slice_backward` of one slice of a partition of the
/// same dimension (the gradient of a fused projection whose result the
/// forward slices into queries, keys and values): the slices' gradients
/// side by side, with no zero-filled tensors to add up. Otherwise `g`.
Value concatenatedSlices(OpBuilder &b, Value g) {
  auto root = g.getDefiningOp<AddOp>();
  if (!root)
    return g;
  SmallVector<SliceBackwardOp> terms;
  SmallVector<AddOp> adds;
  SmallVector<Value> work{g};
  while (!work.empty()) {
    Value v = work.pop_back_val();
    if (auto add = v.getDefiningOp<AddOp>();
        add && (v == g || v.hasOneUse()) && add.getType() == g.getType() &&
        add.getLhs().getType() == g.getType() &&
        add.getRhs().getType() == g.getType()) {
      adds.push_back(add);
      work.push_back(add.getLhs());
      work.push_back(add.getRhs());
      continue;
    }
    auto slice = v.getDefiningOp<SliceBackwardOp>();
    if (!slice || !v.hasOneUse() || slice.getStep() != 1)
      return g;
    terms.push_back(slice);
  }
  int64_t dim = terms.front().getDim();
  llvm::sort(terms, [](SliceBackwardOp x, SliceBackwardOp y) {
    return x.getStart() < y.getStart();
  });
  int64_t next = 0;
  for (SliceBackwardOp t : terms) {
    if (t.getDim() != dim || t.getStart() != next)
      return g;
    next = t.getEnd();
  }
  if (next != terms.front().getDimSize())
    return g;
  SmallVector<Value> parts;
  for (SliceBackwardOp t : terms)
    parts.push_back(t.getGrad());
  OpBuilder::InsertionGuard guard(b);
  b.setInsertionPoint(root);
  auto concat = b.create<ConcatOp>(root.getLoc(), g.getType(), parts,
                                   b.getI64IntegerAttr(dim));
  concat->setAttrs(root->getDiscardableAttrDictionary());
  root.getResult().replaceAllUsesWith(concat.getResult());
  for (AddOp add : adds)
    add.erase();
  for (SliceBackwardOp t : terms)
    t.erase();
  return concat.getResult();
}

struct AutodiffPass : public merak::impl::AutodiffBase<AutodiffPass> {
  using AutodiffBase::AutodiffBase;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    auto forward = module.lookupSymbol<func::FuncOp>(funcName);
    if (!forward) {
      emitError(module.getLoc(), "no function @")
          << funcName << " to differentiate";
      return signalPassFailure();
    }
    if (module.lookupSymbol(kTrainStepName)) {
      emitError(module.getLoc(), "@") << kTrainStepName << " exists already";
      return signalPassFailure();
    }
    if (!forward.getBody().hasOneBlock()) {
      emitError(forward.getLoc(), "must have a single block");
      return signalPassFailure();
    }
    OpBuilder b(module.getContext());
    b.setInsertionPointAfter(forward);
    auto step = cast<func::FuncOp>(b.clone(*forward));
    step.setName(kTrainStepName);
    if (failed(differentiate(step)))
      return signalPassFailure();
  }

  FailureOr<unsigned> findLoss(func::FuncOp func) {
    FunctionType type = func.getFunctionType();
    if (lossResult >= 0) {
      if ((unsigned)lossResult >= type.getNumResults()) {
        emitError(func.getLoc(), "loss-result=")
            << int64_t(lossResult) << " but @" << funcName << " has "
            << type.getNumResults() << " results";
        return failure();
      }
      auto t = dyn_cast<RankedTensorType>(type.getResult(lossResult));
      if (!t || t.getRank() != 0 || !isa<FloatType>(t.getElementType())) {
        emitError(func.getLoc(), "result ")
            << int64_t(lossResult) << " (" << type.getResult(lossResult)
            << ") is not a rank-0 floating loss";
        return failure();
      }
      return (unsigned)lossResult;
    }
    SmallVector<unsigned> candidates;
    for (unsigned i = 0; i < type.getNumResults(); ++i) {
      if (func.getResultAttr(i, kBufferUpdateAttr))
        continue;
      auto t = dyn_cast<RankedTensorType>(type.getResult(i));
      if (t && t.getRank() == 0 && isa<FloatType>(t.getElementType()))
        candidates.push_back(i);
    }
    if (candidates.size() != 1) {
      emitError(func.getLoc(), "cannot tell the loss: ")
          << candidates.size()
          << " rank-0 floating results; pass loss-result=K";
      return failure();
    }
    return candidates.front();
  }

  LogicalResult differentiate(func::FuncOp func) {
    MLIRContext *ctx = func.getContext();
    Block &body = func.getBody().front();
    auto ret = cast<func::ReturnOp>(body.getTerminator());
    auto lossIndex = findLoss(func);
    if (failed(lossIndex))
      return failure();
    Value loss = ret.getOperand(*lossIndex);
    OpBuilder b(ctx);

    // Ops whose backward needs values they do not return (dropout's mask)
    // expand first; the rule of each lives with the op.
    SmallVector<GradientOpInterface> expandable;
    func.walk([&](GradientOpInterface op) { expandable.push_back(op); });
    for (GradientOpInterface op : expandable)
      (void)op.expandForDifferentiation(b);

    // Values that depend on a parameter through floating values.
    llvm::DenseSet<Value> needsGrad;
    SmallVector<unsigned> params;
    // A frozen parameter (merak.frozen) gets no gradient.
    for (unsigned i = 0; i < func.getNumArguments(); ++i)
      if (func.getArgAttr(i, kParamAttr) && !func.getArgAttr(i, kFrozenAttr)) {
        params.push_back(i);
        if (isFloatTensor(func.getArgument(i).getType()))
          needsGrad.insert(func.getArgument(i));
      }
    int64_t nextId = 0;
    SmallVector<Operation *> forwardOps;
    for (Operation &op : body.without_terminator()) {
      op.setAttr(kIdAttr, b.getI64IntegerAttr(nextId++));
      forwardOps.push_back(&op);
      if (llvm::any_of(op.getOperands(),
                       [&](Value v) { return needsGrad.contains(v); }))
        for (Value r : op.getResults())
          if (isFloatTensor(r.getType()))
            needsGrad.insert(r);
    }

    // Reverse sweep.
    llvm::DenseMap<Value, Value> grads;
    b.setInsertionPoint(ret);
    Location lossLoc = loss.getLoc();
    auto lossType = cast<RankedTensorType>(loss.getType());
    if (auto scaling = func->getAttrOfType<DictionaryAttr>(kLossScaleAttr)) {
      // Loss scaling (--merak-mixed-precision): the backward starts from
      // the step's scale, so every gradient comes out scaled by it.
      func->removeAttr(kLossScaleAttr);
      auto f32Scalar = RankedTensorType::get({}, b.getF32Type());
      unsigned idx = func.getNumArguments();
      (void)func.insertArgument(
          idx, f32Scalar,
          b.getDictionaryAttr(b.getNamedAttr(kLossScaleAttr, scaling)),
          func.getLoc());
      Value scale = func.getArgument(idx);
      if (f32Scalar != lossType)
        scale = b.create<CastOp>(lossLoc, lossType, scale);
      grads[loss] = scale;
    } else {
      grads[loss] = b.create<ConstantOp>(
          lossLoc, lossType,
          DenseElementsAttr::get(
              lossType, b.getFloatAttr(lossType.getElementType(), 1.0)));
    }
    bool ok = true;
    for (Operation *op : llvm::reverse(forwardOps)) {
      SmallVector<Value> resultGrads;
      bool any = false;
      for (Value r : op->getResults()) {
        Value g = grads.lookup(r);
        resultGrads.push_back(g);
        any |= bool(g);
      }
      bool wantsOperands = llvm::any_of(
          op->getOperands(), [&](Value v) { return needsGrad.contains(v); });
      if (!any || !wantsOperands)
        continue;
      auto iface = dyn_cast<GradientOpInterface>(op);
      if (!iface) {
        op->emitError("has no gradient rule, but the loss depends on it "
                      "through a parameter");
        ok = false;
        continue;
      }
      Operation *before = ret->getPrevNode();
      SmallVector<Value> operandGrads;
      if (failed(iface.buildGradients(b, resultGrads, operandGrads))) {
        ok = false;
        continue;
      }
      // Backward ops remember their forward op.
      Attribute id = op->getAttr(kIdAttr);
      for (Operation *n = before ? before->getNextNode() : &body.front();
           n && n != ret; n = n->getNextNode())
        n->setAttr(kGradOfAttr, id);
      for (auto [operand, g] : llvm::zip(op->getOperands(), operandGrads)) {
        if (!g || !needsGrad.contains(operand))
          continue;
        Value &acc = grads[operand];
        if (!acc) {
          acc = g;
        } else {
          acc = b.create<AddOp>(op->getLoc(), acc, g);
          acc.getDefiningOp()->setAttr(kGradOfAttr, id);
        }
      }
    }
    if (!ok)
      return failure();
    // Several values may share one gradient: each is rewritten once.
    llvm::DenseMap<Value, Value> rewritten;
    for (auto &[value, g] : grads) {
      auto [it, fresh] = rewritten.try_emplace(g, Value());
      if (fresh)
        it->second = concatenatedSlices(b, g);
      g = it->second;
    }

    // Results: loss, one gradient per parameter, then buffer updates.
    SmallVector<Value> results{loss};
    SmallVector<DictionaryAttr> resultAttrs{
        b.getDictionaryAttr(b.getNamedAttr(kLossAttr, b.getUnitAttr()))};
    // Parameters the loss does not depend on get no gradient result, as
    // PyTorch leaves their .grad None and optimizers skip them.
    for (unsigned i : params) {
      Value g = grads.lookup(func.getArgument(i));
      if (!g)
        continue;
      results.push_back(g);
      resultAttrs.push_back(b.getDictionaryAttr(
          b.getNamedAttr(kGradAttr, func.getArgAttr(i, kParamAttr))));
    }
    for (unsigned i = 0; i < ret.getNumOperands(); ++i) {
      auto name = func.getResultAttrOfType<StringAttr>(i, kBufferUpdateAttr);
      if (!name)
        continue;
      std::optional<unsigned> arg;
      for (unsigned a = 0; a < func.getNumArguments(); ++a)
        if (func.getArgAttr(a, kBufferAttr) == name)
          arg = a;
      if (!arg) {
        emitError(func.getLoc(), "buffer update of '")
            << name.getValue() << "' has no buffer argument";
        return failure();
      }
      results.push_back(ret.getOperand(i));
      resultAttrs.push_back(b.getDictionaryAttr(
          b.getNamedAttr(kUpdateArgAttr, b.getI64IntegerAttr(*arg))));
    }
    b.create<func::ReturnOp>(ret.getLoc(), results);
    ret.erase();
    func.setType(FunctionType::get(ctx, func.getArgumentTypes(),
                                   ValueRange(results).getTypes()));
    func.setAllResultAttrs(resultAttrs);
    return success();
  }
};

} // namespace
