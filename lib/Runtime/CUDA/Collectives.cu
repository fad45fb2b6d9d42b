//===- Collectives.cu - kernels the device collectives need ---------------===//

#include "Collectives.h"

namespace merak::runtime::cuda {
namespace {

template <typename T>
__global__ void divideKernel(T *data, int64_t count, T n) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < count;
       i += int64_t(gridDim.x) * blockDim.x)
    data[i] /= n;
}

} // namespace

void divideIntegers(const View &v, int64_t n, cudaStream_t stream) {
  const int64_t count = v.numel();
  if (count == 0)
    return;
  const int threads = 256;
  const int blocks =
      int(std::min<int64_t>((count + threads - 1) / threads, int64_t(1) << 16));
  if (v.type == ElemType::I64)
    divideKernel<<<blocks, threads, 0, stream>>>(v.ptr<int64_t>(), count, n);
  else if (v.type == ElemType::I32)
    divideKernel<<<blocks, threads, 0, stream>>>(v.ptr<int32_t>(), count,
                                                 int32_t(n));
  else
    throw CudaError(std::string("an integer average of ") +
                    elemTypeName(v.type));
}

} // namespace merak::runtime::cuda
