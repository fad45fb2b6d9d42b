//===- VectorMath.cpp - elementwise kernels: dispatch and scalar path -----===//
//
// The scalar formulas here are the eight-lane ones of VectorMathAvx2.cpp,
// one element at a time; see VectorMath.h for what each kernel computes.
//
//===----------------------------------------------------------------------===//

#include "VectorMath.h"

#include <algorithm>
#include <cmath>

namespace merak::runtime::vecmath {
namespace {

// sqrt(2 / pi) and the cubic coefficient of PyTorch's tanh approximation.
constexpr float kBeta = 0.7978845608028654f;
constexpr float kKappa = 0.044715f;
// The gradient clamps exp(-2u) here, where the slope is zero to within
// 1e-30, so that e s^2 never meets inf * 0 and stays clear of denormals.
// The forward lets exp overflow: x / inf is a zero of x's sign.
constexpr float kMaxExponent = 80.0f;

} // namespace

bool usesAvx2() {
#if defined(MERAK_VECTORMATH_AVX2)
  static const bool avx2 =
      __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return avx2;
#else
  return false;
#endif
}

void geluTanh(const float *x, float *y, int64_t n) {
#if defined(MERAK_VECTORMATH_AVX2)
  if (usesAvx2())
    return detail::geluTanhAvx2(x, y, n);
#endif
  detail::geluTanhScalar(x, y, n);
}

void geluTanhBackward(const float *dy, const float *x, float *dx, int64_t n) {
#if defined(MERAK_VECTORMATH_AVX2)
  if (usesAvx2())
    return detail::geluTanhBackwardAvx2(dy, x, dx, n);
#endif
  detail::geluTanhBackwardScalar(dy, x, dx, n);
}

void detail::geluTanhScalar(const float *x, float *y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    float v = x[i];
    float u = kBeta * (v + kKappa * (v * v * v));
    y[i] = v / (1.0f + std::exp(-2.0f * u));
  }
}

void detail::geluTanhBackwardScalar(const float *dy, const float *x, float *dx,
                                    int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    float v = x[i];
    float v2 = v * v;
    float u = kBeta * (v + kKappa * (v2 * v));
    float e = std::exp(std::min(-2.0f * u, kMaxExponent));
    float s = 1.0f / (1.0f + e);
    // s (1 - s) = e s^2, without forming 1 - s.
    float ds = (e * s) * s;
    float du = kBeta * (1.0f + 3.0f * kKappa * v2);
    dx[i] = dy[i] * (s + 2.0f * v * ds * du);
  }
}

} // namespace merak::runtime::vecmath
