//===- Losses.cu - cross-entropy kernels ----------------------------------===//
//
// One warp or block per row of logits (Normalization.h's `RowPlan`): the
// row's max and log-sum-exp, the target's logit and (with label smoothing)
// the sum of the log-probabilities, without the log-probabilities ever
// written out. A reduced loss sums the rows' terms in one block, in a fixed
// order; the gradient counts the rows that count the same way.
//
//===----------------------------------------------------------------------===//

#include "Losses.h"
#include "Normalization.h"

#include <cmath>

namespace merak::runtime::cuda {
namespace {

constexpr int kFinishThreads = 1024;

/// Row `row`'s target class, or -1 when it is ignored.
template <typename I>
MERAK_DEVICE int64_t targetClass(const I *target, int64_t row,
                                 int64_t ignoreIndex) {
  int64_t t = int64_t(target[row]);
  return t == ignoreIndex ? -1 : t;
}

/// Per row: the max of the logits and their log-sum-exp relative to it
/// (one read, the online softmax); with `wantSum`, also the sum of the
/// log-probabilities.
template <typename T, typename A>
MERAK_DEVICE void rowLogSumExp(const T *x, int64_t n, bool active, bool wantSum,
                               MaxSum<A> *shared, A *sharedSum, A &max, A &lse,
                               A &logSum) {
  MaxSum<A> ms{A(-INFINITY), A(0)};
  A sum = 0;
  if (active)
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
      A v = toAcc(x[j]);
      ms = maxSumAdd(ms, v);
      sum += v;
    }
  ms = rowReduce(ms, MaxSumOp<A>(), shared);
  if (wantSum)
    sum = rowReduce(sum, SumOp<A>(), sharedSum);
  max = ms.max;
  lse = mathLog(ms.sum);
  // sum(x - max - lse): the terms subtracted are no larger than the result.
  logSum = sum - A(n) * (max + lse);
}

/// Each row's loss (`None`: into `out`, of O, the type the loss computes
/// in) or its two terms (into `terms[row]` and `terms[rows + row]`, for
/// the reduction); the logits of T (O's, or bf16 or f16 under an f32 loss).
template <typename T, typename O, typename I>
__global__ void
crossEntropyRowsKernel(const T *logits, const I *target, O *out, Acc<O> *terms,
                       int64_t rows, int64_t classes, int64_t ignoreIndex,
                       double labelSmoothing, Reduction reduction) {
  using A = Acc<O>;
  __shared__ MaxSum<A> shared[kMaxRowsPerBlock * 32];
  __shared__ A sharedSum[kMaxRowsPerBlock * 32];
  forRows(rows, [&](int64_t row, bool active) {
    const T *x = logits + (active ? row * classes : 0);
    A m, lse, logSum;
    rowLogSumExp(x, classes, active, labelSmoothing > 0, shared, sharedSum, m,
                 lse, logSum);
    if (!active || threadIdx.x != 0)
      return;
    int64_t t = targetClass(target, row, ignoreIndex);
    A nll = 0, smooth = 0;
    if (t >= classes || t < -1) {
      nll = smooth = A(NAN);
    } else if (t >= 0) {
      nll = -(toAcc(x[t]) - m - lse);
      smooth = -logSum;
    }
    if (reduction == Reduction::None) {
      out[row] = convertTo<O>(crossEntropyLoss(
          nll, smooth, A(1), labelSmoothing, classes, Reduction::None));
    } else {
      terms[row] = nll;
      terms[rows + row] = smooth;
    }
  });
}

/// One block: the rows' terms summed in a fixed order, the rows that count
/// counted, the loss into `out[0]`.
template <typename T, typename I>
__global__ void
crossEntropyReduceKernel(const Acc<T> *terms, const I *target, T *out,
                         int64_t rows, int64_t classes, int64_t ignoreIndex,
                         double labelSmoothing, Reduction reduction) {
  using A = Acc<T>;
  __shared__ A shared[32];
  __shared__ long long sharedCount[32];
  A nll = 0, smooth = 0;
  long long count = 0;
  for (int64_t r = threadIdx.x; r < rows; r += blockDim.x) {
    nll += terms[r];
    smooth += terms[rows + r];
    count += int64_t(target[r]) != ignoreIndex;
  }
  nll = rowReduce(nll, SumOp<A>(), shared);
  smooth = rowReduce(smooth, SumOp<A>(), shared);
  count = rowReduce(count, SumOp<long long>(), sharedCount);
  if (threadIdx.x == 0)
    out[0] = convertTo<T>(crossEntropyLoss(nll, smooth, A(count),
                                           labelSmoothing, classes, reduction));
}

/// One block: the number of targets that are not `ignoreIndex`.
template <typename I>
__global__ void countTargetsKernel(const I *target, long long *count,
                                   int64_t rows, int64_t ignoreIndex) {
  __shared__ long long shared[32];
  long long n = 0;
  for (int64_t r = threadIdx.x; r < rows; r += blockDim.x)
    n += int64_t(target[r]) != ignoreIndex;
  n = rowReduce(n, SumOp<long long>(), shared);
  if (threadIdx.x == 0)
    *count = n;
}

/// `_log_softmax_backward_data` of the log-probabilities' gradient
/// (`everywhere`, plus `atTarget` at the target): that gradient minus
/// softmax times its row sum. It computes in G's accumulation type (the
/// incoming gradient's); the logits L and the result R are G, or bf16 or
/// f16 when G is float (casts folded into the op), each rounded once.
template <typename G, typename L, typename R, typename I>
__global__ void
crossEntropyBackwardKernel(const G *grad, int64_t gradStride, const L *logits,
                           const I *target, R *result, const long long *count,
                           int64_t rows, int64_t classes, int64_t ignoreIndex,
                           double labelSmoothing, Reduction reduction) {
  using A = Acc<G>;
  __shared__ MaxSum<A> shared[kMaxRowsPerBlock * 32];
  forRows(rows, [&](int64_t row, bool active) {
    int64_t start = active ? row * classes : 0;
    const L *x = logits + start;
    A m, lse, logSum;
    rowLogSumExp(x, classes, active, false, shared, static_cast<A *>(nullptr),
                 m, lse, logSum);
    if (!active)
      return;
    int64_t t = targetClass(target, row, ignoreIndex);
    CrossEntropyGrad<A> g{A(0), A(0)};
    if (t >= classes || t < -1)
      g.atTarget = g.everywhere = A(NAN);
    else if (t >= 0)
      g = crossEntropyGrad(toAcc(grad[row * gradStride]),
                           count ? A(*count) : A(1), labelSmoothing, classes,
                           reduction);
    A total = A(classes) * g.everywhere + g.atTarget;
    R *out = result + start;
    for (int64_t j = threadIdx.x; j < classes; j += blockDim.x) {
      A d = j == t ? g.everywhere + g.atTarget : g.everywhere;
      out[j] = convertTo<R>(d - A(mathExp(A(toAcc(x[j])) - m - lse)) * total);
    }
  });
}

} // namespace

