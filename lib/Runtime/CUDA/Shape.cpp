//===- Shape.cpp - CUDA host kernels: Shape
//-----------------------------------===//

#include "CudaKernels.h"

namespace merak::runtime::cuda {

void registerShapeKernels(KernelTable &table) { (void)table; }

} // namespace merak::runtime::cuda
