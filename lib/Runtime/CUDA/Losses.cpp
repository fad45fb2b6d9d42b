//===- Losses.cpp - CUDA host kernels: Losses
//-----------------------------------===//

#include "CudaKernels.h"

namespace merak::runtime::cuda {

void registerLossKernels(KernelTable &table) { (void)table; }

} // namespace merak::runtime::cuda
