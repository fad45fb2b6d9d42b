//===- CudaFlashAttentionTest.cpp - tiled attention arithmetic ------------===//
//
// The host-callable parts of the FlashAttention-form kernels
// (FlashAttention.h): the launch covers every row and stack, the shared
// memory fits the devices built for, unsupported shapes are named, and the
// online softmax the forward kernel runs, tile by tile, gives the
// log-sum-exp and the softmax-weighted sum of a direct computation
// (masked keys, fully masked rows and a growing maximum included). On a
// machine without a GPU, `--device=cuda` on the FlashAttention form is the
// backend's usual error (cuda-backend.test).
//
//===----------------------------------------------------------------------===//

#include "../../lib/Runtime/CUDA/FlashAttention.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

using namespace merak::runtime::cuda;

namespace {

TEST(CudaFlashAttention, LaunchCoversEveryRowAndStack) {
  for (FlashKernel kernel : {FlashKernel::Forward, FlashKernel::KeyValueGrad,
                             FlashKernel::QueryGrad})
    for (int64_t t : {1, 31, 32, 33, 64, 1000, 1024, 8192})
      for (int64_t n : {1, 96, 65535, 65536, 200000}) {
        FlashLaunch l = flashLaunch(kernel, n, t, 64, 64, 4);
        int64_t per =
            kernel == FlashKernel::KeyValueGrad ? kFlashKeys : kFlashRows;
        EXPECT_GE(int64_t(l.tiles) * per, t);
        EXPECT_LT(int64_t(l.tiles - 1) * per, t);
        EXPECT_LE(l.stacks, 65535u);
        EXPECT_GE(int64_t(l.stacks) * l.stacksZ, n);
        // No grid z-slice beyond the last stack is whole.
        EXPECT_LT(int64_t(l.stacks) * (l.stacksZ - 1), n);
      }
}

TEST(CudaFlashAttention, WarpsOwnTheTile) {
  EXPECT_EQ(kFlashKeys, 32); // a lane per key of a tile
  EXPECT_EQ(kFlashRowsPerWarp * (kFlashThreads / 32), kFlashRows);
  EXPECT_EQ(kFlashRowsPerWarp * (kFlashThreads / 32), kFlashKeys);
  EXPECT_EQ(kFlashDimsPerLane * 32, kFlashMaxDim);
}

TEST(CudaFlashAttention, SharedMemoryFits) {
  // GPT-2's heads (64) in f32 and bf16 (float accumulation) need no more
  // than the default 48 KiB in the forward and the query-gradient kernel.
  EXPECT_LE(flashSharedBytes(FlashKernel::Forward, 64, 64, 4), 48 * 1024);
  EXPECT_LE(flashSharedBytes(FlashKernel::QueryGrad, 64, 64, 4), 48 * 1024);
  // Every kernel at the largest heads, even in f64, within sm_80's 163 KiB
  // (sm_90: 227 KiB).
  for (FlashKernel kernel : {FlashKernel::Forward, FlashKernel::KeyValueGrad,
                             FlashKernel::QueryGrad})
    for (int64_t acc : {4, 8})
      EXPECT_LE(flashSharedBytes(kernel, kFlashMaxDim, kFlashMaxDim, acc),
                163 * 1024);
  // The key and value gradients: K, V, Q and the output gradient tiles
  // (padded), probabilities and score gradients, two row vectors.
  EXPECT_EQ(flashSharedBytes(FlashKernel::KeyValueGrad, 64, 32, 4),
            4 * (32 * 65 + 32 * 33 + 32 * 65 + 32 * 33 + 2 * 32 * 33 + 64));
}

TEST(CudaFlashAttention, UnsupportedShapesAreNamed) {
  EXPECT_EQ(flashUnsupported(1024, 64, 64), nullptr);
  EXPECT_EQ(flashUnsupported(1, 128, 1), nullptr);
  EXPECT_STREQ(flashUnsupported(16, 129, 64),
               "head dimensions must be 1 to 128");
  EXPECT_STREQ(flashUnsupported(16, 64, 256),
               "head dimensions must be 1 to 128");
  EXPECT_STREQ(flashUnsupported(0, 64, 64), "the sequence is empty");
}

TEST(CudaFlashAttention, MaskedOutElements) {
  // A tile is skipped when every element of its mask removes its score.
  EXPECT_TRUE(flashMaskedOut(false));
  EXPECT_FALSE(flashMaskedOut(true));
  EXPECT_TRUE(flashMaskedOut(-INFINITY));
  EXPECT_FALSE(flashMaskedOut(0.0f));
  EXPECT_FALSE(flashMaskedOut(-1e30f)); // a large negative still counts
  EXPECT_FALSE(flashMaskedOut(-1e300));
  EXPECT_TRUE(flashMaskedOut(double(-INFINITY)));
  // Under a causal mask of 1,024 rows the tiles on and below the diagonal
  // have a key to attend: 528 of 1,024.
  int64_t t = 1024, visible = 0;
  for (int64_t i0 = 0; i0 < t; i0 += kFlashRows)
    for (int64_t j0 = 0; j0 < t; j0 += kFlashKeys) {
      bool any = false;
      for (int64_t i = i0; i < i0 + kFlashRows && !any; ++i)
        for (int64_t j = j0; j < j0 + kFlashKeys && !any; ++j)
          any = !flashMaskedOut(j <= i);
      visible += any;
    }
  EXPECT_EQ(visible, 528);
}

/// The forward kernel's per-row arithmetic over tiles of `kFlashKeys`
/// scores: the log-sum-exp and the weighted sum of `values`.
void onlineRow(const std::vector<float> &scores,
               const std::vector<float> &values, float &lse, float &weighted) {
  OnlineSoftmax<float> row;
  float acc = 0;
  for (size_t j0 = 0; j0 < scores.size(); j0 += kFlashKeys) {
    size_t j1 = std::min(scores.size(), j0 + kFlashKeys);
    float tileMax = -INFINITY;
    for (size_t j = j0; j < j1; ++j)
      tileMax = std::max(tileMax, scores[j]);
    acc *= row.absorb(tileMax);
    float tileSum = 0;
    for (size_t j = j0; j < j1; ++j) {
      float p = row.weight(scores[j]);
      tileSum += p;
      acc += p * values[j];
    }
    row.add(tileSum);
  }
  lse = row.logSumExp();
  weighted = acc / row.l;
}

TEST(CudaFlashAttention, OnlineSoftmaxMatchesTheDirectOne) {
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  std::bernoulli_distribution masked(0.3);
  for (int trial = 0; trial < 200; ++trial) {
    size_t t = 1 + trial * 7 % 300;
    std::vector<float> scores(t), values(t);
    for (size_t j = 0; j < t; ++j) {
      // Later tiles hold larger scores now and then: the maximum grows.
      scores[j] = normal(rng) + (trial % 3 == 0 ? float(j) * 0.1f : 0.0f);
      if (masked(rng) && j > 0)
        scores[j] = -INFINITY;
      values[j] = normal(rng);
    }
    double mx = -INFINITY;
    for (float s : scores)
      mx = std::max(mx, double(s));
    double sum = 0, weighted = 0;
    for (size_t j = 0; j < t; ++j) {
      double p = std::exp(double(scores[j]) - mx);
      sum += p;
      weighted += p * values[j];
    }
    float lse, out;
    onlineRow(scores, values, lse, out);
    EXPECT_NEAR(lse, mx + std::log(sum), 1e-5 * (1 + std::fabs(mx)))
        << "t = " << t;
    EXPECT_NEAR(out, weighted / sum, 1e-5 * (1 + std::fabs(weighted / sum)))
        << "t = " << t;
  }
}

TEST(CudaFlashAttention, FullyMaskedRowIsNaNWithMinusInfinityLogSumExp) {
  // Masked throughout, and masked only in its first tile.
  std::vector<float> scores(70, -INFINITY), values(70, 1.0f);
  float lse, out;
  onlineRow(scores, values, lse, out);
  EXPECT_TRUE(std::isinf(lse) && lse < 0);
  EXPECT_TRUE(std::isnan(out));
  scores[40] = 2.0f;
  values[40] = 5.0f;
  onlineRow(scores, values, lse, out);
  EXPECT_FLOAT_EQ(lse, 2.0f);
  EXPECT_FLOAT_EQ(out, 5.0f);
}

TEST(CudaFlashAttention, TensorCoreShapes) {
  for (int64_t d : {16, 32, 48, 64, 80, 96, 112, 128})
    EXPECT_EQ(flashMmaUnsupported(d, 64), nullptr) << d;
  for (int64_t d : {0, 8, 24, 40, 72, 100, 144, 256}) {
    EXPECT_NE(flashMmaUnsupported(d, 64), nullptr) << d;
    EXPECT_NE(flashMmaUnsupported(64, d), nullptr) << d;
  }
  // Accumulators sized by the larger dimension.
  EXPECT_EQ(flashMmaDimBlocks(64, 64), 4);
  EXPECT_EQ(flashMmaDimBlocks(16, 64), 4);
  EXPECT_EQ(flashMmaDimBlocks(80, 16), 8);
  EXPECT_EQ(flashMmaDimBlocks(64, 128), 8);
  // Four warps of 16 rows make a tile, in rows and in keys.
  EXPECT_EQ(kMmaWarpRows * (kMmaThreads / 32), kMmaRows);
  EXPECT_EQ(kMmaWarpRows * (kMmaThreads / 32), kMmaKeys);
}

/// Every array of a shared-memory layout (offset, bytes; empty ones
/// skipped) 128-byte aligned, in order, without overlap, within `total`.
void expectInOrderAndAligned(
    const std::vector<std::pair<int64_t, int64_t>> &arrays, int64_t total) {
  int64_t end = 0;
  for (auto [at, bytes] : arrays) {
    if (bytes == 0)
      continue;
    EXPECT_EQ(at % 128, 0);
    EXPECT_GE(at, end);
    end = at + bytes;
  }
  EXPECT_LE(end, total);
}

TEST(CudaFlashAttention, TensorCoreLayoutAlignsEveryFragment) {
  // WMMA loads and stores need a 32-byte aligned first element and a pitch
  // of 16 bytes; a tile's 16-row blocks and 16-column blocks must keep both.
  for (FlashKernel kernel : {FlashKernel::Forward, FlashKernel::KeyValueGrad,
                             FlashKernel::QueryGrad})
    for (int64_t d = 16; d <= 128; d += 16)
      for (int64_t e = 16; e <= 128; e += 16) {
        FlashMmaLayout l = flashMmaLayout(kernel, d, e);
        // Every array 128-byte aligned, in order, without overlap.
        std::vector<std::pair<int64_t, int64_t>> arrays = {
            {l.q, kMmaRows * mmaPitch16(d) * 2},
            {l.k, kMmaKeys * mmaPitch16(d) * 2},
            {l.v, kMmaKeys * mmaPitch16(e) * 2},
            {l.g,
             kernel == FlashKernel::Forward ? 0 : kMmaRows * mmaPitch16(e) * 2},
            {l.scratch, kMmaThreads / 32 * kMmaWarpRows * l.scratchPitch * 4},
            {l.p, kernel == FlashKernel::QueryGrad
                      ? 0
                      : kMmaRows * mmaPitch16(kMmaKeys) * 2},
            {l.ds, kernel == FlashKernel::Forward
                       ? 0
                       : kMmaRows * mmaPitch16(kMmaKeys) * 2},
            {l.out,
             kernel == FlashKernel::Forward ? kMmaRows * mmaPitch32(e) * 4 : 0},
            {l.lse, kernel == FlashKernel::KeyValueGrad ? kMmaRows * 4 : 0},
            {l.sums, kernel == FlashKernel::KeyValueGrad ? kMmaRows * 4 : 0},
            {l.maskRow, kMmaRows * 8}};
        expectInOrderAndAligned(arrays, l.bytes);
        // sm_80's largest block allowance (163 KiB; sm_90: 227 KiB).
        EXPECT_LE(l.bytes, 163 * 1024) << d << " " << e;
        // Pitches of 16 bytes; 16-row blocks 32-byte aligned.
        for (int64_t cols : {d, e, int64_t(kMmaKeys)}) {
          EXPECT_EQ(mmaPitch16(cols) * 2 % 16, 0);
          EXPECT_EQ(16 * mmaPitch16(cols) * 2 % 32, 0);
          EXPECT_EQ(mmaPitch32(cols) * 4 % 16, 0);
          EXPECT_EQ(16 * mmaPitch32(cols) * 4 % 32, 0);
        }
        EXPECT_EQ(l.scratchPitch * 4 % 16, 0);
        EXPECT_EQ(kMmaWarpRows * l.scratchPitch * 4 % 32, 0);
        // The second float tile starts 32-byte aligned and fits, as do
        // the accumulators on their way out.
        EXPECT_EQ(kMmaSecond * 4 % 32, 0);
        EXPECT_GE(kMmaSecond, kMmaKeys);
        EXPECT_GE(l.scratchPitch, kMmaSecond + kMmaKeys);
        EXPECT_GE(l.scratchPitch, std::max(d, e));
      }
}

TEST(CudaFlashAttention, TensorCoreLaunchCoversEveryRow) {
  for (FlashKernel kernel : {FlashKernel::Forward, FlashKernel::KeyValueGrad,
                             FlashKernel::QueryGrad})
    for (int64_t t : {1, 63, 64, 65, 1024, 8191})
      for (int64_t n : {1, 96, 70000}) {
        FlashLaunch l = flashMmaLaunch(kernel, n, t, 64, 64);
        EXPECT_GE(int64_t(l.tiles) * kMmaRows, t);
        EXPECT_LT(int64_t(l.tiles - 1) * kMmaRows, t);
        EXPECT_GE(int64_t(l.stacks) * l.stacksZ, n);
        EXPECT_EQ(l.sharedBytes, flashMmaLayout(kernel, 64, 64).bytes);
      }
}

//===----------------------------------------------------------------------===//
// The register-tile form
//===----------------------------------------------------------------------===//

TEST(CudaFlashAttention, FragmentLayoutsArePtxs) {
  // PTX ISA, mma.m16n8k16 with 16-bit operands: lane 5 is group 1, pair 1.
  EXPECT_EQ(fragGroup(5), 1);
  EXPECT_EQ(fragPair(5), 1);
  const int aRows[4] = {1, 9, 1, 9}, aCols[4] = {2, 2, 10, 10};
  for (int r = 0; r < 4; ++r) {
    EXPECT_EQ(fragARow(5, r), aRows[r]) << r;
    EXPECT_EQ(fragACol(5, r), aCols[r]) << r;
  }
  EXPECT_EQ(fragBRow(5, 0), 2);
  EXPECT_EQ(fragBRow(5, 1), 10);
  EXPECT_EQ(fragBCol(5), 1);
  const int cRows[4] = {1, 1, 9, 9}, cCols[4] = {2, 3, 2, 3};
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(fragCRow(5, i), cRows[i]) << i;
    EXPECT_EQ(fragCCol(5, i), cCols[i]) << i;
  }
  EXPECT_EQ(fragARow(31, 3), 15);
  EXPECT_EQ(fragACol(31, 3), 14);
  EXPECT_EQ(fragCRow(31, 3), 15);
  EXPECT_EQ(fragCCol(31, 3), 7);
}

