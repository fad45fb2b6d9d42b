//===- CudaShapeTest.cpp - the shape and reduction kernels' arithmetic ---===//
//
// On the host, without a GPU: the strides of a reshape view (ATen's rule),
// slice bounds, the source elements of pad, roll and gathers (Shape.h),
// and how a reduction is split into kept and reduced views, oriented and
// cut into passes (Reductions.h).
//
//===----------------------------------------------------------------------===//

#include "../../lib/Runtime/CUDA/Reductions.h"
#include "../../lib/Runtime/CUDA/Shape.h"

#include <gtest/gtest.h>

#include <vector>

using namespace merak::runtime::cuda;

namespace {

View shaped(std::vector<int64_t> sizes, std::vector<int64_t> strides = {}) {
  View v;
  v.rank = int(sizes.size());
  for (int d = 0; d < v.rank; ++d)
    v.sizes[d] = sizes[d];
  if (strides.empty())
    contiguousStrides(v.sizes, v.rank, v.strides);
  else
    for (int d = 0; d < v.rank; ++d)
      v.strides[d] = strides[d];
  return v;
}

/// The strides of `newSizes` read from `old`, or empty when not a view.
std::vector<int64_t> reshaped(const View &old, std::vector<int64_t> newSizes) {
  std::vector<int64_t> strides(newSizes.size());
  if (!reshapeStrides(old.sizes, old.strides, old.rank, newSizes.data(),
                      int(newSizes.size()), strides.data()))
    return {};
  return strides;
}

TEST(CudaShape, ReshapeOfContiguousIsAView) {
  View x = shaped({2, 3, 4});
  EXPECT_EQ(reshaped(x, {6, 4}), (std::vector<int64_t>{4, 1}));
  EXPECT_EQ(reshaped(x, {24}), (std::vector<int64_t>{1}));
  EXPECT_EQ(reshaped(x, {2, 1, 12}), (std::vector<int64_t>{12, 12, 1}));
  EXPECT_EQ(reshaped(x, {4, 3, 2}), (std::vector<int64_t>{6, 2, 1}));
}

TEST(CudaShape, ReshapeOfTransposeFollowsATen) {
  // [3, 4] transposed to [4, 3]: strides (1, 4).
  View t = shaped({4, 3}, {1, 4});
  // Flattening mixes the two dimensions: a copy, as x.t().reshape(-1).
  EXPECT_TRUE(reshaped(t, {12}).empty());
  // Splitting a dimension keeps the view: [4, 3] -> [2, 2, 3].
  EXPECT_EQ(reshaped(t, {2, 2, 3}), (std::vector<int64_t>{2, 1, 4}));
  // Adding size-1 dimensions keeps it too.
  EXPECT_EQ(reshaped(t, {4, 1, 3}), (std::vector<int64_t>{1, 12, 4}));
  // A broadcast (stride 0) dimension split stays a broadcast.
  View e = shaped({4, 6}, {0, 1});
  EXPECT_EQ(reshaped(e, {2, 2, 6}), (std::vector<int64_t>{0, 0, 1}));
  EXPECT_TRUE(reshaped(e, {24}).empty());
}

TEST(CudaShape, ReshapeOfSlicedRows) {
  // Every other row of an [8, 5] tensor: [4, 5] with strides (10, 1).
  View s = shaped({4, 5}, {10, 1});
  EXPECT_EQ(reshaped(s, {2, 2, 5}), (std::vector<int64_t>{20, 10, 1}));
  EXPECT_TRUE(reshaped(s, {20}).empty());
  EXPECT_TRUE(reshaped(s, {5, 4}).empty());
}

TEST(CudaShape, ReshapeOfScalarsAndEmpties) {
  View scalar = shaped({});
  EXPECT_EQ(reshaped(scalar, {1, 1}), (std::vector<int64_t>{1, 1}));
  View one = shaped({1, 1}, {7, 9});
  EXPECT_EQ(reshaped(one, {}), std::vector<int64_t>{});
  std::vector<int64_t> none;
  EXPECT_TRUE(
      reshapeStrides(one.sizes, one.strides, 2, nullptr, 0, none.data()));
  View empty = shaped({0, 3});
  EXPECT_EQ(reshaped(empty, {3, 0}), (std::vector<int64_t>{1, 1}));
  EXPECT_EQ(reshaped(empty, {0, 3}), (std::vector<int64_t>{3, 1}));
}

TEST(CudaShape, SliceBoundsClampLikeATen) {
  int64_t first, count;
  sliceBounds(10, 2, 9, 3, first, count);
  EXPECT_EQ(first, 2);
  EXPECT_EQ(count, 3); // 2, 5, 8
  sliceBounds(10, -3, 100, 1, first, count);
  EXPECT_EQ(first, 7);
  EXPECT_EQ(count, 3);
  sliceBounds(10, 8, 4, 1, first, count);
  EXPECT_EQ(count, 0);
  sliceBounds(10, 12, 20, 2, first, count);
  EXPECT_EQ(first, 10);
  EXPECT_EQ(count, 0);
  sliceBounds(10, -20, -1, 4, first, count);
  EXPECT_EQ(first, 0);
  EXPECT_EQ(count, 3); // 0, 4, 8
}

TEST(CudaShape, WrapDim) {
  EXPECT_EQ(wrapDim(-1, 3), 2);
  EXPECT_EQ(wrapDim(0, 3), 0);
  EXPECT_EQ(wrapDim(3, 3), -1);
  EXPECT_EQ(wrapDim(-4, 3), -1);
}

TEST(CudaShape, PadSourceCropsAndPads) {
  // [2, 3] padded by (1, 0) low, (0, 2) high... read as a [3, 5] result.
  View x = shaped({2, 3});
  int64_t low[2] = {1, 0};
  int64_t out[2] = {3, 5};
  int64_t offset;
  EXPECT_FALSE(padSource(x, low, out, 0, offset)); // row 0 is padding
  EXPECT_TRUE(padSource(x, low, out, 5, offset));  // (1, 0) -> x(0, 0)
  EXPECT_EQ(offset, 0);
  EXPECT_TRUE(padSource(x, low, out, 12, offset)); // (2, 2) -> x(1, 2)
  EXPECT_EQ(offset, 5);
  EXPECT_FALSE(padSource(x, low, out, 13, offset)); // (2, 3): high pad
  // A negative low crops: result (0, 0) reads x(0, 1).
  int64_t crop[2] = {0, -1};
  int64_t cropped[2] = {2, 2};
  EXPECT_TRUE(padSource(x, crop, cropped, 0, offset));
  EXPECT_EQ(offset, 1);
  // Strided source: a transpose.
  View t = shaped({3, 2}, {1, 3});
  int64_t none[2] = {0, 0};
  int64_t same[2] = {3, 2};
  EXPECT_TRUE(padSource(t, none, same, 1, offset)); // t(0, 1) = x(1, 0)
  EXPECT_EQ(offset, 3);
}

TEST(CudaShape, RollSourceWraps) {
  View x = shaped({3, 4});
  int64_t shifts[2] = {1, 3}; // already modulo the sizes
  // Output (0, 0) reads input (-1 mod 3, -3 mod 4) = (2, 1).
  EXPECT_EQ(rollSource(x, shifts, 0), 2 * 4 + 1);
  // Output (2, 3) reads (1, 0).
  EXPECT_EQ(rollSource(x, shifts, 11), 4);
  int64_t none[2] = {0, 0};
  for (int64_t i = 0; i < 12; ++i)
    EXPECT_EQ(rollSource(x, none, i), i);
  EXPECT_EQ(positiveMod(-7, 3), 2);
  EXPECT_EQ(positiveMod(7, 3), 1);
  EXPECT_EQ(positiveMod(-6, 3), 0);
}

TEST(CudaShape, GatherReadsTheIndexedRow) {
  // index_select along dim 1 of [2, 5, 3] by 4 indices: result [2, 4, 3].
  View x = shaped({2, 5, 3});
  GatherGeometry g = gatherGeometry(x, 1);
  EXPECT_EQ(g.outer, 2);
  EXPECT_EQ(g.inner, 3);
  EXPECT_EQ(g.dimSize, 5);
  EXPECT_EQ(g.dimStride, 3);
  // Result element (1, 2, 1) = linear 1 * 12 + 2 * 3 + 1 = 19, row 4.
  EXPECT_EQ(gatherSource(g, 4, 19, 4), 1 * 15 + 4 * 3 + 1);
  // Embedding: dim 0 of a transposed [V=6, D=4] weight (strides 1, 6).
  View w = shaped({6, 4}, {1, 6});
  GatherGeometry e = gatherGeometry(w, 0);
  EXPECT_EQ(e.outer, 1);
  EXPECT_EQ(e.inner, 4);
  EXPECT_EQ(gatherSource(e, 10, 7 * 4 + 2, 5), 5 + 2 * 6);
  // The last dimension: inner is 1.
  GatherGeometry last = gatherGeometry(x, 2);
  EXPECT_EQ(last.inner, 1);
  EXPECT_EQ(last.outer, 10);
  EXPECT_EQ(gatherSource(last, 2, 7, 2), 3 * 3 + 2); // o = 3, row 2
}

TEST(CudaShape, UpdateSliceWritesTheRowsAtThePosition) {
  // An update of [2, 3, 4] written at row 5 of a [2, 8, 4] result: every
  // element lands at (o, 5 + r, k), and no two elements at one place.
  std::vector<int> hits(2 * 8 * 4, 0);
  for (int64_t i = 0; i < 2 * 3 * 4; ++i) {
    int64_t o = i / 12, r = i / 4 % 3, k = i % 4;
    int64_t t = updateSliceTarget(i, 3, 4, 8, 5);
    EXPECT_EQ(t, (o * 8 + 5 + r) * 4 + k) << i;
    ++hits[size_t(t)];
  }
  for (int64_t o = 0; o < 2; ++o)
    for (int64_t row = 0; row < 8; ++row)
      for (int64_t k = 0; k < 4; ++k)
        EXPECT_EQ(hits[size_t((o * 8 + row) * 4 + k)], row >= 5 ? 1 : 0);
  // The last dimension (inner 1) and one row: a decode step's cache.
  EXPECT_EQ(updateSliceTarget(0, 1, 1, 16, 15), 15);
  EXPECT_EQ(updateSliceTarget(3, 1, 1, 16, 0), 3 * 16);
}

TEST(CudaShape, SortKeyBitsCoverTheSentinel) {
  EXPECT_EQ(sortKeyBits(0), 1);
  EXPECT_EQ(sortKeyBits(1), 1);
  EXPECT_EQ(sortKeyBits(2), 2);
  EXPECT_EQ(sortKeyBits(3), 2);
  EXPECT_EQ(sortKeyBits(4), 3);
  EXPECT_EQ(sortKeyBits(50257), 16);
  EXPECT_EQ(sortKeyBits(65535), 16);
  EXPECT_EQ(sortKeyBits(65536), 17);
  for (int64_t n : {1, 5, 31, 32, 1000, 123457})
    EXPECT_LE(n, (int64_t(1) << sortKeyBits(n)) - 1);
  EXPECT_EQ(alignScratch(1), 256);
  EXPECT_EQ(alignScratch(256), 256);
  EXPECT_EQ(alignScratch(0), 0);
}

//===----------------------------------------------------------------------===//
// Reductions
//===----------------------------------------------------------------------===//

TEST(CudaReductions, SplitKeepsAndReducesInOrder) {
  // Sum over dims 0 and 2 of [2, 3, 4]: kept [3] stride 4, reduced [2, 4]
  // with strides (12, 1).
  View x = shaped({2, 3, 4});
  bool reduced[3] = {true, false, true};
  View kept, red;
  splitReduction(x, reduced, kept, red);
  ASSERT_EQ(kept.rank, 1);
  EXPECT_EQ(kept.sizes[0], 3);
  EXPECT_EQ(kept.strides[0], 4);
  ASSERT_EQ(red.rank, 2);
  EXPECT_EQ(red.sizes[0], 2);
  EXPECT_EQ(red.strides[0], 12);
  EXPECT_EQ(red.sizes[1], 4);
  EXPECT_EQ(red.strides[1], 1);
  EXPECT_FALSE(reduceByColumns(kept, red));
  // The last two reduced: they merge into one dimension of 12.
  bool trailing[3] = {false, true, true};
  splitReduction(x, trailing, kept, red);
  ASSERT_EQ(red.rank, 1);
  EXPECT_EQ(red.sizes[0], 12);
  EXPECT_EQ(kept.numel(), 2);
  EXPECT_FALSE(reduceByColumns(kept, red));
  // The leading one (a bias gradient): columns.
  bool leading[3] = {true, false, false};
  splitReduction(x, leading, kept, red);
  ASSERT_EQ(kept.rank, 1);
  EXPECT_EQ(kept.sizes[0], 12);
  EXPECT_EQ(red.strides[0], 12);
  EXPECT_TRUE(reduceByColumns(kept, red));
  // Everything: one output.
  bool all[3] = {true, true, true};
  splitReduction(x, all, kept, red);
  EXPECT_EQ(kept.numel(), 1);
  EXPECT_EQ(kept.rank, 0);
  EXPECT_EQ(red.numel(), 24);
  EXPECT_FALSE(reduceByColumns(kept, red));
}

TEST(CudaReductions, SizeOneDimensionsDrop) {
  View x = shaped({1, 5, 1});
  bool reduced[3] = {false, true, false};
  View kept, red;
  splitReduction(x, reduced, kept, red);
  EXPECT_EQ(kept.rank, 0);
  EXPECT_EQ(kept.numel(), 1);
  EXPECT_EQ(red.rank, 1);
  EXPECT_EQ(kept.offsetOf(0), 0);
}

TEST(CudaReductions, OffsetInMatchesOffsetOf) {
  View v = shaped({3, 7}, {1, 3});
  for (int64_t i = 0; i < 21; ++i)
    EXPECT_EQ(offsetIn(v, i), v.offsetOf(i));
  View r = shaped({9}, {5});
  for (int64_t i = 0; i < 9; ++i)
    EXPECT_EQ(offsetIn(r, i), 5 * i);
}

/// Runs every pass of a reduction of `K` elements for `M` outputs on the
/// host, as the kernels cut it, counting how often each element is read;
/// returns the number of passes.
int simulate(int64_t M, int64_t K, bool columns, std::vector<int64_t> &reads) {
  reads.assign(size_t(M * K), 0);
  ReducePass pass = planReducePass(M, K, columns);
  int passes = 1;
  for (int64_t m = 0; m < M; ++m)
    for (int64_t s = 0; s < pass.splits; ++s) {
      int64_t begin = s * pass.chunk;
      int64_t end = std::min(K, begin + pass.chunk);
      EXPECT_LT(begin, end) << "an empty chunk";
      for (int64_t k = begin; k < end; ++k)
        ++reads[size_t(m * K + k)];
    }
  for (int64_t k = pass.splits; pass.splits > 1; k = pass.splits) {
    pass = planReducePass(M, k, columns);
    EXPECT_LT(pass.splits, k) << "a pass that does not shrink";
    int64_t covered = 0;
    for (int64_t s = 0; s < pass.splits; ++s)
      covered += std::min(k, (s + 1) * pass.chunk) - s * pass.chunk;
    EXPECT_EQ(covered, k);
    ++passes;
  }
  return passes;
}

TEST(CudaReductions, PassesReadEveryElementOnce) {
  for (bool columns : {false, true})
    for (int64_t M : {1, 2, 3, 31, 257, 4096, 100000})
      for (int64_t K : {1, 2, 31, 33, 127, 1025, 4097, 65537, 1000003}) {
        if (M * K > 4000000)
          continue;
        std::vector<int64_t> reads;
        int passes = simulate(M, K, columns, reads);
        EXPECT_LE(passes, 6) << M << "x" << K;
        for (int64_t r : reads)
          ASSERT_EQ(r, 1) << M << "x" << K << (columns ? " columns" : "");
      }
}

TEST(CudaReductions, PlansDependOnSizesAlone) {
  ReducePass small = planReducePass(64, 1000, false);
  EXPECT_EQ(small.splits, 1);
  EXPECT_EQ(small.chunk, 1000);
  ReducePass full = planReducePass(1, 1 << 24, false);
  EXPECT_EQ(full.splits, kRowTargetItems);
  EXPECT_EQ(full.chunk, (1 << 24) / kRowTargetItems);
  ReducePass column = planReducePass(4, 1 << 20, true);
  EXPECT_GT(column.splits, 1);
  EXPECT_GE(column.chunk, kColumnMinChunk);
  // Many outputs: no split.
  EXPECT_EQ(planReducePass(1 << 20, 4096, true).splits, 1);
  EXPECT_EQ(planReducePass(1 << 20, 4096, false).splits, 1);
}

TEST(CudaReductions, ScratchHoldsEveryPass) {
  EXPECT_EQ(reductionScratchBytes(100, 50, false, ElemType::F32), 0);
  EXPECT_EQ(reductionScratchBytes(0, 50, false, ElemType::F32), 0);
  EXPECT_EQ(reductionScratchBytes(5, 0, false, ElemType::F32), 0);
  for (bool columns : {false, true})
    for (int64_t M : {1, 3, 64})
      for (int64_t K : {5000, 1 << 20, 1 << 26}) {
        ReducePass first = planReducePass(M, K, columns);
        int64_t bytes = reductionScratchBytes(M, K, columns, ElemType::BF16);
        if (first.splits == 1) {
          EXPECT_EQ(bytes, 0);
          continue;
        }
        int64_t firstBytes = alignScratch(M * first.splits * 4);
        ReducePass second = planReducePass(M, first.splits, columns);
        int64_t secondBytes =
            second.splits > 1 ? M * second.splits * 4 : int64_t(0);
        EXPECT_EQ(bytes, firstBytes + secondBytes);
        EXPECT_EQ(reductionScratchBytes(M, K, columns, ElemType::F64),
                  alignScratch(M * first.splits * 8) + 2 * secondBytes);
      }
  EXPECT_EQ(accElemSize(ElemType::BF16), 4);
  EXPECT_EQ(accElemSize(ElemType::F16), 4);
  EXPECT_EQ(accElemSize(ElemType::F64), 8);
  EXPECT_EQ(accElemSize(ElemType::Bool), 1);
}

} // namespace
