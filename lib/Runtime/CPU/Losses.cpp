//===- Losses.cpp - CPU kernels: cross-entropy ----------------------------===//
//
// `cross_entropy` and its gradient by blocks of rows: the logits read once,
// the log-probabilities kept only in each thread's scratch.
//
//===----------------------------------------------------------------------===//

#include "CpuKernels.h"

#include "absl/strings/str_cat.h"

#include <ATen/ScalarOps.h>

#include <stdexcept>

namespace merak::runtime::cpu {
namespace {

/// `grad * s` as autograd's MulBackward1 computes it for `tensor * number`:
/// the number becomes a double 0-dim tensor, so a rank-0 gradient is scaled
/// in double precision, then rounded back to its own type.
at::Tensor scaleLikeAutograd(const at::Tensor &grad, double s) {
  return at::mul(grad, at::scalar_to_tensor(s)).to(grad.scalar_type());
}

/// Rows of logits one thread takes at a time: about 128 KiB, so that the
/// block and its scratch stay in cache between the passes over it.
int64_t crossEntropyBlockRows(const at::Tensor &logits) {
  int64_t rowBytes =
      std::max<int64_t>(logits.size(1), 1) * int64_t(logits.element_size());
  return std::max<int64_t>(1, (int64_t(128) << 10) / rowBytes);
}

/// Calls `fn(begin, end, scratch)` for blocks of at most `block` rows over
/// the threads; `scratch` holds `count` blocks of `[block, columns]` of the
/// thread's own.
template <typename Fn>
void forRowBlocks(const at::Tensor &like, int64_t block, int64_t count, Fn fn) {
  int64_t rows = like.size(0), columns = like.size(1);
  forBlocks(rows, 2 * block, 1, [&](int64_t begin, int64_t end) {
    std::vector<at::Tensor> scratch;
    for (int64_t i = 0; i < count; ++i)
      scratch.push_back(at::empty({block, columns}, like.options()));
    for (int64_t r = begin; r < end; r += block) {
      int64_t k = std::min(end, r + block) - r;
      std::vector<at::Tensor> views;
      for (const at::Tensor &t : scratch)
        views.push_back(t.narrow(0, 0, k));
      fn(r, k, views);
    }
  });
}

/// What the cross-entropy and its gradient need of the targets: which rows
/// are ignored (`ignore_index`) and the class to read in each (0 where
/// ignored). Throws, as `nll_loss` does, for a target outside the classes.
struct CrossEntropyTargets {
  at::Tensor ignored, classes;
};
CrossEntropyTargets crossEntropyTargets(const at::Tensor &target,
                                        int64_t numClasses,
                                        int64_t ignoreIndex) {
  at::Tensor ignored = target.eq(ignoreIndex);
  at::Tensor classes = target.masked_fill(ignored, 0);
  at::Tensor outside = classes.lt(0).logical_or(classes.ge(numClasses));
  if (outside.any().item<bool>())
    throw std::invalid_argument(absl::StrCat(
        "Target ", target.masked_select(outside)[0].item<int64_t>(),
        " is out of bounds."));
  return {ignored, classes};
}

/// `at::cross_entropy_loss` of logits `[N, C]` (no class weights), the
/// logits read once: each thread takes blocks of rows through `log_softmax`
/// into a scratch block in cache, and keeps of it only the target's
/// log-probability (and, with label smoothing, the row's sum). `nll_loss`
/// over that one column then reduces exactly as over the whole matrix, so
/// the loss is PyTorch's bit for bit without the `[N, C]` log-probabilities
/// ever being written out.
at::Tensor crossEntropy(const at::Tensor &logits, const at::Tensor &target,
                        const OpAttrs &a) {
  int64_t n = logits.size(0), numClasses = logits.size(1);
  CrossEntropyTargets t =
      crossEntropyTargets(target, numClasses, a.ignoreIndex);
  double ls = a.labelSmoothing;
  at::Tensor picked = at::empty({n}, logits.options());
  at::Tensor rowSums = ls > 0 ? at::empty({n}, logits.options()) : at::Tensor();
  forRowBlocks(logits, crossEntropyBlockRows(logits), 1,
               [&](int64_t r, int64_t k, std::vector<at::Tensor> &scratch) {
                 at::Tensor &logp = scratch[0];
                 at::_log_softmax_out(logp, logits.narrow(0, r, k), 1, false);
                 at::Tensor picks = picked.narrow(0, r, k).unsqueeze(1);
                 at::gather_out(picks, logp, 1,
                                t.classes.narrow(0, r, k).unsqueeze(1));
                 if (ls > 0) {
                   at::Tensor sums = rowSums.narrow(0, r, k);
                   at::sum_out(sums, logp, {1});
                 }
               });
  int64_t reduction = a.reduction == LossReduction::Mean  ? at::Reduction::Mean
                      : a.reduction == LossReduction::Sum ? at::Reduction::Sum
                                                          : at::Reduction::None;
  // nll_loss over the picked column: every row's target is that column, or
  // `ignore_index` where ignored (with `ignore_index` 0 the column is the
  // second of two, so the two stay apart).
  int64_t column = a.ignoreIndex == 0 ? 1 : 0;
  at::Tensor columns = column == 0
                           ? picked.unsqueeze(1)
                           : at::stack({at::zeros_like(picked), picked}, 1);
  at::Tensor nll = at::nll_loss(
      columns,
      at::full_like(target, column).masked_fill_(t.ignored, a.ignoreIndex), {},
      reduction, a.ignoreIndex);
  if (ls == 0)
    return nll;
  // PyTorch's label smoothing: -sum(logp) per row, 0 where ignored, reduced
  // (the mean of the rows that count), mixed with the nll term.
  at::Tensor smooth = rowSums.neg().masked_fill_(t.ignored, 0);
  at::Tensor ret;
  switch (a.reduction) {
  case LossReduction::Mean:
    ret = smooth.masked_select(t.ignored.logical_not()).mean();
    break;
  case LossReduction::Sum:
    ret = smooth.sum();
    break;
  case LossReduction::None:
    ret = smooth;
    break;
  }
  return (1 - ls) * nll + ret * (ls / double(numClasses));
}

/// The gradient of `crossEntropy` with respect to the logits, computed as
/// autograd computes it (the gradient of `nll_loss` and of the smoothing
/// term into `_log_softmax_backward_data`), block by block: the logits are
/// read once, the result written once, and `log_softmax` and the gradient
/// of the log-probabilities live only in each thread's scratch blocks.
at::Tensor crossEntropyBackward(const at::Tensor &grad,
                                const at::Tensor &logits,
                                const at::Tensor &target, const OpAttrs &a) {
  int64_t n = logits.size(0), numClasses = logits.size(1);
  // Row-major whatever the logits' strides: LibTorch 1.13's
  // `_log_softmax_backward_data_out` writes a strided `out` (the gradient of
  // a transposed view, as `empty_like` would make it) wrongly.
  at::Tensor result = at::empty({n, numClasses}, logits.options());
  CrossEntropyTargets t =
      crossEntropyTargets(target, numClasses, a.ignoreIndex);
  double ls = a.labelSmoothing;
  bool mean = a.reduction == LossReduction::Mean;
  at::Tensor counted = t.ignored.logical_not();
  // nll_loss_backward puts -(g / total weight) (mean) or -g at the target.
  at::Tensor gradNll = ls > 0 ? scaleLikeAutograd(grad, 1 - ls) : grad;
  at::Tensor atTarget =
      mean ? (gradNll / counted.sum().to(gradNll.scalar_type())).neg()
           : gradNll.neg();
  atTarget = atTarget.expand({n}).masked_fill(t.ignored, 0);
  // Label smoothing adds -(g ls / C) (over the count under mean) everywhere
  // in a counted row.
  at::Tensor everywhere;
  if (ls > 0) {
    at::Tensor gradRet = scaleLikeAutograd(grad, ls / double(numClasses));
    at::Tensor gradSmooth = mean ? gradRet.div(counted.sum()) : gradRet;
    everywhere =
        gradSmooth.expand({n}).masked_fill(t.ignored, 0).neg().contiguous();
  }
  forRowBlocks(
      logits, crossEntropyBlockRows(logits), 2,
      [&](int64_t r, int64_t k, std::vector<at::Tensor> &scratch) {
        at::Tensor &logp = scratch[0], &gradLogp = scratch[1];
        at::_log_softmax_out(logp, logits.narrow(0, r, k), 1, false);
        if (ls > 0)
          gradLogp.copy_(
              everywhere.narrow(0, r, k).unsqueeze(1).expand({k, numClasses}));
        else
          gradLogp.zero_();
        gradLogp.scatter_add_(1, t.classes.narrow(0, r, k).unsqueeze(1),
                              atTarget.narrow(0, r, k).unsqueeze(1));
        at::Tensor out = result.narrow(0, r, k);
        at::_log_softmax_backward_data_out(out, gradLogp, logp, 1,
                                           logits.scalar_type());
      });
  return result;
}

} // namespace

void registerLossKernels(KernelTable &table) {
  table.add(OpKind::CrossEntropy, [](Ctx &c) {
    // The dialect allows i32 targets; the kernels index with int64.
    c.set(0, crossEntropy(c.in(0), c.in(1).to(at::kLong), c.a));
  });
  table.add(OpKind::CrossEntropyBackward, [](Ctx &c) {
    c.set(0,
          crossEntropyBackward(c.in(0), c.in(1), c.in(2).to(at::kLong), c.a));
  });
}

} // namespace merak::runtime::cpu
