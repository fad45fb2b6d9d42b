//===- Copy.cu - copies, conversions, fills and in-place arithmetic -------===//

#include "Copy.h"

#include <cmath>

namespace merak::runtime::cuda {

const char *elemTypeName(ElemType t) {
  switch (t) {
  case ElemType::F16:
    return "f16";
  case ElemType::BF16:
    return "bf16";
  case ElemType::F32:
    return "f32";
  case ElemType::F64:
    return "f64";
  case ElemType::Bool:
    return "i1";
  case ElemType::I32:
    return "i32";
  case ElemType::I64:
    return "i64";
  }
  return "?";
}

void check(cudaError_t status, const char *what) {
  if (status != cudaSuccess)
    throw CudaError(std::string(what) + ": " + cudaGetErrorString(status));
}

namespace {

/// Reads an element as the widest type of its kind, so one kernel per
/// destination type converts from any source type.
template <typename S> __device__ double loadWide(const View &v, int64_t off) {
  return double(toAcc(v.ptr<S>()[off]));
}

__device__ double loadAny(const View &v, int64_t off) {
  switch (v.type) {
  case ElemType::F16:
    return loadWide<__half>(v, off);
  case ElemType::BF16:
    return loadWide<__nv_bfloat16>(v, off);
  case ElemType::F32:
    return loadWide<float>(v, off);
  case ElemType::F64:
    return loadWide<double>(v, off);
  case ElemType::Bool:
    return v.ptr<bool>()[off] ? 1.0 : 0.0;
  case ElemType::I32:
    return double(v.ptr<int32_t>()[off]);
  case ElemType::I64:
    return double(v.ptr<int64_t>()[off]);
  }
  return 0;
}

template <typename D>
__global__ void convertKernel(View src, View dst, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    int64_t so = src.offsetOf(i);
    D *out = dst.ptr<D>() + dst.offsetOf(i);
    if constexpr (std::is_same_v<D, int64_t>) {
      // Exact for integer sources wider than a double's mantissa.
      if (src.type == ElemType::I64) {
        *out = src.ptr<int64_t>()[so];
        continue;
      }
    }
    *out = convertTo<D>(loadAny(src, so));
  }
}

template <typename T>
__global__ void sameTypeKernel(View src, View dst, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    dst.ptr<T>()[dst.offsetOf(i)] = src.ptr<T>()[src.offsetOf(i)];
}

/// `sameTypeKernel` where `fitsIndex32` holds.
template <typename T>
__global__ void sameTypeKernel32(View src, View dst, uint32_t n) {
  for (uint32_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += gridDim.x * blockDim.x)
    dst.ptr<T>()[offsetOf32(dst, i)] = src.ptr<T>()[offsetOf32(src, i)];
}

/// A copy of unit `U` (an element, or `vectorizeLast`'s several), in
/// 32-bit index arithmetic where it fits.
template <typename U>
void launchSameType(const View &src, const View &dst, cudaStream_t stream) {
  int64_t n = dst.numel();
  Launch l = linearLaunch(n);
  View views[2] = {src, dst};
  if (fitsIndex32(views, 2, n))
    sameTypeKernel32<U><<<l.grid, l.block, 0, stream>>>(src, dst, uint32_t(n));
  else
    sameTypeKernel<U><<<l.grid, l.block, 0, stream>>>(src, dst, n);
}

template <typename T> __global__ void fillKernel(View dst, T value, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    dst.ptr<T>()[dst.offsetOf(i)] = value;
}

template <typename T>
__global__ void addIntoKernel(View into, View addend, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    T *p = into.ptr<T>() + into.offsetOf(i);
    *p = convertTo<T>(toAcc(*p) + toAcc(addend.ptr<T>()[addend.offsetOf(i)]));
  }
}

__global__ void writeWordsKernel(int64_t *dst, int64_t a, int64_t b, int64_t c,
                                 int64_t d) {
  dst[0] = a;
  dst[1] = b;
  dst[2] = c;
  dst[3] = d;
}

template <typename T>
__global__ void scaleKernel(View v, double factor, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    T *p = v.ptr<T>() + v.offsetOf(i);
    *p = convertTo<T>(toAcc(*p) * Acc<T>(factor));
  }
}

