//===- Lora.cpp - --merak-lora
//---------------------------------------------===//
//
// Low-rank adapters on the forward program: each target linear gets two
// new parameters whose product, scaled, is added to its result, and every
// other parameter is frozen. See Passes.td.
//
//===----------------------------------------------------------------------===//

#include "merak/Dialect/Merak/IR/AttrNames.h"
#include "merak/Dialect/Merak/IR/MerakOps.h"
#include "merak/Dialect/Merak/Transforms/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/SmallString.h"
#include "llvm/ADT/StringExtras.h"

#include <cmath>

namespace merak {
#define GEN_PASS_DEF_LORA
#include "merak/Dialect/Merak/Transforms/Passes.h.inc"
} // namespace merak

using namespace mlir;
using namespace merak;

namespace {

/// The parameter argument behind a linear's weight operand (through casts,
/// which --merak-mixed-precision puts there), or null.
BlockArgument adaptedWeight(Value weight) {
  while (auto cast = weight.getDefiningOp<CastOp>())
    weight = cast.getInput();
  auto arg = dyn_cast<BlockArgument>(weight);
  if (!arg)
    return {};
  auto func = dyn_cast<func::FuncOp>(arg.getOwner()->getParentOp());
  if (!func || !func.getArgAttr(arg.getArgNumber(), kParamAttr))
    return {};
  return arg;
}

/// Whether `value` reaches a cross-entropy through shape ops alone: the
/// model's output head.
bool feedsLossDirectly(Value value) {
  SmallVector<Value> work{value};
  while (!work.empty()) {
    Value v = work.pop_back_val();
    for (Operation *user : v.getUsers()) {
      if (isa<CrossEntropyOp>(user))
        return true;
      if (isa<ReshapeOp, PermuteOp, CastOp, SliceOp>(user))
        work.push_back(user->getResult(0));
    }
  }
  return false;
}

/// Whether the dotted components of `target` appear, in order and
/// together, among those of `name`.
bool nameMatches(StringRef name, StringRef target) {
  SmallVector<StringRef> have, want;
  name.split(have, '.');
  target.split(want, '.');
  if (want.empty() || want.size() > have.size())
    return false;
  for (size_t i = 0; i + want.size() <= have.size(); ++i)
    if (llvm::equal(ArrayRef(have).slice(i, want.size()), want))
      return true;
  return false;
}

struct LoraPass : public merak::impl::LoraBase<LoraPass> {
  using LoraBase::LoraBase;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    auto func = module.lookupSymbol<func::FuncOp>(funcName);
    if (!func || func.getBody().empty()) {
      emitError(module.getLoc(), "--merak-lora: no @") << funcName;
      return signalPassFailure();
    }
    if (module.lookupSymbol(kTrainStepName)) {
      emitError(module.getLoc(), "--merak-lora runs on @")
          << funcName << " before --merak-train, but @" << kTrainStepName
          << " exists already";
      return signalPassFailure();
    }
    if (rank < 1) {
      emitError(module.getLoc(), "--merak-lora: rank must be at least 1, got ")
          << int64_t(rank);
      return signalPassFailure();
    }
    if (!std::isfinite(double(alpha)) || alpha <= 0.0) {
      emitError(module.getLoc(), "--merak-lora: alpha must be above 0, got ")
          << double(alpha);
      return signalPassFailure();
    }
    if (!(dropout >= 0.0 && dropout < 1.0)) {
      emitError(module.getLoc(),
                "--merak-lora: dropout must be in [0, 1), got ")
          << double(dropout);
      return signalPassFailure();
    }
    if (failed(adapt(func)))
      signalPassFailure();
  }

