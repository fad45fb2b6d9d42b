//===- MixedPrecision.cpp - --merak-mixed-precision -----------------------===//
//
// Rewrites the forward program to compute in a low-precision type, op by
// op, by the policy each op declares (`precision` in MerakOps.td), with
// explicit casts that the gradient then follows. See Passes.td.
//
//===----------------------------------------------------------------------===//

#include "merak/Dialect/Merak/IR/AttrNames.h"
#include "merak/Dialect/Merak/IR/MerakOps.h"
#include "merak/Dialect/Merak/Transforms/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/Interfaces/InferTypeOpInterface.h"
#include "llvm/ADT/StringExtras.h"

#include <cmath>

namespace merak {
#define GEN_PASS_DEF_MIXEDPRECISION
#include "merak/Dialect/Merak/Transforms/Passes.h.inc"
} // namespace merak

using namespace mlir;
using namespace merak;

namespace {

FloatType floatElement(Value v) {
  auto t = dyn_cast<RankedTensorType>(v.getType());
  return t ? dyn_cast<FloatType>(t.getElementType()) : FloatType();
}

/// A one-element constant: a Python number in the model, which takes the
/// type of the tensors it meets rather than widening them.
bool isNumber(Value v) {
  auto c = v.getDefiningOp<ConstantOp>();
  return c && cast<RankedTensorType>(c.getType()).getNumElements() == 1;
}

/// The wider of two floating types (float32 over bfloat16 and float16; of
/// bfloat16 and float16, float32, which holds both).
FloatType wider(FloatType a, FloatType b) {
  if (!a || a == b)
    return b;
  if (!b)
    return a;
  if (a.getWidth() != b.getWidth())
    return a.getWidth() > b.getWidth() ? a : b;
  return Float32Type::get(a.getContext());
}

struct MixedPrecisionPass
    : public merak::impl::MixedPrecisionBase<MixedPrecisionPass> {
  using MixedPrecisionBase::MixedPrecisionBase;

  /// Records `loss-scale` on the forward for --merak-autodiff.
  LogicalResult recordLossScale(func::FuncOp func) {
    std::string mode = lossScale;
    if (mode.empty())
      mode = compute == "fp16" ? "dynamic" : "none";
    if (mode == "none")
      return success();
    double init = lossScaleInit;
    bool dynamic = mode == "dynamic";
    if (!dynamic &&
        (!llvm::to_float(mode, init) || !std::isfinite(init) || init <= 0.0))
      return emitError(func.getLoc(), "--merak-mixed-precision: loss-scale "
                                      "must be dynamic, none or a positive "
                                      "number, got '")
             << mode << "'";
    if (dynamic && (!std::isfinite(init) || init <= 0.0))
      return emitError(func.getLoc(), "--merak-mixed-precision: "
                                      "loss-scale-init must be positive, got ")
             << init;
    if (dynamic && lossScaleWindow < 1)
      return emitError(func.getLoc(), "--merak-mixed-precision: "
                                      "loss-scale-window must be at least 1, "
                                      "got ")
             << int64_t(lossScaleWindow);
    Builder b(func.getContext());
    func->setAttr(
        kLossScaleAttr,
        b.getDictionaryAttr(
            {b.getNamedAttr("dynamic", b.getBoolAttr(dynamic)),
             b.getNamedAttr("init", b.getF64FloatAttr(init)),
             b.getNamedAttr("window", b.getI64IntegerAttr(lossScaleWindow))}));
    return success();
  }

  void runOnOperation() override {
    ModuleOp module = getOperation();
    MLIRContext *ctx = module.getContext();
    low = {};
    if (compute == "bf16")
      low = BFloat16Type::get(ctx);
    else if (compute == "fp16")
      low = Float16Type::get(ctx);
    else if (compute != "fp32") {
      emitError(module.getLoc(), "--merak-mixed-precision: compute must be "
                                 "bf16, fp16 or fp32, got '")
          << compute << "'";
      return signalPassFailure();
    }
    auto func = module.lookupSymbol<func::FuncOp>(funcName);
    if (!func || func.getBody().empty()) {
      emitError(module.getLoc(), "--merak-mixed-precision: no @")
          << funcName << " to rewrite";
      return signalPassFailure();
    }
    if (master != "fp32") {
      emitError(module.getLoc(), "--merak-mixed-precision: master must be "
                                 "fp32 (master weights and optimizer state "
                                 "stay float32), got '")
          << master << "'";
      return signalPassFailure();
    }
    if (failed(recordLossScale(func)))
      return signalPassFailure();
    if (!low)
      return;
    if (func.getBody().getBlocks().size() != 1) {
      func.emitError("--merak-mixed-precision needs a single-block forward");
      return signalPassFailure();
    }
    f32 = Float32Type::get(ctx);
    for (Operation &op :
         llvm::make_early_inc_range(func.getBody().front().getOperations()))
      if (failed(rewrite(&op)))
        return signalPassFailure();
  }

  /// Casts `v` to element type `to` before `op`, when it is not already.
  Value castTo(Operation *op, Value v, FloatType to) {
    FloatType from = floatElement(v);
    if (!from || from == to)
      return v;
    auto type = cast<RankedTensorType>(v.getType());
    OpBuilder b(op);
    return b.create<CastOp>(op->getLoc(), type.clone(to), v);
  }

  LogicalResult rewrite(Operation *op) {
    if (auto ret = dyn_cast<func::ReturnOp>(op)) {
      // Results keep the function's types.
      auto types = ret->getParentOfType<func::FuncOp>().getResultTypes();
      for (auto [i, v] : llvm::enumerate(ret.getOperands()))
        if (auto t = dyn_cast<RankedTensorType>(types[i]))
          if (auto want = dyn_cast<FloatType>(t.getElementType()))
            ret->setOperand(i, castTo(op, v, want));
      return success();
    }
    if (isa<ConstantOp, CastOp>(op))
      return success();

    // The type each floating operand should have.
    FloatType target;
    switch (precisionPolicy(op)) {
    case PrecisionPolicy::Compute:
      target = low;
      break;
    case PrecisionPolicy::Fp32:
      target = f32;
      break;
    case PrecisionPolicy::Promote:
      for (Value v : op->getOperands())
        if (!isNumber(v))
          target = wider(target, floatElement(v));
      // Only numbers: they keep their type.
      break;
    }
    for (OpOperand &use : op->getOpOperands()) {
      FloatType from = floatElement(use.get());
      if (target && from && from != target)
        use.set(castTo(op, use.get(), target));
    }

    // Operand types may have changed here or in their producers; the result
    // types follow: by the op's shape rule, or,
    // for an op without one (masked attention), its floating results take
    // the type it computes in.
    SmallVector<Type> types;
    if (auto infer = dyn_cast<InferTypeOpInterface>(op)) {
      if (failed(infer.inferReturnTypes(
              op->getContext(), op->getLoc(), op->getOperands(),
              op->getAttrDictionary(), op->getPropertiesStorage(),
              op->getRegions(), types)))
        return op->emitOpError("--merak-mixed-precision: result types do "
                               "not follow from the new operand types");
    } else {
      auto attention = dyn_cast<MaskedAttentionOp>(op);
      for (Value r : op->getResults()) {
        auto t = cast<RankedTensorType>(r.getType());
        // A FlashAttention log-sum-exp stays in f32.
        bool keep = attention && attention.savesLogSumExp() &&
                    r == attention.getSaved();
        types.push_back(target && floatElement(r) && !keep ? t.clone(target)
                                                           : t);
      }
    }
    for (auto [r, t] : llvm::zip(op->getResults(), types))
      r.setType(t);
    return success();
  }

  FloatType f32;
  /// The compute type (null for fp32: nothing to rewrite).
  FloatType low;
};

} // namespace
