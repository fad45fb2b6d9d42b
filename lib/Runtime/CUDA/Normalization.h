//===- Normalization.h - softmax and normalization kernels ------*- C++ -*-===//
//
// Launchers of Normalization.cu (softmax, log_softmax, softmax's gradient,
// layer and RMS normalization and layer normalization's gradients) and the
// host arithmetic of their launches: how a tensor splits around the softmax
// dimension, how rows map onto blocks, how a column reduction splits into
// chunks, and Welford's combination of partial statistics. The row plan and
// the reductions are shared with Losses.cu.
//
//===----------------------------------------------------------------------===//
#ifndef MERAK_LIB_RUNTIME_CUDA_NORMALIZATION_H
#define MERAK_LIB_RUNTIME_CUDA_NORMALIZATION_H

#include "CudaCommon.h"

namespace merak::runtime::cuda {

//===----------------------------------------------------------------------===//
// Host arithmetic (unit-tested in CudaNormalizationTest.cpp)
//===----------------------------------------------------------------------===//

/// `dim` in [-rank, rank) as a dimension in [0, rank), or -1 when out of
/// range. A rank-0 tensor has one dimension for this purpose (as ATen's
/// softmax takes `dim` 0 or -1 of a scalar).
MERAK_HD int softmaxDim(int64_t dim, int rank) {
  int64_t r = rank > 0 ? rank : 1;
  if (dim < -r || dim >= r)
    return -1;
  return int(dim < 0 ? dim + r : dim);
}

/// A dense row-major tensor seen as `[outer, size, inner]` around one
/// dimension.
struct DimSplit {
  int64_t outer = 1, size = 1, inner = 1;
};
MERAK_HD DimSplit splitAt(const int64_t *sizes, int rank, int dim) {
  DimSplit s;
  for (int d = 0; d < rank; ++d) {
    if (d < dim)
      s.outer *= sizes[d];
    else if (d == dim)
      s.size = sizes[d];
    else
      s.inner *= sizes[d];
  }
  return s;
}

/// A dense row-major tensor seen as `[rows, cols]`, `cols` the product of
/// its trailing `trailing` dimensions.
struct RowSplit {
  int64_t rows = 1, cols = 1;
};
MERAK_HD RowSplit splitTrailing(const int64_t *sizes, int rank, int trailing) {
  RowSplit s;
  for (int d = 0; d < rank; ++d) {
    if (d < rank - trailing)
      s.rows *= sizes[d];
    else
      s.cols *= sizes[d];
  }
  return s;
}

/// The most blocks a row kernel launches; it loops over the rows beyond.
constexpr int64_t kMaxRowBlocks = int64_t(1) << 20;

/// A launch that reduces rows of `cols` elements: `threads` per row (a
/// power of two, 32 to 1024; one warp reduces with shuffles alone), rows
/// side by side in a block (`blockDim = (threads, rowsPerBlock)`, 256
/// threads where the rows are short), and `grid` blocks (bounded: the
/// kernels step over the rows by `grid * rowsPerBlock`).
struct RowPlan {
  int threads = 32;
  int rowsPerBlock = 1;
  unsigned grid = 1;
};
MERAK_HD RowPlan rowPlan(int64_t rows, int64_t cols, int perThread = 4) {
  RowPlan p;
  p.threads = rowBlock(cols, perThread);
  p.rowsPerBlock = p.threads >= 256 ? 1 : 256 / p.threads;
  int64_t blocks = ceilDiv(rows > 0 ? rows : 1, p.rowsPerBlock);
  p.grid = unsigned(blocks < kMaxRowBlocks ? blocks : kMaxRowBlocks);
  return p;
}
/// The most rows one block of a `RowPlan` holds (the shared memory the
/// block reductions size for).
constexpr int kMaxRowsPerBlock = 8;
/// Columns per thread of the layer and RMS norm kernels' `RowPlan`: a
/// model's hidden size (768 to 1,024) takes one warp a row, eight rows a
/// block, its reductions shuffles with no barrier; rows of 4,096 take 128
/// threads. (A block of 256 threads a row of 768, three elements each and
/// barriers in every reduction, left those kernels waiting on latency.)
constexpr int kNormColumnsPerThread = 32;

/// A sum over the rows of a `[rows, cols]` matrix, column by column, in a
/// fixed order without atomics: the rows split into `chunks` chunks of
/// `chunkRows` (the last one shorter), each chunk's column sums written
/// apart, then summed chunk after chunk. Chunks of at least 32 rows and at
/// most 1024 of them, so that the partials stay small and the grid's y
/// dimension within its limit.
struct ColumnChunks {
  int64_t chunkRows = 1;
  int64_t chunks = 1;
};
constexpr int64_t kMaxColumnChunks = 1024;
MERAK_HD ColumnChunks columnChunks(int64_t rows) {
  ColumnChunks c;
  int64_t r = rows > 0 ? rows : 1;
  c.chunkRows = ceilDiv(r, kMaxColumnChunks);
  if (c.chunkRows < 32)
    c.chunkRows = 32;
  c.chunks = ceilDiv(r, c.chunkRows);
  return c;
}
/// Columns one block of the chunked column sum takes (its x dimension)
/// and threads down the rows (its y dimension).
constexpr int kColumnTile = 32;
constexpr int kColumnRowThreads = 8;

/// Partial statistics of a set of values: how many, their mean and the
/// sum of their squared deviations from it (Welford). An aggregate without
/// initializers, so that kernels can keep it in shared memory; `{0, 0, 0}`
/// is the empty set.
template <typename A> struct Welford { A count, mean, m2; };
template <typename A> MERAK_HD Welford<A> welfordAdd(Welford<A> w, A x) {
  w.count += A(1);
  A delta = x - w.mean;
  w.mean += delta / w.count;
  w.m2 += delta * (x - w.mean);
  return w;
}
/// Chan's combination of two partial statistics (either may be empty).
template <typename A>
MERAK_HD Welford<A> welfordCombine(Welford<A> a, Welford<A> b) {
  if (b.count == A(0))
    return a;
  if (a.count == A(0))
    return b;
  Welford<A> w;
  w.count = a.count + b.count;
  A delta = b.mean - a.mean;
  A nb = b.count / w.count;
  w.mean = a.mean + delta * nb;
  w.m2 = a.m2 + b.m2 + delta * delta * a.count * nb;
  return w;
}

#if defined(__CUDACC__) || defined(MERAK_CUDA_EMULATION)
//===----------------------------------------------------------------------===//
// Row reductions (device code, shared with Losses.cu)
//===----------------------------------------------------------------------===//

template <typename A> struct SumOp {
  MERAK_DEVICE A operator()(A a, A b) const { return a + b; }
};
/// The larger of two values, NaN when either is (as ATen's max).
template <typename A> struct MaxOp {
  MERAK_DEVICE A operator()(A a, A b) const {
    return (a != a || a > b) ? a : b;
  }
};
template <typename A> struct WelfordOp {
  MERAK_DEVICE Welford<A> operator()(Welford<A> a, Welford<A> b) const {
    return welfordCombine(a, b);
  }
};

/// A running max and the sum of `exp(x - max)` over the values seen (the
/// online softmax): one read of a row gives both.
template <typename A> struct MaxSum { A max, sum; };
/// Adds `x`; an `x` of -inf adds nothing (so a masked row keeps its sum).
template <typename A> MERAK_DEVICE MaxSum<A> maxSumAdd(MaxSum<A> a, A x) {
  if (x > a.max) {
    a.sum = a.sum * mathExp(a.max - x) + A(1);
    a.max = x;
  } else if (x != A(-INFINITY)) {
    a.sum += mathExp(x - a.max);
  }
  return a;
}
template <typename A> struct MaxSumOp {
  MERAK_DEVICE MaxSum<A> operator()(MaxSum<A> a, MaxSum<A> b) const {
    A m = MaxOp<A>()(a.max, b.max);
    if (m == A(-INFINITY))
      return {m, a.sum + b.sum};
    return {m, a.sum * mathExp(a.max - m) + b.sum * mathExp(b.max - m)};
  }
};

template <typename A> MERAK_DEVICE A shuffleDown(A v, int offset) {
  return __shfl_down_sync(0xffffffffu, v, offset);
}
template <typename A>
MERAK_DEVICE Welford<A> shuffleDown(Welford<A> w, int offset) {
  return {shuffleDown(w.count, offset), shuffleDown(w.mean, offset),
          shuffleDown(w.m2, offset)};
}
template <typename A>
MERAK_DEVICE MaxSum<A> shuffleDown(MaxSum<A> v, int offset) {
  return {shuffleDown(v.max, offset), shuffleDown(v.sum, offset)};
}
template <typename A> MERAK_DEVICE A shuffleFirst(A v) {
  return __shfl_sync(0xffffffffu, v, 0);
}
template <typename A> MERAK_DEVICE MaxSum<A> shuffleFirst(MaxSum<A> v) {
  return {shuffleFirst(v.max), shuffleFirst(v.sum)};
}
template <typename A> MERAK_DEVICE Welford<A> shuffleFirst(Welford<A> w) {
  return {shuffleFirst(w.count), shuffleFirst(w.mean), shuffleFirst(w.m2)};
}

/// Combines `v` over the `blockDim.x` threads of this thread's row (row
/// `threadIdx.y` of a `RowPlan` block) in a fixed order: a tree within
/// each warp, then the warps one after another. Every thread of the row
/// gets the same value. `shared` holds `kMaxRowsPerBlock * 32` values;
/// every thread of the block must call it (a barrier when the row spans
/// warps).
template <typename S, typename Op>
MERAK_DEVICE S rowReduce(S v, Op op, S *shared) {
  for (int offset = 16; offset > 0; offset >>= 1)
    v = op(v, shuffleDown(v, offset));
  if (blockDim.x == 32)
    return shuffleFirst(v);
  S *mine = shared + threadIdx.y * 32;
  __syncthreads(); // the previous reduction's readers are done
  if ((threadIdx.x & 31) == 0)
    mine[threadIdx.x >> 5] = v;
  __syncthreads();
  S r = mine[0];
  for (unsigned w = 1; w < (blockDim.x >> 5); ++w)
    r = op(r, mine[w]);
  return r;
}
/// The rows of a `RowPlan` launch: calls `body(row, active)` for every
/// group of `blockDim.y` rows this block takes, the same number of times
/// in every thread of the block (`active` false past the last row), so
/// that the body may call `rowReduce`.
template <typename Body>
MERAK_DEVICE void forRows(int64_t rows, const Body &body) {
  int64_t step = int64_t(gridDim.x) * blockDim.y;
  for (int64_t base = int64_t(blockIdx.x) * blockDim.y; base < rows;
       base += step) {
    int64_t row = base + threadIdx.y;
    body(row, row < rows);
  }
}

#endif // __CUDACC__

//===----------------------------------------------------------------------===//
// Launchers (Normalization.cu); `type` is the element type of every tensor
//===----------------------------------------------------------------------===//

/// `out = softmax(in)` (or `log_softmax` when `log`) over the middle
/// dimension of dense `[outer, size, inner]` tensors.
void softmaxForward(const void *in, void *out, ElemType type,
                    const DimSplit &split, bool log, cudaStream_t stream);

/// `result = output * (grad - sum(grad * output))` over the middle
/// dimension of dense `[outer, size, inner]` tensors.
void softmaxBackward(const void *grad, const void *output, void *result,
                     ElemType type, const DimSplit &split, cudaStream_t stream);

/// Layer normalization of the rows of a dense `[rows, cols]` tensor of
/// `type`; `weight` and `bias` (`[cols]` of `type`) may be null. `y` is of
/// `yType`: `type`, or bf16 or f16 for an f32 `type` (a cast folded into
/// the op: Fusion.h), rounded once.
void layerNormForward(const void *x, const void *weight, const void *bias,
                      void *y, ElemType type, ElemType yType, int64_t rows,
                      int64_t cols, double eps, cudaStream_t stream);

/// The input gradient of layer normalization (`weight` may be null) into
/// `dx` (`type`, the input's); each row's mean and 1/std into `mean` and
/// `rstd` (`[rows]` of the accumulation type: float, double for f64).
/// `dy` is of `dyType`: `type`, or bf16 or f16 for an f32 `type`.
void layerNormBackwardInput(const void *dy, const void *x, const void *weight,
                            void *dx, void *mean, void *rstd, ElemType type,
                            ElemType dyType, int64_t rows, int64_t cols,
                            double eps, cudaStream_t stream);

/// The weight and bias gradients of layer normalization (`[cols]`, either
/// null when not wanted) from the statistics `layerNormBackwardInput` left;
/// `partials` is scratch of `2 * columnChunks(rows).chunks * cols` elements
/// of the accumulation type.
void layerNormBackwardParams(const void *dy, const void *x, const void *mean,
                             const void *rstd, void *gradWeight, void *gradBias,
                             void *partials, ElemType type, ElemType dyType,
                             int64_t rows, int64_t cols, cudaStream_t stream);

/// RMS normalization of the rows of a dense `[rows, cols]` tensor, as
/// PyTorch's composite computes it: normalized in the accumulation type,
/// rounded to `type`, then times `weight` (`[cols]`, may be null) and
/// rounded again, to `yType` (`type`, or bf16 or f16 for an f32 `type`).
void rmsNormForward(const void *x, const void *weight, void *y, ElemType type,
                    ElemType yType, int64_t rows, int64_t cols, double eps,
                    cudaStream_t stream);

} // namespace merak::runtime::cuda

#endif // MERAK_LIB_RUNTIME_CUDA_NORMALIZATION_H