  LogicalResult adapt(func::FuncOp func) {
    SmallVector<StringRef> wanted;
    StringRef(targets).split(wanted, ',', -1, /*KeepEmpty=*/false);
    for (StringRef &t : wanted)
      t = t.trim();
    if (wanted.empty())
      return emitError(func.getLoc(), "--merak-lora: targets is empty");
    bool allLinear = llvm::is_contained(wanted, "all-linear");

    // The linears on a parameter weight, and what matched each target.
    SmallVector<std::pair<LinearOp, BlockArgument>> linears;
    func.walk([&](LinearOp op) {
      if (BlockArgument w = adaptedWeight(op.getWeight()))
        linears.push_back({op, w});
    });
    auto nameOf = [&](BlockArgument w) {
      return cast<StringAttr>(func.getArgAttr(w.getArgNumber(), kParamAttr))
          .getValue();
    };
    llvm::StringMap<int> matched;
    SmallVector<std::pair<LinearOp, BlockArgument>> chosen;
    for (auto [op, w] : linears) {
      StringRef name = nameOf(w);
      bool pick = false;
      if (allLinear) {
        // A weight of its own (a tied one serves another op too), and not
        // the output head.
        bool own = llvm::all_of(w.getUsers(), [&](Operation *user) {
          return user == op ||
                 (isa<CastOp>(user) &&
                  llvm::all_of(user->getUsers(),
                               [&](Operation *u) { return u == op; }));
        });
        if (own && !feedsLossDirectly(op.getResult())) {
          pick = true;
          ++matched["all-linear"];
        }
      }
      for (StringRef t : wanted)
        if (t != "all-linear" && nameMatches(name, t)) {
          pick = true;
          ++matched[t];
        }
      if (pick)
        chosen.push_back({op, w});
    }
    for (StringRef t : wanted)
      if (!matched.count(t)) {
        std::string names;
        for (auto [i, entry] : llvm::enumerate(linears)) {
          if (i == 8) {
            names += ", ...";
            break;
          }
          names += (i ? ", " : "") + nameOf(entry.second).str();
        }
        return emitError(func.getLoc(), "--merak-lora: target '")
               << t << "' matches no linear layer; the linear weights are: "
               << (names.empty() ? std::string("none") : names);
      }

    OpBuilder b(func.getContext());
    Block &body = func.getBody().front();
    llvm::DenseSet<unsigned> adapters;
    llvm::DenseSet<unsigned> done;
    for (auto [op, w] : chosen) {
      auto weightType = cast<RankedTensorType>(w.getType());
      if (weightType.getRank() != 2)
        return op.emitError("--merak-lora: the weight of this linear is ")
               << weightType << ", not a matrix";
      StringRef name = nameOf(w);
      StringRef prefix = name;
      prefix.consume_back(".weight");
      int64_t out = weightType.getDimSize(0), in = weightType.getDimSize(1);
      Type f = weightType.getElementType();
      auto addParam = [&](ArrayRef<int64_t> shape, StringRef suffix,
                          StringRef init) {
        unsigned idx = func.getNumArguments();
        SmallVector<NamedAttribute, 2> attrs{
            b.getNamedAttr(kParamAttr, b.getStringAttr(prefix + suffix)),
            b.getNamedAttr(kInitAttr, b.getStringAttr(init))};
        (void)func.insertArgument(idx, RankedTensorType::get(shape, f),
                                  b.getDictionaryAttr(attrs), op.getLoc());
        adapters.insert(idx);
        return func.getArgument(idx);
      };
      // A weight shared by several linears gets one pair of adapters.
      if (!done.insert(w.getArgNumber()).second)
        return op.emitError("--merak-lora: weight '")
               << name
               << "' serves several linear layers; adapt one of them by "
                  "name, or leave it out";
      Value a =
          addParam({int64_t(rank), in}, ".lora_A.weight", "kaiming_uniform");
      Value bw = addParam({out, int64_t(rank)}, ".lora_B.weight", "zeros");

      b.setInsertionPointAfter(op);
      Location loc = op.getLoc();
      Value x = op.getInput();
      auto xType = cast<RankedTensorType>(x.getType());
      // Under mixed precision the adapters compute as the layer does.
      auto asInput = [&](Value v) -> Value {
        auto t = cast<RankedTensorType>(v.getType());
        if (t.getElementType() == xType.getElementType())
          return v;
        return b.create<CastOp>(loc, t.clone(xType.getElementType()), v);
      };
      Value in0 = x;
      if (dropout > 0.0)
        in0 = b.create<DropoutOp>(loc, x, b.getF64FloatAttr(dropout),
                                  b.getBoolAttr(true));
      Value h = b.create<LinearOp>(loc, in0, asInput(a), Value());
      Value d = b.create<LinearOp>(loc, h, asInput(bw), Value());
      auto scalarType = RankedTensorType::get({}, xType.getElementType());
      Value scale = b.create<ConstantOp>(
          loc, scalarType,
          DenseElementsAttr::get(scalarType,
                                 b.getFloatAttr(xType.getElementType(),
                                                double(alpha) / double(rank))));
      Value scaled = b.create<MulOp>(loc, d, scale);
      auto sum = b.create<AddOp>(loc, op.getResult(), scaled);
      op.getResult().replaceAllUsesExcept(sum, sum);
    }
    // Every parameter but the adapters is frozen.
    for (unsigned i = 0; i < body.getNumArguments(); ++i)
      if (func.getArgAttr(i, kParamAttr) && !adapters.contains(i))
        func.setArgAttr(i, kFrozenAttr, b.getUnitAttr());
    return success();
  }
};

} // namespace
