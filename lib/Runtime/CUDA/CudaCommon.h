//===- CudaCommon.h - what the CUDA kernels and their callers share -*- C++
//-*-===//
//
// Private to lib/Runtime/CUDA, included by the kernel files (.cu, compiled
// by nvcc) and by the host code that launches them (.cpp): element types
// as kernels see them, `View` (a strided tensor in device memory), the
// index arithmetic of broadcasting and of launch grids, conversions to and
// from the accumulation type, and dispatch over element types.
//
// Everything here that is not device code is plain host arithmetic and is
// unit-tested without a GPU (unittests/Runtime/Cuda*Test.cpp).
//
//===----------------------------------------------------------------------===//
#ifndef MERAK_LIB_RUNTIME_CUDA_CUDACOMMON_H
#define MERAK_LIB_RUNTIME_CUDA_CUDACOMMON_H

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "DeviceMath.h"

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <type_traits>

namespace merak::runtime::cuda {

/// Element types, numbered as `DType` (Tensor.h) numbers them.
enum class ElemType : uint8_t { F16, BF16, F32, F64, Bool, I32, I64 };

MERAK_HD size_t elemSize(ElemType t) {
  switch (t) {
  case ElemType::F16:
  case ElemType::BF16:
    return 2;
  case ElemType::F32:
  case ElemType::I32:
    return 4;
  case ElemType::F64:
  case ElemType::I64:
    return 8;
  case ElemType::Bool:
    return 1;
  }
  return 0;
}

MERAK_HD bool isFloatType(ElemType t) {
  return t == ElemType::F16 || t == ElemType::BF16 || t == ElemType::F32 ||
         t == ElemType::F64;
}

const char *elemTypeName(ElemType t);

/// A tensor in device memory as a kernel reads it: `sizes` and `strides`
/// (in elements; 0 for a broadcast dimension) of `rank` dimensions.
struct View {
  void *data = nullptr;
  ElemType type = ElemType::F32;
  int rank = 0;
  int64_t sizes[kMaxDims] = {};
  int64_t strides[kMaxDims] = {};

