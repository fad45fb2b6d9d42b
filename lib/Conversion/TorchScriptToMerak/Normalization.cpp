//===- Normalization.cpp - softmax and normalization ----------------------===//
//
// Softmax, log-softmax, layer, RMS and batch normalization, attention.
//
//===----------------------------------------------------------------------===//

#include "ImporterImpl.h"

namespace merak::torchscript {

void Importer::populateNormalizationConverters(ConverterTable &table) {
  // Softmax and normalization.
  auto softmax = [](bool log) {
    return [log](Importer &im, jit::Node *n) -> LogicalResult {
      Value x = im.tensorArg(n, 0);
      if (!x)
        return failure();
      auto d = im.dimArg(n, 1, typeOf(x).getRank());
      TRY(d);
      std::string k = n->kind().toQualString();
      if (k.find("aten::_") == std::string::npos && n->inputs().size() >= 3 &&
          !im.isNone(n, 2)) {
        auto dt = im.intArg(n, 2, "dtype");
        TRY(dt);
        auto e = elementTypeOf(im.ctx, (at::ScalarType)*dt);
        if (failed(e))
          return im.unsupported(n, "dtype");
        x = im.cast(x, *e);
      } else if (!isa<FloatType>(typeOf(x).getElementType())) {
        x = im.cast(x, im.b.getF32Type());
      }
      Value v =
          log ? im.make1<LogSoftmaxOp>(x, *d) : im.make1<SoftmaxOp>(x, *d);
      return im.bind(n, v);
    };
  };
  table["aten::softmax"] = table["aten::_softmax"] = softmax(false);
  table["aten::log_softmax"] = table["aten::_log_softmax"] = softmax(true);
  CONVERT("aten::layer_norm") {
    Value x = im.tensorArg(n, 0);
    if (!x)
      return failure();
    auto shape = im.intsArg(n, 1, "normalized_shape");
    TRY(shape);
    Value w, bias;
    if (!im.isNone(n, 2) && !(w = im.tensorArg(n, 2)))
      return failure();
    if (!im.isNone(n, 3) && !(bias = im.tensorArg(n, 3)))
      return failure();
    auto eps = im.floatArg(n, 4, "eps");
    TRY(eps);
    auto xs = typeOf(x).getShape();
    if (shape->size() > xs.size() ||
        !std::equal(shape->begin(), shape->end(), xs.end() - shape->size())) {
      im.error(n) << "normalized_shape does not match the input's "
                     "trailing dimensions";
      return failure();
    }
    Value v =
        im.make1<LayerNormOp>(x, w, bias, im.b.getI64IntegerAttr(shape->size()),
                              im.b.getF64FloatAttr(*eps));
    return im.bind(n, v);
  };
  CONVERT("aten::rms_norm") {
    Value x = im.tensorArg(n, 0);
    if (!x)
      return failure();
    auto shape = im.intsArg(n, 1, "normalized_shape");
    TRY(shape);
    Value w;
    if (!im.isNone(n, 2) && !(w = im.tensorArg(n, 2)))
      return failure();
    // PyTorch's default eps is the machine epsilon of the input's dtype.
    Type elem = typeOf(x).getElementType();
    double eps = elem.isF64()    ? 2.220446049250313e-16
                 : elem.isF16()  ? 9.765625e-04
                 : elem.isBF16() ? 7.8125e-03
                                 : 1.1920928955078125e-07;
    if (!im.isNone(n, 3)) {
      auto e = im.floatArg(n, 3, "eps");
      TRY(e);
      eps = *e;
    }
    Value v = im.make1<RmsNormOp>(x, w, im.b.getI64IntegerAttr(shape->size()),
                                  im.b.getF64FloatAttr(eps));
    return im.bind(n, v);
  };
  CONVERT("aten::batch_norm") {
    Value x = im.tensorArg(n, 0);
    if (!x)
      return failure();
    if (typeOf(x).getRank() < 2) {
      im.error(n) << "input must have rank >= 2";
      return failure();
    }
    int64_t c = typeOf(x).getDimSize(1);
    auto st = *scalarTypeOf(typeOf(x).getElementType());
    auto param = [&](size_t i, double fill) -> Value {
      if (!im.isNone(n, i))
        return im.tensorArg(n, i);
      return im.constantTensor(
          at::full({c}, fill, at::TensorOptions().dtype(st)), im.curLoc);
    };
    Value w = param(1, 1.0), bias = param(2, 0.0), mean = param(3, 0.0),
          var = param(4, 1.0);
    if (!w || !bias || !mean || !var)
      return failure();
    auto training = im.boolArg(n, 5, "training");
    TRY(training);
    auto momentum = im.floatArg(n, 6, "momentum");
    TRY(momentum);
    auto eps = im.floatArg(n, 7, "eps");
    TRY(eps);
    if (!*training && (im.isNone(n, 3) || im.isNone(n, 4))) {
      im.error(n) << "evaluation mode needs running statistics";
      return failure();
    }
    Operation *op = im.make<BatchNormOp>(
        x, w, bias, mean, var, im.b.getBoolAttr(*training),
        im.b.getF64FloatAttr(*momentum), im.b.getF64FloatAttr(*eps));
    if (!op)
      return failure();
    im.setOut(n, 0, op->getResult(0));
    if (*training) {
      if (!im.isNone(n, 3))
        im.recordBufferUpdate(n->input(3), op->getResult(1));
      if (!im.isNone(n, 4))
        im.recordBufferUpdate(n->input(4), op->getResult(2));
    }
    return success();
  };
}

} // namespace merak::torchscript