#define MERAK_CUDA_DISPATCH_TARGET(type, I, ...)                               \
  switch (type) {                                                              \
  case ElemType::I32: {                                                        \
    using I = int32_t;                                                         \
    __VA_ARGS__;                                                               \
    break;                                                                     \
  }                                                                            \
  case ElemType::I64: {                                                        \
    using I = int64_t;                                                         \
    __VA_ARGS__;                                                               \
    break;                                                                     \
  }                                                                            \
  default:                                                                     \
    throw CudaError(std::string("cross_entropy: targets of ") +                \
                    elemTypeName(type) + " (i32 or i64 expected)");            \
  }

void crossEntropyForward(const void *logits, const void *target, void *out,
                         void *scratch, ElemType logitsType, ElemType outType,
                         ElemType targetType, int64_t rows, int64_t classes,
                         int64_t ignoreIndex, double labelSmoothing,
                         Reduction reduction, cudaStream_t stream) {
  RowPlan p = rowPlan(rows, classes);
  dim3 block(unsigned(p.threads), unsigned(p.rowsPerBlock));
  MERAK_CUDA_DISPATCH_FLOAT(outType, "cross_entropy", O, {
    dispatchFoldedType<O>(logitsType, "cross_entropy", [&](auto logitsTag) {
      using T = typename decltype(logitsTag)::type;
      MERAK_CUDA_DISPATCH_TARGET(targetType, I, {
        const T *x = static_cast<const T *>(logits);
        const I *t = static_cast<const I *>(target);
        O *y = static_cast<O *>(out);
        Acc<O> *terms = static_cast<Acc<O> *>(scratch);
        if (rows > 0) {
          crossEntropyRowsKernel<T, O, I><<<p.grid, block, 0, stream>>>(
              x, t, y, terms, rows, classes, ignoreIndex, labelSmoothing,
              reduction);
          checkLaunch("cross_entropy");
        }
        if (reduction != Reduction::None) {
          crossEntropyReduceKernel<O, I><<<1, kFinishThreads, 0, stream>>>(
              terms, t, y, rows, classes, ignoreIndex, labelSmoothing,
              reduction);
          checkLaunch("cross_entropy (the reduction)");
        }
      });
    });
  });
}

void crossEntropyBackward(const void *grad, const void *logits,
                          const void *target, void *result, void *count,
                          ElemType gradType, ElemType logitsType,
                          ElemType resultType, ElemType targetType,
                          int64_t rows, int64_t classes, int64_t ignoreIndex,
                          double labelSmoothing, Reduction reduction,
                          cudaStream_t stream) {
  if (rows == 0 || classes == 0)
    return;
  RowPlan p = rowPlan(rows, classes);
  dim3 block(unsigned(p.threads), unsigned(p.rowsPerBlock));
  const char *what = "cross_entropy_backward";
  MERAK_CUDA_DISPATCH_FLOAT(gradType, what, G, {
    dispatchFoldedType<G>(logitsType, what, [&](auto logitsTag) {
      using L = typename decltype(logitsTag)::type;
      dispatchFoldedType<G>(resultType, what, [&](auto resultTag) {
        using R = typename decltype(resultTag)::type;
        MERAK_CUDA_DISPATCH_TARGET(targetType, I, {
          const I *t = static_cast<const I *>(target);
          long long *n = nullptr;
          if (reduction == Reduction::Mean) {
            n = static_cast<long long *>(count);
            countTargetsKernel<I>
                <<<1, kFinishThreads, 0, stream>>>(t, n, rows, ignoreIndex);
            checkLaunch("cross_entropy_backward (counting the targets)");
          }
          crossEntropyBackwardKernel<G, L, R, I><<<p.grid, block, 0, stream>>>(
              static_cast<const G *>(grad),
              reduction == Reduction::None ? int64_t(1) : int64_t(0),
              static_cast<const L *>(logits), t, static_cast<R *>(result), n,
              rows, classes, ignoreIndex, labelSmoothing, reduction);
          checkLaunch("cross_entropy_backward");
        });
      });
    });
  });
}

} // namespace merak::runtime::cuda
