//===- Normalization.cu - softmax and normalization kernels ---------------===//
//
// Rows reduced by a warp or a block each (`RowPlan`, `rowReduce`): softmax
// and its gradient over the last dimension or, with a stride, over an inner
// one; layer and RMS normalization over trailing dimensions. The softmax of
// an inner dimension with many columns takes one thread per column instead.
// Every reduction runs in a fixed order, so results repeat bit for bit.
//
//===----------------------------------------------------------------------===//

#include "Normalization.h"

#include <cmath>

namespace merak::runtime::cuda {
namespace {

/// Where row `row` of a `[outer, size, inner]` tensor starts when its rows
/// run along the middle dimension.
MERAK_DEVICE int64_t rowStart(int64_t row, const DimSplit &s) {
  return (row / s.inner) * s.size * s.inner + row % s.inner;
}

/// Max, then the sum of exponentials, then the result: three reads of the
/// row (the later ones mostly from cache), measured faster than the online
/// softmax's one read with a rescaling per element.
template <typename T, bool Log>
__global__ void softmaxRowsKernel(const T *in, T *out, DimSplit s) {
  using A = Acc<T>;
  __shared__ A shared[kMaxRowsPerBlock * 32];
  int64_t rows = s.outer * s.inner, n = s.size, stride = s.inner;
  forRows(rows, [&](int64_t row, bool active) {
    int64_t start = active ? rowStart(row, s) : 0;
    const T *x = in + start;
    A m = -INFINITY;
    if (active)
      for (int64_t j = threadIdx.x; j < n; j += blockDim.x)
        m = MaxOp<A>()(m, toAcc(x[j * stride]));
    m = rowReduce(m, MaxOp<A>(), shared);
    A sum = 0;
    if (active)
      for (int64_t j = threadIdx.x; j < n; j += blockDim.x)
        sum += mathExp(toAcc(x[j * stride]) - m);
    sum = rowReduce(sum, SumOp<A>(), shared);
    if (!active)
      return;
    T *y = out + start;
    if (Log) {
      A shift = m + mathLog(sum);
      for (int64_t j = threadIdx.x; j < n; j += blockDim.x)
        y[j * stride] = convertTo<T>(toAcc(x[j * stride]) - shift);
    } else {
      A scale = A(1) / sum;
      for (int64_t j = threadIdx.x; j < n; j += blockDim.x)
        y[j * stride] = convertTo<T>(mathExp(toAcc(x[j * stride]) - m) * scale);
    }
  });
}

/// One thread per column of an inner dimension (coalesced across the
/// threads of a warp), the softmax dimension walked in order.
template <typename T, bool Log>
__global__ void softmaxColumnsKernel(const T *in, T *out, DimSplit s) {
  using A = Acc<T>;
  int64_t columns = s.outer * s.inner;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < columns;
       i += int64_t(gridDim.x) * blockDim.x) {
    int64_t start = rowStart(i, s);
    const T *x = in + start;
    T *y = out + start;
    A m = -INFINITY;
    for (int64_t j = 0; j < s.size; ++j)
      m = MaxOp<A>()(m, toAcc(x[j * s.inner]));
    A sum = 0;
    for (int64_t j = 0; j < s.size; ++j)
      sum += mathExp(toAcc(x[j * s.inner]) - m);
    if (Log) {
      A shift = m + mathLog(sum);
      for (int64_t j = 0; j < s.size; ++j)
        y[j * s.inner] = convertTo<T>(toAcc(x[j * s.inner]) - shift);
    } else {
      A scale = A(1) / sum;
      for (int64_t j = 0; j < s.size; ++j)
        y[j * s.inner] =
            convertTo<T>(mathExp(toAcc(x[j * s.inner]) - m) * scale);
    }
  }
}

template <typename T>
__global__ void softmaxBackwardRowsKernel(const T *grad, const T *output,
                                          T *result, DimSplit s) {
  using A = Acc<T>;
  __shared__ A shared[kMaxRowsPerBlock * 32];
  int64_t rows = s.outer * s.inner, n = s.size, stride = s.inner;
  forRows(rows, [&](int64_t row, bool active) {
    int64_t start = active ? rowStart(row, s) : 0;
    const T *g = grad + start, *y = output + start;
    A dot = 0;
    if (active)
      for (int64_t j = threadIdx.x; j < n; j += blockDim.x)
        dot += toAcc(g[j * stride]) * toAcc(y[j * stride]);
    dot = rowReduce(dot, SumOp<A>(), shared);
    if (!active)
      return;
    T *r = result + start;
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x)
      r[j * stride] =
          convertTo<T>(toAcc(y[j * stride]) * (toAcc(g[j * stride]) - dot));
  });
}

