//===- Reductions.cpp - CUDA host kernels: Reductions
//-----------------------------------===//

#include "CudaKernels.h"

namespace merak::runtime::cuda {

void registerReductionKernels(KernelTable &table) { (void)table; }

} // namespace merak::runtime::cuda
