//===- Optimizer.cpp - optimizer updates in the training step -------------===//
//
// Turns the gradients returned by `@train_step` into parameter updates
// (SGD or AdamW), with the optimizer state as explicit arguments and
// results, and optional global-norm gradient clipping built from merak ops.
//
//===----------------------------------------------------------------------===//

#include "merak/Dialect/Merak/IR/AttrNames.h"
#include "merak/Dialect/Merak/IR/MerakOps.h"
#include "merak/Dialect/Merak/Transforms/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinAttributes.h"

#include <cmath>
#include <sstream>

namespace merak {
#define GEN_PASS_DEF_OPTIMIZER
#include "merak/Dialect/Merak/Transforms/Passes.h.inc"
} // namespace merak

using namespace mlir;
using namespace merak;

namespace {

Value scalarConst(OpBuilder &b, Location loc, Type elem, double v) {
  auto t = RankedTensorType::get({}, elem);
  return b.create<ConstantOp>(
      loc, t, DenseElementsAttr::get(t, b.getFloatAttr(elem, v)));
}

struct OptimizerPass : public merak::impl::OptimizerBase<OptimizerPass> {
  using OptimizerBase::OptimizerBase;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    auto func = module.lookupSymbol<func::FuncOp>(kTrainStepName);
    if (!func) {
      emitError(module.getLoc(), "no @") << kTrainStepName
                                         << " to add an optimizer to; run "
                                            "--merak-autodiff first";
      return signalPassFailure();
    }
    if (optimizer != "sgd" && optimizer != "adamw") {
      emitError(func.getLoc(), "unknown optimizer '")
          << optimizer << "': expected sgd or adamw";
      return signalPassFailure();
    }
    if (func->hasAttr(kOptimizerAttr)) {
      emitError(func.getLoc(), "already has an optimizer");
      return signalPassFailure();
    }
    // Each option as PyTorch's optimizers accept it; NaN and infinities
    // never (a comparison with NaN is false, so each test is positive).
    struct Check {
      const char *name;
      double value;
      bool ok;
      const char *need;
    };
    auto finite = [](double v) { return std::isfinite(v); };
    const Check checks[] = {
        {"lr", lr, finite(lr) && lr > 0.0, "a finite number > 0"},
        {"momentum", momentum, finite(momentum) && momentum >= 0.0,
         "a finite number >= 0"},
        {"dampening", dampening, finite(dampening) && dampening >= 0.0,
         "a finite number >= 0"},
        {"weight-decay", weightDecay,
         finite(weightDecay) && (weightDecay >= 0.0 || weightDecay == -1.0),
         "a finite number >= 0"},
        {"beta1", beta1, beta1 >= 0.0 && beta1 < 1.0, "in [0, 1)"},
        {"beta2", beta2, beta2 >= 0.0 && beta2 < 1.0, "in [0, 1)"},
        {"eps", eps, finite(eps) && eps > 0.0, "a finite number > 0"},
        {"clip-grad-norm", clipGradNorm,
         finite(clipGradNorm) && clipGradNorm >= 0.0,
         "a finite number >= 0 (0: off)"}};
    for (const Check &c : checks)
      if (!c.ok) {
        std::ostringstream value;
        value << c.value;
        emitError(func.getLoc(), "invalid optimizer option ")
            << c.name << "=" << value.str() << ": need " << c.need;
        return signalPassFailure();
      }
    if (nesterov && (momentum <= 0.0 || dampening != 0.0)) {
      emitError(func.getLoc(),
                "nesterov momentum requires momentum > 0 and zero "
                "dampening (as in PyTorch)");
      return signalPassFailure();
    }
    if (failed(rewrite(func)))
      signalPassFailure();
  }

