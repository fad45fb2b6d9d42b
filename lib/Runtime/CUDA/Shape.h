//===- Shape.h - CUDA shape, view and indexing kernels -------------*- C++
//-*-===//
//
// The launchers of Shape.cu (pad, roll, gathers along a dimension, the
// deterministic scatter-add of index_backward) and the index arithmetic the
// host code and the kernels share: the strides of a reshape that can be a
// view (ATen's rule), slice bounds, and the source element of a pad, a roll
// and a gather. The arithmetic is plain MERAK_HD code, unit-tested on the
// host (unittests/Runtime/CudaShapeTest.cpp).
//
//===----------------------------------------------------------------------===//
#ifndef MERAK_LIB_RUNTIME_CUDA_SHAPE_H
#define MERAK_LIB_RUNTIME_CUDA_SHAPE_H

#include "CudaCommon.h"

namespace merak::runtime::cuda {

//===----------------------------------------------------------------------===//
// Index arithmetic (host and device)
//===----------------------------------------------------------------------===//

/// The strides under which a tensor of `oldSizes`/`oldStrides` reads as
/// `newSizes` (same number of elements) without a copy, into `newStrides`;
/// false when its layout does not allow one. This is ATen's
/// `computeStride`, so a reshape is a view exactly where PyTorch's is.
MERAK_HD bool reshapeStrides(const int64_t *oldSizes, const int64_t *oldStrides,
                             int oldRank, const int64_t *newSizes, int newRank,
                             int64_t *newStrides) {
  if (oldRank == 0) {
    for (int d = 0; d < newRank; ++d)
      newStrides[d] = 1;
    return true;
  }
  int64_t numel = 1;
  for (int d = 0; d < oldRank; ++d)
    numel *= oldSizes[d];
  if (numel == 0) {
    bool same = oldRank == newRank;
    for (int d = 0; same && d < oldRank; ++d)
      same = oldSizes[d] == newSizes[d];
    if (same) {
      for (int d = 0; d < newRank; ++d)
        newStrides[d] = oldStrides[d];
      return true;
    }
    for (int d = newRank - 1; d >= 0; --d)
      newStrides[d] =
          d == newRank - 1
              ? 1
              : (newSizes[d + 1] > 1 ? newSizes[d + 1] : 1) * newStrides[d + 1];
    return true;
  }
  int viewD = newRank - 1;
  int64_t chunkBaseStride = oldStrides[oldRank - 1];
  int64_t tensorNumel = 1;
  int64_t viewNumel = 1;
  for (int tensorD = oldRank - 1; tensorD >= 0; --tensorD) {
    tensorNumel *= oldSizes[tensorD];
    // A chunk of dimensions ends where the next one out is not laid out
    // right after it.
    if (tensorD == 0 ||
        (oldSizes[tensorD - 1] != 1 &&
         oldStrides[tensorD - 1] != tensorNumel * chunkBaseStride)) {
      while (viewD >= 0 && (viewNumel < tensorNumel || newSizes[viewD] == 1)) {
        newStrides[viewD] = viewNumel * chunkBaseStride;
        viewNumel *= newSizes[viewD];
        --viewD;
      }
      if (viewNumel != tensorNumel)
        return false;
      if (tensorD > 0) {
        chunkBaseStride = oldStrides[tensorD - 1];
        tensorNumel = 1;
        viewNumel = 1;
      }
    }
  }
  return viewD == -1;
}

/// ATen's slice bounds: negative `start`/`end` count from `size`, both
/// clamped to [0, size], `end` at least `start`. Sets the first index and
/// the number of elements taken with `step` (>= 1).
MERAK_HD void sliceBounds(int64_t size, int64_t start, int64_t end,
                          int64_t step, int64_t &first, int64_t &count) {
  if (start < 0)
    start += size;
  if (end < 0)
    end += size;
  if (start < 0)
    start = 0;
  else if (start >= size)
    start = size;
  if (end < start)
    end = start;
  else if (end >= size)
    end = size;
  first = start;
  count = (end - start + step - 1) / step;
}

/// A dimension index as PyTorch takes it: negative counts from `rank`.
/// -1 when it is out of range.
MERAK_HD int64_t wrapDim(int64_t dim, int64_t rank) {
  if (dim < 0)
    dim += rank;
  return dim >= 0 && dim < rank ? dim : -1;
}

/// Padding of each dimension of `src` (constant_pad_nd: negative amounts
/// crop). Output element at row-major position `linear` of `outSizes` (of
/// `src.rank` dimensions) reads `src` at `offset` when it lies inside it
/// (returns true); it is the pad value otherwise (false).
MERAK_HD bool padSource(const View &src, const int64_t *low,
                        const int64_t *outSizes, int64_t linear,
                        int64_t &offset) {
  offset = 0;
  bool inside = true;
  for (int d = src.rank - 1; d >= 0; --d) {
    int64_t i = linear % outSizes[d] - low[d];
    linear /= outSizes[d];
    inside = inside && i >= 0 && i < src.sizes[d];
    offset += i * src.strides[d];
  }
  return inside;
}

/// `x` modulo `n` in [0, n) (n > 0).
MERAK_HD int64_t positiveMod(int64_t x, int64_t n) {
  int64_t r = x % n;
  return r < 0 ? r + n : r;
}

/// at::roll: the offset in `src` of output element `linear` (row-major in
/// `src`'s shape) when each dimension `d` is shifted by `shifts[d]`
/// (already reduced modulo its size; 0 for a dimension not rolled).
MERAK_HD int64_t rollSource(const View &src, const int64_t *shifts,
                            int64_t linear) {
  int64_t offset = 0;
  for (int d = src.rank - 1; d >= 0; --d) {
    int64_t size = src.sizes[d];
    int64_t i = linear % size;
    linear /= size;
    i -= shifts[d];
    if (i < 0)
      i += size;
    offset += i * src.strides[d];
  }
  return offset;
}

/// A gather along one dimension (index_select, embedding): the source is
/// read as `[outer, dimSize, inner]` through `outerView` (the dimensions
/// before the indexed one), `dimStride` and `innerView` (those after it);
/// the result is dense `[outer, count, inner]`, `count` the number of
/// indices.
struct GatherGeometry {
  View outerView;
  View innerView;
  int64_t dimSize = 0;
  int64_t dimStride = 0;
  int64_t outer = 1;
  int64_t inner = 1;
};

/// Splits `src` at dimension `dim` (in range) into a `GatherGeometry`.
MERAK_HD GatherGeometry gatherGeometry(const View &src, int dim) {
  GatherGeometry g;
  g.outerView.rank = dim;
  for (int d = 0; d < dim; ++d) {
    g.outerView.sizes[d] = src.sizes[d];
    g.outerView.strides[d] = src.strides[d];
  }
  g.innerView.rank = src.rank - dim - 1;
  for (int d = dim + 1; d < src.rank; ++d) {
    g.innerView.sizes[d - dim - 1] = src.sizes[d];
    g.innerView.strides[d - dim - 1] = src.strides[d];
  }
  g.dimSize = src.sizes[dim];
  g.dimStride = src.strides[dim];
  g.outer = g.outerView.numel();
  g.inner = g.innerView.numel();
  coalesceDims(&g.outerView, 1);
  coalesceDims(&g.innerView, 1);
  return g;
}

/// The offset in the source of result element `linear` of a gather that
/// picks source row `row` (in range) for it; `count` indices.
MERAK_HD int64_t gatherSource(const GatherGeometry &g, int64_t count,
                              int64_t linear, int64_t row) {
  int64_t j = linear % g.inner;
  int64_t o = linear / g.inner / count;
  return g.outerView.offsetOf(o) + row * g.dimStride + g.innerView.offsetOf(j);
}

/// The offset, in elements, in a dense `[outer, dimSize, inner]` result of
/// element `linear` (row-major) of an update of `[outer, rows, inner]`
/// written at row `position` of the middle dimension (update_slice).
MERAK_HD int64_t updateSliceTarget(int64_t linear, int64_t rows, int64_t inner,
                                   int64_t dimSize, int64_t position) {
  int64_t k = linear % inner;
  int64_t r = linear / inner % rows;
  int64_t o = linear / inner / rows;
  return (o * dimSize + position + r) * inner + k;
}

/// The sort keys of index_backward span [0, dimSize]: dimSize marks an
/// index out of range (skipped). The bits a radix sort must look at.
MERAK_HD int sortKeyBits(int64_t dimSize) {
  int bits = 1;
  while (bits < 32 && (int64_t(1) << bits) <= dimSize)
    ++bits;
  return bits;
}

/// `bytes` rounded up so that the next buffer carved after it is aligned.
MERAK_HD int64_t alignScratch(int64_t bytes) {
  return (bytes + 255) / 256 * 256;
}

//===----------------------------------------------------------------------===//
// Launchers (Shape.cu); every one launches on `stream` and returns at once
//===----------------------------------------------------------------------===//

/// constant_pad_nd: `dst` (dense, `src.rank` dimensions) is `src` placed at
/// offset `low[d]` in each dimension, `value` (converted to the element
/// type, PyTorch's way) elsewhere.
void launchPad(const View &src, const View &dst, const int64_t *low,
               double value, cudaStream_t stream);

/// at::roll: `dst` (dense, `src`'s shape) is `src` shifted by `shifts[d]`
/// along each dimension `d` (any integers). With `flat`, the tensor is
/// shifted as one row-major sequence by `shifts[0]`.
void launchRoll(const View &src, const View &dst, const int64_t *shifts,
                bool flat, cudaStream_t stream);

/// index_select along `dim` of `src` by `count` indices (`indices`, dense,
/// i32 or i64 by `indexType`) into dense `dst` of `[outer, count, inner]`
/// elements. An index outside [0, dimSize) cannot be reported from the
/// device: it yields NaN (floating point) or 0 (integers, bool).
void launchGather(const View &src, int dim, const void *indices,
                  ElemType indexType, int64_t count, const View &dst,
                  cudaStream_t stream);

/// update_slice into `dst` (dense, already holding the input): `update`
/// (any strides, `dst`'s rank) is written at row `position[0]` of
/// dimension `dim` (`position`: one i32 or i64 element on the device,
/// read there). A position at which the update does not fit cannot be
/// reported from the device: nothing is written.
void launchUpdateSlice(const View &update, int dim, const void *position,
                       ElemType positionType, const View &dst,
                       cudaStream_t stream);

/// Device scratch bytes `launchScatterAdd` needs for `count` indices into
/// `dimSize` rows.
int64_t scatterAddScratchBytes(int64_t count, int64_t dimSize);

/// index_add_ into zeros: `dst` (dense `[outer, dimSize, inner]`) gets at
/// row `indices[i]` the sum of the slices `i` of `grad` (dense `[outer,
/// count, inner]`) with that index, added in index order (the indices are
/// stably sorted, so each row's sum has one order, run after run); rows
/// at `paddingRow` (when in range) stay zero, indices outside [0, dimSize)
/// are skipped. `scratch` holds `scatterAddScratchBytes`.
void launchScatterAdd(const View &grad, const void *indices, ElemType indexType,
                      int64_t count, int64_t outer, int64_t dimSize,
                      int64_t inner, int64_t paddingRow, const View &dst,
                      void *scratch, cudaStream_t stream);

} // namespace merak::runtime::cuda

#endif // MERAK_LIB_RUNTIME_CUDA_SHAPE_H
