//===- Elementwise.cpp - CUDA host kernels: Elementwise
//-----------------------------------===//

#include "CudaKernels.h"

namespace merak::runtime::cuda {

void registerElementwiseKernels(KernelTable &table) { (void)table; }

} // namespace merak::runtime::cuda
