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
    Value v = im.make1<CrossEntropyOp>(x, t, im.b.getI64IntegerAttr(*ignore),
                                       LossReductionAttr::get(im.ctx, red),
                                       im.b.getF64FloatAttr(smoothing));
    return im.bind(n, v);
  };
}

} // namespace merak::torchscript
