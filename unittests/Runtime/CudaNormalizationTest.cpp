//===- CudaNormalizationTest.cpp - normalization, loss, optimizer math ----===//
//
// The host arithmetic of the CUDA softmax, normalization, cross-entropy and
// optimizer kernels (Normalization.h, Losses.h, Optimizers.h): dimension
// splits, row and column-chunk launch plans, Welford's combination, the
// cross-entropy's loss and gradient terms and AdamW's scalars.
//
//===----------------------------------------------------------------------===//

#include "../../lib/Runtime/CUDA/Losses.h"
#include "../../lib/Runtime/CUDA/Normalization.h"
#include "../../lib/Runtime/CUDA/Optimizers.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

using namespace merak::runtime::cuda;

namespace {

TEST(CudaNormalization, SoftmaxDim) {
  EXPECT_EQ(softmaxDim(0, 3), 0);
  EXPECT_EQ(softmaxDim(2, 3), 2);
  EXPECT_EQ(softmaxDim(-1, 3), 2);
  EXPECT_EQ(softmaxDim(-3, 3), 0);
  EXPECT_EQ(softmaxDim(3, 3), -1);
  EXPECT_EQ(softmaxDim(-4, 3), -1);
  // A scalar has dimension 0 (or -1), as ATen's softmax takes it.
  EXPECT_EQ(softmaxDim(0, 0), 0);
  EXPECT_EQ(softmaxDim(-1, 0), 0);
  EXPECT_EQ(softmaxDim(1, 0), -1);
}

TEST(CudaNormalization, SplitAtDim) {
  int64_t sizes[] = {2, 3, 5, 7};
  DimSplit s = splitAt(sizes, 4, 1);
  EXPECT_EQ(s.outer, 2);
  EXPECT_EQ(s.size, 3);
  EXPECT_EQ(s.inner, 35);
  s = splitAt(sizes, 4, 3);
  EXPECT_EQ(s.outer, 30);
  EXPECT_EQ(s.size, 7);
  EXPECT_EQ(s.inner, 1);
  s = splitAt(sizes, 4, 0);
  EXPECT_EQ(s.outer, 1);
  EXPECT_EQ(s.inner, 105);
  // Rank 0: one element, a row of one.
  s = splitAt(sizes, 0, 0);
  EXPECT_EQ(s.outer * s.size * s.inner, 1);
}

TEST(CudaNormalization, SplitTrailing) {
  int64_t sizes[] = {4, 6, 8};
  RowSplit s = splitTrailing(sizes, 3, 1);
  EXPECT_EQ(s.rows, 24);
  EXPECT_EQ(s.cols, 8);
  s = splitTrailing(sizes, 3, 2);
  EXPECT_EQ(s.rows, 4);
  EXPECT_EQ(s.cols, 48);
  s = splitTrailing(sizes, 3, 3);
  EXPECT_EQ(s.rows, 1);
  EXPECT_EQ(s.cols, 192);
}

TEST(CudaNormalization, RowPlanCoversEveryRow) {
  for (int64_t cols : {0, 1, 31, 33, 127, 129, 257, 1025, 4096, 50257}) {
    for (int64_t rows : {int64_t(1), int64_t(7), int64_t(65537),
                         int64_t(1) << 31, int64_t(5) << 32}) {
      RowPlan p = rowPlan(rows, cols);
      EXPECT_EQ(p.threads % 32, 0);
      EXPECT_GE(p.threads, 32);
      EXPECT_LE(p.threads, 1024);
      EXPECT_GE(p.rowsPerBlock, 1);
      EXPECT_LE(p.rowsPerBlock, kMaxRowsPerBlock);
      EXPECT_LE(p.threads * p.rowsPerBlock, 1024);
      EXPECT_GE(p.grid, 1u);
      EXPECT_LE(int64_t(p.grid), kMaxRowBlocks);
      // Either one block per group of rows, or the kernels loop.
      EXPECT_TRUE(int64_t(p.grid) * p.rowsPerBlock >= rows ||
                  int64_t(p.grid) == kMaxRowBlocks);
    }
  }
  // Short rows share a block of 256 threads, one warp each.
  RowPlan p = rowPlan(100, 33);
  EXPECT_EQ(p.threads, 32);
  EXPECT_EQ(p.rowsPerBlock, 8);
  EXPECT_EQ(p.grid, 13u);
  // Long rows take a block of their own.
  p = rowPlan(3, 50257);
  EXPECT_EQ(p.threads, 1024);
  EXPECT_EQ(p.rowsPerBlock, 1);
  EXPECT_EQ(p.grid, 3u);
  // The norms: GPT-2 small's 8192 rows of 768 a warp each, eight a block.
  p = rowPlan(8192, 768, kNormColumnsPerThread);
  EXPECT_EQ(p.threads, 32);
  EXPECT_EQ(p.rowsPerBlock, 8);
  EXPECT_EQ(p.grid, 1024u);
  p = rowPlan(8192, 4096, kNormColumnsPerThread);
  EXPECT_EQ(p.threads, 128);
  EXPECT_EQ(p.rowsPerBlock, 2);
}

TEST(CudaNormalization, ColumnChunksCoverTheRows) {
  for (int64_t rows :
       {int64_t(0), int64_t(1), int64_t(31), int64_t(32), int64_t(33),
        int64_t(3000), int64_t(32768), int64_t(32769), int64_t(1) << 40}) {
    ColumnChunks c = columnChunks(rows);
    EXPECT_GE(c.chunkRows, 32);
    EXPECT_GE(c.chunks, 1);
    EXPECT_LE(c.chunks, kMaxColumnChunks);
    EXPECT_LE(c.chunks, 65535); // the grid's y dimension
    EXPECT_GE(c.chunks * c.chunkRows, rows);
    // No chunk is empty (each chunk's partial sums are written).
    EXPECT_LT((c.chunks - 1) * c.chunkRows, std::max<int64_t>(rows, 1));
  }
}

TEST(CudaNormalization, WelfordMatchesTwoPass) {
  std::vector<double> xs;
  for (int i = 0; i < 1000; ++i)
    xs.push_back(1e4 + std::sin(double(i)) * 3);
  double mean = 0, m2 = 0;
  for (double x : xs)
    mean += x;
  mean /= double(xs.size());
  for (double x : xs)
    m2 += (x - mean) * (x - mean);
  // Split into uneven parts, each accumulated alone, then combined in
  // order (as threads, then warps).
  for (size_t parts : {1, 2, 3, 7, 32, 1000}) {
    std::vector<Welford<double>> w(parts, Welford<double>{0, 0, 0});
    for (size_t i = 0; i < xs.size(); ++i)
      w[i % parts] = welfordAdd(w[i % parts], xs[i]);
    Welford<double> all{0, 0, 0};
    for (const auto &p : w)
      all = welfordCombine(all, p);
    EXPECT_EQ(all.count, double(xs.size()));
    EXPECT_NEAR(all.mean, mean, 1e-9);
    EXPECT_NEAR(all.m2, m2, 1e-6 * m2);
  }
  // An empty side leaves the other unchanged.
  Welford<float> a{0, 0, 0}, b = welfordAdd(Welford<float>{0, 0, 0}, 2.5f);
  Welford<float> c = welfordCombine(a, b);
  EXPECT_EQ(c.count, 1.0f);
  EXPECT_EQ(c.mean, 2.5f);
  EXPECT_EQ(c.m2, 0.0f);
  c = welfordCombine(b, a);
  EXPECT_EQ(c.mean, 2.5f);
  Welford<float> empty = welfordCombine(a, a);
  EXPECT_EQ(empty.count, 0.0f);
}

TEST(CudaLosses, CrossEntropyLoss) {
  // No smoothing: the nll term alone, over the count for the mean.
  EXPECT_DOUBLE_EQ(crossEntropyLoss(6.0, 100.0, 3.0, 0.0, 10, Reduction::Mean),
                   2.0);
  EXPECT_DOUBLE_EQ(crossEntropyLoss(6.0, 100.0, 3.0, 0.0, 10, Reduction::Sum),
                   6.0);
  EXPECT_DOUBLE_EQ(crossEntropyLoss(6.0, 100.0, 1.0, 0.0, 10, Reduction::None),
                   6.0);
  // PyTorch's smoothing: (1 - ls) nll + ls / C * smooth.
  EXPECT_NEAR(crossEntropyLoss(6.0, 100.0, 3.0, 0.1, 10, Reduction::Mean),
              0.9 * 2.0 + 0.01 * 100.0 / 3.0, 1e-12);
  EXPECT_NEAR(crossEntropyLoss(6.0, 100.0, 3.0, 0.1, 10, Reduction::Sum),
              0.9 * 6.0 + 0.01 * 100.0, 1e-12);
  // No row counts: the mean is NaN, as ATen's.
  EXPECT_TRUE(
      std::isnan(crossEntropyLoss(0.0f, 0.0f, 0.0f, 0.0, 10, Reduction::Mean)));
  EXPECT_EQ(crossEntropyLoss(0.0f, 0.0f, 0.0f, 0.0, 10, Reduction::Sum), 0.0f);
}

TEST(CudaLosses, CrossEntropyGradTerms) {
  // Mean over 4 rows: -g/4 at the target, no smoothing.
  CrossEntropyGrad<double> g =
      crossEntropyGrad(2.0, 4.0, 0.0, 10, Reduction::Mean);
  EXPECT_DOUBLE_EQ(g.atTarget, -0.5);
  EXPECT_DOUBLE_EQ(g.everywhere, 0.0);
  g = crossEntropyGrad(2.0, 4.0, 0.0, 10, Reduction::Sum);
  EXPECT_DOUBLE_EQ(g.atTarget, -2.0);
  // Smoothing 0.2 over 10 classes: -(1 - 0.2) g at the target, -(0.2 / 10)
  // g everywhere, both over the count for the mean.
  g = crossEntropyGrad(2.0, 4.0, 0.2, 10, Reduction::Mean);
  EXPECT_NEAR(g.atTarget, -0.8 * 2.0 / 4.0, 1e-15);
  EXPECT_NEAR(g.everywhere, -0.02 * 2.0 / 4.0, 1e-15);
  g = crossEntropyGrad(3.0, 1.0, 0.2, 10, Reduction::None);
  EXPECT_NEAR(g.atTarget, -0.8 * 3.0, 1e-15);
  EXPECT_NEAR(g.everywhere, -0.02 * 3.0, 1e-15);
  // The row sums of the gradient of the log-probabilities: what the
  // softmax term subtracts.
  double total = 10 * g.everywhere + g.atTarget;
  EXPECT_NEAR(total, -3.0, 1e-12);
  // A reduced loss scales its rank-0 gradient in double, then rounds.
  float f = scaleGrad(0.3f, 0.9, true);
  EXPECT_EQ(f, float(double(0.3f) * 0.9));
  f = scaleGrad(0.3f, 0.9, false);
  EXPECT_EQ(f, 0.3f * float(0.9));
}

TEST(CudaOptimizers, AdamwScalars) {
  AdamwScalars s = adamwScalars(1e-3, 1, 0.9, 0.999, 1e-8, 0.01);
  EXPECT_TRUE(s.decays);
  EXPECT_DOUBLE_EQ(s.decay, 1 - 1e-3 * 0.01);
  EXPECT_DOUBLE_EQ(s.oneMinusBeta1, 1 - 0.9);
  EXPECT_DOUBLE_EQ(s.oneMinusBeta2, 1 - 0.999);
  // Step 1: bias corrections 1 - beta.
  EXPECT_DOUBLE_EQ(s.negStepSize, -(1e-3 / (1 - 0.9)));
  EXPECT_DOUBLE_EQ(s.biasCorrection2Sqrt, std::sqrt(1 - 0.999));
  s = adamwScalars(2e-4, 10, 0.9, 0.95, 1e-6, 0);
  EXPECT_FALSE(s.decays);
  EXPECT_DOUBLE_EQ(s.negStepSize, -(2e-4 / (1 - std::pow(0.9, 10.0))));
  EXPECT_DOUBLE_EQ(s.biasCorrection2Sqrt, std::sqrt(1 - std::pow(0.95, 10.0)));
  EXPECT_DOUBLE_EQ(s.eps, 1e-6);
}

} // namespace
