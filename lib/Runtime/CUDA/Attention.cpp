//===- Attention.cpp - CUDA host kernels: masked attention ----------------===//
//
// masked_attention and its backward as the unfused ops compute them: the
// products as batched cuBLASLt GEMMs over the leading dimensions (Gemm.h),
// the softmax and its backward as kernels of their own (Attention.cu).
// The scores live in the probabilities result; the backward's score
// gradients in scratch memory. A causal mask runs as any other mask.
//
//===----------------------------------------------------------------------===//

#include "Attention.h"
#include "CudaKernels.h"
#include "Gemm.h"

#include "absl/strings/str_cat.h"

namespace merak::runtime::cuda {
namespace {

/// The scale as the CPU kernel applies it: a float scalar.
float attentionScale(const Ctx &c) { return float(c.a.scale); }

/// query, key, value, mask -> result, probs.
void maskedAttention(Ctx &c) {
  ++c.dev.attentionCalls;
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
