//===- Optimizers.cpp - CPU kernels: optimizer updates --------------------===//
//
// `sgd_update` and `adamw_update`, torch.optim's single-tensor code
// operation by operation; AdamW on float32 as one fused pass with ATen's
// results bit for bit.
//
//===----------------------------------------------------------------------===//

#include "CpuKernels.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include <cmath>

namespace merak::runtime::cpu {
namespace {

/// torch.optim.SGD's `_single_tensor_sgd` for one parameter.
void sgdUpdate(Ctx &c) {
  const OpAttrs &a = c.a;
  const at::Tensor &param = c.in(0), &grad = c.in(1), &buffer = c.in(2);
  double lr = c.scalar(3);
  int64_t step = int64_t(c.scalar(4));
  at::Tensor d = grad;
  if (a.weightDecay != 0)
    d = d.add(param, a.weightDecay);
  at::Tensor newParam = c.inPlace(0);
  if (!newParam.defined())
    newParam = param.clone();
  if (a.momentum != 0) {
    at::Tensor buf = c.inPlace(1);
    if (step == 1) {
      // PyTorch starts the buffer as a copy of the first direction.
      buf = buf.defined() ? buf.copy_(d) : d.clone();
    } else {
      if (!buf.defined())
        buf = buffer.clone();
      buf.mul_(a.momentum).add_(d, 1 - a.dampening);
    }
    d = a.nesterov ? d.add(buf, a.momentum) : buf;
    c.set(1, buf);
  } else {
    c.set(1, buffer); // a view result: the buffer passes through
  }
  newParam.add_(d, -lr);
  c.set(0, newParam);
}

/// The scalars of one AdamW step, rounded to float as ATen's float kernels
/// take them.
struct AdamwScalars {
  bool decays;
  float decay, beta1, oneMinusBeta1, beta2, oneMinusBeta2, biasCorrection2Sqrt,
      eps, negStepSize;
};

/// Elements [begin, end) of one fused AdamW step: the arithmetic of
/// `_single_tensor_adamw`'s ATen calls with each result rounded where ATen
/// rounds it. `m * b1` is rounded, then `(1 - b1) g` added in one fused
/// multiply-add (ATen's vectorized `add_` with alpha); `v * b2` is rounded,
/// then `((1 - b2) g) g` added in one fused multiply-add (its `addcmul_`);
/// `sqrt(v) / sqrt(bc2) + eps` and `p + (-step m) / denom` round at every
/// operation. The translation unit is compiled without floating-point
/// contraction, so no other product fuses with a sum.
void adamwRange(float *p, float *m, float *v, const float *g, int64_t begin,
                int64_t end, const AdamwScalars &s) {
  for (int64_t i = begin; i < end; ++i) {
    float pi = s.decays ? p[i] * s.decay : p[i];
    float mi = std::fma(s.oneMinusBeta1, g[i], m[i] * s.beta1);
    float vi = std::fma(s.oneMinusBeta2 * g[i], g[i], v[i] * s.beta2);
    float denom = std::sqrt(vi) / s.biasCorrection2Sqrt + s.eps;
    p[i] = pi + s.negStepSize * mi / denom;
    m[i] = mi;
    v[i] = vi;
  }
}

#if defined(__x86_64__)
/// `adamwRange` eight elements at a time; the same operations, each one
/// correctly rounded, so the same results.
__attribute__((target("avx2,fma"))) void
adamwRangeAvx2(float *p, float *m, float *v, const float *g, int64_t begin,
               int64_t end, const AdamwScalars &s) {
  const __m256 decay = _mm256_set1_ps(s.decay), b1 = _mm256_set1_ps(s.beta1),
               a1 = _mm256_set1_ps(s.oneMinusBeta1),
               b2 = _mm256_set1_ps(s.beta2),
               a2 = _mm256_set1_ps(s.oneMinusBeta2),
               bc2 = _mm256_set1_ps(s.biasCorrection2Sqrt),
               eps = _mm256_set1_ps(s.eps),
               step = _mm256_set1_ps(s.negStepSize);
  int64_t i = begin;
  for (; i + 8 <= end; i += 8) {
    __m256 pi = _mm256_loadu_ps(p + i);
    if (s.decays)
      pi = _mm256_mul_ps(pi, decay);
    __m256 gi = _mm256_loadu_ps(g + i);
    __m256 mi =
        _mm256_fmadd_ps(a1, gi, _mm256_mul_ps(_mm256_loadu_ps(m + i), b1));
    __m256 vi = _mm256_fmadd_ps(_mm256_mul_ps(a2, gi), gi,
                                _mm256_mul_ps(_mm256_loadu_ps(v + i), b2));
    __m256 denom = _mm256_add_ps(_mm256_div_ps(_mm256_sqrt_ps(vi), bc2), eps);
    pi = _mm256_add_ps(pi, _mm256_div_ps(_mm256_mul_ps(step, mi), denom));
    _mm256_storeu_ps(p + i, pi);
    _mm256_storeu_ps(m + i, mi);
    _mm256_storeu_ps(v + i, vi);
  }
  adamwRange(p, m, v, g, i, end, s);
}
#endif

/// torch.optim.AdamW's `_single_tensor_adamw` (PyTorch 1.13, amsgrad off,
/// not capturable) for one parameter. Contiguous float32 tensors take one
/// fused pass over the threads (the parameter, the gradient and the two
/// moments read once and written once, instead of nine passes of ATen
/// calls), with ATen's results bit for bit; other dtypes take the calls.
void adamwUpdate(Ctx &c) {
  const OpAttrs &a = c.a;
  const at::Tensor &grad = c.in(1);
  double lr = c.scalar(4);
  double step = c.scalar(5);
  at::Tensor param = c.inPlace(0), expAvg = c.inPlace(1),
             expAvgSq = c.inPlace(2);
  if (!param.defined())
    param = c.in(0).clone();
  if (!expAvg.defined())
    expAvg = c.in(2).clone();
  if (!expAvgSq.defined())
    expAvgSq = c.in(3).clone();
  double biasCorrection1 = 1 - std::pow(a.beta1, step);
  double biasCorrection2 = 1 - std::pow(a.beta2, step);
  double stepSize = lr / biasCorrection1;
  double biasCorrection2Sqrt = std::sqrt(biasCorrection2);
  bool fused = denseFloat(param) && denseFloat(grad) && denseFloat(expAvg) &&
               denseFloat(expAvgSq);
  if (fused) {
    AdamwScalars s{a.weightDecay != 0,
                   float(1 - lr * a.weightDecay),
                   float(a.beta1),
                   float(1 - a.beta1),
                   float(a.beta2),
                   float(1 - a.beta2),
                   float(biasCorrection2Sqrt),
                   float(a.eps),
                   float(-stepSize)};
    float *p = param.data_ptr<float>(), *m = expAvg.data_ptr<float>(),
          *v = expAvgSq.data_ptr<float>();
    const float *g = grad.data_ptr<float>();
#if defined(__x86_64__)
    static const bool avx2 =
        __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#else
    static const bool avx2 = false;
#endif
    forBlocks(param.numel(), int64_t(1) << 15, 64,
              [&](int64_t begin, int64_t end) {
#if defined(__x86_64__)
                if (avx2)
                  return adamwRangeAvx2(p, m, v, g, begin, end, s);
#endif
                adamwRange(p, m, v, g, begin, end, s);
              });
  } else {
    // Multiplying by exactly 1 changes nothing, so it is skipped.
    if (a.weightDecay != 0)
      param.mul_(1 - lr * a.weightDecay);
    expAvg.mul_(a.beta1).add_(grad, 1 - a.beta1);
    expAvgSq.mul_(a.beta2).addcmul_(grad, grad, 1 - a.beta2);
    at::Tensor denom = (expAvgSq.sqrt() / biasCorrection2Sqrt).add_(a.eps);
    param.addcdiv_(expAvg, denom, -stepSize);
  }
  c.set(0, param);
  c.set(1, expAvg);
  c.set(2, expAvgSq);
}

} // namespace

void registerOptimizerKernels(KernelTable &table) {
  table.add(OpKind::SgdUpdate, sgdUpdate);
  table.add(OpKind::AdamwUpdate, adamwUpdate);
}

} // namespace merak::runtime::cpu
