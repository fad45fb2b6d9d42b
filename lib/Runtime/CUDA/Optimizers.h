//===- Optimizers.h - optimizer update kernels -----------------*- C++ -*-===//
//
// Launchers of Optimizers.cu (torch.optim.SGD's and AdamW's update of one
// parameter) and the host arithmetic of their scalars: the step's bias
// corrections in double, from the host's learning rate and step, as the
// CPU backend (lib/Runtime/CPU/Optimizers.cpp) computes them.
//
//===----------------------------------------------------------------------===//
#ifndef MERAK_LIB_RUNTIME_CUDA_OPTIMIZERS_H
#define MERAK_LIB_RUNTIME_CUDA_OPTIMIZERS_H

#include "CudaCommon.h"

#include <cmath>

namespace merak::runtime::cuda {

/// The scalars of one SGD step (the kernels round each to the element
/// type's accumulation type, as ATen's kernels take them).
struct SgdScalars {
  double lr = 0, weightDecay = 0, momentum = 0, dampening = 0;
  bool nesterov = false;
  /// The first step starts the momentum buffer as a copy of the direction.
  bool firstStep = false;
};

/// The scalars of one AdamW step.
struct AdamwScalars {
  bool decays = false;
  double decay = 1, beta1 = 0, oneMinusBeta1 = 1, beta2 = 0, oneMinusBeta2 = 1,
         biasCorrection2Sqrt = 1, eps = 0, negStepSize = 0;
};

/// `_single_tensor_adamw`'s scalars for learning rate `lr` at `step`
/// (counting from 1), in double as PyTorch computes them on the host.
inline AdamwScalars adamwScalars(double lr, double step, double beta1,
                                 double beta2, double eps, double weightDecay) {
  AdamwScalars s;
  s.decays = weightDecay != 0;
  s.decay = 1 - lr * weightDecay;
  s.beta1 = beta1;
  s.oneMinusBeta1 = 1 - beta1;
  s.beta2 = beta2;
  s.oneMinusBeta2 = 1 - beta2;
  double biasCorrection1 = 1 - std::pow(beta1, step);
  double biasCorrection2 = 1 - std::pow(beta2, step);
  s.biasCorrection2Sqrt = std::sqrt(biasCorrection2);
  s.eps = eps;
  s.negStepSize = -(lr / biasCorrection1);
  return s;
}

/// One SGD step over `n` elements (dense, of `type`): `param`, `grad` and
/// `buffer` read, `newParam` and (with momentum) `newBuffer` written; each
/// output may be its input.
void sgdUpdate(const void *param, const void *grad, const void *buffer,
               void *newParam, void *newBuffer, ElemType type, int64_t n,
               const SgdScalars &s, cudaStream_t stream);

/// One AdamW step over `n` elements (dense, of `type`); each output may be
/// its input.
void adamwUpdate(const void *param, const void *grad, const void *expAvg,
                 const void *expAvgSq, void *newParam, void *newExpAvg,
                 void *newExpAvgSq, ElemType type, int64_t n,
                 const AdamwScalars &s, cudaStream_t stream);

} // namespace merak::runtime::cuda

#endif // MERAK_LIB_RUNTIME_CUDA_OPTIMIZERS_H
