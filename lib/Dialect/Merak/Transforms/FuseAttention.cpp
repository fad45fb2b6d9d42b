//===- FuseAttention.cpp - masked attention chains into one op ------------===//
//
// A model's attention with a boolean mask (GPT-2's
// `att.masked_fill(~mask, -inf)`) imports to a chain of six ops: the scores
// `matmul(q, k^T)`, their scaling, the masking `where`, `softmax`, a
// dropout and `matmul(probs, v)`. Fused into one `merak.masked_attention`,
// the kernel sees the mask next to the products and, where it is causal,
// skips the blocks of both products (and of the four in the backward) that
// the mask zeroes: about half of the attention's work at long sequences.
//
//===----------------------------------------------------------------------===//

#include "merak/Dialect/Merak/IR/MerakOps.h"
#include "merak/Dialect/Merak/Transforms/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinAttributes.h"

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

    // Up: where(not(mask), -inf, scores), scores = [mul(] matmul [, c)].
    auto where = softmax.getInput().getDefiningOp<WhereOp>();
    if (!where || !hasOneUse(where.getResult()))
      return;
    auto notOp = where.getCondition().getDefiningOp<NotOp>();
    std::optional<double> fill = scalarConstant(where.getOnTrue());
    if (!notOp || !fill || !std::isinf(*fill) || *fill > 0)
      return;
    Value mask = notOp.getInput();
    Value scores = where.getOnFalse();
    if (tensorType(scores) != type)
      return;
    double scale = 1.0;
    MulOp mul = scores.getDefiningOp<MulOp>();
    if (mul) {
      std::optional<double> c = scalarConstant(mul.getRhs());
      Value other = mul.getLhs();
      if (!c) {
        c = scalarConstant(mul.getLhs());
        other = mul.getRhs();
      }
      if (!c || !hasOneUse(mul.getResult()))
        return;
      scale = *c;
      scores = other;
    }
    auto product = scores.getDefiningOp<MatmulOp>();
    if (!product || !hasOneUse(product.getResult()) ||
        tensorType(product.getResult()) != type)
      return;
    Value q = product.getLhs();
    Value kT = product.getRhs();

    // Self-attention shapes without broadcasting: q and k [..., T, D],
    // v [..., T, E], all float of one type.
    auto qt = tensorType(q), kTt = tensorType(kT), vt = tensorType(v);
    if (qt.getRank() != rank || kTt.getRank() != rank || vt.getRank() != rank ||
        qt.getElementType() != type.getElementType() ||
        vt.getElementType() != type.getElementType())
      return;
    ArrayRef<int64_t> qs = qt.getShape();
    int64_t t = qs[rank - 2];
    if (type.getShape()[rank - 1] != t ||
        vt.getShape().drop_back() != qs.drop_back() ||
        kTt.getShape().drop_back(2) != qs.drop_back(2) ||
        kTt.getShape()[rank - 2] != qs[rank - 1] ||
        kTt.getShape()[rank - 1] != t)
      return;
    if (tensorType(context.getResult()) != vt)
      return;

    OpBuilder b(context);
    Location loc =
        b.getFusedLoc({product.getLoc(), softmax.getLoc(), context.getLoc()});
    Value k;
    auto permute = kT.getDefiningOp<PermuteOp>();
    if (permute && isLastDimSwap(permute)) {
      k = permute.getInput();
    } else {
      SmallVector<int64_t> perm = llvm::to_vector(llvm::seq<int64_t>(0, rank));
      std::swap(perm[rank - 1], perm[rank - 2]);
      k = b.create<PermuteOp>(loc, kT, perm);
    }
    if (tensorType(k) != qt)
      return;
    // The mask must broadcast against the scores.
    ArrayRef<int64_t> ms = tensorType(mask).getShape();
    if (int64_t(ms.size()) > rank)
      return;
    for (auto [j, size] : llvm::enumerate(ms))
      if (size != 1 && size != type.getShape()[rank - ms.size() + j])
        return;

    auto fused = b.create<MaskedAttentionOp>(loc, TypeRange{vt, type}, q, k, v,
                                             mask, b.getF64FloatAttr(scale));
    context.getResult().replaceAllUsesWith(fused.getResult());
    // The chain, last reader first; shared values (the mask's `not`, the
    // constants, k's transpose) go when nothing else reads them.
    SmallVector<Operation *> chain = {context, dropout, softmax, where};
    SmallVector<Operation *> shared = {notOp,
                                       where.getOnTrue().getDefiningOp()};
    if (mul) {
      chain.push_back(mul);
      shared.push_back((mul.getLhs() == scores ? mul.getRhs() : mul.getLhs())
                           .getDefiningOp());
    }
    chain.push_back(product);
    shared.push_back(permute);
    for (Operation *op : chain)
      if (op)
        op->erase();
    for (Operation *op : shared)
      if (op && op->use_empty())
        op->erase();
  }
};

} // namespace
