//===- Reductions.cpp - reductions ----------------------------------------===//
//
// Reductions over dimensions: sum, mean, max, with keepdim and dtype; the
// Euclidean norm, argmax, top-k and one-hot, built from those and
// elementwise ops; cumulative sums.
//
//===----------------------------------------------------------------------===//

#include "ImporterImpl.h"

namespace merak::torchscript {

void Importer::populateReductionConverters(ConverterTable &table) {
  // The first position along `dim` where the boolean `mask` holds, as i64
  // (kept as size 1 with `keepdim`); `size` where it holds nowhere. With
  // `rev = size - position`, the first position is
  // `size - max(where(mask, rev, 0))`. An integer result carries no
  // gradient.
  static const auto firstTrue = [](Importer &im, Value mask, int64_t dim,
                                   bool keepdim) -> Value {
    auto shape = typeOf(mask).getShape();
    int64_t size = shape[dim];
    std::vector<int64_t> revShape(shape.size(), 1);
    revShape[dim] = size;
    Value rev = im.constantTensor(
        at::arange(size, 0, -1, at::kLong).reshape(revShape), im.curLoc);
    Value zero = im.constantTensor(at::zeros({}, at::kLong), im.curLoc);
    if (!rev || !zero)
      return {};
    Value revAt = im.make1<WhereOp>(mask, rev, zero);
    if (!revAt)
      return {};
    Value best =
        im.make1<ReduceMaxOp>(revAt, im.b.getDenseI64ArrayAttr({dim}), keepdim);
    Value sizeValue =
        im.constantTensor(at::scalar_tensor(size, at::kLong), im.curLoc);
    if (!best || !sizeValue)
      return {};
    return im.make1<SubOp>(sizeValue, best);
  };

  // `[1, .., size, .., 1]` (rank `rank`, `size` at `dim`): 0 .. size - 1.
  static const auto positions = [](Importer &im, int64_t rank, int64_t dim,
                                   int64_t size) -> Value {
    std::vector<int64_t> shape(rank, 1);
    shape[dim] = size;
    return im.constantTensor(at::arange(size, at::kLong).reshape(shape),
                             im.curLoc);
  };

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

  // argmax(x, dim, keepdim): the first position of the maximum. Without
  // `dim`, over the flattened tensor.
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
    auto dims = im.b.getDenseI64ArrayAttr({dim});
    Value top = im.make1<ReduceMaxOp>(x, dims, true);
    if (!top)
      return failure();
    Value isTop = im.make1<CompareOp>(
        ComparePredicateAttr::get(im.ctx, ComparePredicate::eq), x, top);
    if (!isTop)
      return failure();
    Value first = firstTrue(im, isTop, dim, *k);
    if (first && *k && (im.isNone(n, 1) || rank == 0))
      first = im.reshape(first, SmallVector<int64_t>(rank, 1));
    return im.bind(n, first);
  };

