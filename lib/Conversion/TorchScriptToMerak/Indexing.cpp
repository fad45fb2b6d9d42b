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
    int64_t dim = -1;
    Value idx;
    for (size_t i = 0; i < entries.size(); ++i) {
      Slot &e = entries[i];
      if (e.isConst() && e.iv.isNone())
        continue;
      if (dim >= 0)
        return im.unsupported(n, "several index tensors");
      dim = i;
      idx = e.isTensor()      ? e.value
            : e.iv.isTensor() ? im.constantTensor(e.iv.toTensor(), im.curLoc)
                              : Value();
    }
    if (dim < 0 || !idx)
      return im.unsupported(n, "no index tensor");
    if (!isa<IntegerType>(typeOf(idx).getElementType()) ||
        typeOf(idx).getElementType().isInteger(1))
      return im.unsupported(n, "boolean mask index");
    Value v = im.make1<IndexOp>(x, idx, dim);
    return im.bind(n, v);
  };
}

} // namespace merak::torchscript
