//===- Losses.h - cross-entropy kernels ------------------------*- C++ -*-===//
//
// Launchers of Losses.cu (the cross-entropy of logits `[N, C]` and class
// targets, and its gradient with respect to the logits) and the scalar
// arithmetic both sides share: how a row's terms combine into the loss and
// what the gradient puts at a row's target and everywhere else, as the CPU
// backend (lib/Runtime/CPU/Losses.cpp, PyTorch's formulas) computes them.
//
//===----------------------------------------------------------------------===//
#ifndef MERAK_LIB_RUNTIME_CUDA_LOSSES_H
#define MERAK_LIB_RUNTIME_CUDA_LOSSES_H

#include "CudaCommon.h"

namespace merak::runtime::cuda {

/// `LossReduction` (Program.h), which this header cannot include.
enum class Reduction : uint8_t { None, Mean, Sum };

/// The loss from the summed terms of the rows that count (`nll`: minus
/// the target's log-probability; `smooth`: minus the sum of the row's
/// log-probabilities), `count` of them; for `None`, one row's terms and
/// `count` 1. PyTorch's label smoothing: `(1 - ls) nll + (ls / C) smooth`,
/// both means over the rows that count (NaN when none does, as ATen).
template <typename A>
MERAK_HD A crossEntropyLoss(A nll, A smooth, A count, double labelSmoothing,
                            int64_t classes, Reduction reduction) {
  if (reduction == Reduction::Mean) {
    nll /= count;
    smooth /= count;
  }
  if (labelSmoothing == 0)
    return nll;
  return A(1 - labelSmoothing) * nll +
         smooth * A(labelSmoothing / double(classes));
}

/// What the gradient of the log-probabilities of one row is: `atTarget`
/// added at the target's class, `everywhere` at every class (0 and 0 in an
/// ignored row).
template <typename A> struct CrossEntropyGrad { A atTarget, everywhere; };
/// `g * s` as autograd's MulBackward computes a tensor times a number: a
/// rank-0 gradient (`reduced`) in double, rounded back; a row's in `A`.
template <typename A> MERAK_HD A scaleGrad(A g, double s, bool reduced) {
  return reduced ? A(double(g) * s) : g * A(s);
}

/// The gradient terms of a row that counts, for the incoming gradient `g`
/// (the loss's, or the row's for `None`) and `count` rows that count, as
/// autograd computes them: the rank-0 gradient of a reduced loss is scaled
/// in double and rounded back (MulBackward of a tensor by a number), a
/// row's gradient in its own type.
template <typename A>
MERAK_HD CrossEntropyGrad<A>
crossEntropyGrad(A g, A count, double labelSmoothing, int64_t classes,
                 Reduction reduction) {
  bool reduced = reduction != Reduction::None;
  A gradNll =
      labelSmoothing > 0 ? scaleGrad(g, 1 - labelSmoothing, reduced) : g;
  CrossEntropyGrad<A> r;
  r.atTarget = reduction == Reduction::Mean ? -(gradNll / count) : -gradNll;
  r.everywhere = A(0);
  if (labelSmoothing > 0) {
    A gradSmooth = scaleGrad(g, labelSmoothing / double(classes), reduced);
    r.everywhere =
        -(reduction == Reduction::Mean ? gradSmooth / count : gradSmooth);
  }
  return r;
}

/// The loss of `logits` (dense `[rows, classes]` of `logitsType`) and
/// `target` (dense `[rows]` of `targetType`, i32 or i64) into `out`
/// (`outType`, the type the loss computes in; `[rows]` for `None`, one
/// element otherwise). The logits are of `outType`, or bf16 or f16 under an
/// f32 loss (a cast folded into the op: Fusion.h). `scratch` holds
/// `2 * rows` elements of the accumulation type (float, double for f64).
/// A target outside `[0, classes)` other than `ignoreIndex` gives NaN (the
/// CPU backend throws; a kernel cannot).
void crossEntropyForward(const void *logits, const void *target, void *out,
                         void *scratch, ElemType logitsType, ElemType outType,
                         ElemType targetType, int64_t rows, int64_t classes,
                         int64_t ignoreIndex, double labelSmoothing,
                         Reduction reduction, cudaStream_t stream);

/// The gradient of the loss with respect to the logits into `result`
/// (dense `[rows, classes]` of `resultType`), for `grad` (`gradType`, the
/// type it computes in; `[rows]` for `None`, one element otherwise). The
/// logits and the result are of `gradType`, or each bf16 or f16 under an
/// f32 `grad`. `count` is scratch for one int64.
void crossEntropyBackward(const void *grad, const void *logits,
                          const void *target, void *result, void *count,
                          ElemType gradType, ElemType logitsType,
                          ElemType resultType, ElemType targetType,
                          int64_t rows, int64_t classes, int64_t ignoreIndex,
                          double labelSmoothing, Reduction reduction,
                          cudaStream_t stream);

} // namespace merak::runtime::cuda

#endif // MERAK_LIB_RUNTIME_CUDA_LOSSES_H
