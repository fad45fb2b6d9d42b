//===- LinearAlgebra.cpp - matmul, linear, addmm --------------------------===//
//
// Matrix products: matmul and its batched and vector forms, linear, addmm.
//
//===----------------------------------------------------------------------===//

#include "ImporterImpl.h"

namespace merak::torchscript {

void Importer::populateLinearAlgebraConverters(ConverterTable &table) {
  // Linear algebra.
  CONVERT("aten::linear") {
    Value x = im.tensorArg(n, 0), w = im.tensorArg(n, 1);
    if (!x || !w)
      return failure();
    Value bias;
    if (!im.isNone(n, 2) && !(bias = im.tensorArg(n, 2)))
      return failure();
    Value v = im.make1<LinearOp>(x, w, bias);
    return im.bind(n, v);
  };
  auto matmul = [](Importer &im, jit::Node *n) -> LogicalResult {
    Value l = im.tensorArg(n, 0), r = im.tensorArg(n, 1);
    if (!l || !r)
      return failure();
    int64_t lr = typeOf(l).getRank(), rr = typeOf(r).getRank();
    if (lr == 0 || rr == 0) {
      im.error(n) << "matmul of a rank-0 tensor";
      return failure();
    }
    // 1-D operands become matrices and the added dimension is dropped.
    SmallVector<int64_t> outShape;
    if (lr == 1)
      l = im.reshape(l, {1, typeOf(l).getDimSize(0)});
    if (rr == 1)
      r = im.reshape(r, {typeOf(r).getDimSize(0), 1});
    Value v = im.make1<MatmulOp>(l, r);
    if (!v)
      return failure();
    if (lr == 1 || rr == 1) {
      SmallVector<int64_t> shape(typeOf(v).getShape());
      if (rr == 1)
        shape.pop_back();
      if (lr == 1)
        shape.erase(shape.end() - (rr == 1 ? 1 : 2));
      v = im.reshape(v, shape);
    }
    im.setOut(n, 0, v);
    return success();
  };
  table["aten::matmul"] = table["aten::mm"] = table["aten::bmm"] = matmul;
  auto addmm = [](Importer &im, jit::Node *n) -> LogicalResult {
    Value c = im.tensorArg(n, 0), a = im.tensorArg(n, 1),
          bm = im.tensorArg(n, 2);
    if (!c || !a || !bm)
      return failure();
    auto beta = im.floatArg(n, 3, "beta");
    TRY(beta);
    auto alpha = im.floatArg(n, 4, "alpha");
    TRY(alpha);
    Value p = im.make1<MatmulOp>(a, bm);
    if (!p)
      return failure();
    Type elem = typeOf(p).getElementType();
    if (*alpha != 1.0)
      p = im.make1<MulOp>(p,
                          im.materialize(c10::IValue(*alpha), im.curLoc, elem));
    if (*beta != 1.0)
      c = im.make1<MulOp>(c,
                          im.materialize(c10::IValue(*beta), im.curLoc, elem));
    Value v = *beta == 0.0 ? p : im.make1<AddOp>(c, p);
    return im.bind(n, v);
  };
  table["aten::addmm"] = table["aten::baddbmm"] = addmm;
}

} // namespace merak::torchscript