/// `src` re-read in `dst`'s shape when only their shapes differ (a reshape
/// of a contiguous tensor); a strided source of another shape is read
/// through its own shape by a first pass into a contiguous buffer.
View sameShapeSource(const View &src, const View &dst) {
  View s = src;
  bool same = src.rank == dst.rank;
  for (int d = 0; same && d < src.rank; ++d)
    same = src.sizes[d] == dst.sizes[d];
  if (same)
    return s;
  // Only a contiguous source can be re-read in another shape this way.
  s.rank = dst.rank;
  for (int d = 0; d < dst.rank; ++d)
    s.sizes[d] = dst.sizes[d];
  contiguousStrides(s.sizes, s.rank, s.strides);
  return s;
}

} // namespace

void copyStrided(const View &src, const View &dst, cudaStream_t stream) {
  int64_t n = dst.numel();
  if (n == 0)
    return;
  if (src.numel() != n)
    throw CudaError("copy: " + std::to_string(src.numel()) + " elements into " +
                    std::to_string(n));
  bool sameShape = src.rank == dst.rank;
  for (int d = 0; sameShape && d < src.rank; ++d)
    sameShape = src.sizes[d] == dst.sizes[d];
  if (!sameShape && !src.isContiguous()) {
    // A strided source of another shape: the caller first makes it
    // contiguous (Ctx::contiguous); refusing here keeps a wrong order out.
    throw CudaError("copy: a strided source of another shape");
  }
  View views[2] = {sameShapeSource(src, dst), dst};
  if (src.type == dst.type && src.isContiguous() && dst.isContiguous()) {
    check(cudaMemcpyAsync(dst.data, src.data, size_t(n) * elemSize(dst.type),
                          cudaMemcpyDeviceToDevice, stream),
          "copy");
    return;
  }
  coalesceDims(views, 2);
  Launch l = linearLaunch(n);
  if (src.type == dst.type) {
    // Several elements at a time where the last dimension is dense in both
    // (a permute of the heads, a slice of a concatenation): 16 bytes, else
    // 8 or 4, per access.
    int64_t bytes = int64_t(elemSize(dst.type));
    if (bytes < 16 && vectorizeLast(views, 2, 16 / bytes, bytes))
      launchSameType<uint4>(views[0], views[1], stream);
    else if (bytes < 8 && vectorizeLast(views, 2, 8 / bytes, bytes))
      launchSameType<uint2>(views[0], views[1], stream);
    else if (bytes < 4 && vectorizeLast(views, 2, 4 / bytes, bytes))
      launchSameType<uint32_t>(views[0], views[1], stream);
    else
      MERAK_CUDA_DISPATCH_ALL(dst.type, "copy", T,
                              launchSameType<T>(views[0], views[1], stream));
  } else {
    MERAK_CUDA_DISPATCH_ALL(dst.type, "convert", T,
                            convertKernel<T><<<l.grid, l.block, 0, stream>>>(
                                views[0], views[1], n));
  }
  checkLaunch("copy");
}

void fill(const View &dst, double value, cudaStream_t stream) {
  int64_t n = dst.numel();
  if (n == 0)
    return;
  View v = dst;
  coalesceDims(&v, 1);
  Launch l = linearLaunch(n);
  MERAK_CUDA_DISPATCH_ALL(
      dst.type, "fill", T,
      fillKernel<T><<<l.grid, l.block, 0, stream>>>(v, convertTo<T>(value), n));
  checkLaunch("fill");
}

void addInto(const View &into, const View &addend, cudaStream_t stream) {
  int64_t n = into.numel();
  if (n == 0)
    return;
  if (addend.type != into.type || addend.numel() != n)
    throw CudaError("accumulate: operands of different types or sizes");
  View views[2] = {into, sameShapeSource(addend, into)};
  coalesceDims(views, 2);
  Launch l = linearLaunch(n);
  MERAK_CUDA_DISPATCH_ALL(
      into.type, "accumulate", T,
      addIntoKernel<T><<<l.grid, l.block, 0, stream>>>(views[0], views[1], n));
  checkLaunch("accumulate");
}

void scaleInPlace(const View &tensor, double factor, cudaStream_t stream) {
  int64_t n = tensor.numel();
  if (n == 0)
    return;
  View v = tensor;
  coalesceDims(&v, 1);
  Launch l = linearLaunch(n);
  MERAK_CUDA_DISPATCH_FLOAT(tensor.type, "scale", T,
                            scaleKernel<T>
                            <<<l.grid, l.block, 0, stream>>>(v, factor, n));
  checkLaunch("scale");
}

void writeWords(int64_t *dst, const std::array<int64_t, 4> &words,
                cudaStream_t stream) {
  writeWordsKernel<<<1, 1, 0, stream>>>(dst, words[0], words[1], words[2],
                                        words[3]);
  checkLaunch("a transfer's header");
}

} // namespace merak::runtime::cuda
