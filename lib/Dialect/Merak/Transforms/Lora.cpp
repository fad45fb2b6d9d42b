//===- Lora.cpp - --merak-lora --------------------------------------------===//
//
// Low-rank adapters on the forward program: each target linear gets two
// new parameters whose product, scaled, is added to its result, and every
// other parameter is frozen. See Passes.td.
//
//===----------------------------------------------------------------------===//

#include "merak/Dialect/Merak/IR/AttrNames.h"
#include "merak/Dialect/Merak/IR/MerakOps.h"
#include "merak/Dialect/Merak/Transforms/LayerPatterns.h"
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

bool isScalar(Value v) {
  return cast<RankedTensorType>(v.getType()).getRank() == 0;
}

/// The linears `v` is computed from through ops that move, scale, combine
/// or rotate values without mixing features (a query or key through its
/// head split, scaling and rotary embedding; GPT-2's fused projection
/// through its slices).
void projectionsOf(Value v, llvm::SmallPtrSetImpl<Operation *> &out) {
  SmallVector<Value> work{v};
  llvm::SmallPtrSet<Operation *, 16> seen;
  while (!work.empty()) {
    Operation *def = work.pop_back_val().getDefiningOp();
    if (!def || !seen.insert(def).second)
      continue;
    if (isa<LinearOp>(def)) {
      out.insert(def);
      continue;
    }
    if (isa<ReshapeOp, PermuteOp, SliceOp, SelectOp, ExpandOp, ConcatOp, CastOp,
            DropoutOp, MulOp, DivOp, AddOp, SubOp, NegOp, RollOp>(def))
      for (Value operand : def->getOperands())
        work.push_back(operand);
  }
}

/// The linears that read `v` through ops that only move or cast it (an
/// attention's output projection after its heads are merged).
void readersOf(Value v, llvm::SmallPtrSetImpl<Operation *> &out) {
  SmallVector<Value> work{v};
  while (!work.empty()) {
    Value value = work.pop_back_val();
    for (OpOperand &use : value.getUses()) {
      Operation *user = use.getOwner();
      if (auto linear = dyn_cast<LinearOp>(user)) {
        if (use.getOperandNumber() == 0)
          out.insert(linear);
      } else if (isa<ReshapeOp, PermuteOp, CastOp, DropoutOp>(user)) {
        work.push_back(user->getResult(0));
      }
    }
  }
}

/// The matmul `v` is computed from through scaling, masking and casts (an
/// attention's scores before their softmax), or null.
MatmulOp scoresProduct(Value v) {
  while (Operation *def = v.getDefiningOp()) {
    if (auto m = dyn_cast<MatmulOp>(def))
      return m;
    if (isa<CastOp, ReshapeOp, DropoutOp>(def)) {
      v = def->getOperand(0);
      continue;
    }
    if (!isa<MulOp, DivOp, AddOp, SubOp, WhereOp>(def))
      return {};
    // Of the operands, the one with the scores' shape that is computed
    // (a mask or a bias is a constant, an input or a broadcast).
    Value next;
    for (Value operand : def->getOperands())
      if (operand.getType() == v.getType() && !isScalar(operand) &&
          scoresProduct(operand)) {
        next = operand;
        break;
      }
    if (!next)
      return {};
    v = next;
  }
  return {};
}

/// The linears of the attention layers and of the MLPs of `func`, found by
/// structure as tensor parallelism finds them: an attention is a softmax
/// over the product of two values, whose probabilities multiply a third
/// (or a fused `masked_attention`); its projections are the linears the
/// query, key and value come from and those reading its result. An MLP is
/// two linears joined by an activation (GELU, ReLU, SiLU, a gated product,
/// or such a function written out in arithmetic), neither of them the
/// output head nor an attention's.
struct LayerCategories {
  llvm::SmallPtrSet<Operation *, 32> attention, mlp;
};

LayerCategories categorize(func::FuncOp func,
                           llvm::function_ref<bool(LinearOp)> isHead) {
  LayerCategories c;
  auto addAttention = [&](Value q, Value k, Value v, Value out) {
    projectionsOf(q, c.attention);
    projectionsOf(k, c.attention);
    projectionsOf(v, c.attention);
    readersOf(out, c.attention);
  };
  func.walk([&](Operation *op) {
    if (auto fused = dyn_cast<MaskedAttentionOp>(op)) {
      addAttention(fused.getQuery(), fused.getKey(), fused.getValue(),
                   fused.getResult());
      return;
    }
    auto softmax = dyn_cast<SoftmaxOp>(op);
    if (!softmax)
      return;
    MatmulOp scores = scoresProduct(softmax.getInput());
    if (!scores)
      return;
    // The probabilities (through dropout and casts) times the values.
    SmallVector<Value> work{softmax.getResult()};
    while (!work.empty()) {
      Value p = work.pop_back_val();
      for (OpOperand &use : p.getUses()) {
        Operation *user = use.getOwner();
        if (auto m = dyn_cast<MatmulOp>(user); m && use.getOperandNumber() == 0)
          addAttention(scores.getLhs(), scores.getRhs(), m.getRhs(),
                       m.getResult());
        else if (isa<DropoutOp, CastOp>(user))
          work.push_back(user->getResult(0));
      }
    }
  });
  func.walk([&](LinearOp first) {
    if (c.attention.contains(first) || isHead(first))
      return;
    // The activation's values, from the first linear's result.
    llvm::SmallPtrSet<Value, 16> chain;
    SmallVector<Value> work{first.getResult()};
    chain.insert(first.getResult());
    SmallVector<LinearOp> seconds;
    while (!work.empty()) {
      Value v = work.pop_back_val();
      for (OpOperand &use : v.getUses()) {
        Operation *user = use.getOwner();
        if (auto second = dyn_cast<LinearOp>(user)) {
          if (use.getOperandNumber() == 0 && second != first &&
              !c.attention.contains(second) && !isHead(second))
            seconds.push_back(second);
          continue;
        }
        bool activation = isHiddenElementwise(user) || isa<CastOp>(user);
        if (!activation && isHiddenArithmetic(user))
          activation = llvm::all_of(user->getOperands(), [&](Value operand) {
            return chain.contains(operand) || isScalar(operand);
          });
        if (activation && user->getNumResults() == 1 &&
            chain.insert(user->getResult(0)).second)
          work.push_back(user->getResult(0));
      }
    }
    // A linear whose result only passes through casts to the next one is
    // not an MLP (a projection pair, such as LoRA's own adapters).
    bool activated = llvm::any_of(chain, [&](Value v) {
      Operation *def = v.getDefiningOp();
      return def && def != first.getOperation() && !isa<CastOp>(def);
    });
    if (!activated)
      return;
    for (LinearOp second : seconds) {
      c.mlp.insert(first);
      c.mlp.insert(second);
    }
  });
  return c;
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
    auto isCategory = [](StringRef t) {
      return t == "all-linear" || t == "attention" || t == "mlp";
    };
    LayerCategories categories = categorize(
        func, [](LinearOp op) { return feedsLossDirectly(op.getResult()); });

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
        if (!isCategory(t) && nameMatches(name, t)) {
          pick = true;
          ++matched[t];
        }
      for (auto [category, set] :
           {std::pair{StringRef("attention"), &categories.attention},
            std::pair{StringRef("mlp"), &categories.mlp}})
        if (llvm::is_contained(wanted, category) && set->contains(op)) {
          pick = true;
          ++matched[category];
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
