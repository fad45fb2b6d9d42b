//===- Convolution.cpp - convolution and pooling --------------------------===//
//
// Two-dimensional convolution, max, average and adaptive pooling.
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
    if (typeOf(w).getRank() != 4)
      return im.unsupported(n, "not 2-D");
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
    Value v =
        im.make1<Conv2dOp>(x, w, bias, im.b.getDenseI64ArrayAttr(pair(*stride)),
                           im.b.getDenseI64ArrayAttr(pair(*padding)),
                           im.b.getDenseI64ArrayAttr(pair(*dilation)),
                           im.b.getI64IntegerAttr(*groups));
    return im.bind(n, v);
  };
  table["aten::conv2d"] = table["aten::_convolution"] =
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
