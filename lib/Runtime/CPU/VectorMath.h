//===- VectorMath.h - elementwise kernels on float arrays -------*- C++ -*-===//
//
// Kernels the CPU backend runs on contiguous float32 data in place of a
// chain of ATen calls, or of an ATen kernel that spends its time in a
// slower function than the computation needs. Each takes raw pointers and
// a count, so the backend splits the work over its threads by ranges.
// Where the CPU has AVX2 and FMA the work runs eight lanes at a time with
// SLEEF's vector exponential (the one ATen's vectorized kernels call);
// elsewhere, the same formulas one element at a time.
//
// These kernels are not ATen's bit for bit: each documents its error
// against the exact function, which tests check against float64.
//
//===----------------------------------------------------------------------===//

#ifndef MERAK_LIB_RUNTIME_CPU_VECTORMATH_H
#define MERAK_LIB_RUNTIME_CPU_VECTORMATH_H

#include <cstdint>

namespace merak::runtime::vecmath {

/// PyTorch's tanh approximation of GELU, `0.5 x (1 + tanh(u))` with
/// `u = sqrt(2/pi) (x + 0.044715 x^3)`, computed as the equal
/// `x / (1 + exp(-2u))`: one exponential instead of a hyperbolic tangent,
/// and no cancellation in `1 + tanh(u)` for negative x. Within 4 ulp of the
/// exact function, plus the rounding of exp's float argument (relative
/// |2u| 2^-22, which matters only where x < -4 and the value is below
/// 1e-6). y[i] for i in [0, n).
void geluTanh(const float *x, float *y, int64_t n);

/// The gradient of `geluTanh`: dx = dy * (s + 2 x s (1 - s) du/dx) with
/// `s = 1 / (1 + exp(-2u))`, within 8 ulp of the exact value plus 4 ulp of
/// dy (where the slope crosses zero), and within 1e-30 of zero below
/// x = -9.5. `dx` may alias `dy`.
void geluTanhBackward(const float *dy, const float *x, float *dx, int64_t n);

/// Whether the eight-lane kernels run on this CPU.
bool usesAvx2();

namespace detail {
// One element at a time (VectorMath.cpp), as on CPUs without AVX2.
void geluTanhScalar(const float *x, float *y, int64_t n);
void geluTanhBackwardScalar(const float *dy, const float *x, float *dx,
                            int64_t n);
// The eight-lane kernels (VectorMathAvx2.cpp); call only where usesAvx2().
void geluTanhAvx2(const float *x, float *y, int64_t n);
void geluTanhBackwardAvx2(const float *dy, const float *x, float *dx,
                          int64_t n);
} // namespace detail

} // namespace merak::runtime::vecmath

#endif // MERAK_LIB_RUNTIME_CPU_VECTORMATH_H
