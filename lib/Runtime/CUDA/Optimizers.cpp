//===- Optimizers.cpp - CUDA host kernels: optimizer updates --------------===//
//
// `sgd_update` and `adamw_update` for one parameter, as the CPU backend's
// (lib/Runtime/CPU/Optimizers.cpp, torch.optim's single-tensor code)
// compute them: the updated parameter and states written into the
// operands the plan gives them, one launch each.
//
//===----------------------------------------------------------------------===//

#include "Optimizers.h"
#include "CudaKernels.h"

#include "absl/strings/str_cat.h"

namespace merak::runtime::cuda {
namespace {

/// Throws unless operands `first..last` and every result have operand
/// `first`'s type (the dialect's AllTypesMatch).
void expectOneType(Ctx &c, size_t first, size_t last) {
  const TensorType &type = c.operandType(first);
  for (size_t k = first + 1; k <= last; ++k)
    if (c.operandType(k) != type)
      throw CudaError(absl::StrCat("operand #", k, " is ",
                                   c.operandType(k).str(), ", expected ",
                                   type.str()));
  for (size_t r = 0; r < c.inst.results.size(); ++r)
    if (c.resultType(r) != type)
      throw CudaError(absl::StrCat("result #", r, " is ", c.resultType(r).str(),
                                   ", expected ", type.str()));
}

/// torch.optim.SGD's `_single_tensor_sgd` for one parameter.
void sgdKernel(Ctx &c) {
  const OpAttrs &a = c.a;
  expectOneType(c, 0, 2);
  SgdScalars s;
  s.lr = c.scalar(3);
  s.weightDecay = a.weightDecay;
  s.momentum = a.momentum;
  s.dampening = a.dampening;
  s.nesterov = a.nesterov;
  s.firstStep = int64_t(c.scalar(4)) == 1;
  View param = c.contiguous(0), grad = c.contiguous(1);
  int64_t n = param.numel();
  CudaTensor &newParam = c.result(0);
  if (a.momentum == 0) {
    // The buffer passes through, a view of the operand (as the plan says).
    const CudaTensor &buffer = c.in(2);
    c.viewResult(1, 2, 0, buffer.strides);
    sgdUpdate(param.data, grad.data, nullptr, newParam.data(), nullptr,
              param.type, n, s, c.stream());
    return;
  }
  // The first step only writes the buffer (PyTorch starts it as a copy of
  // the direction).
  const void *buffer = s.firstStep ? nullptr : c.contiguous(2).data;
  CudaTensor &newBuffer = c.result(1);
  sgdUpdate(param.data, grad.data, buffer, newParam.data(), newBuffer.data(),
            param.type, n, s, c.stream());
}

/// torch.optim.AdamW's `_single_tensor_adamw` (amsgrad off) for one
/// parameter.
void adamwKernel(Ctx &c) {
  const OpAttrs &a = c.a;
  expectOneType(c, 0, 3);
  AdamwScalars s = adamwScalars(c.scalar(4), c.scalar(5), a.beta1, a.beta2,
                                a.eps, a.weightDecay);
  View param = c.contiguous(0), grad = c.contiguous(1),
       expAvg = c.contiguous(2), expAvgSq = c.contiguous(3);
  CudaTensor &newParam = c.result(0), &newExpAvg = c.result(1),
             &newExpAvgSq = c.result(2);
  adamwUpdate(param.data, grad.data, expAvg.data, expAvgSq.data,
              newParam.data(), newExpAvg.data(), newExpAvgSq.data(), param.type,
              param.numel(), s, c.stream());
}

} // namespace

void registerOptimizerKernels(KernelTable &table) {
  table.add(OpKind::SgdUpdate, sgdKernel);
  table.add(OpKind::AdamwUpdate, adamwKernel);
}

} // namespace merak::runtime::cuda
