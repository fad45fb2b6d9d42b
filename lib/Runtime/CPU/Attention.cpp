//===- Attention.cpp - CPU kernels: masked attention ----------------------===//
//
// `masked_attention` and its backward as the unfused ops compute them, the
// stacks of (batch, head) matrices split over ATen's threads, and a causal
// mask run by blocks of rows that skip the keys it masks.
//
//===----------------------------------------------------------------------===//

#include "CpuKernels.h"

#include <atomic>
#include <cmath>

namespace merak::runtime::cpu {
namespace {

/// Calls of masked_attention and its backward that found a causal mask.
std::atomic<int64_t> causalAttention{0};

/// Whether `mask`, broadcast against `[..., t, t]` scores, is the causal
/// mask: the same for every leading index, and for key <= query true (a
/// boolean mask) or zero (an additive one), else false or -inf.
bool isCausalMask(const at::Tensor &mask, int64_t t) {
  if (mask.numel() != t * t)
    return false;
  at::Tensor m = mask.contiguous();
  if (m.scalar_type() == at::kBool) {
    const bool *p = m.data_ptr<bool>();
    for (int64_t i = 0; i < t; ++i)
      for (int64_t j = 0; j < t; ++j)
        if (p[i * t + j] != (j <= i))
          return false;
    return true;
  }
  if (m.scalar_type() != at::kFloat)
    return false;
  const float *p = m.data_ptr<float>();
  for (int64_t i = 0; i < t; ++i)
    for (int64_t j = 0; j < t; ++j) {
      float x = p[i * t + j];
      if (j <= i ? x != 0.0f : !(std::isinf(x) && x < 0))
        return false;
    }
  return true;
}

/// The scores' scaling of masked_attention: by `scale`, or divided by it.
struct AttentionScale {
  at::Scalar scale;
  bool divide;
  void apply(at::Tensor &scores) const {
    if (divide)
      scores.div_(scale);
    else
      scores.mul_(scale);
  }
};

/// A mask (boolean, or additive float) applied to the scores.
void applyMask(at::Tensor &scores, const at::Tensor &mask) {
  if (mask.scalar_type() == at::kBool)
    scores.masked_fill_(mask.logical_not(), -INFINITY);
  else
    scores.add_(mask);
}

/// Rows per block of a causal attention: row block [i, i + rows) reads
/// keys [0, i + rows) only. Blocks of 64 rows keep the products large
/// enough for the BLAS; long sequences use at most 8 blocks... more would
/// skip little more of the square and call the BLAS more often.
int64_t attentionRows(int64_t t) {
  int64_t rows = std::max<int64_t>(64, (t + 7) / 8);
  return (rows + 7) / 8 * 8;
}

/// `[..., t, f]` as `[n, t, f]`.
at::Tensor asStack(const at::Tensor &x) {
  return x.reshape({-1, x.size(-2), x.size(-1)});
}

/// The mask broadcast against the scores, as `[n, t, t]`.
at::Tensor maskStack(const at::Tensor &mask, const at::Tensor &query) {
  std::vector<int64_t> shape(query.sizes().begin(), query.sizes().end() - 1);
  shape.push_back(query.size(-2));
  return asStack(mask.expand(shape));
}

/// Contiguous `[n, r, c]` tensors carved from one flat buffer, reused block
/// after block: a causal kernel's per-block temporaries would otherwise be
/// fresh pages each time (large allocations are mapped and unmapped).
class Scratch {
public:
  Scratch(int64_t elements, const at::TensorOptions &options)
      : buffer(at::empty({elements}, options)) {}
  at::Tensor get(int64_t n, int64_t r, int64_t c) {
    return buffer.narrow(0, 0, n * r * c).view({n, r, c});
  }

private:
  at::Tensor buffer;
};

/// masked_attention on stacks `[n, t, d]`: the scaled and masked scores,
/// their softmax into `probs` and `probs @ v` into `out`, as the unfused
/// ops compute them (matmul, mul or div, where or add, softmax, matmul).
/// With a causal mask, row block [i0, i1) reads keys [0, i1) only; the
/// probs it skips are zero, as softmax leaves them.
void attentionForward(const at::Tensor &q, const at::Tensor &k,
                      const at::Tensor &v, const at::Tensor &mask, bool causal,
                      const AttentionScale &s, at::Tensor &out,
                      at::Tensor &probs) {
  int64_t n = q.size(0), t = q.size(1);
  if (!causal) {
    at::Tensor scores = at::empty({n, t, k.size(1)}, q.options());
    bmmInto(scores, q, k.transpose(1, 2));
    s.apply(scores);
    applyMask(scores, mask);
    at::_softmax_out(probs, scores, -1, false);
    bmmInto(out, probs, v);
    return;
  }
  int64_t rows = std::min(t, attentionRows(t));
  Scratch scoresBuf(n * rows * t, q.options()),
      probsBuf(n * rows * t, q.options());
  at::Tensor above =
      at::ones({rows, rows}, mask.options().dtype(at::kBool)).triu_(1);
  for (int64_t i0 = 0; i0 < t; i0 += rows) {
    int64_t i1 = std::min(t, i0 + rows), r = i1 - i0;
    at::Tensor scores = scoresBuf.get(n, r, i1);
    bmmInto(scores, q.narrow(1, i0, r), k.narrow(1, 0, i1).transpose(1, 2));
    s.apply(scores);
    // Within the diagonal block, keys after the query are masked (adding
    // zero where they are not leaves the scores as they are).
    scores.narrow(2, i0, r).masked_fill_(above.narrow(0, 0, r).narrow(1, 0, r),
                                         -INFINITY);
    at::Tensor p = probsBuf.get(n, r, i1);
    at::_softmax_out(p, scores, -1, false);
    probs.narrow(1, i0, r).narrow(2, 0, i1).copy_(p);
    if (i1 < t)
      probs.narrow(1, i0, r).narrow(2, i1, t - i1).zero_();
    at::Tensor o = out.narrow(1, i0, r);
    bmmInto(o, p, v.narrow(1, 0, i1));
  }
}

/// masked_attention_backward on stacks: `grad_value = probs^T grad`,
/// `ds = softmax_backward(grad v^T, probs)`, scaled as the scores were,
/// `grad_query = ds k`,
/// `grad_key = ds^T q`. With a causal mask, row block [i0, i1) reads keys
/// [0, i1): its query gradient rows, and its terms of the key and value
/// gradients of keys [0, i1), summed block after block. The terms skipped
/// are products with probabilities that are zero.
void attentionBackward(const at::Tensor &g, const at::Tensor &q,
                       const at::Tensor &k, const at::Tensor &v,
                       const at::Tensor &probs, bool causal,
                       const AttentionScale &s, at::Tensor &gq, at::Tensor &gk,
                       at::Tensor &gv) {
  int64_t n = q.size(0), t = q.size(1);
  if (!causal) {
    bmmInto(gv, probs.transpose(1, 2), g);
    at::Tensor dp = at::empty_like(probs);
    bmmInto(dp, g, v.transpose(1, 2));
    at::Tensor ds =
        at::_softmax_backward_data(dp, probs, -1, probs.scalar_type());
    s.apply(ds);
    bmmInto(gq, ds, k);
    bmmInto(gk, ds.transpose(1, 2), q);
    return;
  }
  int64_t rows = std::min(t, attentionRows(t));
  Scratch probsBuf(n * rows * t, q.options()), dpBuf(n * rows * t, q.options()),
      dsBuf(n * rows * t, q.options());
  gk.zero_();
  gv.zero_();
  for (int64_t i0 = 0; i0 < t; i0 += rows) {
    int64_t i1 = std::min(t, i0 + rows), r = i1 - i0;
    // _softmax_backward_data reads its operands densely.
    at::Tensor p = probsBuf.get(n, r, i1);
    p.copy_(probs.narrow(1, i0, r).narrow(2, 0, i1));
    at::Tensor gBlock = g.narrow(1, i0, r);
    at::Tensor dp = dpBuf.get(n, r, i1);
    bmmInto(dp, gBlock, v.narrow(1, 0, i1).transpose(1, 2));
    at::Tensor d = dsBuf.get(n, r, i1);
    at::_softmax_backward_data_out(d, dp, p, -1, p.scalar_type());
    s.apply(d);
    at::Tensor o = gq.narrow(1, i0, r);
    bmmInto(o, d, k.narrow(1, 0, i1));
    at::Tensor gkBlock = gk.narrow(1, 0, i1), gvBlock = gv.narrow(1, 0, i1);
    bmmInto(gkBlock, d.transpose(1, 2), q.narrow(1, i0, r),
            /*accumulate=*/true);
    bmmInto(gvBlock, p.transpose(1, 2), gBlock, /*accumulate=*/true);
  }
}

/// The scaled, masked scores of query rows [i0, i0 + r) against keys
/// [0, keys) into `scores` (`[n, r, keys]`): the mask's rows as given, or,
/// causal, keys after the query masked.
void blockScores(at::Tensor &scores, const at::Tensor &q, const at::Tensor &k,
                 const at::Tensor &mask, bool causal, const AttentionScale &s,
                 int64_t i0, int64_t r, int64_t keys) {
  bmmInto(scores, q.narrow(1, i0, r), k.narrow(1, 0, keys).transpose(1, 2));
  s.apply(scores);
  if (causal) {
    at::Tensor above =
        at::ones({r, r}, mask.options().dtype(at::kBool)).triu_(1);
    scores.narrow(2, i0, r).masked_fill_(above, -INFINITY);
  } else {
    applyMask(scores, mask.narrow(1, i0, r));
  }
}

/// The type attention's statistics are taken in: f64 for f64 operands,
/// else f32 (bf16 and f16 round only their results).
at::ScalarType accumulation(const at::Tensor &q) {
  return q.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
}

/// masked_attention in the FlashAttention form on stacks `[n, t, d]`: by
/// blocks of query rows, the scores, their softmax (as the unfused ops
/// compute it) times `v` into `out`, and each row's log-sum-exp (f32) into
/// `lse` (`[n, t]`); only a block's scores exist at a time. With a causal
/// mask a block reads the keys up to its last row only.
void flashForward(const at::Tensor &q, const at::Tensor &k, const at::Tensor &v,
                  const at::Tensor &mask, bool causal, const AttentionScale &s,
                  at::Tensor &out, at::Tensor &lse) {
  int64_t n = q.size(0), t = q.size(1);
  int64_t rows = std::min(t, attentionRows(t));
  Scratch scoresBuf(n * rows * t, q.options()),
      probsBuf(n * rows * t, q.options());
  for (int64_t i0 = 0; i0 < t; i0 += rows) {
    int64_t i1 = std::min(t, i0 + rows), r = i1 - i0;
    int64_t keys = causal ? i1 : t;
    at::Tensor scores = scoresBuf.get(n, r, keys);
    blockScores(scores, q, k, mask, causal, s, i0, r, keys);
    at::Tensor l = lse.narrow(1, i0, r);
    l.copy_(at::logsumexp(scores.to(accumulation(q)), {-1}, false));
    at::Tensor p = probsBuf.get(n, r, keys);
    at::_softmax_out(p, scores, -1, false);
    at::Tensor o = out.narrow(1, i0, r);
    bmmInto(o, p, v.narrow(1, 0, keys));
  }
}

/// masked_attention_backward in the FlashAttention form: by blocks of
/// query rows, the probabilities again as `exp(scores - lse)` (in f32,
/// rounded to the element type as softmax rounds them), the softmax
/// backward with the rows' sums `sum(grad * out)`, and the block's terms of
/// the three gradients (the key and value ones summed block after block).
void flashBackward(const at::Tensor &g, const at::Tensor &q,
                   const at::Tensor &k, const at::Tensor &v,
                   const at::Tensor &mask, const at::Tensor &lse,
                   const at::Tensor &out, bool causal, const AttentionScale &s,
                   at::Tensor &gq, at::Tensor &gk, at::Tensor &gv) {
  int64_t n = q.size(0), t = q.size(1);
  int64_t rows = std::min(t, attentionRows(t));
  Scratch scoresBuf(n * rows * t, q.options()),
      dpBuf(n * rows * t, q.options());
  gk.zero_();
  gv.zero_();
  // The softmax backward's row sums: sum_j dp_ij p_ij = grad_i . out_i.
  at::ScalarType acc = accumulation(q);
  at::Tensor rowSums = (g.to(acc) * out.to(acc)).sum(-1, true); // [n, t, 1]
  for (int64_t i0 = 0; i0 < t; i0 += rows) {
    int64_t i1 = std::min(t, i0 + rows), r = i1 - i0;
    int64_t keys = causal ? i1 : t;
    at::Tensor scores = scoresBuf.get(n, r, keys);
    blockScores(scores, q, k, mask, causal, s, i0, r, keys);
    at::Tensor pf =
        (scores.to(acc) - lse.narrow(1, i0, r).unsqueeze(-1).to(acc)).exp_();
    at::Tensor p = pf.to(q.scalar_type());
    at::Tensor gBlock = g.narrow(1, i0, r);
    at::Tensor dp = dpBuf.get(n, r, keys);
    bmmInto(dp, gBlock, v.narrow(1, 0, keys).transpose(1, 2));
    at::Tensor ds = (p.to(acc) * (dp.to(acc) - rowSums.narrow(1, i0, r)))
                        .to(q.scalar_type());
    s.apply(ds);
    at::Tensor o = gq.narrow(1, i0, r);
    bmmInto(o, ds, k.narrow(1, 0, keys));
    at::Tensor gkBlock = gk.narrow(1, 0, keys), gvBlock = gv.narrow(1, 0, keys);
    bmmInto(gkBlock, ds.transpose(1, 2), q.narrow(1, i0, r),
            /*accumulate=*/true);
    bmmInto(gvBlock, p.transpose(1, 2), gBlock, /*accumulate=*/true);
  }
}

} // namespace

void registerAttentionKernels(KernelTable &table) {
  table.add(OpKind::MaskedAttention, [](Ctx &c) {
    const OpAttrs &a = c.a;
    const at::Tensor &query = c.in(0);
    at::Tensor q = asStack(query), k = asStack(c.in(1)), v = asStack(c.in(2));
    at::Tensor mask = maskStack(c.in(3), query);
    bool causal = isCausalMask(c.in(3), q.size(1));
    if (causal)
      causalAttention.fetch_add(1);
    AttentionScale scale{at::Scalar(float(a.scale)), a.scaleDivides};
    at::Tensor out = at::empty({q.size(0), q.size(1), v.size(2)}, q.options());
    std::vector<int64_t> shape(query.sizes().begin(), query.sizes().end());
    if (c.resultType(1).shape.size() + 1 == shape.size()) {
      // The FlashAttention form: the rows' log-sum-exp.
      at::Tensor lse =
          at::empty({q.size(0), q.size(1)}, q.options().dtype(at::kFloat));
      forBlocks(q.size(0), 1, 1, [&](int64_t begin, int64_t end) {
        int64_t n = end - begin;
        at::Tensor o = out.narrow(0, begin, n), l = lse.narrow(0, begin, n);
        flashForward(q.narrow(0, begin, n), k.narrow(0, begin, n),
                     v.narrow(0, begin, n), mask.narrow(0, begin, n), causal,
                     scale, o, l);
      });
      shape.back() = v.size(2);
      c.set(0, out.view(shape));
      shape.pop_back();
      c.set(1, lse.view(shape));
      return;
    }
    at::Tensor probs =
        at::empty({q.size(0), q.size(1), q.size(1)}, q.options());
    forBlocks(q.size(0), 1, 1, [&](int64_t begin, int64_t end) {
      int64_t n = end - begin;
      at::Tensor o = out.narrow(0, begin, n), p = probs.narrow(0, begin, n);
      attentionForward(q.narrow(0, begin, n), k.narrow(0, begin, n),
                       v.narrow(0, begin, n), mask.narrow(0, begin, n), causal,
                       scale, o, p);
    });
    shape.back() = v.size(2);
    c.set(0, out.view(shape));
    shape.back() = q.size(1);
    c.set(1, probs.view(shape));
  });
  table.add(OpKind::MaskedAttentionBackward, [](Ctx &c) {
    const OpAttrs &a = c.a;
    const at::Tensor &query = c.in(1);
    at::Tensor g = asStack(c.in(0)), q = asStack(query), k = asStack(c.in(2)),
               v = asStack(c.in(3));
    bool causal = isCausalMask(c.in(4), q.size(1));
    if (causal)
      causalAttention.fetch_add(1);
    AttentionScale scale{at::Scalar(float(a.scale)), a.scaleDivides};
    at::Tensor gq = at::empty_like(q), gk = at::empty_like(k),
               gv = at::empty_like(v);
    if (c.has(6)) {
      // The FlashAttention form: the rows' log-sum-exp and the output.
      at::Tensor lse = c.in(5).reshape({q.size(0), q.size(1)});
      at::Tensor out = asStack(c.in(6));
      at::Tensor mask = maskStack(c.in(4), query);
      forBlocks(q.size(0), 1, 1, [&](int64_t begin, int64_t end) {
        int64_t n = end - begin;
        at::Tensor oq = gq.narrow(0, begin, n), ok = gk.narrow(0, begin, n),
                   ov = gv.narrow(0, begin, n);
        flashBackward(g.narrow(0, begin, n), q.narrow(0, begin, n),
                      k.narrow(0, begin, n), v.narrow(0, begin, n),
                      mask.narrow(0, begin, n), lse.narrow(0, begin, n),
                      out.narrow(0, begin, n), causal, scale, oq, ok, ov);
      });
      c.set(0, gq.view(query.sizes()));
      c.set(1, gk.view(query.sizes()));
      c.set(2, gv.view(c.in(3).sizes()));
      return;
    }
    forBlocks(q.size(0), 1, 1, [&](int64_t begin, int64_t end) {
      int64_t n = end - begin;
      at::Tensor oq = gq.narrow(0, begin, n), ok = gk.narrow(0, begin, n),
                 ov = gv.narrow(0, begin, n);
      attentionBackward(g.narrow(0, begin, n), q.narrow(0, begin, n),
                        k.narrow(0, begin, n), v.narrow(0, begin, n),
                        asStack(c.in(5)).narrow(0, begin, n), causal, scale, oq,
                        ok, ov);
    });
    c.set(0, gq.view(query.sizes()));
    c.set(1, gk.view(query.sizes()));
    c.set(2, gv.view(c.in(3).sizes()));
  });
}

} // namespace merak::runtime::cpu

namespace merak::runtime {

int64_t causalAttentionCalls() { return cpu::causalAttention.load(); }

} // namespace merak::runtime
