//===- VectorMathAvx2.cpp - elementwise kernels, eight lanes at a time ----===//
//
// Compiled with -mavx2 -mfma; the functions here run only where
// vecmath::usesAvx2() says so. A partial last vector is read and written
// through a lane mask, so every element takes the same arithmetic.
//
//===----------------------------------------------------------------------===//

#include "VectorMath.h"

#include <immintrin.h>
#include <sleef.h>

namespace merak::runtime::vecmath::detail {
namespace {

/// Lanes [0, count) set, for a masked load or store of a partial vector.
__m256i firstLanes(int64_t count) {
  const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(int(count)), lane);
}

/// Runs `body(offset, mask)` over [0, n) eight lanes at a time; `mask` is
/// null for full vectors.
template <typename Body> void forVectors(int64_t n, Body body) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    body(i, static_cast<const __m256i *>(nullptr));
  if (i < n) {
    __m256i mask = firstLanes(n - i);
    body(i, &mask);
  }
}

__m256 load(const float *p, const __m256i *mask) {
  return mask ? _mm256_maskload_ps(p, *mask) : _mm256_loadu_ps(p);
}

void store(float *p, __m256 v, const __m256i *mask) {
  if (mask)
    _mm256_maskstore_ps(p, *mask, v);
  else
    _mm256_storeu_ps(p, v);
}

struct GeluConstants {
  __m256 beta = _mm256_set1_ps(0.7978845608028654f);
  __m256 kappa = _mm256_set1_ps(0.044715f);
  __m256 kappa3 = _mm256_set1_ps(3.0f * 0.044715f);
  __m256 minusTwo = _mm256_set1_ps(-2.0f);
  __m256 two = _mm256_set1_ps(2.0f);
  __m256 one = _mm256_set1_ps(1.0f);
  __m256 maxExponent = _mm256_set1_ps(80.0f);

  /// -2u for x, where `x2` is x^2.
  __m256 minus2u(__m256 x, __m256 x2) const {
    __m256 inner = _mm256_add_ps(x, _mm256_mul_ps(kappa, _mm256_mul_ps(x2, x)));
    return _mm256_mul_ps(minusTwo, _mm256_mul_ps(beta, inner));
  }
};

} // namespace

void geluTanhAvx2(const float *x, float *y, int64_t n) {
  const GeluConstants k;
  forVectors(n, [&](int64_t i, const __m256i *mask) {
    __m256 v = load(x + i, mask);
    __m256 e = Sleef_expf8_u10avx2(k.minus2u(v, _mm256_mul_ps(v, v)));
    store(y + i, _mm256_div_ps(v, _mm256_add_ps(k.one, e)), mask);
  });
}

void geluTanhBackwardAvx2(const float *dy, const float *x, float *dx,
                          int64_t n) {
  const GeluConstants k;
  forVectors(n, [&](int64_t i, const __m256i *mask) {
    __m256 v = load(x + i, mask);
    __m256 v2 = _mm256_mul_ps(v, v);
    // Clamped as the scalar path clamps it. min_ps returns its second
    // operand for a NaN lane; x carries the NaN through the rest.
    __m256 e =
        Sleef_expf8_u10avx2(_mm256_min_ps(k.minus2u(v, v2), k.maxExponent));
    __m256 s = _mm256_div_ps(k.one, _mm256_add_ps(k.one, e));
    __m256 ds = _mm256_mul_ps(_mm256_mul_ps(e, s), s);
    __m256 du = _mm256_mul_ps(
        k.beta, _mm256_add_ps(k.one, _mm256_mul_ps(k.kappa3, v2)));
    __m256 slope = _mm256_add_ps(
        s, _mm256_mul_ps(_mm256_mul_ps(_mm256_mul_ps(k.two, v), ds), du));
    store(dx + i, _mm256_mul_ps(load(dy + i, mask), slope), mask);
  });
}

} // namespace merak::runtime::vecmath::detail
