//===- Losses.cpp - loss functions ----------------------------------------===//
//
// Loss functions.
//
//===----------------------------------------------------------------------===//

#include "ImporterImpl.h"

namespace merak::torchscript {

void Importer::populateLossConverters(ConverterTable &table) {
  // Losses.
  CONVERT("aten::cross_entropy_loss") {
    Value x = im.tensorArg(n, 0), t = im.tensorArg(n, 1);
    if (!x || !t)
      return failure();
    if (!im.isNone(n, 2))
      return im.unsupported(n, "class weights");
    auto reduction = im.intArg(n, 3, "reduction");
    TRY(reduction);
    auto ignore = im.intArg(n, 4, "ignore_index");
    TRY(ignore);
    double smoothing = 0.0;
    if (n->inputs().size() > 5) {
      auto s = im.floatArg(n, 5, "label_smoothing");
      TRY(s);
      smoothing = *s;
    }
    if (isa<FloatType>(typeOf(t).getElementType()))
      return im.unsupported(n, "probability targets");
    LossReduction red = *reduction == 0   ? LossReduction::none
                        : *reduction == 1 ? LossReduction::mean
                                          : LossReduction::sum;
    // Per-pixel logits [N, C, d1, ...] against targets [N, d1, ...]: the
    // class dimension moved last and every position a row, [N * d1 * ...,
    // C] against [N * d1 * ...]; the loss is the same over the rows.
    auto xs = typeOf(x).getShape();
    SmallVector<int64_t> positions;
    if (xs.size() > 2) {
      SmallVector<int64_t> perm = {0};
      int64_t rows = xs[0];
      for (size_t d = 2; d < xs.size(); ++d) {
        perm.push_back(d);
        rows *= xs[d];
      }
      perm.push_back(1);
      positions.assign(typeOf(t).getShape().begin(),
                       typeOf(t).getShape().end());
      x = im.make1<PermuteOp>(x, im.b.getDenseI64ArrayAttr(perm));
      if (!x || !(x = im.reshape(x, {rows, xs[1]})) ||
          !(t = im.reshape(t, {rows})))
        return failure();
    }
    Value v = im.make1<CrossEntropyOp>(x, t, im.b.getI64IntegerAttr(*ignore),
                                       LossReductionAttr::get(im.ctx, red),
                                       im.b.getF64FloatAttr(smoothing));
    if (v && !positions.empty() && red == LossReduction::none)
      v = im.reshape(v, positions);
    return im.bind(n, v);
  };
  // The mean (or sum) of squared differences, from elementwise ops and a
  // reduction over every dimension.
  CONVERT("aten::mse_loss") {
    Value x = im.tensorArg(n, 0), t = im.tensorArg(n, 1);
    if (!x || !t)
      return failure();
    auto reduction = im.intArg(n, 2, "reduction");
    TRY(reduction);
    Type elem = typeOf(x).getElementType();
    if (!isa<FloatType>(elem))
      return im.unsupported(n, "integer input");
    Value d = im.make1<SubOp>(x, im.cast(t, elem));
    Value sq = d ? im.make1<MulOp>(d, d) : Value();
    if (!sq || *reduction == 0)
      return im.bind(n, sq);
    SmallVector<int64_t> all;
    for (int64_t i = 0; i < typeOf(sq).getRank(); ++i)
      all.push_back(i);
    DenseI64ArrayAttr dims = im.b.getDenseI64ArrayAttr(all);
    Value v = *reduction == 1 ? im.make1<ReduceMeanOp>(sq, dims, false)
                              : im.make1<ReduceSumOp>(sq, dims, false);
    return im.bind(n, v);
  };
}

} // namespace merak::torchscript
