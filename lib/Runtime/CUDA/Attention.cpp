//===- Attention.cpp - CUDA host kernels: masked attention ----------------===//
//
// masked_attention and its backward as the unfused ops compute them: the
// products as batched cuBLASLt GEMMs over the leading dimensions (Gemm.h),
// the softmax and its backward as kernels of their own (Attention.cu).
// The scores live in the probabilities result; the backward's score
// gradients in scratch memory. A causal mask runs as any other mask. The
// FlashAttention form (the rows' log-sum-exp kept, not the probabilities)
// runs as the tiled kernels of FlashAttention.h.
//
//===----------------------------------------------------------------------===//

#include "Attention.h"
#include "CudaKernels.h"
#include "FlashAttention.h"
#include "Gemm.h"

#include "absl/strings/str_cat.h"

namespace merak::runtime::cuda {
namespace {

/// The scale as the CPU kernel applies it: a float scalar.
float attentionScale(const Ctx &c) { return float(c.a.scale); }

/// The mask operand `k` broadcast to the scores `[..., t, t]` of `query`.
View scoresMask(Ctx &c, size_t k, const View &query) {
  View scores = query;
  scores.sizes[scores.rank - 1] = query.sizes[query.rank - 2];
  View mask;
  if (!broadcastView(c.view(k), scores.sizes, scores.rank, mask))
    throw CudaError(absl::StrCat("masked_attention: a mask of ",
                                 c.in(k).type.str(),
                                 " does not broadcast to the scores"));
  return mask;
}

/// The FlashAttention form: query, key, value, mask -> result, log-sum-exp.
void flashAttention(Ctx &c) {
  View q = c.contiguous(0), k = c.contiguous(1), v = c.contiguous(2);
  flashAttentionForward(q, k, v, scoresMask(c, 3, q), c.result(0).view(),
                        c.result(1).view(), attentionScale(c), c.a.scaleDivides,
                        c.dev.flashRegisterTiles, c.stream());
}

/// grad, query, key, value, mask, log-sum-exp, output -> grad_query,
/// grad_key, grad_value.
void flashAttentionGrad(Ctx &c) {
  View g = c.contiguous(0), q = c.contiguous(1), k = c.contiguous(2),
       v = c.contiguous(3), lse = c.contiguous(5), out = c.contiguous(6);
  int64_t rows = lse.numel();
  View sums = c.scratch(TensorType{DType::F32, {rows}}).view();
  flashAttentionBackward(g, q, k, v, scoresMask(c, 4, q), out, lse,
                         c.result(0).view(), c.result(1).view(),
                         c.result(2).view(), sums.ptr<float>(),
                         attentionScale(c), c.a.scaleDivides,
                         c.dev.flashRegisterTiles, c.stream());
}

/// query, key, value, mask -> result, probs.
void maskedAttention(Ctx &c) {
  ++c.dev.attentionCalls;
  if (c.resultType(1).shape.size() < c.in(0).type.shape.size())
    return flashAttention(c);
  View q = gemmOperand(c, c.in(0)), k = gemmOperand(c, c.in(1)),
       v = gemmOperand(c, c.in(2));
  View out = c.result(0).view(), probs = c.result(1).view();
  View mask;
  if (!broadcastView(c.view(3), probs.sizes, probs.rank, mask))
    throw CudaError(absl::StrCat(
        "masked_attention: a mask of ", c.in(3).type.str(),
        " does not broadcast to scores of ", c.resultType(1).str()));
  GemmDevice dev = gemmDevice(c);
  gemm(dev, q, transposeLast(k), probs);
  maskedSoftmax(probs, mask, attentionScale(c), c.a.scaleDivides, c.stream());
  gemm(dev, probs, v, out);
}

/// grad, query, key, value, mask, probs -> grad_query, grad_key,
/// grad_value. The mask only marks what a causal kernel could skip.
void maskedAttentionBackward(Ctx &c) {
  ++c.dev.attentionCalls;
  if (c.has(6))
    return flashAttentionGrad(c);
  View g = gemmOperand(c, c.in(0)), q = gemmOperand(c, c.in(1)),
       k = gemmOperand(c, c.in(2)), v = gemmOperand(c, c.in(3));
  View probs = c.contiguous(5);
  View gq = c.result(0).view(), gk = c.result(1).view(),
       gv = c.result(2).view();
  GemmDevice dev = gemmDevice(c);
  gemm(dev, transposeLast(probs), g, gv);
  // The probabilities' gradient in f32 for f16 and bf16: the softmax
  // backward subtracts its row's weighted mean from each element.
  TensorType dpType = c.in(5).type;
  if (probs.type == ElemType::BF16 || probs.type == ElemType::F16)
    dpType.dtype = DType::F32;
  View dp = c.scratch(dpType).view();
  View ds = dpType == c.in(5).type ? dp : c.scratch(c.in(5).type).view();
  gemm(dev, g, transposeLast(v), dp);
  softmaxBackwardScaled(dp, probs, ds, attentionScale(c), c.a.scaleDivides,
                        c.stream());
  gemm(dev, ds, k, gq);
  gemm(dev, transposeLast(ds), q, gk);
}

} // namespace

void registerAttentionKernels(KernelTable &table) {
  table.add(OpKind::MaskedAttention, maskedAttention);
  table.add(OpKind::MaskedAttentionBackward, maskedAttentionBackward);
}

} // namespace merak::runtime::cuda