template <typename T>
__global__ void softmaxBackwardColumnsKernel(const T *grad, const T *output,
                                             T *result, DimSplit s) {
  using A = Acc<T>;
  int64_t columns = s.outer * s.inner;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < columns;
       i += int64_t(gridDim.x) * blockDim.x) {
    int64_t start = rowStart(i, s);
    const T *g = grad + start, *y = output + start;
    T *r = result + start;
    A dot = 0;
    for (int64_t j = 0; j < s.size; ++j)
      dot += toAcc(g[j * s.inner]) * toAcc(y[j * s.inner]);
    for (int64_t j = 0; j < s.size; ++j)
      r[j * s.inner] =
          convertTo<T>(toAcc(y[j * s.inner]) * (toAcc(g[j * s.inner]) - dot));
  }
}

/// The mean and 1/sqrt(biased variance + eps) of a row of `n` elements,
/// as ATen's layer norm computes them (a negative variance from rounding
/// counts as 0).
template <typename T, typename A>
MERAK_DEVICE void rowMoments(const T *x, int64_t n, bool active, A eps,
                             Welford<A> *shared, A &mean, A &rstd) {
  Welford<A> w{0, 0, 0};
  if (active)
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x)
      w = welfordAdd(w, toAcc(x[j]));
  w = rowReduce(w, WelfordOp<A>(), shared);
  A var = w.m2 / A(n);
  mean = w.mean;
  rstd = A(1) / mathSqrt((var > A(0) ? var : A(0)) + eps);
}

/// `y` of Y: T, or bf16 or f16 for float T (a cast folded into the op).
template <typename T, typename Y>
__global__ void layerNormKernel(const T *x, const T *weight, const T *bias,
                                Y *y, int64_t rows, int64_t cols, Acc<T> eps) {
  using A = Acc<T>;
  __shared__ Welford<A> shared[kMaxRowsPerBlock * 32];
  forRows(rows, [&](int64_t row, bool active) {
    const T *xr = x + (active ? row * cols : 0);
    A mean, rstd;
    rowMoments(xr, cols, active, eps, shared, mean, rstd);
    if (!active)
      return;
    Y *yr = y + row * cols;
    for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) {
      A v = (toAcc(xr[j]) - mean) * rstd;
      if (weight)
        v *= toAcc(weight[j]);
      if (bias)
        v += toAcc(bias[j]);
      yr[j] = convertTo<Y>(v);
    }
  });
}

/// `dy` of D: T, or bf16 or f16 for float T (a cast folded into the op).
template <typename T, typename D>
__global__ void
layerNormBackwardInputKernel(const D *dy, const T *x, const T *weight, T *dx,
                             Acc<T> *means, Acc<T> *rstds, int64_t rows,
                             int64_t cols, Acc<T> eps) {
  using A = Acc<T>;
  __shared__ Welford<A> sharedMoments[kMaxRowsPerBlock * 32];
  __shared__ A shared[kMaxRowsPerBlock * 32];
  forRows(rows, [&](int64_t row, bool active) {
    int64_t start = active ? row * cols : 0;
    const T *xr = x + start;
    const D *gr = dy + start;
    A mean, rstd;
    rowMoments(xr, cols, active, eps, sharedMoments, mean, rstd);
    // ATen's: ds = sum(dy w x), db = sum(dy w).
    A ds = 0, db = 0;
    if (active)
      for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) {
        A g = toAcc(gr[j]);
        if (weight)
          g *= toAcc(weight[j]);
        ds += g * toAcc(xr[j]);
        db += g;
      }
    ds = rowReduce(ds, SumOp<A>(), shared);
    db = rowReduce(db, SumOp<A>(), shared);
    if (!active)
      return;
    if (threadIdx.x == 0) {
      means[row] = mean;
      rstds[row] = rstd;
    }
    A scale = A(1) / A(cols);
    A b = (db * mean - ds) * rstd * rstd * rstd * scale;
    A c = -b * mean - db * rstd * scale;
    T *out = dx + start;
    for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) {
      A g = toAcc(gr[j]);
      if (weight)
        g *= toAcc(weight[j]);
      out[j] = convertTo<T>(rstd * g + b * toAcc(xr[j]) + c);
    }
  });
}

