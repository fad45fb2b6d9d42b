//===- FuseAttention.cpp - masked attention chains into one op ------------===//
//
// A model's masked attention imports to a chain of ops: the scores
// `matmul(q, k^T)`, their scaling, the mask (GPT-2's boolean
// `masked_fill(~mask, -inf)` as a `where`, LLaMA's additive `scores + mask`
// as an `add`), `softmax`, a dropout and `matmul(probs, v)`. Fused into one
// `merak.masked_attention`, the kernel sees the mask next to the products
// and, where it is causal, skips the blocks of both products (and of the
// four in the backward) that the mask zeroes: about half of the
// attention's work at long sequences.
//
//===----------------------------------------------------------------------===//

#include "merak/Dialect/Merak/IR/AttrNames.h"
#include "merak/Dialect/Merak/IR/MerakOps.h"
#include "merak/Dialect/Merak/Transforms/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

#include <cmath>

namespace merak {
#define GEN_PASS_DEF_FUSEATTENTION
#include "merak/Dialect/Merak/Transforms/Passes.h.inc"
} // namespace merak

using namespace mlir;
using namespace merak;

namespace {

/// The value of a splat floating-point constant with one element.
std::optional<double> scalarConstant(Value v) {
  auto c = v.getDefiningOp<ConstantOp>();
  if (!c)
    return std::nullopt;
  auto dense = dyn_cast<DenseElementsAttr>(c.getValue());
  if (!dense || !dense.isSplat() || dense.getNumElements() != 1 ||
      !isa<FloatType>(dense.getElementType()))
    return std::nullopt;
  return dense.getSplatValue<APFloat>().convertToDouble();
}

bool isLastDimSwap(PermuteOp p) {
  ArrayRef<int64_t> perm = p.getPermutation();
  int64_t r = perm.size();
  if (r < 2 || perm[r - 1] != r - 2 || perm[r - 2] != r - 1)
    return false;
  for (int64_t i = 0; i + 2 < r; ++i)
    if (perm[i] != i)
      return false;
  return true;
}

bool hasOneUse(Value v) { return v.hasOneUse(); }

/// Whether `v` is computed from a parameter (a `merak.param` argument).
bool dependsOnParameter(Value v) {
  SmallVector<Value> work = {v};
  DenseSet<Value> seen;
  while (!work.empty()) {
    Value x = work.pop_back_val();
    if (!seen.insert(x).second)
      continue;
    if (auto arg = dyn_cast<BlockArgument>(x)) {
      auto func = dyn_cast<func::FuncOp>(arg.getOwner()->getParentOp());
      if (func && func.getArgAttr(arg.getArgNumber(), kParamAttr))
        return true;
      continue;
    }
    for (Value operand : x.getDefiningOp()->getOperands())
      work.push_back(operand);
  }
  return false;
}

RankedTensorType tensorType(Value v) {
  return cast<RankedTensorType>(v.getType());
}

struct FuseAttentionPass
    : public merak::impl::FuseAttentionBase<FuseAttentionPass> {
  using FuseAttentionBase::FuseAttentionBase;

  void runOnOperation() override {
    SmallVector<SoftmaxOp> softmaxes;
    getOperation().walk([&](SoftmaxOp op) { softmaxes.push_back(op); });
    for (SoftmaxOp op : softmaxes)
      fuse(op);
  }

  /// Fuses the chain around `softmax` when it has the expected form.
  void fuse(SoftmaxOp softmax) {
    Value probs = softmax.getResult();
    auto type = tensorType(probs);
    int64_t rank = type.getRank();
    if (rank < 2 || (softmax.getDim() != rank - 1 && softmax.getDim() != -1))
      return;

    // Down: an optional inactive dropout, then matmul(probs, v).
    if (!hasOneUse(probs))
      return;
    Operation *user = *probs.getUsers().begin();
    DropoutOp dropout;
    if ((dropout = dyn_cast<DropoutOp>(user))) {
      if (dropout.getTraining() && dropout.getP().convertToDouble() != 0.0)
        return;
      if (!hasOneUse(dropout.getResult()))
        return;
      user = *dropout.getResult().getUsers().begin();
    }
    auto context = dyn_cast<MatmulOp>(user);
    Value scoresUse = dropout ? dropout.getResult() : probs;
    if (!context || context.getLhs() != scoresUse)
      return;
    Value v = context.getRhs();

    // Up: the mask, where(not(mask), -inf, s) or s + mask ...
    Value masked = softmax.getInput();
    if (!hasOneUse(masked))
      return;
    Value mask, scores;
    Operation *maskOp = masked.getDefiningOp();
    SmallVector<Operation *> shared; // erased when nothing else reads them
    auto isMinusInf = [](Value x) {
      std::optional<double> fill = scalarConstant(x);
      return fill && std::isinf(*fill) && *fill < 0;
    };
    if (auto where = dyn_cast_or_null<WhereOp>(maskOp)) {
      // masked_fill(~mask, -inf): where(not(mask), -inf, s); or
      // torch.where(mask, s, -inf).
      if (auto notOp = where.getCondition().getDefiningOp<NotOp>();
          notOp && isMinusInf(where.getOnTrue())) {
        mask = notOp.getInput();
        scores = where.getOnFalse();
        shared = {notOp, where.getOnTrue().getDefiningOp()};
      } else if (isMinusInf(where.getOnFalse())) {
        mask = where.getCondition();
        scores = where.getOnTrue();
        shared = {where.getOnFalse().getDefiningOp()};
      } else {
        return;
      }
    } else if (auto add = dyn_cast_or_null<AddOp>(maskOp)) {
      // The scores are the operand of the result's type that the scaling
      // or the product computes; the mask is the other one, and must not
      // need a gradient (T5's position bias, added the same way, does).
      auto isScores = [&](Value x) {
        return tensorType(x) == type &&
               isa_and_nonnull<MulOp, DivOp, MatmulOp>(x.getDefiningOp());
      };
      scores = isScores(add.getLhs()) ? add.getLhs() : add.getRhs();
      mask = scores == add.getLhs() ? add.getRhs() : add.getLhs();
      if (!isScores(scores) ||
          tensorType(mask).getElementType() != type.getElementType() ||
          dependsOnParameter(mask))
        return;
      shared = {mask.getDefiningOp()};
    } else {
      return;
    }
    if (tensorType(scores) != type)
      return;
    // ... of s = matmul(q, k^T), optionally multiplied or divided by a
    // one-element constant.
    double scale = 1.0;
    bool divide = false;
    Operation *scaling = scores.getDefiningOp();
    if (isa_and_nonnull<MulOp, DivOp>(scaling)) {
      Value lhs = scaling->getOperand(0), rhs = scaling->getOperand(1);
      divide = isa<DivOp>(scaling);
      std::optional<double> c = scalarConstant(rhs);
      Value other = lhs;
      if (!c && !divide) {
        c = scalarConstant(lhs);
        other = rhs;
      }
      if (!c || (divide && *c == 0.0) || !hasOneUse(scaling->getResult(0)))
        return;
      scale = *c;
      shared.push_back((other == lhs ? rhs : lhs).getDefiningOp());
      scores = other;
    } else {
      scaling = nullptr;
    }
    auto product = scores.getDefiningOp<MatmulOp>();
    if (!product || !hasOneUse(product.getResult()) ||
        tensorType(product.getResult()) != type)
      return;
    Value q = product.getLhs();
    Value kT = product.getRhs();

    // k is kT with its last two dimensions swapped back: the permute's
    // input, or a new permute. It must have q's type (self-attention);
    // then the op's own rule decides whether q, k, v and the mask fit.
    auto permute = kT.getDefiningOp<PermuteOp>();
    if (!permute || !isLastDimSwap(permute))
      permute = nullptr;
    auto kTt = tensorType(kT);
    SmallVector<int64_t> kShape(kTt.getShape());
    if (kShape.size() < 2)
      return;
    std::swap(kShape[kShape.size() - 1], kShape[kShape.size() - 2]);
    auto qt = tensorType(q);
    if (RankedTensorType::get(kShape, kTt.getElementType()) != qt ||
        failed(MaskedAttentionOp::checkOperands(nullptr, q, q, v, mask)))
      return;

    OpBuilder b(context);
    Location loc =
        b.getFusedLoc({product.getLoc(), softmax.getLoc(), context.getLoc()});
    Value k;
    if (permute) {
      k = permute.getInput();
    } else {
      SmallVector<int64_t> perm = llvm::to_vector(llvm::seq<int64_t>(0, rank));
      std::swap(perm[rank - 1], perm[rank - 2]);
      k = b.create<PermuteOp>(loc, kT, perm);
    }
    // What the backward reads: the probabilities, or (flash) the rows'
    // log-sum-exp in f32.
    Type saved = type;
    if (flash)
      saved =
          RankedTensorType::get(type.getShape().drop_back(), b.getF32Type());
    auto fused = b.create<MaskedAttentionOp>(
        loc, TypeRange{v.getType(), saved}, q, k, v, mask,
        b.getF64FloatAttr(scale), divide ? b.getUnitAttr() : UnitAttr());
    context.getResult().replaceAllUsesWith(fused.getResult());
    // The chain, last reader first; shared values (the mask's `not`, the
    // constants, k's transpose) go when nothing else reads them.
    shared.push_back(permute);
    for (Operation *op :
         {context.getOperation(), dropout.getOperation(),
          softmax.getOperation(), maskOp, scaling, product.getOperation()})
      if (op)
        op->erase();
    for (Operation *op : shared)
      if (op && op->use_empty() && isMemoryEffectFree(op))
        op->erase();
  }
};

} // namespace
