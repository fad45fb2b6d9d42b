//===- CudaElementwiseTest.cpp - the CUDA elementwise arithmetic ----------===//
//
// Elementwise.h on the host: the Philox-4x32-10 generator against the
// published known-answer vectors, dropout's counters and keep threshold,
// the index arithmetic of strided and broadcast operands, and ATen's
// element formulas (Python-style remainder and floor division, NaN in
// minimum, maximum and relu, integer powers, GELU).
//
//===----------------------------------------------------------------------===//

#include "../../lib/Runtime/CUDA/Elementwise.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>

using namespace merak::runtime::cuda;

namespace {

void expectPhilox(Philox4 counter, uint32_t k0, uint32_t k1, Philox4 expected) {
  Philox4 got = philox4x32_10(counter, k0, k1);
  for (int i = 0; i < 4; ++i)
    EXPECT_EQ(got.v[i], expected.v[i]) << "word " << i;
}

// Random123's kat_vectors for philox4x32_10.
TEST(CudaElementwise, PhiloxKnownAnswers) {
  expectPhilox({{0, 0, 0, 0}}, 0, 0,
               {{0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u}});
  expectPhilox({{0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu}},
               0xffffffffu, 0xffffffffu,
               {{0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu}});
  expectPhilox({{0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u}},
               0xa4093822u, 0x299f31d0u,
               {{0xd16cfe09u, 0x94fdccebu, 0x5001e420u, 0x24126ea1u}});
}

TEST(CudaElementwise, DropoutCounters) {
  DropoutCounter c = dropoutCounter(0, 0);
  EXPECT_EQ(c.block, 0u);
  EXPECT_EQ(c.lane, 0);
  c = dropoutCounter(8, 5);
  EXPECT_EQ(c.block, 3u);
  EXPECT_EQ(c.lane, 1);
  c = dropoutCounter(uint64_t(1) << 34, 3);
  EXPECT_EQ(c.block, uint64_t(1) << 32);
  EXPECT_EQ(c.lane, 3);
  Philox4 counter = dropoutBlockCounter((uint64_t(7) << 32) | 9);
  EXPECT_EQ(counter.v[0], 9u);
  EXPECT_EQ(counter.v[1], 7u);
  EXPECT_EQ(counter.v[2], 0u);
  EXPECT_EQ(counter.v[3], 0u);

  // Masks take whole blocks: the next one starts on a fresh block.
  EXPECT_EQ(dropoutOffsetAfter(0, 0), 0u);
  EXPECT_EQ(dropoutOffsetAfter(0, 1), 4u);
  EXPECT_EQ(dropoutOffsetAfter(0, 4), 4u);
  EXPECT_EQ(dropoutOffsetAfter(8, 1025), 8u + 1028u);

  // Blocks a mask touches, also from an offset inside a block.
  EXPECT_EQ(dropoutBlocks(0, 0), 0);
  EXPECT_EQ(dropoutBlocks(0, 1), 1);
  EXPECT_EQ(dropoutBlocks(0, 4), 1);
  EXPECT_EQ(dropoutBlocks(0, 5), 2);
  EXPECT_EQ(dropoutBlocks(3, 2), 2);
  EXPECT_EQ(dropoutBlocks(3, 1), 1);
  EXPECT_EQ(dropoutBlocks(4, 4), 1);
  for (uint64_t offset = 0; offset < 8; ++offset)
    for (int64_t n = 1; n < 20; ++n) {
      uint64_t first = dropoutCounter(offset, 0).block;
      uint64_t last = dropoutCounter(offset, n - 1).block;
      EXPECT_EQ(dropoutBlocks(offset, n), int64_t(last - first + 1));
    }
}

TEST(CudaElementwise, KeepThreshold) {
  EXPECT_EQ(keepThreshold(0), 0u);
  EXPECT_EQ(keepThreshold(-0.5), 0u);
  EXPECT_EQ(keepThreshold(1), uint64_t(1) << 32);
  EXPECT_EQ(keepThreshold(0.5), uint64_t(1) << 31);
  EXPECT_TRUE(philoxKeeps(0x7fffffffu, keepThreshold(0.5)));
  EXPECT_FALSE(philoxKeeps(0x80000000u, keepThreshold(0.5)));
  EXPECT_TRUE(philoxKeeps(0xffffffffu, keepThreshold(1)));
  EXPECT_FALSE(philoxKeeps(0, keepThreshold(0)));
  // word / 2^32 < keep, exactly: 2^-32 rounds up to one word.
  EXPECT_EQ(keepThreshold(std::ldexp(1.0, -32)), 1u);
  EXPECT_EQ(keepThreshold(std::ldexp(1.5, -32)), 2u);

  // Keeps about `keep` of the words.
  for (double keep : {0.1, 0.5, 0.9}) {
    uint64_t threshold = keepThreshold(keep);
    int64_t kept = 0, n = 0;
    for (uint64_t block = 0; block < 25000; ++block) {
      Philox4 r = philox4x32_10(dropoutBlockCounter(block), 0x1234u, 0x5678u);
      for (uint32_t w : r.v) {
        kept += philoxKeeps(w, threshold);
        ++n;
      }
    }
    EXPECT_NEAR(double(kept) / double(n), keep, 0.005) << "keep " << keep;
  }
}

View dense(std::initializer_list<int64_t> sizes) {
  View v;
  v.rank = int(sizes.size());
  int d = 0;
  for (int64_t s : sizes)
    v.sizes[d++] = s;
  contiguousStrides(v.sizes, v.rank, v.strides);
  return v;
}

TEST(CudaElementwise, StridedBroadcastOffsets) {
  // [3, 1] + [4] -> [3, 4].
  int64_t shape[2] = {3, 4};
  View views[2];
  ASSERT_TRUE(broadcastView(dense({3, 1}), shape, 2, views[0]));
  ASSERT_TRUE(broadcastView(dense({4}), shape, 2, views[1]));
  Strided<2> s;
  EXPECT_FALSE(makeStrided<2>(views, s));
  for (int64_t i = 0; i < 12; ++i) {
    int64_t off[2];
    s.offsets(i, off);
    EXPECT_EQ(off[0], i / 4) << i;
    EXPECT_EQ(off[1], i % 4) << i;
  }
}

TEST(CudaElementwise, StridedTransposedOffsets) {
  // A [4, 3] view of a dense [3, 4] (a transpose) next to a dense [4, 3].
  View views[2];
  views[0].rank = 2;
  views[0].sizes[0] = 4;
  views[0].sizes[1] = 3;
  views[0].strides[0] = 1;
  views[0].strides[1] = 4;
  views[1] = dense({4, 3});
  Strided<2> s;
  EXPECT_FALSE(makeStrided<2>(views, s));
  for (int64_t i = 0; i < 12; ++i) {
    int64_t off[2];
    s.offsets(i, off);
    int64_t row = i / 3, col = i % 3;
    EXPECT_EQ(off[0], col * 4 + row) << i;
    EXPECT_EQ(off[1], i) << i;
  }
}

TEST(CudaElementwise, StridedDenseAndScalar) {
  View views[3] = {dense({2, 3, 5}), dense({2, 3, 5}), dense({2, 3, 5})};
  Strided<3> s;
  EXPECT_TRUE(makeStrided<3>(views, s));
  EXPECT_EQ(s.rank, 1);
  EXPECT_EQ(s.sizes[0], 30);

  // A rank-0 operand broadcast to [7]: stride 0, not dense.
  int64_t shape[1] = {7};
  View b[2];
  ASSERT_TRUE(broadcastView(dense({7}), shape, 1, b[0]));
  ASSERT_TRUE(broadcastView(dense({}), shape, 1, b[1]));
  Strided<2> s2;
  EXPECT_FALSE(makeStrided<2>(b, s2));
  int64_t off[2];
  s2.offsets(5, off);
  EXPECT_EQ(off[0], 5);
  EXPECT_EQ(off[1], 0);

  // All of size 1: rank 0, one element at offset 0.
  View ones[1] = {dense({1, 1})};
  Strided<1> s1;
  EXPECT_TRUE(makeStrided<1>(ones, s1));
  EXPECT_EQ(s1.rank, 0);
  int64_t one[1];
  s1.offsets(0, one);
  EXPECT_EQ(one[0], 0);
}

TEST(CudaElementwise, Triangles) {
  EXPECT_TRUE(triangleKeeps(0, 0, 0, false));
  EXPECT_FALSE(triangleKeeps(0, 1, 0, false));
  EXPECT_TRUE(triangleKeeps(0, 1, 1, false));
  EXPECT_FALSE(triangleKeeps(2, 0, -3, false));
  EXPECT_TRUE(triangleKeeps(0, 0, 0, true));
  EXPECT_FALSE(triangleKeeps(1, 0, 0, true));
  EXPECT_TRUE(triangleKeeps(1, 0, -1, true));
  EXPECT_FALSE(triangleKeeps(0, 1, 2, true));
}

TEST(CudaElementwise, RemainderHasTheDivisorsSign) {
  EXPECT_EQ(remainderOf<int64_t>(-7, 2), 1);
  EXPECT_EQ(remainderOf<int64_t>(7, -2), -1);
  EXPECT_EQ(remainderOf<int64_t>(-7, -2), -1);
  EXPECT_EQ(remainderOf<int64_t>(7, 2), 1);
  EXPECT_EQ(remainderOf<int32_t>(6, -3), 0);
  EXPECT_EQ(remainderOf<int32_t>(std::numeric_limits<int32_t>::min(), -1), 0);
  EXPECT_EQ(remainderOf<int32_t>(5, 0), 0);
  EXPECT_EQ(remainderOf(-7.5f, 2.0f), 0.5f);
  EXPECT_EQ(remainderOf(7.5f, -2.0f), -0.5f);
  EXPECT_EQ(remainderOf(-7.5, -2.0), -1.5);
  EXPECT_EQ(remainderOf<double>(5.0, INFINITY), 5.0);
  EXPECT_EQ(remainderOf<double>(-5.0, INFINITY), INFINITY);
  EXPECT_TRUE(std::isnan(remainderOf(5.0f, 0.0f)));
}

TEST(CudaElementwise, FloorDivideRoundsDown) {
  EXPECT_EQ(floorDivideOf<int64_t>(-7, 2), -4);
  EXPECT_EQ(floorDivideOf<int64_t>(7, -2), -4);
  EXPECT_EQ(floorDivideOf<int64_t>(-7, -2), 3);
  EXPECT_EQ(floorDivideOf<int64_t>(7, 2), 3);
  EXPECT_EQ(floorDivideOf<int32_t>(-6, 3), -2);
  EXPECT_EQ(floorDivideOf<int32_t>(5, 0), 0);
  EXPECT_EQ(floorDivideOf<int64_t>(std::numeric_limits<int64_t>::min(), -1),
            std::numeric_limits<int64_t>::min());
  EXPECT_EQ(floorDivideOf<int32_t>(9, -1), -9);
  EXPECT_EQ(floorDivideOf(-7.5f, 2.0f), -4.0f);
  EXPECT_EQ(floorDivideOf(7.5f, -2.0f), -4.0f);
  EXPECT_EQ(floorDivideOf(1.0, 0.1), 9.0); // Python's 1.0 // 0.1
  EXPECT_EQ(floorDivideOf(7.0f, 0.0f), INFINITY);
  EXPECT_EQ(floorDivideOf(-7.0f, 0.0f), -INFINITY);
  EXPECT_TRUE(std::isnan(floorDivideOf(0.0f, 0.0f)));
  float z = floorDivideOf(0.0f, -1.0f);
  EXPECT_EQ(z, 0.0f);
  EXPECT_TRUE(std::signbit(z));
  float small = floorDivideOf(0.5f, 3.0f);
  EXPECT_EQ(small, 0.0f);
  EXPECT_FALSE(std::signbit(small));
  // a == b * (a // b) + a % b.
  for (double a : {-7.25, -3.0, -0.5, 0.0, 2.5, 9.75})
    for (double b : {-2.5, -1.0, 0.75, 3.0})
      EXPECT_DOUBLE_EQ(b * floorDivideOf(a, b) + remainderOf(a, b), a)
          << a << " " << b;
}

TEST(CudaElementwise, MinimumMaximumPropagateNaN) {
  float nan = std::numeric_limits<float>::quiet_NaN();
  EXPECT_TRUE(std::isnan(minimumOf(nan, 1.0f)));
  EXPECT_TRUE(std::isnan(minimumOf(1.0f, nan)));
  EXPECT_TRUE(std::isnan(maximumOf(nan, 1.0f)));
  EXPECT_TRUE(std::isnan(maximumOf(1.0f, nan)));
  EXPECT_EQ(minimumOf(-1.0f, 2.0f), -1.0f);
  EXPECT_EQ(maximumOf(-1.0f, 2.0f), 2.0f);
  EXPECT_EQ(minimumOf(-INFINITY, 2.0f), -INFINITY);
  EXPECT_EQ(minimumOf<int64_t>(-3, 2), -3);
  EXPECT_EQ(maximumOf<int32_t>(-3, 2), 2);
  EXPECT_FALSE(minimumOf(true, false));
  EXPECT_TRUE(maximumOf(true, false));
}

TEST(CudaElementwise, Relu) {
  EXPECT_TRUE(std::isnan(reluOf(std::numeric_limits<float>::quiet_NaN())));
  EXPECT_EQ(reluOf(-2.0f), 0.0f);
  EXPECT_EQ(reluOf(3.0f), 3.0f);
  EXPECT_EQ(reluOf<int64_t>(-5), 0);
  EXPECT_EQ(reluOf<int32_t>(5), 5);
}

TEST(CudaElementwise, IntegerPower) {
  EXPECT_EQ(integerPow<int64_t>(2, 10), 1024);
  EXPECT_EQ(integerPow<int64_t>(-3, 3), -27);
  EXPECT_EQ(integerPow<int64_t>(0, 0), 1);
  EXPECT_EQ(integerPow<int32_t>(1, -5), 1);
  EXPECT_EQ(integerPow<int32_t>(-1, -3), -1);
  EXPECT_EQ(integerPow<int32_t>(-1, -4), 1);
  EXPECT_EQ(integerPow<int32_t>(2, -1), 0);
  EXPECT_EQ(integerPow<int64_t>(3, 39), 4052555153018976267LL);
}

TEST(CudaElementwise, PowScalarShortcuts) {
  EXPECT_EQ(powScalarFloat(3.0f, 2.0f), 9.0f);
  EXPECT_EQ(powScalarFloat(3.0f, 3.0f), 27.0f);
  EXPECT_EQ(powScalarFloat(4.0f, 0.5f), 2.0f);
  EXPECT_EQ(powScalarFloat(4.0f, -0.5f), 0.5f);
  EXPECT_EQ(powScalarFloat(4.0f, -1.0f), 0.25f);
  EXPECT_EQ(powScalarFloat(2.0f, -2.0f), 0.25f);
  EXPECT_EQ(powScalarFloat(NAN, 0.0f), 1.0f);
  EXPECT_EQ(powScalarFloat(5.0f, 1.0f), 5.0f);
  EXPECT_FLOAT_EQ(powScalarFloat(2.0f, 1.5f), std::pow(2.0f, 1.5f));
  EXPECT_TRUE(std::isnan(powScalarFloat(-4.0f, 0.5f)));
}

TEST(CudaElementwise, SigmoidAndSilu) {
  EXPECT_FLOAT_EQ(sigmoidOf(0.0f), 0.5f);
  EXPECT_EQ(sigmoidOf(-100.0f), 0.0f);
  EXPECT_EQ(sigmoidOf(100.0f), 1.0f);
  EXPECT_EQ(siluOf(-100.0f), 0.0f);
  EXPECT_FLOAT_EQ(siluOf(2.0f), float(2.0 / (1.0 + std::exp(-2.0))));
}

TEST(CudaElementwise, GeluMatchesItsDefinitions) {
  for (double x = -9; x <= 9; x += 0.37) {
    double exact = 0.5 * x * (1 + std::erf(x / std::sqrt(2.0)));
    double u = std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x);
    double approx = 0.5 * x * (1 + std::tanh(u));
    EXPECT_NEAR(geluOf(float(x)), exact, 1e-6 + 1e-6 * std::fabs(exact)) << x;
    EXPECT_NEAR(geluOf(x), exact, 1e-14 + 1e-12 * std::fabs(exact)) << x;
    EXPECT_NEAR(geluTanhOf(float(x)), approx, 1e-6 + 1e-6 * std::fabs(approx))
        << x;
    // The gradients against central differences in double.
    double h = 1e-6;
    double dExact = (geluOf(x + h) - geluOf(x - h)) / (2 * h);
    double dApprox = (geluTanhOf(x + h) - geluTanhOf(x - h)) / (2 * h);
    EXPECT_NEAR(geluBackwardOf(1.5, x), 1.5 * dExact, 1e-7) << x;
    EXPECT_NEAR(geluTanhBackwardOf(1.5, x), 1.5 * dApprox, 1e-7) << x;
    EXPECT_NEAR(geluTanhBackwardOf(1.5f, float(x)), 1.5 * dApprox, 1e-5) << x;
  }
  EXPECT_EQ(geluTanhOf(-100.0f), 0.0f);
  EXPECT_NEAR(geluTanhBackwardOf(1.0f, -100.0f), 0.0f, 1e-29);
}

} // namespace

// Dense operands go in packs of kPack elements, each pack one access of at
// most 16 bytes, where every address is a multiple of its pack's size.
TEST(CudaElementwise, PackAlignment) {
  EXPECT_EQ(packAlignment(1), 8u);
  EXPECT_EQ(packAlignment(2), 16u);
  EXPECT_EQ(packAlignment(4), 16u);
  EXPECT_EQ(packAlignment(8), 16u);
  EXPECT_EQ(alignof(Pack<uint16_t>), 16u);
  EXPECT_EQ(sizeof(Pack<uint16_t>), 16u);
  EXPECT_EQ(sizeof(Pack<float>), 32u);
  alignas(16) static char buffer[64];
  EXPECT_TRUE(packAligned(buffer, 2));
  EXPECT_TRUE(packAligned(buffer + 16, 4));
  // A view starting one bf16 element in is not: its kernel goes element by
  // element.
  EXPECT_FALSE(packAligned(buffer + 2, 2));
  EXPECT_TRUE(packAligned(buffer + 8, 1));
  EXPECT_FALSE(packAligned(buffer + 4, 1));
}