TEST(CudaFlashAttention, FragmentsCoverTheirMatricesOnce) {
  std::vector<int> a(16 * 16), b(16 * 8), c(16 * 8);
  for (int lane = 0; lane < 32; ++lane) {
    for (int r = 0; r < 4; ++r)
      for (int x = 0; x < 2; ++x)
        ++a[fragARow(lane, r) * 16 + fragACol(lane, r) + x];
    for (int r = 0; r < 2; ++r)
      for (int x = 0; x < 2; ++x)
        ++b[(fragBRow(lane, r) + x) * 8 + fragBCol(lane)];
    for (int i = 0; i < 4; ++i)
      ++c[fragCRow(lane, i) * 8 + fragCCol(lane, i)];
  }
  for (int x : a)
    EXPECT_EQ(x, 1);
  for (int x : b)
    EXPECT_EQ(x, 1);
  for (int x : c)
    EXPECT_EQ(x, 1);
}

TEST(CudaFlashAttention, AccumulatorTilesAreTheNextLeftOperand) {
  // Register r of a left operand, made of accumulator tile fragFromTile(r)
  // (columns 8 x that on), elements fragFromC(r) and the next: the same
  // (row, column) pairs the operand's layout asks for.
  for (int lane = 0; lane < 32; ++lane)
    for (int r = 0; r < 4; ++r) {
      int i = fragFromC(r), tile = fragFromTile(r);
      EXPECT_EQ(fragCRow(lane, i), fragARow(lane, r));
      EXPECT_EQ(fragCRow(lane, i + 1), fragARow(lane, r));
      EXPECT_EQ(8 * tile + fragCCol(lane, i), fragACol(lane, r));
      EXPECT_EQ(8 * tile + fragCCol(lane, i + 1), fragACol(lane, r) + 1);
    }
  // The lanes an xor of 1, 2 or 3 reaches hold the same rows.
  for (int lane = 0; lane < 32; ++lane)
    for (int x = 1; x < 4; ++x)
      EXPECT_EQ(fragGroup(lane ^ x), fragGroup(lane));
}

