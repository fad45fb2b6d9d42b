//===- Normalization.cpp - CUDA host kernels: softmax and normalization ---===//
//
// `softmax`, `log_softmax` and softmax's gradient; layer and RMS
// normalization and layer normalization's gradients, as the CPU backend's
// (lib/Runtime/CPU/Normalization.cpp) compute them. Batch normalization is
// in Convolution.cpp (cuDNN).
//
//===----------------------------------------------------------------------===//

#include "Normalization.h"
#include "Copy.h"
#include "CudaKernels.h"

#include "absl/strings/str_cat.h"

namespace merak::runtime::cuda {
namespace {

/// Throws unless result `r` has the element type of operand `k` (the
/// kernels write the operand's type).
void expectSameType(Ctx &c, size_t r, size_t k) {
  if (c.resultType(r).dtype != c.operandType(k).dtype)
    throw CudaError(absl::StrCat("result #", r, " is ", c.resultType(r).str(),
                                 ", the kernel writes ",
                                 dtypeName(c.operandType(k).dtype)));
}

/// Operand `k`'s shape split around the attribute `dim`.
DimSplit softmaxSplit(Ctx &c, size_t k) {
  View v = c.view(k);
  int dim = softmaxDim(c.a.dim, v.rank);
  if (dim < 0)
    throw CudaError(
        absl::StrCat("dim ", c.a.dim, " is out of range for rank ", v.rank));
  return splitAt(v.sizes, v.rank, v.rank == 0 ? 0 : dim);
}

/// Operand `k` as `[rows, cols]` over its trailing `normalizedRank` dims.
RowSplit normalizedSplit(Ctx &c, size_t k) {
  View v = c.view(k);
  int64_t trailing = c.a.normalizedRank;
  if (trailing < 1 || trailing > v.rank)
    throw CudaError(absl::StrCat("normalized_rank ", trailing,
                                 " is not in [1, ", v.rank, "]"));
  return splitTrailing(v.sizes, v.rank, int(trailing));
}

/// Optional operand `k` (weight, bias: `cols` elements of the input's
/// type, operand `input`) dense, or null when absent.
const void *optionalData(Ctx &c, size_t k, size_t input, int64_t cols) {
  if (!c.has(k))
    return nullptr;
  const TensorType &t = c.in(k).type;
  if (t.dtype != c.operandType(input).dtype || t.numElements() != cols)
    throw CudaError(absl::StrCat("operand #", k, " is ", t.str(), ", expected ",
                                 cols, " elements of ",
                                 dtypeName(c.operandType(input).dtype)));
  return c.contiguous(k).data;
}

/// The accumulation type's dtype for `dtype` (float, double for f64).
DType accDType(DType dtype) {
  return dtype == DType::F64 ? DType::F64 : DType::F32;
}

void softmaxKernel(Ctx &c, bool log) {
  expectSameType(c, 0, 0);
  DimSplit split = softmaxSplit(c, 0);
  View in = c.contiguous(0);
  CudaTensor &out = c.result(0);
  softmaxForward(in.data, out.data(), in.type, split, log, c.stream());
}

void layerNormBackwardKernel(Ctx &c) {
  expectFoldable(c.operandType(0), c.operandType(1).dtype, "the gradient");
  expectSameType(c, 0, 1);
  RowSplit s = normalizedSplit(c, 1);
  View dy = c.contiguous(0), x = c.contiguous(1);
  const void *weight = optionalData(c, 2, 1, s.cols);
  DType acc = accDType(c.operandType(1).dtype);
  CudaTensor &mean = c.scratch({acc, {s.rows}});
  CudaTensor &rstd = c.scratch({acc, {s.rows}});
  CudaTensor &dx = c.result(0);
  layerNormBackwardInput(dy.data, x.data, weight, dx.data(), mean.data(),
                         rstd.data(), x.type, dy.type, s.rows, s.cols, c.a.eps,
                         c.stream());
  // As the CPU backend: the weight's gradient only with a weight, the
  // bias's only with a bias, zeros otherwise.
  void *grads[2] = {nullptr, nullptr};
  for (size_t r = 1; r <= 2; ++r) {
    CudaTensor &g = c.result(r);
    if (g.type.numElements() == 0)
      continue;
    if (!c.has(r + 1)) {
      fill(g.view(), 0, c.stream());
      continue;
    }
    expectSameType(c, r, 1);
    if (g.type.numElements() != s.cols)
      throw CudaError(absl::StrCat("result #", r, " is ", g.type.str(),
                                   ", the normalized shape has ", s.cols,
                                   " elements"));
    if (c.needed(r))
      grads[r - 1] = g.data();
  }
  if (!grads[0] && !grads[1])
    return;
  ColumnChunks chunks = columnChunks(s.rows);
  CudaTensor &partials = c.scratch({acc, {2 * chunks.chunks * s.cols}});
  layerNormBackwardParams(dy.data, x.data, mean.data(), rstd.data(), grads[0],
                          grads[1], partials.data(), x.type, dy.type, s.rows,
                          s.cols, c.stream());
}

} // namespace

void registerNormalizationKernels(KernelTable &table) {
  table.add(OpKind::Softmax, [](Ctx &c) { softmaxKernel(c, false); });
  table.add(OpKind::LogSoftmax, [](Ctx &c) { softmaxKernel(c, true); });
  table.add(OpKind::SoftmaxBackward, [](Ctx &c) {
    expectSameType(c, 0, 0);
    if (c.operandType(1).shape != c.operandType(0).shape ||
        c.operandType(1).dtype != c.operandType(0).dtype)
      throw CudaError(absl::StrCat("grad ", c.operandType(0).str(),
                                   " and output ", c.operandType(1).str(),
                                   " differ"));
    DimSplit split = softmaxSplit(c, 1);
    View grad = c.contiguous(0), output = c.contiguous(1);
    CudaTensor &result = c.result(0);
    softmaxBackward(grad.data, output.data, result.data(), grad.type, split,
                    c.stream());
  });
  table.add(OpKind::LayerNorm, [](Ctx &c) {
    expectFoldable(c.resultType(0), c.operandType(0).dtype, "the result");
    RowSplit s = normalizedSplit(c, 0);
    View x = c.contiguous(0);
    const void *weight = optionalData(c, 1, 0, s.cols),
               *bias = optionalData(c, 2, 0, s.cols);
    CudaTensor &y = c.result(0);
    layerNormForward(x.data, weight, bias, y.data(), x.type,
                     elemTypeOf(y.type.dtype), s.rows, s.cols, c.a.eps,
                     c.stream());
  });
  table.add(OpKind::LayerNormBackward, layerNormBackwardKernel);
  table.add(OpKind::RmsNorm, [](Ctx &c) {
    expectFoldable(c.resultType(0), c.operandType(0).dtype, "the result");
    RowSplit s = normalizedSplit(c, 0);
    View x = c.contiguous(0);
    const void *weight = optionalData(c, 1, 0, s.cols);
    CudaTensor &y = c.result(0);
    rmsNormForward(x.data, weight, y.data(), x.type, elemTypeOf(y.type.dtype),
                   s.rows, s.cols, c.a.eps, c.stream());
  });
}

} // namespace merak::runtime::cuda
