//===- Copy.h - copies, conversions and in-place arithmetic ----*- C++ -*-===//
//
// The kernels every family uses (Copy.cu): a strided copy that converts
// between element types (making a view contiguous, casts, materializing
// permutes and broadcasts), fills, and the backend's `accumulate` and
// `scale`.
//
//===----------------------------------------------------------------------===//
#ifndef MERAK_LIB_RUNTIME_CUDA_COPY_H
#define MERAK_LIB_RUNTIME_CUDA_COPY_H

#include "CudaCommon.h"

#include <array>

namespace merak::runtime::cuda {

/// `dst[i] = convert(src[i])` for every element of `dst`'s shape; `src` is
/// read with its own strides and must have the same number of elements in
/// the same row-major order (its shape may differ: a reshape reads through
/// it). Conversions follow PyTorch's: float to integer truncates, anything
/// to bool is `!= 0`.
void copyStrided(const View &src, const View &dst, cudaStream_t stream);

/// Every element of `dst` (any strides) set to `value` converted to its
/// type.
void fill(const View &dst, double value, cudaStream_t stream);

/// `into += addend` elementwise (same shape, both floating point or both
/// integer; `addend` read with its strides).
void addInto(const View &into, const View &addend, cudaStream_t stream);

/// `tensor *= factor` (floating point).
void scaleInPlace(const View &tensor, double factor, cudaStream_t stream);

/// Writes the four words to `dst` (device memory) in stream order: a
/// transfer's header, without host memory that must outlive the call.
void writeWords(int64_t *dst, const std::array<int64_t, 4> &words,
                cudaStream_t stream);

} // namespace merak::runtime::cuda

#endif // MERAK_LIB_RUNTIME_CUDA_COPY_H