// A warp of the register-tile kernels emulated lane by lane: each
// m16n8k16 step rebuilt from the 32 lanes' registers by the fragment
// layouts above. Accumulators are [tile][lane][element]: eight tiles of
// 8 columns (64 keys, or head dimensions up to 64).
using Tiles = float[8][32][4];

/// One step: the lanes' registers in, the lanes' accumulators updated.
void emulatedMma(float (&c)[32][4], const float (&a)[32][4][2],
                 const float (&b)[32][2][2]) {
  float am[16][16], bm[16][8];
  for (int lane = 0; lane < 32; ++lane) {
    for (int r = 0; r < 4; ++r)
      for (int x = 0; x < 2; ++x)
        am[fragARow(lane, r)][fragACol(lane, r) + x] = a[lane][r][x];
    for (int r = 0; r < 2; ++r)
      for (int x = 0; x < 2; ++x)
        bm[fragBRow(lane, r) + x][fragBCol(lane)] = b[lane][r][x];
  }
  for (int lane = 0; lane < 32; ++lane)
    for (int i = 0; i < 4; ++i) {
      float sum = 0;
      for (int k = 0; k < 16; ++k)
        sum += am[fragCRow(lane, i)][k] * bm[k][fragCCol(lane, i)];
      c[lane][i] += sum;
    }
}

