//===- Normalization.cpp - CPU kernels: softmax and normalization ---------===//
//
// `softmax`, `log_softmax` and softmax's gradient; layer, RMS and batch
// normalization and the backwards of layer and batch normalization.
//
//===----------------------------------------------------------------------===//

#include "CpuKernels.h"

namespace merak::runtime::cpu {

void registerNormalizationKernels(KernelTable &table) {
  table.add(OpKind::Softmax,
            [](Ctx &c) { c.set(0, at::softmax(c.in(0), c.a.dim)); });
  table.add(OpKind::LogSoftmax,
            [](Ctx &c) { c.set(0, at::log_softmax(c.in(0), c.a.dim)); });
  table.add(OpKind::SoftmaxBackward, [](Ctx &c) {
    // LibTorch 1.13's kernel reads a strided softmax output (a tensor
    // parallel rank's slice of the heads) wrongly: both operands dense.
    c.set(0,
          at::_softmax_backward_data(c.in(0).contiguous(), c.in(1).contiguous(),
                                     c.a.dim, c.in(0).scalar_type()));
  });
  table.add(OpKind::LayerNorm, [](Ctx &c) {
    const OpAttrs &a = c.a;
    const auto &shape = c.operandType(0).shape;
    std::vector<int64_t> normalized(shape.end() - a.normalizedRank,
                                    shape.end());
    return c.set(0, std::get<0>(at::native_layer_norm(
                        c.in(0), normalized, c.opt(1), c.opt(2), a.eps)));
  });
  table.add(OpKind::RmsNorm, [](Ctx &c) {
    const OpAttrs &a = c.a;
    // PyTorch's composite rms_norm: upcast half types, x * rsqrt(mean(x^2)
    // + eps) over the normalized dims, back to the input type, times weight.
    const at::Tensor &x = c.in(0);
    int64_t rank = x.dim();
    std::vector<int64_t> dims;
    for (int64_t i = 0; i < a.normalizedRank; ++i)
      dims.push_back(rank - i - 1);
    at::ScalarType opmath =
        x.scalar_type() == at::kHalf || x.scalar_type() == at::kBFloat16
            ? at::kFloat
            : x.scalar_type();
    at::Tensor up = x.to(opmath);
    at::Tensor scale =
        at::rsqrt(at::pow(up, 2).mean(dims, /*keepdim=*/true).add_(a.eps));
    at::Tensor y = up.mul(scale).type_as(x);
    if (c.has(1))
      y = y.mul(c.in(1));
    return c.set(0, y);
  });
  table.add(OpKind::BatchNorm, [](Ctx &c) {
    const OpAttrs &a = c.a;
    // native_batch_norm updates the running statistics in place; the op
    // returns them, so it works on copies. An evaluation normalizes with
    // them and returns them unchanged.
    at::Tensor mean = c.in(3).clone(), var = c.in(4).clone();
    at::Tensor y = std::get<0>(at::native_batch_norm(
        c.in(0), c.in(1), c.in(2), mean, var, a.training && !c.evaluating(),
        a.momentum, a.eps));
    c.set(0, y);
    c.set(1, mean);
    c.set(2, var);
  });
  table.add(OpKind::LayerNormBackward, [](Ctx &c) {
    const OpAttrs &a = c.a;
    const at::Tensor &grad = c.in(0), &x = c.in(1);
    const auto &shape = c.operandType(1).shape;
    std::vector<int64_t> normalized(shape.end() - a.normalizedRank,
                                    shape.end());
    // Autograd saved mean and rstd from the forward; recomputing them from
    // the same input gives the same values.
    auto [y, mean, rstd] =
        at::native_layer_norm(x, normalized, c.opt(2), c.opt(3), a.eps);
    auto [gx, gw, gb] = at::native_layer_norm_backward(
        grad, x, normalized, mean, rstd, c.opt(2), c.opt(3),
        {true, c.has(2), c.has(3)});
    c.set(0, gx);
    c.set(1, gw.defined() ? gw : c.zerosFor(1));
    c.set(2, gb.defined() ? gb : c.zerosFor(2));
  });
  table.add(OpKind::BatchNormBackward, [](Ctx &c) {
    const OpAttrs &a = c.a;
    const at::Tensor &grad = c.in(0), &x = c.in(1), &w = c.in(2);
    at::Tensor saveMean, saveInvstd;
    if (a.training) {
      auto stats = at::native_batch_norm(x, w, {}, {}, {}, true, 0.0, a.eps);
      saveMean = std::get<1>(stats);
      saveInvstd = std::get<2>(stats);
    }
    auto [gx, gw, gb] = at::native_batch_norm_backward(
        grad, x, w, c.in(3), c.in(4), saveMean, saveInvstd, a.training, a.eps,
        {true, true, true});
    c.set(0, gx);
    c.set(1, gw);
    c.set(2, gb);
  });
}

} // namespace merak::runtime::cpu