  MERAK_HD int64_t numel() const {
    int64_t n = 1;
    for (int d = 0; d < rank; ++d)
      n *= sizes[d];
    return n;
  }
  /// Dense row-major (dimensions of size 1 may have any stride).
  MERAK_HD bool isContiguous() const {
    int64_t expected = 1;
    for (int d = rank - 1; d >= 0; --d) {
      if (sizes[d] != 1 && strides[d] != expected)
        return false;
      expected *= sizes[d];
    }
    return true;
  }
  /// The offset, in elements, of the element at row-major position
  /// `linear` of this view's shape.
  MERAK_HD int64_t offsetOf(int64_t linear) const {
    int64_t offset = 0;
    for (int d = rank - 1; d >= 0; --d) {
      int64_t size = sizes[d];
      offset += (linear % size) * strides[d];
      linear /= size;
    }
    return offset;
  }
  template <typename T> MERAK_HD T *ptr() const {
    return static_cast<T *>(data);
  }
};

/// Row-major strides of `sizes`.
MERAK_HD void contiguousStrides(const int64_t *sizes, int rank,
                                int64_t *strides) {
  int64_t s = 1;
  for (int d = rank - 1; d >= 0; --d) {
    strides[d] = s;
    s *= sizes[d];
  }
}

/// `v` read as a tensor of shape `sizes` (rank `rank`) by NumPy's
/// broadcasting: dimensions aligned on the right, a missing or size-1
/// dimension repeated (stride 0). False when `v` does not broadcast to the
/// shape; `out` is then unspecified.
MERAK_HD bool broadcastView(const View &v, const int64_t *sizes, int rank,
                            View &out) {
  if (v.rank > rank)
    return false;
  out.data = v.data;
  out.type = v.type;
  out.rank = rank;
  int shift = rank - v.rank;
  for (int d = 0; d < rank; ++d) {
    out.sizes[d] = sizes[d];
    if (d < shift) {
      out.strides[d] = 0;
      continue;
    }
    int64_t size = v.sizes[d - shift];
    if (size == sizes[d])
      out.strides[d] = v.strides[d - shift];
    else if (size == 1)
      out.strides[d] = 0;
    else
      return false;
  }
  return true;
}

/// Merges adjacent dimensions of every view in `views` (all of one shape)
/// where each view's strides allow it, so that index arithmetic runs over
/// as few dimensions as possible; drops dimensions of size 1. The views
/// keep their data and shape in element order.
MERAK_HD void coalesceDims(View *views, int count) {
  if (count == 0)
    return;
  int rank = views[0].rank;
  int outRank = 0;
  for (int d = 0; d < rank; ++d) {
    if (views[0].sizes[d] == 1)
      continue;
    bool merge = outRank > 0;
    for (int v = 0; v < count && merge; ++v)
      merge = views[v].strides[outRank - 1] ==
              views[v].strides[d] * views[v].sizes[d];
    for (int v = 0; v < count; ++v) {
      if (merge) {
        views[v].sizes[outRank - 1] *= views[v].sizes[d];
        views[v].strides[outRank - 1] = views[v].strides[d];
      } else {
        views[v].sizes[outRank] = views[v].sizes[d];
        views[v].strides[outRank] = views[v].strides[d];
      }
    }
    if (!merge)
      ++outRank;
  }
  for (int v = 0; v < count; ++v)
    views[v].rank = outRank;
}

/// Reads `views` (coalesced, of one shape) as views of `k`-element units:
/// the last dimension's size and every other stride divided by `k`. False,
/// leaving them unchanged, unless the last dimension is dense (stride 1)
/// in each, its size and every other stride are multiples of `k`, and each
/// view's data is aligned to `k * elemBytes` bytes: a copy can then move
/// `k` elements with one access (16 bytes for eight bf16).
MERAK_HD bool vectorizeLast(View *views, int count, int64_t k,
                            int64_t elemBytes) {
  if (count == 0 || k <= 1)
    return false;
  int rank = views[0].rank;
  if (rank == 0 || views[0].sizes[rank - 1] % k != 0)
    return false;
  for (int v = 0; v < count; ++v) {
    if (views[v].rank != rank || views[v].strides[rank - 1] != 1 ||
        reinterpret_cast<uintptr_t>(views[v].data) % uintptr_t(k * elemBytes))
      return false;
    for (int d = 0; d + 1 < rank; ++d)
      if (views[v].strides[d] % k != 0)
        return false;
  }
  for (int v = 0; v < count; ++v) {
    views[v].sizes[rank - 1] /= k;
    for (int d = 0; d + 1 < rank; ++d)
      views[v].strides[d] /= k;
  }
  return true;
}

/// Whether every offset of `views` (each of `n` elements) and `n` itself
/// fit 32-bit index arithmetic (much cheaper on a GPU than 64-bit).
MERAK_HD bool fitsIndex32(const View *views, int count, int64_t n) {
  if (n >= (int64_t(1) << 31))
    return false;
  for (int v = 0; v < count; ++v) {
    int64_t last = 0;
    for (int d = 0; d < views[v].rank; ++d) {
      if (views[v].strides[d] < 0)
        return false;
      last += (views[v].sizes[d] - 1) * views[v].strides[d];
    }
    if (last >= (int64_t(1) << 31))
      return false;
  }
  return true;
}

/// `View::offsetOf` in 32-bit arithmetic, where `fitsIndex32` holds.
MERAK_HD uint32_t offsetOf32(const View &v, uint32_t linear) {
  uint32_t offset = 0;
  for (int d = v.rank - 1; d >= 0; --d) {
    uint32_t size = uint32_t(v.sizes[d]);
    offset += (linear % size) * uint32_t(v.strides[d]);
    linear /= size;
  }
  return offset;
}

MERAK_HD int64_t ceilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

/// A one-dimensional launch over `n` items with `block` threads each:
/// enough blocks for one item per thread, at most `maxBlocks` (kernels
/// loop with a grid stride beyond that).
struct Launch {
  unsigned grid = 1;
  unsigned block = 1;
};
MERAK_HD Launch linearLaunch(int64_t n, int block = 256,
                             int64_t maxBlocks = 65535LL * 32) {
  Launch l;
  l.block = unsigned(block);
  int64_t blocks = ceilDiv(n > 0 ? n : 1, block);
  l.grid = unsigned(blocks < maxBlocks ? blocks : maxBlocks);
  return l;
}

/// Threads per block for a kernel that gives one block to each row of
/// `cols` elements: a multiple of the warp size, at least 32, at most
/// 1024, about one thread per `perThread` elements.
MERAK_HD int rowBlock(int64_t cols, int perThread = 4) {
  int64_t t = ceilDiv(cols, perThread);
  int64_t threads = 32;
  while (threads < t && threads < 1024)
    threads *= 2;
  return int(threads);
}

/// A kernel or CUDA call that failed; the backend turns it into an error
/// naming the op.
class CudaError : public std::runtime_error {
public:
  using std::runtime_error::runtime_error;
};

/// Throws `CudaError` with `what` and CUDA's description when `status` is
/// not success.
void check(cudaError_t status, const char *what);
/// Checks the launch of the kernel `name` just issued.
inline void checkLaunch(const char *name) { check(cudaGetLastError(), name); }

//===----------------------------------------------------------------------===//
// Element conversions (device code)
//===----------------------------------------------------------------------===//

/// The type a kernel accumulates `T` in: float for the 16-bit types.
template <typename T> struct AccOf { using type = T; };
template <> struct AccOf<__half> { using type = float; };
template <> struct AccOf<__nv_bfloat16> { using type = float; };
template <typename T> using Acc = typename AccOf<T>::type;

template <typename T> MERAK_HD Acc<T> toAcc(T v) { return v; }
#if defined(__CUDACC__) || defined(MERAK_CUDA_EMULATION)
template <> MERAK_HD float toAcc<__half>(__half v) { return __half2float(v); }
template <> MERAK_HD float toAcc<__nv_bfloat16>(__nv_bfloat16 v) {
  return __bfloat162float(v);
}
#endif

/// Converts a value of any arithmetic type (the accumulation type) to `T`,
/// rounding to nearest even for the 16-bit types.
template <typename T> struct Convert {
  template <typename S> MERAK_HD static T from(S v) { return T(v); }
};
#if defined(__CUDACC__) || defined(MERAK_CUDA_EMULATION)
template <> struct Convert<__half> {
  template <typename S> MERAK_HD static __half from(S v) {
    return __float2half_rn(float(v));
  }
};
template <> struct Convert<__nv_bfloat16> {
  template <typename S> MERAK_HD static __nv_bfloat16 from(S v) {
    return __float2bfloat16_rn(float(v));
  }
};
template <> struct Convert<bool> {
  template <typename S> MERAK_HD static bool from(S v) { return v != S(0); }
};
#endif
template <typename T, typename S> MERAK_HD T convertTo(S v) {
  return Convert<T>::from(v);
}

#if defined(__CUDACC__) || defined(MERAK_CUDA_EMULATION)
template <typename T> struct TypeTag { using type = T; };

/// Calls `f(TypeTag<U>())` with `U` the C++ type of `io`: `T` itself, or,
/// when `T` is float, `__nv_bfloat16` or `__half` (an operand or result of
/// another type than the op computes in, a cast folded into it:
/// Fusion.h's `castFolding`). Throws `CudaError` naming `what` otherwise.
template <typename T, typename F>
void dispatchFoldedType(ElemType io, const char *what, F &&f) {
  switch (io) {
  case ElemType::F32:
    if constexpr (std::is_same_v<T, float>)
      return f(TypeTag<float>());
    break;
  case ElemType::BF16:
    if constexpr (std::is_same_v<T, float> || std::is_same_v<T, __nv_bfloat16>)
      return f(TypeTag<__nv_bfloat16>());
    break;
  case ElemType::F16:
    if constexpr (std::is_same_v<T, float> || std::is_same_v<T, __half>)
      return f(TypeTag<__half>());
    break;
  case ElemType::F64:
    if constexpr (std::is_same_v<T, double>)
      return f(TypeTag<double>());
    break;
  default:
    break;
  }
  throw CudaError(std::string(what) + ": no kernel reading or writing " +
                  elemTypeName(io) + " where it computes in another type");
}
#endif

} // namespace merak::runtime::cuda

