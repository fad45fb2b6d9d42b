//===- CpuTensor.h - the CPU backend's tensor handle -----------*- C++ -*-===//
//
// Internal to the runtime's LibTorch translation units: the CPU kernels and
// the Gloo communicator, which exchanges the CPU backend's tensors.
//
//===----------------------------------------------------------------------===//
#ifndef MERAK_LIB_RUNTIME_CPU_CPUTENSOR_H
#define MERAK_LIB_RUNTIME_CPU_CPUTENSOR_H

#include "merak/Runtime/Backend.h"

#include <ATen/Tensor.h>

#include <memory>

namespace merak::runtime {

class CpuTensor final : public DeviceTensor {
public:
  explicit CpuTensor(at::Tensor t) : tensor(std::move(t)) {}
  at::Tensor tensor;
};

inline const at::Tensor &unwrap(const DeviceTensor &t) {
  return static_cast<const CpuTensor &>(t).tensor;
}

inline TensorHandle wrap(at::Tensor t) {
  return std::make_shared<CpuTensor>(std::move(t));
}

} // namespace merak::runtime

#endif // MERAK_LIB_RUNTIME_CPU_CPUTENSOR_H
