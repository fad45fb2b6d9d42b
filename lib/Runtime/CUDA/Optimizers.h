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
#include <vector>

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

/// One parameter of a multi-tensor float32 AdamW update: its operands and
/// where its results go (possibly the operands themselves), `n` elements.
struct AdamwTensor {
  const float *param, *grad, *expAvg, *expAvgSq;
  float *newParam, *newExpAvg, *newExpAvgSq;
  int64_t n;
};

/// One parameter of a multi-tensor float32 SGD update: `buffer` is null
/// on the first step and without momentum, `newBuffer` without momentum.
struct SgdTensor {
  const float *param, *grad, *buffer;
  float *newParam, *newBuffer;
  int64_t n;
};

/// Tensors one multi-tensor launch takes (its parameters hold them by
/// value: 32 AdamW tensors are 2 KiB of the 4 KiB a launch may pass).
constexpr int kTensorsPerLaunch = 32;

/// One launch of a multi-tensor kernel over `Tensor`s (AdamwTensor,
/// SgdTensor): tensor `t` is updated by blocks `blockStart[t]` to
/// `blockStart[t + 1] - 1`, each grid-striding over it.
template <typename Tensor> struct TensorList {
  Tensor tensors[kTensorsPerLaunch];
  int32_t blockStart[kTensorsPerLaunch + 1];
  int32_t count;
};

/// The blocks of 256 threads one tensor of `n` elements gets: one per 4,096
/// elements (16 per thread), at least one, at most 1,024.
MERAK_HD int32_t multiTensorBlocks(int64_t n) {
  int64_t blocks = ceilDiv(n > 0 ? n : 1, 4096);
  return int32_t(blocks < 1024 ? blocks : 1024);
}

/// Splits `count` tensors of `sizes` into launches of at most
/// `kTensorsPerLaunch` each: for each launch, its first tensor and the
/// block offsets of its tensors (`blockStart`, `count + 1` entries).
struct MultiTensorLaunch {
  int first = 0;
  int count = 0;
  int32_t blockStart[kTensorsPerLaunch + 1] = {};
};
inline std::vector<MultiTensorLaunch> planMultiTensor(const int64_t *sizes,
                                                      int count) {
  std::vector<MultiTensorLaunch> launches;
  for (int first = 0; first < count; first += kTensorsPerLaunch) {
    MultiTensorLaunch l;
    l.first = first;
    l.count =
        count - first < kTensorsPerLaunch ? count - first : kTensorsPerLaunch;
    for (int t = 0; t < l.count; ++t)
      l.blockStart[t + 1] =
          l.blockStart[t] + multiTensorBlocks(sizes[first + t]);
    launches.push_back(l);
  }
  return launches;
}

/// Float32 AdamW over `count` tensors with the same scalars, in as few
/// launches as `planMultiTensor` gives, each element as `adamwUpdate`
/// computes it (bit for bit).
void adamwMultiTensor(const AdamwTensor *tensors, int count,
                      const AdamwScalars &s, cudaStream_t stream);

/// Float32 SGD over `count` tensors with the same scalars, likewise, each
/// element as `sgdUpdate` computes it (bit for bit).
void sgdMultiTensor(const SgdTensor *tensors, int count, const SgdScalars &s,
                    cudaStream_t stream);

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
