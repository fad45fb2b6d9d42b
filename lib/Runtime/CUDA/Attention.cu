//===- Attention.cu - the softmax kernels of masked attention -------------===//
//
// One block per row of scores; each pass over the row strides by the
// block, and the block's partial values combine in a fixed tree (warp
// shuffles, then one warp over the warps), so a row gives the same result
// every run.
//
//===----------------------------------------------------------------------===//

#include "Attention.h"

#include <cmath>
#include <string>
#include <type_traits>

namespace merak::runtime::cuda {
namespace {

struct MaxOp {
  template <typename A> MERAK_DEVICE A operator()(A x, A y) const {
    return x > y ? x : y;
  }
};
struct SumOp {
  template <typename A> MERAK_DEVICE A operator()(A x, A y) const {
    return x + y;
  }
};

/// `v` combined over the block with `op`, the same in every thread;
/// `shared` holds 32 values. Starts with a barrier, so calls may follow
/// one another.
template <typename A, typename Op>
__device__ A blockReduce(A v, A *shared, Op op) {
  for (int offset = 16; offset > 0; offset /= 2)
    v = op(v, __shfl_xor_sync(0xffffffffu, v, offset));
  int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  int warps = blockDim.x / 32;
  __syncthreads();
  if (lane == 0)
    shared[warp] = v;
  __syncthreads();
  v = shared[lane < warps ? lane : 0];
  for (int offset = 16; offset > 0; offset /= 2) {
    A other = __shfl_xor_sync(0xffffffffu, v, offset);
    v = (lane ^ offset) < warps && lane < warps ? op(v, other) : v;
  }
  v = __shfl_sync(0xffffffffu, v, 0);
  return v;
}

/// A masked score: `false` masks, a float mask adds.
template <typename T, typename A> MERAK_DEVICE A applyMask(A s, bool m) {
  return m ? s : A(-INFINITY);
}
template <typename T, typename A> MERAK_DEVICE A applyMask(A s, T m) {
  return s + toAcc(m);
}

/// `v` combined over the warp with `op` (a fixed butterfly), the same in
/// every lane.
template <typename A, typename Op> __device__ A warpReduce(A v, Op op) {
  for (int offset = 16; offset > 0; offset /= 2)
    v = op(v, __shfl_xor_sync(0xffffffffu, v, offset));
  return v;
}

/// The first row of this warp and the distance to its next one.
__device__ void warpRows(int64_t &first, int64_t &step) {
  first = (blockIdx.x * int64_t(blockDim.x) + threadIdx.x) / 32;
  step = gridDim.x * int64_t(blockDim.x) / 32;
}

/// `maskedSoftmaxKernel` for rows of at most `32 * N` columns: one warp a
/// row, column `lane + 32 i` in the lane's register `i`, read once and
/// written once, no barriers.
template <typename T, typename M, int N>
__global__ void maskedSoftmaxWarpKernel(T *scores, int64_t rows, int64_t cols,
                                        const M *mask, MaskRows maskRows,
                                        Acc<T> scale, bool divide) {
  using A = Acc<T>;
  const int lane = threadIdx.x % 32;
  int64_t first, step;
  warpRows(first, step);
  for (int64_t row = first; row < rows; row += step) {
    T *p = scores + row * cols;
    const M *m = mask + maskRows.rows.offsetOf(row);
    A s[N];
    A mx = A(-INFINITY);
#pragma unroll
    for (int i = 0; i < N; ++i) {
      int64_t j = lane + 32 * i;
      s[i] = A(-INFINITY);
      if (j < cols) {
        A v = toAcc(p[j]);
        v = divide ? v / scale : v * scale;
        s[i] = applyMask<T, A>(v, m[j * maskRows.colStride]);
        mx = s[i] > mx ? s[i] : mx;
      }
    }
    mx = warpReduce(mx, MaxOp());
    A sum = 0;
#pragma unroll
    for (int i = 0; i < N; ++i)
      if (lane + 32 * i < cols) {
        s[i] = mathExp(s[i] - mx);
        sum += s[i];
      }
    sum = warpReduce(sum, SumOp());
    A inv = A(1) / sum;
#pragma unroll
    for (int i = 0; i < N; ++i) {
      int64_t j = lane + 32 * i;
      if (j < cols)
        p[j] = convertTo<T>(s[i] * inv);
    }
  }
}

template <typename T, typename M>
__global__ void maskedSoftmaxKernel(T *scores, int64_t rows, int64_t cols,
                                    const M *mask, MaskRows maskRows,
                                    Acc<T> scale, bool divide) {
  using A = Acc<T>;
  __shared__ A shared[32];
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    T *p = scores + row * cols;
    const M *m = mask + maskRows.rows.offsetOf(row);
    auto score = [&](int64_t j) {
      A s = toAcc(p[j]);
      s = divide ? s / scale : s * scale;
      return applyMask<T, A>(s, m[j * maskRows.colStride]);
    };
    A mx = A(-INFINITY);
    for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) {
      A s = score(j);
      mx = s > mx ? s : mx;
    }
    mx = blockReduce(mx, shared, MaxOp());
    // Every intermediate in the accumulation type (float for bf16 and
    // f16), rounded to T once, at the end.
    auto e = [&](int64_t j) { return mathExp(score(j) - mx); };
    A sum = 0;
    for (int64_t j = threadIdx.x; j < cols; j += blockDim.x)
      sum += e(j);
    sum = blockReduce(sum, shared, SumOp());
    A inv = A(1) / sum;
    for (int64_t j = threadIdx.x; j < cols; j += blockDim.x)
      p[j] = convertTo<T>(e(j) * inv);
  }
}