/// Runs `__VA_ARGS__` with `T` the C++ type of the floating-point element
/// type `type`; other types throw `CudaError` naming `what`.
#define MERAK_CUDA_FLOAT_CASES(T, ...)                                         \
  case ::merak::runtime::cuda::ElemType::F16: {                                \
    using T = __half;                                                          \
    __VA_ARGS__;                                                               \
    break;                                                                     \
  }                                                                            \
  case ::merak::runtime::cuda::ElemType::BF16: {                               \
    using T = __nv_bfloat16;                                                   \
    __VA_ARGS__;                                                               \
    break;                                                                     \
  }                                                                            \
  case ::merak::runtime::cuda::ElemType::F32: {                                \
    using T = float;                                                           \
    __VA_ARGS__;                                                               \
    break;                                                                     \
  }                                                                            \
  case ::merak::runtime::cuda::ElemType::F64: {                                \
    using T = double;                                                          \
    __VA_ARGS__;                                                               \
    break;                                                                     \
  }
#define MERAK_CUDA_INT_CASES(T, ...)                                           \
  case ::merak::runtime::cuda::ElemType::Bool: {                               \
    using T = bool;                                                            \
    __VA_ARGS__;                                                               \
    break;                                                                     \
  }                                                                            \
  case ::merak::runtime::cuda::ElemType::I32: {                                \
    using T = int32_t;                                                         \
    __VA_ARGS__;                                                               \
    break;                                                                     \
  }                                                                            \
  case ::merak::runtime::cuda::ElemType::I64: {                                \
    using T = int64_t;                                                         \
    __VA_ARGS__;                                                               \
    break;                                                                     \
  }
#define MERAK_CUDA_DISPATCH_FLOAT(type, what, T, ...)                          \
  switch (type) {                                                              \
    MERAK_CUDA_FLOAT_CASES(T, __VA_ARGS__)                                     \
  default:                                                                     \
    throw ::merak::runtime::cuda::CudaError(                                   \
        std::string(what) + ": no kernel for " +                               \
        ::merak::runtime::cuda::elemTypeName(type));                           \
  }
#define MERAK_CUDA_DISPATCH_ALL(type, what, T, ...)                            \
  switch (type) {                                                              \
    MERAK_CUDA_FLOAT_CASES(T, __VA_ARGS__)                                     \
    MERAK_CUDA_INT_CASES(T, __VA_ARGS__)                                       \
  default:                                                                     \
    throw ::merak::runtime::cuda::CudaError(                                   \
        std::string(what) + ": no kernel for " +                               \
        ::merak::runtime::cuda::elemTypeName(type));                           \
  }

#endif // MERAK_LIB_RUNTIME_CUDA_CUDACOMMON_H
