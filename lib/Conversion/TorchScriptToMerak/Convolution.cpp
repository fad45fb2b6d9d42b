//===- Convolution.cpp - convolution and pooling --------------------------===//
//
// Two-dimensional convolution, max, average and adaptive pooling; a
// one-dimensional convolution is the two-dimensional one over a height of 1.
//
//===----------------------------------------------------------------------===//

#include "ImporterImpl.h"

namespace merak::torchscript {

void Importer::populateConvolutionConverters(ConverterTable &table) {
  // Convolution and pooling.
  auto pair = [](std::vector<int64_t> v) {
    if (v.size() == 1)
      v.push_back(v[0]);
    return v;
  };
  // Pooling windows: kernel_size, stride (empty means the kernel),
  // padding and, for max pooling, dilation, as operands 1 to 4.
  struct Window {
    DenseI64ArrayAttr kernel, stride, padding, dilation;
  };
  auto window = [pair](Importer &im, jit::Node *n,
                       bool withDilation) -> FailureOr<Window> {
    auto kernel = im.intsArg(n, 1, "kernel_size");
    TRY(kernel);
    auto stride = im.intsArg(n, 2, "stride");
    TRY(stride);
    auto padding = im.intsArg(n, 3, "padding");
    TRY(padding);
    if (stride->empty())
      *stride = *kernel;
    Window w{im.b.getDenseI64ArrayAttr(pair(*kernel)),
             im.b.getDenseI64ArrayAttr(pair(*stride)),
             im.b.getDenseI64ArrayAttr(pair(*padding)),
             {}};
    if (withDilation) {
      auto dilation = im.intsArg(n, 4, "dilation");
      TRY(dilation);
      w.dilation = im.b.getDenseI64ArrayAttr(pair(*dilation));
    }
    return w;
  };
  auto conv = [pair](Importer &im, jit::Node *n) -> LogicalResult {
    std::string k = n->kind().toQualString();
    Value x = im.tensorArg(n, 0), w = im.tensorArg(n, 1);
    if (!x || !w)
      return failure();
    int64_t rank = typeOf(w).getRank();
    if (rank != 4 && rank != 3)
      return im.unsupported(n, "not 1-D or 2-D");
    Value bias;
    if (!im.isNone(n, 2) && !(bias = im.tensorArg(n, 2)))
      return failure();
    auto stride = im.intsArg(n, 3, "stride");
    TRY(stride);
    if (im.in(n, 4).isConst() && im.in(n, 4).iv.isString())
      return im.unsupported(n, "string padding");
    auto padding = im.intsArg(n, 4, "padding");
    TRY(padding);
    auto dilation = im.intsArg(n, 5, "dilation");
    TRY(dilation);
    size_t groupsIdx = 6;
    if (k == "aten::_convolution") {
      auto transposed = im.boolArg(n, 6, "transposed");
      TRY(transposed);
      if (*transposed)
        return im.unsupported(n, "transposed");
      groupsIdx = 8;
    }
    auto groups = im.intArg(n, groupsIdx, "groups");
    TRY(groups);
    if (rank == 3) {
      // [N, C, L] as [N, C, 1, L]: a kernel of height 1, stride 1, no
      // padding, dilation 1 along the added height.
      auto xs = typeOf(x).getShape(), ws = typeOf(w).getShape();
      if (xs.size() != 3 || stride->size() != 1 || padding->size() != 1 ||
          dilation->size() != 1) {
        im.error(n) << "a 1-D convolution takes a [N, C, L] input and one "
                       "stride, padding and dilation";
        return failure();
      }
      Value x2 = im.reshape(x, {xs[0], xs[1], 1, xs[2]});
      Value w2 = im.reshape(w, {ws[0], ws[1], 1, ws[2]});
      Value y = im.make1<Conv2dOp>(
          x2, w2, bias, im.b.getDenseI64ArrayAttr({1, (*stride)[0]}),
          im.b.getDenseI64ArrayAttr({0, (*padding)[0]}),
          im.b.getDenseI64ArrayAttr({1, (*dilation)[0]}),
          im.b.getI64IntegerAttr(*groups));
      if (!y)
        return failure();
      auto ys = typeOf(y).getShape();
      return im.bind(n, im.reshape(y, {ys[0], ys[1], ys[3]}));
    }
    Value v =
        im.make1<Conv2dOp>(x, w, bias, im.b.getDenseI64ArrayAttr(pair(*stride)),
                           im.b.getDenseI64ArrayAttr(pair(*padding)),
                           im.b.getDenseI64ArrayAttr(pair(*dilation)),
                           im.b.getI64IntegerAttr(*groups));
    return im.bind(n, v);
  };
  table["aten::conv2d"] = table["aten::conv1d"] = table["aten::_convolution"] =
      table["aten::convolution"] = conv;
  table["aten::max_pool2d"] = [window](Importer &im,
                                       jit::Node *n) -> LogicalResult {
    Value x = im.tensorArg(n, 0);
    if (!x)
      return failure();
    auto w = window(im, n, /*withDilation=*/true);
    TRY(w);
    auto ceil = im.boolArg(n, 5, "ceil_mode");
    TRY(ceil);
    Value v = im.make1<MaxPool2dOp>(x, w->kernel, w->stride, w->padding,
                                    w->dilation, im.b.getBoolAttr(*ceil));
    return im.bind(n, v);
  };
  table["aten::avg_pool2d"] = [window](Importer &im,
                                       jit::Node *n) -> LogicalResult {
    Value x = im.tensorArg(n, 0);
    if (!x)
      return failure();
    auto w = window(im, n, /*withDilation=*/false);
    TRY(w);
    auto ceil = im.boolArg(n, 4, "ceil_mode");
    TRY(ceil);
    auto include = im.boolArg(n, 5, "count_include_pad");
    TRY(include);
    if (n->inputs().size() > 6 && !im.isNone(n, 6))
      return im.unsupported(n, "divisor_override");
    Value v = im.make1<AvgPool2dOp>(x, w->kernel, w->stride, w->padding,
                                    im.b.getBoolAttr(*ceil),
                                    im.b.getBoolAttr(*include));
    return im.bind(n, v);
  };
  table["aten::adaptive_avg_pool2d"] = [pair](Importer &im,
                                              jit::Node *n) -> LogicalResult {
    Value x = im.tensorArg(n, 0);
    if (!x)
      return failure();
    auto size = im.intsArg(n, 1, "output_size");
    TRY(size);
    Value v = im.make1<AdaptiveAvgPool2dOp>(
        x, im.b.getDenseI64ArrayAttr(pair(*size)));
    return im.bind(n, v);
  };
}

} // namespace merak::torchscript
