//===- CudaGemmTest.cpp - the GEMM and attention arithmetic, no GPU -------===//
//
// How the CUDA GEMMs read strided operands (a transpose is a flag, merged
// leading dimensions are rows), how a stack of products becomes cuBLASLt
// calls, and how the attention softmax finds its mask's rows.
//
//===----------------------------------------------------------------------===//

#include "../../lib/Runtime/CUDA/Attention.h"
#include "../../lib/Runtime/CUDA/Gemm.h"

#include <gtest/gtest.h>

#include <initializer_list>

namespace merak::runtime::cuda {
namespace {

View makeView(std::initializer_list<int64_t> sizes,
              std::initializer_list<int64_t> strides = {}) {
  View v;
  v.rank = int(sizes.size());
  int d = 0;
  for (int64_t s : sizes)
    v.sizes[d++] = s;
  if (strides.size() == 0) {
    contiguousStrides(v.sizes, v.rank, v.strides);
  } else {
    d = 0;
    for (int64_t s : strides)
      v.strides[d++] = s;
  }
  return v;
}

TEST(CudaGemmTest, RowMajorMatrixIsReadAsIs) {
  MatrixLayout l;
  ASSERT_TRUE(matrixLayout(3, 5, 5, 1, l));
  EXPECT_FALSE(l.trans);
  EXPECT_EQ(l.ld, 5);
  // A narrowed matrix keeps its row stride.
  ASSERT_TRUE(matrixLayout(3, 5, 8, 1, l));
  EXPECT_FALSE(l.trans);
  EXPECT_EQ(l.ld, 8);
}

TEST(CudaGemmTest, TransposedMatrixIsAFlag) {
  MatrixLayout l;
  // A 5x3 matrix stored as the row-major [3, 5]: element (i, j) at i + 5 j.
  ASSERT_TRUE(matrixLayout(5, 3, 1, 5, l));
  EXPECT_TRUE(l.trans);
  EXPECT_EQ(l.ld, 5);
}

TEST(CudaGemmTest, UnreadableLayoutsAreRefused) {
  MatrixLayout l;
  EXPECT_FALSE(matrixLayout(3, 5, 10, 2, l)); // every other column
  EXPECT_FALSE(matrixLayout(3, 5, 2, 1, l));  // overlapping rows
  EXPECT_FALSE(matrixLayout(3, 5, 0, 1, l));  // a broadcast row
  EXPECT_FALSE(matrixLayout(4, 1, 0, 1, l));  // a broadcast column
  EXPECT_TRUE(gemmReadable(makeView({2, 3, 4})));
  EXPECT_FALSE(gemmReadable(makeView({2, 3, 4}, {12, 8, 2})));
  EXPECT_FALSE(gemmReadable(makeView({4})));
}

TEST(CudaGemmTest, SizeOneDimensionsTakeAnyStride) {
  MatrixLayout l;
  // One row: its column stride decides.
  ASSERT_TRUE(matrixLayout(1, 7, 123, 1, l));
  EXPECT_FALSE(l.trans);
  EXPECT_EQ(l.ld, 7);
  ASSERT_TRUE(matrixLayout(1, 7, 0, 3, l));
  EXPECT_TRUE(l.trans);
  EXPECT_EQ(l.ld, 3);
  // One column.
  ASSERT_TRUE(matrixLayout(7, 1, 4, 99, l));
  EXPECT_FALSE(l.trans);
  EXPECT_EQ(l.ld, 4);
  ASSERT_TRUE(matrixLayout(1, 1, 0, 0, l));
  EXPECT_EQ(l.ld, 1);
  // Empty matrices are read as they come.
  ASSERT_TRUE(matrixLayout(0, 5, 5, 1, l));
  EXPECT_FALSE(l.trans);
  // [5, 0], as dense strides give it (a row stride of 0).
  ASSERT_TRUE(matrixLayout(5, 0, 0, 1, l));
  EXPECT_FALSE(l.trans);
  EXPECT_EQ(l.ld, 1);
}

TEST(CudaGemmTest, LeadingDimensionsMergeIntoRows) {
  View m;
  ASSERT_TRUE(asMatrix(makeView({2, 3, 4}), m));
  EXPECT_EQ(m.rank, 2);
  EXPECT_EQ(m.sizes[0], 6);
  EXPECT_EQ(m.sizes[1], 4);
  EXPECT_EQ(m.strides[0], 4);
  EXPECT_EQ(m.strides[1], 1);
  // A vector is one row.
  ASSERT_TRUE(asMatrix(makeView({5}), m));
  EXPECT_EQ(m.sizes[0], 1);
  EXPECT_EQ(m.sizes[1], 5);
  // Rows of a narrowed tensor, 10 apart.
  ASSERT_TRUE(asMatrix(makeView({2, 3, 4}, {30, 10, 1}), m));
  EXPECT_EQ(m.sizes[0], 6);
  EXPECT_EQ(m.strides[0], 10);
  // Permuted leading dimensions do not merge.
  EXPECT_FALSE(asMatrix(makeView({2, 3, 4}, {4, 8, 1}), m));
}

TEST(CudaGemmTest, TransposeSwapsTheLastTwoDimensions) {
  View t = transposeLast(makeView({2, 3, 4}));
  EXPECT_EQ(t.sizes[1], 4);
  EXPECT_EQ(t.sizes[2], 3);
  EXPECT_EQ(t.strides[1], 1);
  EXPECT_EQ(t.strides[2], 4);
  EXPECT_EQ(t.strides[0], 12);
  MatrixLayout l;
  ASSERT_TRUE(
      matrixLayout(t.sizes[1], t.sizes[2], t.strides[1], t.strides[2], l));
  EXPECT_TRUE(l.trans);
  EXPECT_EQ(l.ld, 4);
}

TEST(CudaGemmTest, ContiguousStacksAreOneCall) {
  View a = makeView({2, 3, 5, 7}), b = makeView({2, 3, 7, 4}),
       c = makeView({2, 3, 5, 4});
  BatchPlan p = planBatch(a, b, c);
  EXPECT_EQ(p.calls(), 1);
  EXPECT_EQ(p.batch(), 6);
  EXPECT_EQ(p.innerA(), 35);
  EXPECT_EQ(p.innerB(), 28);
  EXPECT_EQ(p.innerC(), 20);
}

TEST(CudaGemmTest, BroadcastOperandHasBatchStrideZero) {
  // [2, 3, 5, 7] @ [7, 4] broadcast to [2, 3, 7, 4].
  View a = makeView({2, 3, 5, 7}), b = makeView({2, 3, 7, 4}, {0, 0, 4, 1}),
       c = makeView({2, 3, 5, 4});
  BatchPlan p = planBatch(a, b, c);
  EXPECT_EQ(p.calls(), 1);
  EXPECT_EQ(p.batch(), 6);
  EXPECT_EQ(p.innerB(), 0);
  MatrixLayout la{false, 7};
  EXPECT_TRUE(
      foldsIntoRows(p.batch(), 5, la, p.innerA(), p.innerB(), 4, p.innerC()));
  // A transposed lhs does not fold.
  MatrixLayout lt{true, 5};
  EXPECT_FALSE(
      foldsIntoRows(p.batch(), 5, lt, p.innerA(), p.innerB(), 4, p.innerC()));
  // Nor does a batched rhs.
  EXPECT_FALSE(foldsIntoRows(p.batch(), 5, la, p.innerA(), 28, 4, p.innerC()));
}

TEST(CudaGemmTest, UnmergeableBatchesLoopOnTheHost) {
  // Heads split from [B=2, T=5, H=3, D=7] and permuted to [B, H, T, D].
  View q = makeView({2, 3, 5, 7}, {105, 7, 21, 1});
  View kt = transposeLast(q);
  View c = makeView({2, 3, 5, 5});
  BatchPlan p = planBatch(q, kt, c);
  EXPECT_EQ(p.rank, 2);
  EXPECT_EQ(p.calls(), 2);
  EXPECT_EQ(p.batch(), 3);
  EXPECT_EQ(p.innerA(), 7);
  EXPECT_EQ(p.innerC(), 25);
  int64_t oa, ob, oc;
  p.offsets(1, oa, ob, oc);
  EXPECT_EQ(oa, 105);
  EXPECT_EQ(ob, 105);
  EXPECT_EQ(oc, 75);
}

TEST(CudaGemmTest, MixedBroadcastLoops) {
  // [2, 1, 5, 7] @ [1, 3, 7, 4] -> [2, 3, 5, 4].
  View a = makeView({2, 3, 5, 7}, {35, 0, 7, 1});
  View b = makeView({2, 3, 7, 4}, {0, 28, 4, 1});
  View c = makeView({2, 3, 5, 4});
  BatchPlan p = planBatch(a, b, c);
  EXPECT_EQ(p.calls(), 2);
  EXPECT_EQ(p.batch(), 3);
  EXPECT_EQ(p.innerA(), 0);
  EXPECT_EQ(p.innerB(), 28);
  int64_t oa, ob, oc;
  p.offsets(1, oa, ob, oc);
  EXPECT_EQ(oa, 35);
  EXPECT_EQ(ob, 0);
  EXPECT_EQ(oc, 60);
}

TEST(CudaGemmTest, MatricesAreOneCallOfOne) {
  BatchPlan p = planBatch(makeView({5, 7}), makeView({7, 4}), makeView({5, 4}));
  EXPECT_EQ(p.rank, 0);
  EXPECT_EQ(p.calls(), 1);
  EXPECT_EQ(p.batch(), 1);
  // Batch dimensions of size 1 vanish.
  p = planBatch(makeView({1, 1, 5, 7}), makeView({1, 1, 7, 4}),
                makeView({1, 1, 5, 4}));
  EXPECT_EQ(p.calls(), 1);
  EXPECT_EQ(p.batch(), 1);
}

TEST(CudaGemmTest, AlignmentIsTheLargestPowerOfTwoUpTo256) {
  EXPECT_EQ(alignmentOf(0), 256u);
  EXPECT_EQ(alignmentOf(4096), 256u);
  EXPECT_EQ(alignmentOf(256 + 16), 16u);
  EXPECT_EQ(alignmentOf(2), 2u);
  EXPECT_EQ(alignmentOf(7), 1u);
}

TEST(CudaAttentionTest, MaskRowsFollowTheBroadcast) {
  // A [t, t] mask broadcast to scores [2, 3, t, t]: every head reads it.
  View mask = makeView({2, 3, 4, 4}, {0, 0, 4, 1});
  MaskRows m = maskRowsOf(mask);
  EXPECT_EQ(m.colStride, 1);
  EXPECT_EQ(m.rows.offsetOf(0), 0);
  EXPECT_EQ(m.rows.offsetOf(3), 12);
  EXPECT_EQ(m.rows.offsetOf(4), 0); // next head, same mask
  EXPECT_EQ(m.rows.offsetOf(23), 12);
  // A padding mask [2, 1, 1, t]: one row per batch element.
  View pad = makeView({2, 3, 4, 4}, {4, 0, 0, 1});
  m = maskRowsOf(pad);
  EXPECT_EQ(m.rows.offsetOf(11), 0);
  EXPECT_EQ(m.rows.offsetOf(12), 4);
  // A contiguous mask merges into one dimension.
  m = maskRowsOf(makeView({2, 3, 4, 4}));
  EXPECT_EQ(m.rows.rank, 1);
  EXPECT_EQ(m.rows.offsetOf(23), 92);
}

TEST(CudaAttentionTest, RowGridIsBounded) {
  EXPECT_EQ(rowGrid(0), 1u);
  EXPECT_EQ(rowGrid(33), 33u);
  EXPECT_EQ(rowGrid(int64_t(1) << 40), unsigned(65535 * 16));
}

TEST(CudaAttentionTest, RowsUpTo1024ColumnsTakeAWarpEach) {
  // Each lane holds the fewest of 4, 8, 16, 32 columns that cover a row.
  EXPECT_EQ(warpRowColumns(1), 4);
  EXPECT_EQ(warpRowColumns(128), 4);
  EXPECT_EQ(warpRowColumns(129), 8);
  EXPECT_EQ(warpRowColumns(257), 16);
  EXPECT_EQ(warpRowColumns(512), 16);
  EXPECT_EQ(warpRowColumns(1024), 32); // GPT-2's 1,024 positions
  for (int64_t cols = 1; cols <= kWarpRowMaxColumns; ++cols)
    ASSERT_GE(32 * warpRowColumns(cols), cols) << cols;
  // Longer rows take a block each.
  EXPECT_EQ(warpRowColumns(1025), 0);
  // Eight warps a block, one row each; the grid bounded, warps looping.
  EXPECT_EQ(warpRowGrid(0), 1u);
  EXPECT_EQ(warpRowGrid(8), 1u);
  EXPECT_EQ(warpRowGrid(9), 2u);
  EXPECT_EQ(warpRowGrid(8 * 12 * 1024), 12288u);
  EXPECT_EQ(warpRowGrid(int64_t(1) << 40), unsigned(65535 * 16));
}

} // namespace
TEST(CudaGemmTest, RowsThatAreNot16BytesApartAreStaged) {
  // GPT-2's logits: 8192 rows of 50,257 bf16 (100,514 bytes apart).
  EXPECT_EQ(stagedLeading(8192, 50257, 50257, 2), 50264);
  EXPECT_EQ(stagedLeading(8192, 50257, 50257, 4), 50260);
  EXPECT_EQ(stagedLeading(8192, 50257, 50257, 8), 50258);
  // Aligned rows, a view of them (a slice of a wider matrix: only the
  // distance between rows counts) and padded ones are read in place.
  EXPECT_EQ(stagedLeading(8192, 768, 768, 2), 0);
  EXPECT_EQ(stagedLeading(8192, 50257, 50264, 2), 0);
  EXPECT_EQ(stagedLeading(8192, 50257, 50260, 4), 0);
  // Small matrices and single rows are not worth the copies.
  EXPECT_EQ(stagedLeading(1023, 1023, 1023, 2), 0);
  EXPECT_EQ(stagedLeading(1, 1 << 22, 1 << 22, 2), 0);
  EXPECT_EQ(stagedLeading(1025, 1023, 1023, 2), 0); // one short of 2^20
  EXPECT_EQ(stagedLeading(1027, 1023, 1023, 2), 1024);
  EXPECT_EQ(kStageElements, 1 << 20);
}

} // namespace merak::runtime::cuda