/// Block (kColumnTile, kColumnRowThreads), grid (column tiles, chunks):
/// each block sums a tile of columns over one chunk of rows, its threads
/// down the rows then combined in order, into `partials[chunk][col]` (the
/// weight's first, the bias's `chunks * cols` after).
template <typename T, typename D>
__global__ void
layerNormParamPartialsKernel(const D *dy, const T *x, const Acc<T> *means,
                             const Acc<T> *rstds, Acc<T> *partials,
                             int64_t rows, int64_t cols, int64_t chunkRows,
                             int64_t chunks, bool wantWeight, bool wantBias) {
  using A = Acc<T>;
  __shared__ A sumW[kColumnRowThreads][kColumnTile + 1];
  __shared__ A sumB[kColumnRowThreads][kColumnTile + 1];
  int64_t chunk = blockIdx.y;
  int64_t r0 = chunk * chunkRows;
  int64_t r1 = r0 + chunkRows < rows ? r0 + chunkRows : rows;
  for (int64_t tile = int64_t(blockIdx.x) * kColumnTile; tile < cols;
       tile += int64_t(gridDim.x) * kColumnTile) {
    int64_t col = tile + threadIdx.x;
    A w = 0, b = 0;
    if (col < cols)
      for (int64_t r = r0 + threadIdx.y; r < r1; r += kColumnRowThreads) {
        A g = toAcc(dy[r * cols + col]);
        if (wantWeight)
          w += g * (toAcc(x[r * cols + col]) - means[r]) * rstds[r];
        b += g;
      }
    __syncthreads(); // the previous tile's sums are read
    sumW[threadIdx.y][threadIdx.x] = w;
    sumB[threadIdx.y][threadIdx.x] = b;
    __syncthreads();
    if (threadIdx.y == 0 && col < cols) {
      for (int k = 1; k < kColumnRowThreads; ++k) {
        w += sumW[k][threadIdx.x];
        b += sumB[k][threadIdx.x];
      }
      if (wantWeight)
        partials[chunk * cols + col] = w;
      if (wantBias)
        partials[(chunks + chunk) * cols + col] = b;
    }
  }
}

/// `out[col]` = the sum of `partials[0..chunks)[col]`, in chunk order.
template <typename T>
__global__ void sumChunksKernel(const Acc<T> *partials, T *out, int64_t chunks,
                                int64_t cols) {
  for (int64_t col = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; col < cols;
       col += int64_t(gridDim.x) * blockDim.x) {
    Acc<T> sum = 0;
    for (int64_t k = 0; k < chunks; ++k)
      sum += partials[k * cols + col];
    out[col] = convertTo<T>(sum);
  }
}