/// `out` may be `grad` (then `G` is `T`): each thread writes only the
/// elements it read.
template <typename T, typename G>
__global__ void softmaxBackwardKernel(const G *grad, const T *probs, T *out,
                                      int64_t rows, int64_t cols, Acc<T> scale,
                                      bool divide) {
  using A = Acc<T>;
  __shared__ A shared[32];
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const G *g = grad + row * cols;
    const T *p = probs + row * cols;
    T *o = out + row * cols;
    A dot = 0;
    for (int64_t j = threadIdx.x; j < cols; j += blockDim.x)
      dot += A(toAcc(g[j])) * toAcc(p[j]);
    dot = blockReduce(dot, shared, SumOp());
    for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) {
      A d = (A(toAcc(g[j])) - dot) * toAcc(p[j]);
      o[j] = convertTo<T>(divide ? d / scale : d * scale);
    }
  }
}

/// `softmaxBackwardKernel` for rows of at most `32 * N` columns: one warp
/// a row, the row's gradient and probabilities in registers.
template <typename T, typename G, int N>
__global__ void softmaxBackwardWarpKernel(const G *grad, const T *probs, T *out,
                                          int64_t rows, int64_t cols,
                                          Acc<T> scale, bool divide) {
  using A = Acc<T>;
  const int lane = threadIdx.x % 32;
  int64_t first, step;
  warpRows(first, step);
  for (int64_t row = first; row < rows; row += step) {
    const G *g = grad + row * cols;
    const T *p = probs + row * cols;
    T *o = out + row * cols;
    A gs[N], ps[N];
    A dot = 0;
#pragma unroll
    for (int i = 0; i < N; ++i) {
      int64_t j = lane + 32 * i;
      gs[i] = ps[i] = A(0);
      if (j < cols) {
        gs[i] = A(toAcc(g[j]));
        ps[i] = toAcc(p[j]);
        dot += gs[i] * ps[i];
      }
    }
    dot = warpReduce(dot, SumOp());
#pragma unroll
    for (int i = 0; i < N; ++i) {
      int64_t j = lane + 32 * i;
      if (j < cols) {
        A d = (gs[i] - dot) * ps[i];
        o[j] = convertTo<T>(divide ? d / scale : d * scale);
      }
    }
  }
}

/// Calls `f(std::integral_constant<int, N>())` for `warpRowColumns`'s N.
template <typename F> void withWarpColumns(int n, F &&f) {
  switch (n) {
  case 4:
    return f(std::integral_constant<int, 4>());
  case 8:
    return f(std::integral_constant<int, 8>());
  case 16:
    return f(std::integral_constant<int, 16>());
  default:
    return f(std::integral_constant<int, 32>());
  }
}

/// Rows and columns of a dense `[..., cols]` tensor.
void rowsOf(const View &v, int64_t &rows, int64_t &cols) {
  cols = v.rank > 0 ? v.sizes[v.rank - 1] : 1;
  rows = cols > 0 ? v.numel() / cols : 0;
}

} // namespace

