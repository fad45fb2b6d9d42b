//===- Convolution.cpp - CUDA host kernels: Convolution
//-----------------------------------===//

#include "CudaKernels.h"

namespace merak::runtime::cuda {

void registerConvolutionKernels(KernelTable &table) { (void)table; }

} // namespace merak::runtime::cuda
