//===- Losses.cpp - CUDA host kernels: cross-entropy ----------------------===//
//
// `cross_entropy` and its gradient, as the CPU backend's
// (lib/Runtime/CPU/Losses.cpp) compute them: logits `[N, C]`, i32 or i64
// targets, `ignore_index`, label smoothing and the three reductions.
//
//===----------------------------------------------------------------------===//

#include "Losses.h"
#include "CudaKernels.h"

#include "absl/strings/str_cat.h"

namespace merak::runtime::cuda {
namespace {

Reduction reductionOf(LossReduction r) {
  switch (r) {
  case LossReduction::None:
    return Reduction::None;
  case LossReduction::Mean:
    return Reduction::Mean;
  case LossReduction::Sum:
    return Reduction::Sum;
  }
  return Reduction::Mean;
}

/// The logits' `[N, C]` (operand `logits`, targets the next operand);
/// throws for other shapes, as the dialect's verifier would.
std::pair<int64_t, int64_t> logitShape(Ctx &c, size_t logits) {
  const auto &x = c.operandType(logits).shape;
  const auto &t = c.operandType(logits + 1).shape;
  if (x.size() != 2 || t.size() != 1 || t[0] != x[0])
    throw CudaError(absl::StrCat(
        "logits ", c.operandType(logits).str(), " and target ",
        c.operandType(logits + 1).str(), " are not [N, C] and [N]"));
  return {x[0], x[1]};
}

DType accDType(DType dtype) {
  return dtype == DType::F64 ? DType::F64 : DType::F32;
}

} // namespace

void registerLossKernels(KernelTable &table) {
  table.add(OpKind::CrossEntropy, [](Ctx &c) {
    auto [rows, classes] = logitShape(c, 0);
    DType dtype = c.resultType(0).dtype;
    Reduction reduction = reductionOf(c.a.reduction);
    expectFoldable(c.operandType(0), dtype, "the logits");
    View logits = c.contiguous(0), target = c.contiguous(1);
    CudaTensor &terms =
        c.scratch({accDType(dtype),
                   {reduction == Reduction::None ? int64_t(0) : 2 * rows}});
    CudaTensor &out = c.result(0);
    crossEntropyForward(logits.data, target.data, out.data(), terms.data(),
                        logits.type, elemTypeOf(dtype), target.type, rows,
                        classes, c.a.ignoreIndex, c.a.labelSmoothing, reduction,
                        c.stream());
  });
  table.add(OpKind::CrossEntropyBackward, [](Ctx &c) {
    auto [rows, classes] = logitShape(c, 1);
    const TensorType &gradType = c.operandType(0);
    DType dtype = gradType.dtype;
    Reduction reduction = reductionOf(c.a.reduction);
    int64_t gradElements = reduction == Reduction::None ? rows : int64_t(1);
    if (gradType.numElements() != gradElements)
      throw CudaError(absl::StrCat("grad ", gradType.str(),
                                   " does not match the loss of logits ",
                                   c.operandType(1).str()));
    expectFoldable(c.operandType(1), dtype, "the logits");
    expectFoldable(c.resultType(0), dtype, "the result");
    if (c.resultType(0).shape != c.operandType(1).shape)
      throw CudaError(absl::StrCat("result ", c.resultType(0).str(),
                                   " differs from the logits ",
                                   c.operandType(1).str()));
    View grad = c.contiguous(0), logits = c.contiguous(1),
         target = c.contiguous(2);
    CudaTensor &count = c.scratch({DType::I64, {1}});
    CudaTensor &result = c.result(0);
    crossEntropyBackward(grad.data, logits.data, target.data, result.data(),
                         count.data(), grad.type, logits.type,
                         elemTypeOf(c.resultType(0).dtype), target.type, rows,
                         classes, c.a.ignoreIndex, c.a.labelSmoothing,
                         reduction, c.stream());
  });
}

} // namespace merak::runtime::cuda