  // topk(x, k, dim=-1, largest=True, sorted=True) -> (values, indices), as
  // k selection rounds: each takes the first position of the largest
  // element not taken yet (ties to the lower index, as the CPU kernel of
  // torch.topk orders them), so the results come sorted. A value is read
  // from `x` through a one-position mask, so its gradient reaches exactly
  // the element picked. Routers take k of a few experts; k is bounded to
  // keep the step's op count reasonable.
  CONVERT("aten::topk") {
    Value x = im.tensorArg(n, 0);
    if (!x)
      return failure();
    auto xt = typeOf(x);
    int64_t rank = xt.getRank();
    auto k = im.intArg(n, 1, "k");
    TRY(k);
    auto d = im.dimArg(n, 2, std::max<int64_t>(rank, 1));
    TRY(d);
    auto largest = im.boolArg(n, 3, "largest");
    TRY(largest);
    if (rank == 0)
      return im.unsupported(n, "rank-0 input");
    int64_t dim = *d, size = xt.getDimSize(dim);
    constexpr int64_t kMostRounds = 64;
    if (*k < 1 || *k > size) {
      im.error(n) << "k = " << *k << " is outside [1, " << size
                  << "], the size of dimension " << dim;
      return failure();
    }
    if (*k > kMostRounds) {
      im.error(n) << "k = " << *k << " is more than the " << kMostRounds
                  << " selection rounds the importer builds";
      return failure();
    }
    Type elem = xt.getElementType();
    if (!isa<FloatType>(elem) && !elem.isInteger(64))
      return im.unsupported(n, "an input neither floating-point nor int64");
    // Selection by the largest of `key` (x, or -x for the smallest); taken
    // elements are replaced by the lowest value of the type.
    Value key = *largest ? x : im.make1<NegOp>(x);
    at::Tensor lowest =
        isa<FloatType>(elem)
            ? at::full({}, -std::numeric_limits<double>::infinity())
            : at::full({}, std::numeric_limits<int64_t>::min(), at::kLong);
    Value floor = im.constantTensor(lowest, im.curLoc);
    Value zero = im.constantTensor(at::zeros({}), im.curLoc);
    Value pos = positions(im, rank, dim, size);
    if (!key || !floor || !zero || !pos)
      return failure();
    floor = im.cast(floor, elem);
    zero = im.cast(zero, elem);
    auto eq = ComparePredicateAttr::get(im.ctx, ComparePredicate::eq);
    auto dims = im.b.getDenseI64ArrayAttr({dim});
    SmallVector<Value> values, indices;
    Value taken;
    for (int64_t r = 0; r < *k; ++r) {
      Value open = taken ? im.make1<WhereOp>(taken, floor, key) : key;
      Value top = open ? im.make1<ReduceMaxOp>(open, dims, true) : Value();
      Value isTop = top ? im.make1<CompareOp>(eq, open, top) : Value();
      if (isTop && taken)
        isTop = im.make1<AndOp>(isTop, im.make1<NotOp>(taken));
      Value index = isTop ? firstTrue(im, isTop, dim, true) : Value();
      Value hit = index ? im.make1<CompareOp>(eq, pos, index) : Value();
      Value picked = hit ? im.make1<WhereOp>(hit, x, zero) : Value();
      Value value =
          picked ? im.make1<ReduceSumOp>(picked, dims, true) : Value();
      if (!value)
        return failure();
      taken = taken ? im.make1<OrOp>(taken, hit) : hit;
      values.push_back(value);
      indices.push_back(index);
    }
    Value v = values.size() == 1 ? values[0] : im.make1<ConcatOp>(values, dim);
    Value i =
        indices.size() == 1 ? indices[0] : im.make1<ConcatOp>(indices, dim);
    if (!v || !i)
      return failure();
    im.setOut(n, 0, v);
    im.setOut(n, 1, i);
    return success();
  };

  // one_hot(x, num_classes): x[..., None] == arange(num_classes), as i64.
  // num_classes = -1 (the largest index plus one) depends on the data.
  CONVERT("aten::one_hot") {
    Value x = im.tensorArg(n, 0);
    if (!x)
      return failure();
    auto classes = im.intArg(n, 1, "num_classes");
    TRY(classes);
    if (*classes < 0)
      return im.unsupported(
          n, "num_classes = -1 (the size would depend on the data)");
    auto xt = typeOf(x);
    if (!xt.getElementType().isInteger(64) || xt.getElementType().isInteger(1))
      return im.unsupported(n, "a non-int64 index tensor");
    SmallVector<int64_t> shape(xt.getShape());
    shape.push_back(1);
    Value col = im.reshape(x, shape);
    Value pos = positions(im, shape.size(), shape.size() - 1, *classes);
    if (!col || !pos)
      return failure();
    Value hit = im.make1<CompareOp>(
        ComparePredicateAttr::get(im.ctx, ComparePredicate::eq), col, pos);
    if (!hit)
      return failure();
    return im.bind(n, im.cast(hit, im.b.getI64Type()));
  };

  // cumsum(x, dim, dtype=None): integers and booleans are summed as i64,
  // as torch.cumsum promotes them.
  CONVERT("aten::cumsum") {
    Value x = im.tensorArg(n, 0);
    if (!x)
      return failure();
    int64_t rank = typeOf(x).getRank();
    if (rank == 0)
      return im.unsupported(n, "rank-0 input");
    auto d = im.dimArg(n, 1, rank);
    TRY(d);
    Type elem = typeOf(x).getElementType();
    if (n->inputs().size() > 2 && !im.isNone(n, 2)) {
      auto st = im.intArg(n, 2, "dtype");
      TRY(st);
      auto e = elementTypeOf(im.ctx, (at::ScalarType)*st);
      if (failed(e))
        return im.unsupported(n, "dtype");
      elem = *e;
    } else if (isa<IntegerType>(elem)) {
      elem = im.b.getI64Type();
    }
    if (elem != typeOf(x).getElementType())
      x = im.cast(x, elem);
    return im.bind(n, im.make1<CumsumOp>(x, *d, false));
  };
}

} // namespace merak::torchscript
