//===- Normalization.cpp - CUDA host kernels: Normalization
//-----------------------------------===//

#include "CudaKernels.h"

namespace merak::runtime::cuda {

void registerNormalizationKernels(KernelTable &table) { (void)table; }

} // namespace merak::runtime::cuda
