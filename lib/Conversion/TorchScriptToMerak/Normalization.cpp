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
  // group_norm: the channels in `num_groups` groups, each normalized with
  // the positions it covers (layer_norm over [N, G, C / G * rest]), then the
  // per-channel affine.
  CONVERT("aten::group_norm") {
    Value x = im.tensorArg(n, 0);
    if (!x)
      return failure();
    auto groups = im.intArg(n, 1, "num_groups");
    TRY(groups);
    Value w, bias;
    if (!im.isNone(n, 2) && !(w = im.tensorArg(n, 2)))
      return failure();
    if (!im.isNone(n, 3) && !(bias = im.tensorArg(n, 3)))
      return failure();
    auto eps = im.floatArg(n, 4, "eps");
    TRY(eps);
    auto xs = typeOf(x).getShape();
    if (xs.size() < 2 || *groups < 1 || xs[1] % *groups != 0) {
      im.error(n) << "group_norm of " << *groups << " groups over " << xs.size()
                  << "-D input: the channels (dimension 1) must "
                  << "divide into the groups";
      return failure();
    }
    int64_t rest = 1;
    for (size_t d = 2; d < xs.size(); ++d)
      rest *= xs[d];
    Value grouped = im.reshape(x, {xs[0], *groups, xs[1] / *groups * rest});
    Value normed = im.make1<LayerNormOp>(grouped, Value(), Value(),
                                         im.b.getI64IntegerAttr(1),
                                         im.b.getF64FloatAttr(*eps));
    if (!normed)
      return failure();
    Value y = im.reshape(normed, xs);
    // The affine per channel: [C] viewed as [C, 1, ...].
    SmallVector<int64_t> channel{xs[1]};
    channel.append(xs.size() - 2, 1);
    if (w && !(y = im.make1<MulOp>(y, im.reshape(w, channel))))
      return failure();
    if (bias && !(y = im.make1<AddOp>(y, im.reshape(bias, channel))))
      return failure();
    return im.bind(n, y);
  };
  // _weight_norm(v, g, dim): v * g / ||v||, the norm over every dimension
  // but `dim` (nn.utils.weight_norm's weight).
  CONVERT("aten::_weight_norm") {
    Value v = im.tensorArg(n, 0), g = im.tensorArg(n, 1);
    if (!v || !g)
      return failure();
    auto dim = im.intArg(n, 2, "dim");
    TRY(dim);
    int64_t rank = typeOf(v).getRank();
    if (*dim < -1 || *dim >= rank) {
      im.error(n) << "dim " << *dim << " of a weight of rank " << rank;
      return failure();
    }
    // dim -1: the norm of the whole weight.
    SmallVector<int64_t> others;
    for (int64_t d = 0; d < rank; ++d)
      if (*dim == -1 || d != *dim)
        others.push_back(d);
    Value squares = im.make1<MulOp>(v, v);
    Value sum = im.make1<ReduceSumOp>(
        squares, im.b.getDenseI64ArrayAttr(others), im.b.getBoolAttr(true));
    if (!sum)
      return failure();
    Value norm = im.make1<SqrtOp>(sum);
    Value scale = im.make1<DivOp>(g, norm);
    if (!scale)
      return failure();
    return im.bind(n, im.make1<MulOp>(v, scale));
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
