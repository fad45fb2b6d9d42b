//===- VectorMathTest.cpp - the CPU backend's elementwise kernels ---------===//
//
// Each kernel, on its scalar path and (where the CPU has AVX2) its
// eight-lane path, against the exact function evaluated in double.
//
//===----------------------------------------------------------------------===//

#include "../../lib/Runtime/CPU/VectorMath.h"

#include "gtest/gtest.h"

#include <cmath>
#include <limits>
#include <string>
#include <vector>

using namespace merak::runtime;

namespace {

/// The tanh-approximated GELU and its derivative, in double, written with
/// s = (1 + tanh(u)) / 2 = 1 / (1 + exp(-2u)) so that no term cancels
/// (in double, 1 + tanh(u) is zero from u = -19 on).
double sigmoid2u(double x) {
  double u = std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x);
  return 1.0 / (1.0 + std::exp(-2.0 * u));
}
double geluTanhExact(double x) { return x * sigmoid2u(x); }
double geluTanhSlopeExact(double x) {
  double s = sigmoid2u(x);
  double du = std::sqrt(2.0 / M_PI) * (1.0 + 3.0 * 0.044715 * x * x);
  return s + 2.0 * x * s * (1.0 - s) * du;
}

/// One unit in the last place of `v` as a float.
double ulp(double v) {
  float f = std::fabs(float(v));
  return double(std::nextafter(f, std::numeric_limits<float>::infinity())) -
         double(f);
}

/// Inputs across GELU's range: a dense grid over [-12, 12] of 20003 values
/// (not a multiple of eight, so the last vector is partial), the extremes
/// and signed zeros.
std::vector<float> inputs() {
  std::vector<float> x;
  for (int i = 0; i <= 20002; ++i)
    x.push_back(-12.0f + 24.0f * float(i) / 20002.0f);
  for (float v : {0.0f, -0.0f, 1e-30f, -1e-30f, 30.0f, -30.0f, 1e6f, -1e6f,
                  std::numeric_limits<float>::max()})
    x.push_back(v);
  return x;
}

using Forward = void (*)(const float *, float *, int64_t);
using Backward = void (*)(const float *, const float *, float *, int64_t);

struct Path {
  std::string name;
  Forward forward;
  Backward backward;
};

std::vector<Path> paths() {
  std::vector<Path> p{{"scalar", vecmath::detail::geluTanhScalar,
                       vecmath::detail::geluTanhBackwardScalar}};
#if defined(__x86_64__)
  if (vecmath::usesAvx2())
    p.push_back({"avx2", vecmath::detail::geluTanhAvx2,
                 vecmath::detail::geluTanhBackwardAvx2});
#endif
  return p;
}

TEST(VectorMathTest, GeluTanhIsWithinUlpsOfTheExactFunction) {
  std::vector<float> x = inputs();
  for (const Path &path : paths()) {
    std::vector<float> y(x.size(), -1.0f);
    path.forward(x.data(), y.data(), int64_t(x.size()));
    double worst = 0;
    for (size_t i = 0; i < x.size(); ++i) {
      double exact = geluTanhExact(x[i]);
      double err = std::fabs(double(y[i]) - exact);
      // exp(-2u) carries the rounding of its float argument: a relative
      // error of up to |2u| times a few float epsilons, which dominates
      // once x < -4 (and where the value is below 1e-6).
      double u = std::sqrt(2.0 / M_PI) * (x[i] + 0.044715 * x[i] * x[i] * x[i]);
      // Once exp(-2u) overflows (x < -10), values below 1e-37 come out as
      // zero.
      double bound =
          4 * ulp(exact) + std::fabs(exact * 2 * u) * 0x1p-22 + 1e-37;
      ASSERT_LE(err, bound) << path.name << ": gelu(" << x[i] << ") = " << y[i]
                            << ", exact " << exact;
      if (exact != 0)
        worst = std::max(worst, err / ulp(exact));
    }
    EXPECT_GT(worst, 0.0) << path.name << " cannot be the exact function";
    // The sign of zero and the identity for large inputs, exactly.
    EXPECT_TRUE(std::signbit(y[x.size() - 8])) << path.name;
    EXPECT_EQ(y[x.size() - 5], 30.0f) << path.name;
    EXPECT_EQ(y[x.size() - 1], std::numeric_limits<float>::max()) << path.name;
  }
}

TEST(VectorMathTest, GeluTanhGradientIsWithinUlpsOfTheExactSlope) {
  std::vector<float> x = inputs();
  // Beyond |x| = 2^64, x^2 overflows and the slope is NaN, as PyTorch's.
  x.pop_back();
  std::vector<float> dy(x.size());
  for (size_t i = 0; i < x.size(); ++i)
    dy[i] = float(1.0 + 0.5 * std::sin(double(i)));
  for (const Path &path : paths()) {
    std::vector<float> dx(x.size());
    path.backward(dy.data(), x.data(), dx.data(), int64_t(x.size()));
    for (size_t i = 0; i < x.size(); ++i) {
      double exact = double(dy[i]) * geluTanhSlopeExact(x[i]);
      // The slope crosses zero near x = -0.75; there the bound is on the
      // terms that cancel, each of size about dy.
      double bound = 8 * ulp(exact) + 4 * ulp(dy[i]) + 1e-30;
      ASSERT_LE(std::fabs(double(dx[i]) - exact), bound)
          << path.name << ": slope at " << x[i] << " times " << dy[i] << " = "
          << dx[i] << ", exact " << exact;
    }
    // In place: dx may be dy's buffer.
    std::vector<float> inPlace = dy;
    path.backward(inPlace.data(), x.data(), inPlace.data(), int64_t(x.size()));
    EXPECT_EQ(inPlace, dx) << path.name;
  }
}

TEST(VectorMathTest, GeluTanhPropagatesNaN) {
  float nan = std::numeric_limits<float>::quiet_NaN();
  for (const Path &path : paths()) {
    // A partial vector, NaN in its middle lane.
    std::vector<float> x{1.0f, -2.0f, nan}, y(3), dx(3);
    std::vector<float> dy{1.0f, 1.0f, 1.0f};
    path.forward(x.data(), y.data(), 3);
    path.backward(dy.data(), x.data(), dx.data(), 3);
    EXPECT_TRUE(std::isnan(y[2])) << path.name;
    EXPECT_TRUE(std::isnan(dx[2])) << path.name;
    EXPECT_FALSE(std::isnan(y[1])) << path.name;
  }
}

} // namespace