/// `y` of Y: T, or bf16 or f16 for float T (a cast folded into the op).
template <typename T, typename Y>
__global__ void rmsNormKernel(const T *x, const T *weight, Y *y, int64_t rows,
                              int64_t cols, Acc<T> eps) {
  using A = Acc<T>;
  __shared__ A shared[kMaxRowsPerBlock * 32];
  forRows(rows, [&](int64_t row, bool active) {
    const T *xr = x + (active ? row * cols : 0);
    A squares = 0;
    if (active)
      for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) {
        A v = toAcc(xr[j]);
        squares += v * v;
      }
    squares = rowReduce(squares, SumOp<A>(), shared);
    if (!active)
      return;
    A scale = A(1) / mathSqrt(squares / A(cols) + eps);
    Y *yr = y + row * cols;
    for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) {
      // Rounded to T before the weight, as `type_as(x)` then `mul`.
      T normalized = convertTo<T>(toAcc(xr[j]) * scale);
      yr[j] = weight ? convertTo<Y>(toAcc(normalized) * toAcc(weight[j]))
                     : convertTo<Y>(toAcc(normalized));
    }
  });
}

dim3 rowBlockDim(const RowPlan &p) {
  return dim3(unsigned(p.threads), unsigned(p.rowsPerBlock));
}

/// Whether a softmax over an inner dimension takes one thread per column:
/// when there are enough columns to fill the device.
bool byColumns(const DimSplit &s) {
  return s.inner > 1 && s.outer * s.inner >= 4096;
}

} // namespace

void softmaxForward(const void *in, void *out, ElemType type,
                    const DimSplit &split, bool log, cudaStream_t stream) {
  int64_t rows = split.outer * split.inner;
  if (rows == 0 || split.size == 0)
    return;
  MERAK_CUDA_DISPATCH_FLOAT(type, "softmax", T, {
    const T *x = static_cast<const T *>(in);
    T *y = static_cast<T *>(out);
    if (byColumns(split)) {
      Launch l = linearLaunch(rows);
      if (log)
        softmaxColumnsKernel<T, true>
            <<<l.grid, l.block, 0, stream>>>(x, y, split);
      else
        softmaxColumnsKernel<T, false>
            <<<l.grid, l.block, 0, stream>>>(x, y, split);
    } else {
      RowPlan p = rowPlan(rows, split.size);
      if (log)
        softmaxRowsKernel<T, true>
            <<<p.grid, rowBlockDim(p), 0, stream>>>(x, y, split);
      else
        softmaxRowsKernel<T, false>
            <<<p.grid, rowBlockDim(p), 0, stream>>>(x, y, split);
    }
  });
  checkLaunch(log ? "log_softmax" : "softmax");
}

void softmaxBackward(const void *grad, const void *output, void *result,
                     ElemType type, const DimSplit &split,
                     cudaStream_t stream) {
  int64_t rows = split.outer * split.inner;
  if (rows == 0 || split.size == 0)
    return;
  MERAK_CUDA_DISPATCH_FLOAT(type, "softmax_backward", T, {
    const T *g = static_cast<const T *>(grad);
    const T *y = static_cast<const T *>(output);
    T *r = static_cast<T *>(result);
    if (byColumns(split)) {
      Launch l = linearLaunch(rows);
      softmaxBackwardColumnsKernel<T>
          <<<l.grid, l.block, 0, stream>>>(g, y, r, split);
    } else {
      RowPlan p = rowPlan(rows, split.size);
      softmaxBackwardRowsKernel<T>
          <<<p.grid, rowBlockDim(p), 0, stream>>>(g, y, r, split);
    }
  });
  checkLaunch("softmax_backward");
}

void layerNormForward(const void *x, const void *weight, const void *bias,
                      void *y, ElemType type, ElemType yType, int64_t rows,
                      int64_t cols, double eps, cudaStream_t stream) {
  if (rows == 0 || cols == 0)
    return;
  RowPlan p = rowPlan(rows, cols, kNormColumnsPerThread);
  MERAK_CUDA_DISPATCH_FLOAT(type, "layer_norm", T, {
    dispatchFoldedType<T>(yType, "layer_norm", [&](auto tag) {
      using Y = typename decltype(tag)::type;
      layerNormKernel<T, Y><<<p.grid, rowBlockDim(p), 0, stream>>>(
          static_cast<const T *>(x), static_cast<const T *>(weight),
          static_cast<const T *>(bias), static_cast<Y *>(y), rows, cols,
          Acc<T>(eps));
    });
  });
  checkLaunch("layer_norm");
}

