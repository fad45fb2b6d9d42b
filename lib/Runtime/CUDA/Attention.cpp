//===- Attention.cpp - CUDA host kernels: Attention
//-----------------------------------===//

#include "CudaKernels.h"

namespace merak::runtime::cuda {

void registerAttentionKernels(KernelTable &table) { (void)table; }

} // namespace merak::runtime::cuda
