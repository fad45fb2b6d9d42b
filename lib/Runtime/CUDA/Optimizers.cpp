//===- Optimizers.cpp - CUDA host kernels: Optimizers
//-----------------------------------===//

#include "CudaKernels.h"

namespace merak::runtime::cuda {

void registerOptimizerKernels(KernelTable &table) { (void)table; }

} // namespace merak::runtime::cuda