/// productRows: the warp's 16 rows from `base` of `a` (inner dimension
/// `n`) times rows 8j.. of the 64 from `first` of `b` (rows past `t` are
/// zero), acc[j] for j < 8.
void products(Tiles &acc, const std::vector<float> &a, int base,
              const std::vector<float> &b, int first, int n, int t) {
  for (int j = 0; j < 8; ++j) {
    for (auto &lane : acc[j])
      for (float &x : lane)
        x = 0;
    for (int kb = 0; kb < n / 16; ++kb) {
      float fa[32][4][2], fb[32][2][2];
      for (int lane = 0; lane < 32; ++lane) {
        for (int r = 0; r < 4; ++r)
          for (int x = 0; x < 2; ++x)
            fa[lane][r][x] = a[(base + fragARow(lane, r)) * n + kb * 16 +
                               fragACol(lane, r) + x];
        int row = first + 8 * j + fragBCol(lane);
        for (int r = 0; r < 2; ++r)
          for (int x = 0; x < 2; ++x)
            fb[lane][r][x] =
                row < t ? b[row * n + kb * 16 + fragBRow(lane, r) + x] : 0;
      }
      emulatedMma(acc[j], fa, fb);
    }
  }
}

/// accumulateWeighted: out += W B, W the 16 x 64 weights in accumulator
/// layout, B the 64 rows from `first` of `b` (width `n`, rows past `t`
/// zero).
void weighted(Tiles &out, const Tiles &w, const std::vector<float> &b,
              int first, int n, int t) {
  for (int kk = 0; kk < 4; ++kk)
    for (int nt = 0; nt < n / 8; ++nt) {
      float fa[32][4][2], fb[32][2][2];
      for (int lane = 0; lane < 32; ++lane) {
        for (int r = 0; r < 4; ++r)
          for (int x = 0; x < 2; ++x)
            fa[lane][r][x] =
                w[2 * kk + fragFromTile(r)][lane][fragFromC(r) + x];
        for (int r = 0; r < 2; ++r)
          for (int x = 0; x < 2; ++x) {
            int row = first + 16 * kk + fragBRow(lane, r) + x;
            fb[lane][r][x] = row < t ? b[row * n + nt * 8 + fragBCol(lane)] : 0;
          }
      }
      emulatedMma(out[nt], fa, fb);
    }
}

