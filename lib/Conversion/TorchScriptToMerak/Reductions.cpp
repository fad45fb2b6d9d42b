//===- Reductions.cpp - reductions ----------------------------------------===//
//
// Reductions over dimensions: sum, mean, max, with keepdim and dtype; the
// Euclidean norm and argmax, built from those and elementwise ops.
//
//===----------------------------------------------------------------------===//

#include "ImporterImpl.h"

namespace merak::torchscript {

void Importer::populateReductionConverters(ConverterTable &table) {
  // Reductions.
  table["aten::sum"] = [](Importer &im, jit::Node *n) {
    return im.reduce(n, "sum");
  };
  table["aten::mean"] = [](Importer &im, jit::Node *n) {
    return im.reduce(n, "mean");
  };

  // sqrt(sum(x * x)) over `dims` (all when empty): the 2-norm, whose
  // gradient x / norm follows from the ops'.
  static const auto euclideanNorm = [](Importer &im, jit::Node *n, Value x,
                                       ArrayRef<int64_t> dims,
                                       bool keepdim) -> LogicalResult {
    int64_t rank = typeOf(x).getRank();
    if (!isa<FloatType>(typeOf(x).getElementType()))
      x = im.cast(x, im.b.getF32Type());
    SmallVector<int64_t> nd;
    for (int64_t d : dims) {
      int64_t v = d < 0 ? d + rank : d;
      if (v < 0 || v >= std::max<int64_t>(rank, 1)) {
        im.error(n) << "dim " << d << " is out of range for rank " << rank;
        return failure();
      }
      nd.push_back(v);
    }
    Value sq = im.make1<MulOp>(x, x);
    if (!sq)
      return failure();
    Value sum =
        rank == 0
            ? sq
            : im.make1<ReduceSumOp>(sq, im.b.getDenseI64ArrayAttr(nd), keepdim);
    if (!sum)
      return failure();
    return im.bind(n, im.make1<SqrtOp>(sum));
  };
  // Whether input `i` of `n`, the order, is 2 (absent means 2).
  static const auto isOrderTwo = [](Importer &im, jit::Node *n,
                                    size_t i) -> FailureOr<bool> {
    if (im.isNone(n, i))
      return true;
    auto p = im.constArg(n, i, "p");
    TRY(p);
    return p->isScalar() && p->toScalar().toDouble() == 2.0;
  };

  // A norm's `dim` list and `keepdim` flag, at inputs `at` and `at + 1`.
  static const auto dimsAndKeepdim = [](Importer &im, jit::Node *n, size_t at,
                                        std::vector<int64_t> &dims,
                                        bool &keepdim) -> LogicalResult {
    auto d = im.intsArg(n, at, "dim");
    TRY(d);
    auto k = im.boolArg(n, at + 1, "keepdim");
    TRY(k);
    dims = *d;
    keepdim = *k;
    return success();
  };

  // Norms: the Frobenius norm, and the vector 2-norm as `norm(p=2)` and
  // `linalg_vector_norm(ord=2)` spell it. Other orders are not supported.
  CONVERT("aten::frobenius_norm") {
    Value x = im.tensorArg(n, 0);
    if (!x)
      return failure();
    std::vector<int64_t> dims;
    bool keepdim = false;
    if (n->inputs().size() >= 3 &&
        failed(dimsAndKeepdim(im, n, 1, dims, keepdim)))
      return failure();
    return euclideanNorm(im, n, x, dims, keepdim);
  };
  CONVERT("aten::norm") {
    Value x = im.tensorArg(n, 0);
    if (!x)
      return failure();
    // Overloads: (self, p) | (self, p, dtype) | (self, p, dim[], keepdim[,
    // dtype]).
    if (n->inputs().size() == 3)
      return im.unsupported(n, "dtype");
    auto two = isOrderTwo(im, n, 1);
    TRY(two);
    if (!*two)
      return im.unsupported(n, "p other than 2");
    std::vector<int64_t> dims;
    bool keepdim = false;
    if (n->inputs().size() >= 4 &&
        failed(dimsAndKeepdim(im, n, 2, dims, keepdim)))
      return failure();
    if (n->inputs().size() >= 5 && !im.isNone(n, 4))
      return im.unsupported(n, "dtype");
    return euclideanNorm(im, n, x, dims, keepdim);
  };
  CONVERT("aten::linalg_vector_norm") {
    Value x = im.tensorArg(n, 0);
    if (!x)
      return failure();
    // (self, ord, dim[]?, keepdim, dtype?)
    auto two = isOrderTwo(im, n, 1);
    TRY(two);
    if (!*two)
      return im.unsupported(n, "ord other than 2");
    std::vector<int64_t> dims;
    if (!im.isNone(n, 2)) {
      auto d = im.intsArg(n, 2, "dim");
      TRY(d);
      dims = *d;
    }
    auto k = im.boolArg(n, 3, "keepdim");
    TRY(k);
    if (n->inputs().size() >= 5 && !im.isNone(n, 4))
      return im.unsupported(n, "dtype");
    return euclideanNorm(im, n, x, dims, *k);
  };

  // argmax(x, dim, keepdim): the first position of the maximum. With
  // `top = (x == max(x))` and `rev = size - position`, the first position
  // is `size - max(where(top, rev, 0))`; an integer result carries no
  // gradient. Without `dim`, over the flattened tensor.
  CONVERT("aten::argmax") {
    Value x = im.tensorArg(n, 0);
    if (!x)
      return failure();
    auto shape = typeOf(x).getShape();
    int64_t rank = shape.size();
    auto k = im.boolArg(n, 2, "keepdim");
    TRY(k);
    int64_t dim = 0;
    if (im.isNone(n, 1) || rank == 0) {
      x = im.reshape(x, {typeOf(x).getNumElements()});
    } else {
      auto d = im.dimArg(n, 1, rank);
      TRY(d);
      dim = *d;
    }
    auto xs = typeOf(x).getShape();
    int64_t size = xs[dim];
    auto dims = im.b.getDenseI64ArrayAttr({dim});
    Value top = im.make1<ReduceMaxOp>(x, dims, true);
    if (!top)
      return failure();
    Value isTop = im.make1<CompareOp>(
        ComparePredicateAttr::get(im.ctx, ComparePredicate::eq), x, top);
    std::vector<int64_t> revShape(xs.size(), 1);
    revShape[dim] = size;
    Value rev = im.constantTensor(
        at::arange(size, 0, -1, at::kLong).reshape(revShape), im.curLoc);
    Value zero = im.constantTensor(at::zeros({}, at::kLong), im.curLoc);
    if (!isTop || !rev || !zero)
      return failure();
    Value revAtTop = im.make1<WhereOp>(isTop, rev, zero);
    if (!revAtTop)
      return failure();
    Value best = im.make1<ReduceMaxOp>(revAtTop, dims, *k);
    Value sizeValue =
        im.constantTensor(at::scalar_tensor(size, at::kLong), im.curLoc);
    if (!best || !sizeValue)
      return failure();
    Value first = im.make1<SubOp>(sizeValue, best);
    if (first && *k && (im.isNone(n, 1) || rank == 0))
      first = im.reshape(first, SmallVector<int64_t>(rank, 1));
    return im.bind(n, first);
  };
}

} // namespace merak::torchscript