void layerNormBackwardInput(const void *dy, const void *x, const void *weight,
                            void *dx, void *mean, void *rstd, ElemType type,
                            ElemType dyType, int64_t rows, int64_t cols,
                            double eps, cudaStream_t stream) {
  if (rows == 0 || cols == 0)
    return;
  RowPlan p = rowPlan(rows, cols, kNormColumnsPerThread);
  MERAK_CUDA_DISPATCH_FLOAT(type, "layer_norm_backward", T, {
    dispatchFoldedType<T>(dyType, "layer_norm_backward", [&](auto tag) {
      using D = typename decltype(tag)::type;
      layerNormBackwardInputKernel<T, D><<<p.grid, rowBlockDim(p), 0, stream>>>(
          static_cast<const D *>(dy), static_cast<const T *>(x),
          static_cast<const T *>(weight), static_cast<T *>(dx),
          static_cast<Acc<T> *>(mean), static_cast<Acc<T> *>(rstd), rows, cols,
          Acc<T>(eps));
    });
  });
  checkLaunch("layer_norm_backward");
}

void layerNormBackwardParams(const void *dy, const void *x, const void *mean,
                             const void *rstd, void *gradWeight, void *gradBias,
                             void *partials, ElemType type, ElemType dyType,
                             int64_t rows, int64_t cols, cudaStream_t stream) {
  if (cols == 0 || (!gradWeight && !gradBias))
    return;
  ColumnChunks chunks = columnChunks(rows);
  int64_t tiles = ceilDiv(cols, kColumnTile);
  dim3 grid(unsigned(tiles < kMaxRowBlocks ? tiles : kMaxRowBlocks),
            unsigned(chunks.chunks));
  dim3 block(kColumnTile, kColumnRowThreads);
  Launch finish = linearLaunch(cols);
  MERAK_CUDA_DISPATCH_FLOAT(type, "layer_norm_backward", T, {
    using A = Acc<T>;
    A *sums = static_cast<A *>(partials);
    dispatchFoldedType<T>(dyType, "layer_norm_backward", [&](auto tag) {
      using D = typename decltype(tag)::type;
      layerNormParamPartialsKernel<T, D><<<grid, block, 0, stream>>>(
          static_cast<const D *>(dy), static_cast<const T *>(x),
          static_cast<const A *>(mean), static_cast<const A *>(rstd), sums,
          rows, cols, chunks.chunkRows, chunks.chunks, gradWeight != nullptr,
          gradBias != nullptr);
    });
    checkLaunch("layer_norm_backward (weight and bias partial sums)");
    if (gradWeight)
      sumChunksKernel<T><<<finish.grid, finish.block, 0, stream>>>(
          sums, static_cast<T *>(gradWeight), chunks.chunks, cols);
    if (gradBias)
      sumChunksKernel<T><<<finish.grid, finish.block, 0, stream>>>(
          sums + chunks.chunks * cols, static_cast<T *>(gradBias),
          chunks.chunks, cols);
  });
  checkLaunch("layer_norm_backward (weight and bias sums)");
}

void rmsNormForward(const void *x, const void *weight, void *y, ElemType type,
                    ElemType yType, int64_t rows, int64_t cols, double eps,
                    cudaStream_t stream) {
  if (rows == 0 || cols == 0)
    return;
  RowPlan p = rowPlan(rows, cols, kNormColumnsPerThread);
  MERAK_CUDA_DISPATCH_FLOAT(type, "rms_norm", T, {
    dispatchFoldedType<T>(yType, "rms_norm", [&](auto tag) {
      using Y = typename decltype(tag)::type;
      rmsNormKernel<T, Y><<<p.grid, rowBlockDim(p), 0, stream>>>(
          static_cast<const T *>(x), static_cast<const T *>(weight),
          static_cast<Y *>(y), rows, cols, Acc<T>(eps));
    });
  });
  checkLaunch("rms_norm");
}

} // namespace merak::runtime::cuda