std::vector<float> drawn(std::mt19937 &rng, int n) {
  std::uniform_real_distribution<float> u(-1.5, 1.5);
  std::vector<float> x(n);
  for (float &v : x)
    v = u(rng);
  return x;
}

/// The register-tile forward of one warp (16 query rows) against the
/// direct softmax: the kernel's algorithm, tile by tile, in float, with
/// masked keys, a fully masked row and keys past a tile edge; sequence
/// `t`, head dimensions `d` and `e` (multiples of 16 up to 64), scores
/// divided by the scale or multiplied, a boolean mask or an additive one.
void checkRegisterTileForward(int t, int d, int e, bool divide, bool additive) {
  SCOPED_TRACE(::testing::Message() << "t " << t << ", d " << d << ", e " << e
                                    << (divide ? ", divided" : "")
                                    << (additive ? ", additive mask" : ""));
  const int rows = 16;
  std::mt19937 rng(7 + t + d + e);
  std::vector<float> q = drawn(rng, rows * d), k = drawn(rng, t * d),
                     v = drawn(rng, t * e);
  // Row r sees keys up to 40 + 7 r (a causal-like mask); row 3 none.
  auto visible = [](int r, int key) { return r != 3 && key <= 40 + 7 * r; };
  auto bias = [&](int r, int key) {
    if (key >= t || !visible(r, key))
      return -INFINITY;
    return additive ? 0.25f * float((3 * r + key) % 5) - 0.5f : 0.0f;
  };
  const float scale = divide ? 4.0f : 0.25f;
  Tiles o = {};
  OnlineSoftmax<float> soft[32][2]; // a lane's rows g and g + 8
  for (int j0 = 0; j0 < t; j0 += kMmaKeys) {
    Tiles s;
    products(s, q, 0, k, j0, d, t);
    float tileMax[32][2], sums[32][2] = {};
    for (auto &lane : tileMax)
      lane[0] = lane[1] = -INFINITY;
    for (int j = 0; j < 8; ++j)
      for (int lane = 0; lane < 32; ++lane)
        for (int i = 0; i < 4; ++i) {
          int r = fragCRow(lane, i), key = j0 + 8 * j + fragCCol(lane, i);
          float x =
              flashBiasedScore(s[j][lane][i], bias(r, key), scale, divide);
          s[j][lane][i] = x;
          tileMax[lane][i >> 1] = std::max(tileMax[lane][i >> 1], x);
        }
    // The four lanes of a row (xor 1, 2, 3) combine their maxima and sums.
    for (int lane = 0; lane < 32; ++lane)
      for (int h = 0; h < 2; ++h) {
        float m = -INFINITY;
        for (int x = 0; x < 4; ++x)
          m = std::max(m, tileMax[lane ^ x][h]);
        float factor = soft[lane][h].absorb(m);
        for (int nt = 0; nt < e / 8; ++nt)
          for (int i = 2 * h; i < 2 * h + 2; ++i)
            o[nt][lane][i] *= factor;
      }
    for (int j = 0; j < 8; ++j)
      for (int lane = 0; lane < 32; ++lane)
        for (int i = 0; i < 4; ++i) {
          float p = soft[lane][i >> 1].weight(s[j][lane][i]);
          s[j][lane][i] = p;
          sums[lane][i >> 1] += p;
        }
    for (int lane = 0; lane < 32; ++lane)
      for (int h = 0; h < 2; ++h) {
        float sum = 0;
        for (int x = 0; x < 4; ++x)
          sum += sums[lane ^ x][h];
        soft[lane][h].add(sum);
      }
    // The probabilities, as they are, the left operand of the values.
    weighted(o, s, v, j0, e, t);
  }
  for (int lane = 0; lane < 32; ++lane)
    for (int i = 0; i < 4; ++i) {
      int r = fragCRow(lane, i);
      const OnlineSoftmax<float> &row = soft[lane][i >> 1];
      // The direct softmax of row r.
      std::vector<double> w(t);
      double mx = -INFINITY, total = 0;
      for (int key = 0; key < t; ++key) {
        double dot = 0;
        for (int x = 0; x < d; ++x)
          dot += double(q[r * d + x]) * k[key * d + x];
        w[key] = visible(r, key)
                     ? (divide ? dot / scale : dot * scale) + bias(r, key)
                     : -INFINITY;
        mx = std::max(mx, w[key]);
      }
      for (double x : w)
        total += x == -INFINITY ? 0 : std::exp(x - mx);
      if (r == 3) {
        EXPECT_EQ(row.logSumExp(), -INFINITY);
        EXPECT_TRUE(std::isnan(o[0][lane][i] / row.l));
        continue;
      }
      EXPECT_NEAR(row.logSumExp(), mx + std::log(total), 1e-4);
      for (int nt = 0; nt < e / 8; ++nt) {
        int col = nt * 8 + fragCCol(lane, i);
        double want = 0;
        for (int key = 0; key < t; ++key)
          if (w[key] != -INFINITY)
            want += std::exp(w[key] - mx) / total * v[key * e + col];
        EXPECT_NEAR(o[nt][lane][i] / row.l, want, 1e-4)
            << "row " << r << " column " << col;
      }
    }
}