void maskedSoftmax(const View &scores, const View &mask, float scale,
                   bool divide, cudaStream_t stream) {
  if (!scores.isContiguous() || scores.rank < 2 || mask.rank != scores.rank)
    throw CudaError("masked softmax: scores must be dense, the mask broadcast "
                    "to them");
  if (mask.type != ElemType::Bool && mask.type != scores.type)
    throw CudaError(std::string("masked softmax: a ") +
                    elemTypeName(mask.type) + " mask on " +
                    elemTypeName(scores.type) + " scores");
  int64_t rows, cols;
  rowsOf(scores, rows, cols);
  if (rows == 0 || cols == 0)
    return;
  MaskRows m = maskRowsOf(mask);
  if (int n = warpRowColumns(cols)) {
    unsigned grid = warpRowGrid(rows);
    unsigned block = 32 * kWarpRowsPerBlock;
    MERAK_CUDA_DISPATCH_FLOAT(scores.type, "masked softmax", T, {
      withWarpColumns(n, [&](auto columns) {
        constexpr int N = decltype(columns)::value;
        if (mask.type == ElemType::Bool)
          maskedSoftmaxWarpKernel<T, bool, N><<<grid, block, 0, stream>>>(
              scores.ptr<T>(), rows, cols, mask.ptr<const bool>(), m,
              Acc<T>(scale), divide);
        else
          maskedSoftmaxWarpKernel<T, T, N><<<grid, block, 0, stream>>>(
              scores.ptr<T>(), rows, cols, mask.ptr<const T>(), m,
              Acc<T>(scale), divide);
      });
    });
    checkLaunch("masked softmax");
    return;
  }
  int block = rowBlock(cols);
  unsigned grid = rowGrid(rows);
  MERAK_CUDA_DISPATCH_FLOAT(scores.type, "masked softmax", T, {
    if (mask.type == ElemType::Bool)
      maskedSoftmaxKernel<T, bool><<<grid, block, 0, stream>>>(
          scores.ptr<T>(), rows, cols, mask.ptr<const bool>(), m, Acc<T>(scale),
          divide);
    else
      maskedSoftmaxKernel<T, T><<<grid, block, 0, stream>>>(
          scores.ptr<T>(), rows, cols, mask.ptr<const T>(), m, Acc<T>(scale),
          divide);
  });
  checkLaunch("masked softmax");
}

void softmaxBackwardScaled(const View &grad, const View &probs, const View &out,
                           float scale, bool divide, cudaStream_t stream) {
  bool wideGrad = grad.type == ElemType::F32 && probs.type != ElemType::F64;
  if (!grad.isContiguous() || !probs.isContiguous() || !out.isContiguous() ||
      grad.numel() != probs.numel() || out.numel() != probs.numel() ||
      out.type != probs.type || (grad.type != probs.type && !wideGrad))
    throw CudaError("softmax backward: grad, probs and the result must be "
                    "dense, of one shape, the result of probs' type and grad "
                    "of it or f32");
  int64_t rows, cols;
  rowsOf(grad, rows, cols);
  if (rows == 0 || cols == 0)
    return;
  if (int n = warpRowColumns(cols)) {
    unsigned grid = warpRowGrid(rows);
    unsigned block = 32 * kWarpRowsPerBlock;
    MERAK_CUDA_DISPATCH_FLOAT(probs.type, "softmax backward", T, {
      withWarpColumns(n, [&](auto columns) {
        constexpr int N = decltype(columns)::value;
        if (grad.type == probs.type)
          softmaxBackwardWarpKernel<T, T, N><<<grid, block, 0, stream>>>(
              grad.ptr<const T>(), probs.ptr<const T>(), out.ptr<T>(), rows,
              cols, Acc<T>(scale), divide);
        else
          softmaxBackwardWarpKernel<T, float, N><<<grid, block, 0, stream>>>(
              grad.ptr<const float>(), probs.ptr<const T>(), out.ptr<T>(), rows,
              cols, Acc<T>(scale), divide);
      });
    });
    checkLaunch("softmax backward");
    return;
  }
  int block = rowBlock(cols);
  unsigned grid = rowGrid(rows);
  MERAK_CUDA_DISPATCH_FLOAT(probs.type, "softmax backward", T, {
    if (grad.type == probs.type)
      softmaxBackwardKernel<T, T><<<grid, block, 0, stream>>>(
          grad.ptr<const T>(), probs.ptr<const T>(), out.ptr<T>(), rows, cols,
          Acc<T>(scale), divide);
    else
      softmaxBackwardKernel<T, float><<<grid, block, 0, stream>>>(
          grad.ptr<const float>(), probs.ptr<const T>(), out.ptr<T>(), rows,
          cols, Acc<T>(scale), divide);
  });
  checkLaunch("softmax backward");
}

} // namespace merak::runtime::cuda
