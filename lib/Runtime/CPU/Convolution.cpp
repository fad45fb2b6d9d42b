//===- Convolution.cpp - CPU kernels: convolution and pooling -------------===//
//
// 2-d convolution, max, average and adaptive average pooling, and their
// backwards.
//
//===----------------------------------------------------------------------===//

#include "CpuKernels.h"

namespace merak::runtime::cpu {

void registerConvolutionKernels(KernelTable &table) {
  table.add(OpKind::Conv2d, [](Ctx &c) {
    const OpAttrs &a = c.a;
    c.set(0, at::convolution(c.in(0), c.in(1), c.opt(2), a.stride, a.padding,
                             a.dilation, false, {0, 0}, a.groups));
  });
  table.add(OpKind::MaxPool2d, [](Ctx &c) {
    const OpAttrs &a = c.a;
    c.set(0,
          std::get<0>(at::max_pool2d_with_indices(
              c.in(0), a.kernel, a.stride, a.padding, a.dilation, a.ceilMode)));
  });
  table.add(OpKind::AvgPool2d, [](Ctx &c) {
    const OpAttrs &a = c.a;
    c.set(0, at::avg_pool2d(c.in(0), a.kernel, a.stride, a.padding, a.ceilMode,
                            a.countIncludePad, c10::nullopt));
  });
  table.add(OpKind::AdaptiveAvgPool2d, [](Ctx &c) {
    c.set(0, at::adaptive_avg_pool2d(c.in(0), c.a.outputSize));
  });
  table.add(OpKind::Conv2dBackward, [](Ctx &c) {
    const OpAttrs &a = c.a;
    const TensorType &w = c.operandType(2);
    std::vector<int64_t> biasSizes{w.shape[0]};
    auto [gx, gw, gb] = at::convolution_backward(
        c.in(0), c.in(1), c.in(2), at::OptionalIntArrayRef(biasSizes), a.stride,
        a.padding, a.dilation, false, {0, 0}, a.groups,
        {c.needed(0), c.needed(1), c.needed(2)});
    c.set(0, gx.defined() ? gx : c.zerosFor(0));
    c.set(1, gw.defined() ? gw : c.zerosFor(1));
    c.set(2, gb.defined() ? gb : c.zerosFor(2));
  });
  table.add(OpKind::MaxPool2dBackward, [](Ctx &c) {
    const OpAttrs &a = c.a;
    const at::Tensor &x = c.in(1);
    at::Tensor indices = std::get<1>(at::max_pool2d_with_indices(
        x, a.kernel, a.stride, a.padding, a.dilation, a.ceilMode));
    return c.set(0, at::max_pool2d_with_indices_backward(
                        c.in(0), x, a.kernel, a.stride, a.padding, a.dilation,
                        a.ceilMode, indices));
  });
  table.add(OpKind::AvgPool2dBackward, [](Ctx &c) {
    const OpAttrs &a = c.a;
    c.set(0, at::avg_pool2d_backward(c.in(0), c.in(1), a.kernel, a.stride,
                                     a.padding, a.ceilMode, a.countIncludePad,
                                     c10::nullopt));
  });
  table.add(OpKind::AdaptiveAvgPool2dBackward, [](Ctx &c) {
    const at::Tensor &grad = c.in(0), &x = c.in(1);
    // adaptive_avg_pool2d to 1x1 is a mean over H and W in PyTorch, so its
    // gradient is mean's: the gradient expanded, divided by H * W.
    if (grad.size(-1) == 1 && grad.size(-2) == 1)
      return c.set(0, grad.expand(x.sizes()) / (x.size(-1) * x.size(-2)));
    return c.set(0, at::_adaptive_avg_pool2d_backward(grad, x));
  });
}

} // namespace merak::runtime::cpu