TEST(CudaFlashAttention, RegisterTileForwardMatchesTheDirectOne) {
  checkRegisterTileForward(150, 32, 16, false, false);
  checkRegisterTileForward(200, 64, 64, true, true);
  checkRegisterTileForward(70, 48, 32, false, true);
}

/// The register-tile backward's two kernels, one warp of each emulated
/// lane by lane (every product an m16n8k16 step rebuilt from the lanes'
/// registers), against the direct gradients: the key and value gradients
/// of keys 16-31 (the scores transposed: keys are the rows of the warp's
/// products) and the query gradients of rows 16-31, over every tile of
/// the other side, with masked scores, a fully masked row and tile edges.
/// Sequence `t`, head dimensions `d` and `e` (multiples of 16 up to 64),
/// scores divided by the scale or multiplied, a boolean mask or an additive
/// one.
void checkRegisterTileBackward(int t, int d, int e, bool divide,
                               bool additive) {
  SCOPED_TRACE(::testing::Message() << "t " << t << ", d " << d << ", e " << e
                                    << (divide ? ", divided" : "")
                                    << (additive ? ", additive mask" : ""));
  const float scale = divide ? 2.5f : 0.3f;
  std::mt19937 rng(11 + t + d + e);
  std::vector<float> q = drawn(rng, t * d), k = drawn(rng, t * d),
                     v = drawn(rng, t * e), go = drawn(rng, t * e);
  auto visible = [](int row, int key) {
    return row != 20 && key <= row + 5 && (row + key) % 7 != 3;
  };
  auto bias = [&](int row, int key) {
    if (!visible(row, key))
      return -INFINITY;
    return additive ? 0.25f * float((3 * row + key) % 5) - 0.5f : 0.0f;
  };
  // The direct computation, in double.
  std::vector<double> pr(t * t), lse(t), sums(t), gq(t * d), gk(t * d),
      gv(t * e);
  for (int i = 0; i < t; ++i) {
    double mx = -INFINITY, total = 0;
    for (int j = 0; j < t; ++j) {
      double dot = 0;
      for (int x = 0; x < d; ++x)
        dot += double(q[i * d + x]) * k[j * d + x];
      pr[i * t + j] = visible(i, j)
                          ? (divide ? dot / scale : dot * scale) + bias(i, j)
                          : -INFINITY;
      mx = std::max(mx, pr[i * t + j]);
    }
    for (int j = 0; j < t; ++j)
      total += pr[i * t + j] == -INFINITY ? 0 : std::exp(pr[i * t + j] - mx);
    lse[i] = total == 0 ? -INFINITY : mx + std::log(total);
    for (int j = 0; j < t; ++j)
      pr[i * t + j] = total == 0 || pr[i * t + j] == -INFINITY
                          ? 0
                          : std::exp(pr[i * t + j] - lse[i]);
    for (int c = 0; c < e; ++c) {
      double out = 0;
      for (int j = 0; j < t; ++j)
        out += pr[i * t + j] * v[j * e + c];
      sums[i] += go[i * e + c] * out;
    }
  }
  for (int i = 0; i < t; ++i)
    for (int j = 0; j < t; ++j) {
      double dp = 0;
      for (int c = 0; c < e; ++c)
        dp += double(go[i * e + c]) * v[j * e + c];
      double p = pr[i * t + j], ds = p * (dp - sums[i]);
      ds = divide ? ds / scale : ds * scale;
      for (int c = 0; c < e; ++c)
        gv[j * e + c] += p * go[i * e + c];
      for (int x = 0; x < d; ++x) {
        gq[i * d + x] += ds * k[j * d + x];
        gk[j * d + x] += ds * q[i * d + x];
      }
    }
  auto check = [&](const Tiles &got, int base, int n,
                   const std::vector<double> &want, const char *what) {
    for (int nt = 0; nt < n / 8; ++nt)
      for (int lane = 0; lane < 32; ++lane)
        for (int i = 0; i < 4; ++i) {
          int row = base + fragCRow(lane, i), col = nt * 8 + fragCCol(lane, i);
          EXPECT_NEAR(got[nt][lane][i], want[row * n + col], 1e-4)
              << what << " row " << row << " column " << col;
        }
  };
  // Key and value gradients of keys 16-31 (the block of keys 0-63).
  {
    const int keys = 16;
    Tiles dk = {}, dv = {};
    for (int i0 = 0; i0 < t; i0 += kMmaRows) {
      Tiles st, dpt;
      products(st, k, keys, q, i0, d, t);
      products(dpt, v, keys, go, i0, e, t);
      for (int j = 0; j < 8; ++j)
        for (int lane = 0; lane < 32; ++lane)
          for (int i = 0; i < 4; ++i) {
            int key = keys + fragCRow(lane, i),
                row = i0 + 8 * j + fragCCol(lane, i);
            FlashScoreGrad g;
            if (row < t && key < t)
              g = flashScoreGrad(st[j][lane][i], bias(row, key),
                                 dpt[j][lane][i], float(lse[row]),
                                 float(sums[row]), scale, divide);
            st[j][lane][i] = g.p;
            dpt[j][lane][i] = g.ds;
          }
      // Row 20 is fully masked: its log-sum-exp is -inf, and the kernel,
      // like the op, gives its scores' gradients NaN; drop it here.
      for (int j = 0; j < 8; ++j)
        for (int lane = 0; lane < 32; ++lane)
          for (int i = 0; i < 4; ++i)
            if (i0 + 8 * j + fragCCol(lane, i) == 20) {
              EXPECT_TRUE(std::isnan(st[j][lane][i]));
              st[j][lane][i] = dpt[j][lane][i] = 0;
            }
      weighted(dv, st, go, i0, e, t);
      weighted(dk, dpt, q, i0, d, t);
    }
    check(dv, keys, e, gv, "value gradient");
    check(dk, keys, d, gk, "key gradient");
  }
  // Query gradients of rows 16-31 (the block of rows 0-63).
  {
    const int rows = 16;
    Tiles dq = {};
    for (int j0 = 0; j0 < t; j0 += kMmaKeys) {
      Tiles s, dp;
      products(s, q, rows, k, j0, d, t);
      products(dp, go, rows, v, j0, e, t);
      for (int j = 0; j < 8; ++j)
        for (int lane = 0; lane < 32; ++lane)
          for (int i = 0; i < 4; ++i) {
            int row = rows + fragCRow(lane, i),
                key = j0 + 8 * j + fragCCol(lane, i);
            FlashScoreGrad g;
            if (row < t && key < t && row != 20)
              g = flashScoreGrad(s[j][lane][i], bias(row, key), dp[j][lane][i],
                                 float(lse[row]), float(sums[row]), scale,
                                 divide);
            s[j][lane][i] = g.ds;
          }
      weighted(dq, s, k, j0, d, t);
    }
    for (int nt = 0; nt < d / 8; ++nt)
      for (int lane = 0; lane < 32; ++lane)
        for (int i = 0; i < 4; ++i)
          if (rows + fragCRow(lane, i) == 20)
            dq[nt][lane][i] = 0; // (gq's row 20 is 0 too)
    check(dq, rows, d, gq, "query gradient");
  }
}