  LogicalResult rewrite(func::FuncOp func) {
    MLIRContext *ctx = func.getContext();
    OpBuilder b(ctx);
    bool adamw = optimizer == "adamw";
    double wd = weightDecay >= 0.0 ? weightDecay : (adamw ? 0.01 : 0.0);
    Block &body = func.getBody().front();
    auto ret = cast<func::ReturnOp>(body.getTerminator());
    Location loc = ret.getLoc();

    // Gradient results and their parameters.
    struct Entry {
      unsigned result;
      unsigned param;
    };
    SmallVector<Entry> entries;
    for (unsigned r = 0; r < func.getNumResults(); ++r) {
      auto name = func.getResultAttrOfType<StringAttr>(r, kGradAttr);
      if (!name)
        continue;
      std::optional<unsigned> param;
      for (unsigned a = 0; a < func.getNumArguments(); ++a)
        if (func.getArgAttr(a, kParamAttr) == name)
          param = a;
      if (!param) {
        emitError(func.getLoc(), "gradient of '")
            << name.getValue() << "' has no parameter argument";
        return failure();
      }
      entries.push_back({r, *param});
    }
    if (entries.empty()) {
      emitError(func.getLoc(),
                "returns no gradients: run --merak-autodiff first");
      return failure();
    }

    // New arguments: optimizer state, learning rate, step.
    auto addArg = [&](Type t, ArrayRef<NamedAttribute> attrs) {
      unsigned idx = func.getNumArguments();
      (void)func.insertArgument(idx, t, b.getDictionaryAttr(attrs), loc);
      return idx;
    };
    SmallVector<SmallVector<unsigned, 2>> stateArgs;
    SmallVector<StringRef> stateNames =
        adamw            ? SmallVector<StringRef>{"exp_avg", "exp_avg_sq"}
        : momentum > 0.0 ? SmallVector<StringRef>{"momentum_buffer"}
                         : SmallVector<StringRef>{};
    for (Entry &e : entries) {
      auto name = cast<StringAttr>(func.getArgAttr(e.param, kParamAttr));
      SmallVector<unsigned, 2> args;
      for (StringRef s : stateNames) {
        SmallVector<NamedAttribute, 2> attrs{b.getNamedAttr(
            kOptStateAttr, b.getStringAttr(name.getValue() + "/" + s))};
        // State is stored in its parameter's shape.
        if (Attribute stored = func.getArgAttr(e.param, kStoredShapeAttr))
          attrs.push_back(b.getNamedAttr(kStoredShapeAttr, stored));
        args.push_back(addArg(func.getArgument(e.param).getType(), attrs));
      }
      stateArgs.push_back(args);
    }
    auto f32Scalar = RankedTensorType::get({}, b.getF32Type());
    auto i64Scalar = RankedTensorType::get({}, b.getI64Type());
    unsigned lrArg =
        addArg(f32Scalar, b.getNamedAttr(kLrAttr, b.getUnitAttr()));
    unsigned stepArg =
        addArg(i64Scalar, b.getNamedAttr(kStepAttr, b.getUnitAttr()));
    Value lrValue = func.getArgument(lrArg);
    Value stepValue = func.getArgument(stepArg);

    b.setInsertionPoint(ret);
    SmallVector<Value> grads;
    for (Entry &e : entries)
      grads.push_back(ret.getOperand(e.result));

    // Loss scaling: the gradients come scaled by the step's loss scale.
    // Whether one is not finite (inf * 0 and NaN * 0 are NaN, so the sum of
    // g * 0 is 0 or NaN), then the gradients unscaled, as PyTorch's
    // GradScaler.unscale_ does (times the float32 reciprocal).
    Value nonFinite;
    std::optional<unsigned> scaleArg;
    for (unsigned a = 0; a < func.getNumArguments(); ++a)
      if (func.getArgAttr(a, kLossScaleAttr))
        scaleArg = a;
    if (scaleArg) {
      Type elem = cast<RankedTensorType>(grads[0].getType()).getElementType();
      Value zero = scalarConst(b, loc, elem, 0.0);
      for (Value g : grads) {
        Value s = b.create<ReduceSumOp>(loc, b.create<MulOp>(loc, g, zero),
                                        ArrayRef<int64_t>{}, false);
        nonFinite = nonFinite ? Value(b.create<AddOp>(loc, nonFinite, s)) : s;
      }
      Value scale = func.getArgument(*scaleArg);
      auto scaleType = cast<RankedTensorType>(scale.getType());
      if (scaleType.getElementType() != elem)
        scale = b.create<CastOp>(loc, scaleType.clone(elem), scale);
      Value inverse =
          b.create<DivOp>(loc, scalarConst(b, loc, elem, 1.0), scale);
      for (Value &g : grads)
        g = b.create<MulOp>(loc, g, inverse);
    }

    // Global-norm clipping, as torch.nn.utils.clip_grad_norm_.
    Value gradNorm;
    if (clipGradNorm > 0.0) {
      Type elem = cast<RankedTensorType>(grads[0].getType()).getElementType();
      Value sumSq;
      for (Value g : grads) {
        Value sq = b.create<MulOp>(loc, g, g);
        Value s = b.create<ReduceSumOp>(loc, sq, ArrayRef<int64_t>{}, false);
        sumSq = sumSq ? Value(b.create<AddOp>(loc, sumSq, s)) : s;
      }
      gradNorm = b.create<SqrtOp>(loc, sumSq);
      Value coef = b.create<DivOp>(
          loc, scalarConst(b, loc, elem, clipGradNorm),
          b.create<AddOp>(loc, gradNorm, scalarConst(b, loc, elem, 1e-6)));
      coef = b.create<ClampOp>(loc, coef, FloatAttr(), b.getF64FloatAttr(1.0));
      for (Value &g : grads)
        g = b.create<MulOp>(loc, g, coef);
    }

    // Updates. Results: loss first, then each parameter and its state.
    SmallVector<Value> results;
    SmallVector<DictionaryAttr> attrs;
    auto updates = [&](unsigned arg) {
      return b.getDictionaryAttr(
          b.getNamedAttr(kUpdateArgAttr, b.getI64IntegerAttr(arg)));
    };
    llvm::DenseSet<unsigned> gradResults;
    for (Entry &e : entries)
      gradResults.insert(e.result);
    for (unsigned r = 0; r < func.getNumResults(); ++r) {
      if (gradResults.contains(r))
        continue;
      results.push_back(ret.getOperand(r));
      attrs.push_back(func.getResultAttrDict(r));
    }
    for (auto [i, e] : llvm::enumerate(entries)) {
      Value p = func.getArgument(e.param);
      if (adamw) {
        auto op = b.create<AdamwUpdateOp>(
            loc, TypeRange{p.getType(), p.getType(), p.getType()}, p, grads[i],
            func.getArgument(stateArgs[i][0]),
            func.getArgument(stateArgs[i][1]), lrValue, stepValue,
            b.getF64FloatAttr(beta1), b.getF64FloatAttr(beta2),
            b.getF64FloatAttr(eps), b.getF64FloatAttr(wd));
        results.append(
            {op.getNewParam(), op.getNewExpAvg(), op.getNewExpAvgSq()});
        attrs.append({updates(e.param), updates(stateArgs[i][0]),
                      updates(stateArgs[i][1])});
      } else {
        Value buf =
            stateArgs[i].empty() ? grads[i] : func.getArgument(stateArgs[i][0]);
        auto op = b.create<SgdUpdateOp>(
            loc, TypeRange{p.getType(), p.getType()}, p, grads[i], buf, lrValue,
            stepValue, b.getF64FloatAttr(momentum),
            b.getF64FloatAttr(dampening), b.getBoolAttr(nesterov),
            b.getF64FloatAttr(wd));
        results.push_back(op.getNewParam());
        attrs.push_back(updates(e.param));
        if (!stateArgs[i].empty()) {
          results.push_back(op.getNewMomentumBuffer());
          attrs.push_back(updates(stateArgs[i][0]));
        }
      }
    }
    if (gradNorm) {
      results.push_back(gradNorm);
      attrs.push_back(
          b.getDictionaryAttr(b.getNamedAttr(kGradNormAttr, b.getUnitAttr())));
    }
    if (nonFinite) {
      results.push_back(nonFinite);
      attrs.push_back(b.getDictionaryAttr(
          b.getNamedAttr(kNonFiniteGradsAttr, b.getUnitAttr())));
    }
    b.create<func::ReturnOp>(loc, results);
    ret.erase();
    func.setType(FunctionType::get(ctx, func.getArgumentTypes(),
                                   ValueRange(results).getTypes()));
    func.setAllResultAttrs(attrs);

    SmallVector<NamedAttribute> config{
        b.getNamedAttr("name", b.getStringAttr(optimizer)),
        b.getNamedAttr("lr", b.getF64FloatAttr(lr)),
        b.getNamedAttr("weight_decay", b.getF64FloatAttr(wd))};
    if (adamw) {
      config.push_back(b.getNamedAttr("beta1", b.getF64FloatAttr(beta1)));
      config.push_back(b.getNamedAttr("beta2", b.getF64FloatAttr(beta2)));
      config.push_back(b.getNamedAttr("eps", b.getF64FloatAttr(eps)));
    } else {
      config.push_back(b.getNamedAttr("momentum", b.getF64FloatAttr(momentum)));
      config.push_back(
          b.getNamedAttr("dampening", b.getF64FloatAttr(dampening)));
      config.push_back(b.getNamedAttr("nesterov", b.getBoolAttr(nesterov)));
    }
    if (clipGradNorm > 0.0)
      config.push_back(
          b.getNamedAttr("clip_grad_norm", b.getF64FloatAttr(clipGradNorm)));
    func->setAttr(kOptimizerAttr, b.getDictionaryAttr(config));
    return success();
  }
};

} // namespace
