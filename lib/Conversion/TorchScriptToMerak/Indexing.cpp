//===- Indexing.cpp - embedding and indexing ------------------------------===//
//
// Embedding lookups and index_select-style gathers.
//
//===----------------------------------------------------------------------===//

#include "ImporterImpl.h"

namespace merak::torchscript {

void Importer::populateIndexingConverters(ConverterTable &table) {
  // Embedding and indexing.
  CONVERT("aten::embedding") {
    Value w = im.tensorArg(n, 0), idx = im.tensorArg(n, 1);
    if (!w || !idx)
      return failure();
    IntegerAttr pad;
    if (n->inputs().size() >= 3) {
      auto p = im.intArg(n, 2, "padding_idx");
      TRY(p);
      if (*p >= 0)
        pad = im.b.getI64IntegerAttr(*p);
    }
    Value v = im.make1<EmbeddingOp>(w, idx, pad);
    return im.bind(n, v);
  };
  CONVERT("aten::index_select") {
    Value x = im.tensorArg(n, 0);
    if (!x)
      return failure();
    auto d = im.dimArg(n, 1, typeOf(x).getRank());
    TRY(d);
    Value idx = im.tensorArg(n, 2);
    if (!idx)
      return failure();
    Value v = im.make1<IndexOp>(x, idx, *d);
    return im.bind(n, v);
  };
  CONVERT("aten::index") {
    Value x = im.tensorArg(n, 0);
    if (!x)
      return failure();
    Slot &list = im.in(n, 1);
    std::vector<Slot> entries;
    if (list.kind == Slot::Kind::List)
      entries = list.elems;
    else if (list.isConst() && list.iv.isList())
      for (const c10::IValue &e : list.iv.toListRef())
        entries.push_back(Slot::constant(e));
    // Index tensors at adjacent dimensions [first, first + count); a
    // constant one is kept as a tensor so that arithmetic on it folds.
    int64_t first = -1;
    std::vector<Slot> indices;
    for (size_t i = 0; i < entries.size(); ++i) {
      Slot &e = entries[i];
      if (e.isConst() && e.iv.isNone())
        continue;
      if (first < 0)
        first = i;
      else if (first + (int64_t)indices.size() != (int64_t)i)
        return im.unsupported(n, "index tensors at non-adjacent dimensions");
      if (!e.isTensor() && !e.iv.isTensor())
        return im.unsupported(n, "no index tensor");
      Type elem = e.isTensor()
                      ? typeOf(e.value).getElementType()
                      : elementTypeOf(im.ctx, e.iv.toTensor().scalar_type())
                            .value_or(Type());
      if (!elem || !isa<IntegerType>(elem) || elem.isInteger(1))
        return im.unsupported(n, "boolean mask index");
      indices.push_back(e);
    }
    if (first < 0)
      return im.unsupported(n, "no index tensor");
    auto valueOf = [&](const Slot &e) {
      return e.isTensor() ? e.value
                          : im.constantTensor(e.iv.toTensor(), im.curLoc);
    };
    Value idx = valueOf(indices.front());
    int64_t dim = first;
    if (indices.size() > 1) {
      // x[i, j] over dimensions of sizes [m, n] is the flattened
      // x[i * n + j] (negative indices counted from the end first), so one
      // index op, whose gradient exists, picks the elements.
      auto xs = typeOf(x).getShape();
      int64_t count = indices.size(), flat = 1;
      auto scalar = [&](int64_t v) {
        return im.constantTensor(at::scalar_tensor(v, at::kLong), im.curLoc);
      };
      // The constant indices' terms fold into one tensor.
      at::Tensor folded;
      idx = Value();
      for (int64_t j = count - 1; j >= 0; --j) {
        int64_t size = xs[first + j];
        if (indices[j].isConst()) {
          at::Tensor t = indices[j].iv.toTensor().to(at::kLong);
          t = at::where(t < 0, t + size, t) * flat;
          folded = folded.defined() ? folded + t : t;
        } else {
          Value i = im.cast(indices[j].value, im.b.getI64Type());
          Value negative = im.make1<CompareOp>(
              ComparePredicateAttr::get(im.ctx, ComparePredicate::lt), i,
              scalar(0));
          Value wrapped = im.make1<AddOp>(i, scalar(size));
          if (!negative || !wrapped)
            return failure();
          i = im.make1<WhereOp>(negative, wrapped, i);
          if (i && flat != 1)
            i = im.make1<MulOp>(i, scalar(flat));
          if (i && idx)
            i = im.make1<AddOp>(i, idx);
          if (!i)
            return failure();
          idx = i;
        }
        flat *= size;
      }
      if (folded.defined()) {
        Value c = im.constantTensor(folded, im.curLoc);
        idx = c && idx ? im.make1<AddOp>(c, idx) : c;
        if (!idx)
          return failure();
      }
      SmallVector<int64_t> merged(xs.begin(), xs.begin() + first);
      merged.push_back(flat);
      merged.append(xs.begin() + first + count, xs.end());
      x = im.reshape(x, merged);
      if (!x)
        return failure();
    }
    Value v = im.make1<IndexOp>(x, idx, dim);
    return im.bind(n, v);
  };
}

} // namespace merak::torchscript