TEST(CudaFlashAttention, RegisterTileBackwardMatchesTheDirectOne) {
  checkRegisterTileBackward(90, 32, 16, false, false);
  // GPT-2's heads, a sequence past two tiles, division, an additive mask.
  checkRegisterTileBackward(130, 64, 64, true, true);
  checkRegisterTileBackward(64, 16, 48, false, true);
}

TEST(CudaFlashAttention, RegisterTileShapesAndLayout) {
  for (int64_t d = 16; d <= 128; d += 16)
    for (int64_t e = 16; e <= 128; e += 16) {
      EXPECT_EQ(flashRegUnsupported(FlashKernel::Forward, d, e), nullptr);
      bool small = d <= 64 && e <= 64;
      for (FlashKernel kernel :
           {FlashKernel::KeyValueGrad, FlashKernel::QueryGrad})
        EXPECT_EQ(flashRegUnsupported(kernel, d, e) == nullptr, small)
            << d << " " << e;
      for (FlashKernel kernel :
           {FlashKernel::Forward, FlashKernel::KeyValueGrad,
            FlashKernel::QueryGrad}) {
        FlashRegLayout l = flashRegLayout(kernel, d, e);
        bool grads = kernel != FlashKernel::Forward;
        bool kv = kernel == FlashKernel::KeyValueGrad;
        std::vector<std::pair<int64_t, int64_t>> arrays = {
            {l.q, kMmaRows * mmaPitch16(d) * 2},
            {l.k, kMmaKeys * mmaPitch16(d) * 2},
            {l.v, kMmaKeys * mmaPitch16(e) * 2},
            {l.g, grads ? kMmaRows * mmaPitch16(e) * 2 : 0},
            {l.bias, kMmaRows * regBiasPitch() * 4},
            {l.lse, kv ? kMmaRows * 4 : 0},
            {l.sums, kv ? kMmaRows * 4 : 0},
            {l.maskRow, kMmaRows * 8}};
        expectInOrderAndAligned(arrays, l.bytes);
        EXPECT_LE(l.bytes, 163 * 1024) << d << " " << e;
        // Operand registers load 32-bit pairs: even pitches.
        EXPECT_EQ(mmaPitch16(d) % 2, 0);
        FlashLaunch launch = flashRegLaunch(kernel, 96, 1000, d, e);
        EXPECT_EQ(launch.sharedBytes, l.bytes);
        EXPECT_EQ(int64_t(launch.tiles) * kMmaRows, 1024);
      }
    }
  EXPECT_GE(regBiasPitch(), kMmaKeys);
  EXPECT_EQ(kRegThreads / 32 * kMmaWarpRows, kMmaRows);
}

} // namespace
