//===- Collectives.h - kernels the device collectives need ------*- C++ -*-===//
//
// Private to lib/Runtime/CUDA: what the NCCL communicator queues on its
// stream besides NCCL's calls and strided copies.
//
//===----------------------------------------------------------------------===//
#ifndef MERAK_LIB_RUNTIME_CUDA_COLLECTIVES_H
#define MERAK_LIB_RUNTIME_CUDA_COLLECTIVES_H

#include "CudaCommon.h"

namespace merak::runtime::cuda {

/// Divides every element of the dense i32 or i64 tensor `v` by `n`,
/// truncating toward zero (an integer average after NCCL's sum).
void divideIntegers(const View &v, int64_t n, cudaStream_t stream);

} // namespace merak::runtime::cuda

#endif // MERAK_LIB_RUNTIME_CUDA_COLLECTIVES_H
