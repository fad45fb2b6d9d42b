//===- CudaCommonTest.cpp - the CUDA backend's index arithmetic ----------===//
//
// Broadcasting, dimension merging and launch shapes (CudaCommon.h) on the
// host; and the backend's answer where there is no GPU.
//
//===----------------------------------------------------------------------===//

#include "../../lib/Runtime/CUDA/CudaCommon.h"
#include "../../lib/Runtime/CUDA/CudaKernels.h"
#include "merak/Runtime/CUDA/CudaBackend.h"
#include "merak/Runtime/Registry.h"

#include <gtest/gtest.h>

using namespace merak::runtime;
using namespace merak::runtime::cuda;

namespace {

View dense(std::initializer_list<int64_t> sizes) {
  View v;
  v.rank = int(sizes.size());
  int d = 0;
  for (int64_t s : sizes)
    v.sizes[d++] = s;
  contiguousStrides(v.sizes, v.rank, v.strides);
  return v;
}

TEST(CudaCommon, ContiguousStridesAndOffsets) {
  View v = dense({2, 3, 4});
  EXPECT_EQ(v.strides[0], 12);
  EXPECT_EQ(v.strides[1], 4);
  EXPECT_EQ(v.strides[2], 1);
  EXPECT_EQ(v.numel(), 24);
  EXPECT_TRUE(v.isContiguous());
  for (int64_t i = 0; i < 24; ++i)
    EXPECT_EQ(v.offsetOf(i), i);
  // The transpose of the last two dimensions: element (a, b, c) of the
  // view is element (a, c, b) of the storage.
  View t = v;
  std::swap(t.sizes[1], t.sizes[2]);
  std::swap(t.strides[1], t.strides[2]);
  EXPECT_FALSE(t.isContiguous());
  EXPECT_EQ(t.offsetOf(1), 4); // (0, 0, 1) -> storage (0, 1, 0)
  EXPECT_EQ(t.offsetOf(3), 1); // (0, 1, 0) -> storage (0, 0, 1)
  EXPECT_EQ(t.offsetOf(12 + 5), 12 + 2 * 4 + 1);
}

TEST(CudaCommon, SizeOneDimensionsDoNotBreakContiguity) {
  View v = dense({3, 1, 5});
  v.strides[1] = 999;
  EXPECT_TRUE(v.isContiguous());
}

TEST(CudaCommon, BroadcastRightAligned) {
  int64_t shape[3] = {4, 3, 5};
  View out;
  ASSERT_TRUE(broadcastView(dense({5}), shape, 3, out));
  EXPECT_EQ(out.rank, 3);
  EXPECT_EQ(out.strides[0], 0);
  EXPECT_EQ(out.strides[1], 0);
  EXPECT_EQ(out.strides[2], 1);
  ASSERT_TRUE(broadcastView(dense({3, 1}), shape, 3, out));
  EXPECT_EQ(out.strides[0], 0);
  EXPECT_EQ(out.strides[1], 1);
  EXPECT_EQ(out.strides[2], 0);
  EXPECT_EQ(out.offsetOf(2 * 15 + 1 * 5 + 4), 1);
  EXPECT_FALSE(broadcastView(dense({2}), shape, 3, out));
  EXPECT_FALSE(broadcastView(dense({1, 4, 3, 5}), shape, 3, out));
  // A scalar broadcasts everywhere.
  ASSERT_TRUE(broadcastView(dense({}), shape, 3, out));
  EXPECT_EQ(out.offsetOf(59), 0);
}

TEST(CudaCommon, CoalesceMergesWhatEveryViewAllows) {
  View views[2] = {dense({2, 3, 4}), dense({2, 3, 4})};
  coalesceDims(views, 2);
  EXPECT_EQ(views[0].rank, 1);
  EXPECT_EQ(views[0].sizes[0], 24);
  EXPECT_EQ(views[1].strides[0], 1);

  // A broadcast row vector: the leading dimensions merge, the last stays.
  int64_t shape[3] = {2, 3, 4};
  View row;
  ASSERT_TRUE(broadcastView(dense({4}), shape, 3, row));
  View pair[2] = {dense({2, 3, 4}), row};
  coalesceDims(pair, 2);
  ASSERT_EQ(pair[0].rank, 2);
  EXPECT_EQ(pair[0].sizes[0], 6);
  EXPECT_EQ(pair[0].sizes[1], 4);
  EXPECT_EQ(pair[1].strides[0], 0);
  EXPECT_EQ(pair[1].strides[1], 1);
  // Offsets are unchanged by the merge.
  View before = row;
  for (int64_t i = 0; i < 24; ++i)
    EXPECT_EQ(pair[1].offsetOf(i), before.offsetOf(i));

  // Dimensions of size 1 drop out; a view of one element has rank 0.
  View ones[1] = {dense({1, 1, 1})};
  coalesceDims(ones, 1);
  EXPECT_EQ(ones[0].rank, 0);
  EXPECT_EQ(ones[0].numel(), 1);
  EXPECT_EQ(ones[0].offsetOf(0), 0);
}

/// GPT-2's heads: attention output `[B, H, T, D]` read as `[B, T, H, D]`
/// (a permute) into a dense copy; element `i` of the copy, as units.
TEST(CudaCommon, CopiesMoveSeveralElementsWhereTheLastDimensionIsDense) {
  alignas(16) static uint16_t storage[8];
  View src = dense({2, 3, 4, 64}); // B, H, T, D
  std::swap(src.sizes[1], src.sizes[2]);
  std::swap(src.strides[1], src.strides[2]); // [B, T, H, D]
  View dst = dense({2, 4, 3, 64});
  src.data = dst.data = storage;
  View views[2] = {src, dst};
  coalesceDims(views, 2);
  ASSERT_EQ(views[0].rank, 4);
  View before[2] = {views[0], views[1]};
  ASSERT_TRUE(vectorizeLast(views, 2, 8, 2));
  EXPECT_EQ(views[0].sizes[3], 8);
  EXPECT_EQ(views[1].sizes[3], 8);
  // Unit u of the vectorized copy is elements [8u, 8u + 8) of the original.
  for (int64_t u = 0; u < views[1].numel(); ++u)
    for (int64_t k = 0; k < 8; ++k) {
      EXPECT_EQ(views[0].offsetOf(u) * 8 + k, before[0].offsetOf(u * 8 + k));
      EXPECT_EQ(views[1].offsetOf(u) * 8 + k, before[1].offsetOf(u * 8 + k));
    }
  // And in 32-bit arithmetic.
  ASSERT_TRUE(fitsIndex32(views, 2, views[1].numel()));
  for (uint32_t u = 0; u < uint32_t(views[1].numel()); ++u)
    EXPECT_EQ(int64_t(offsetOf32(views[0], u)), views[0].offsetOf(u));
}

TEST(CudaCommon, CopiesMoveOneElementWhereUnitsDoNotFit) {
  alignas(16) static uint16_t storage[16];
  View v = dense({4, 6});
  v.data = storage;
  View one[1] = {v};
  EXPECT_FALSE(vectorizeLast(one, 1, 8, 2)); // 6 is not a multiple of 8
  EXPECT_TRUE(vectorizeLast(one, 1, 2, 2));  // 4 bytes: 3 units a row
  EXPECT_EQ(one[0].sizes[1], 3);
  EXPECT_EQ(one[0].strides[0], 3);
  View t = dense({8, 8});
  t.data = storage;
  std::swap(t.strides[0], t.strides[1]); // a transpose: last stride 8
  View two[1] = {t};
  EXPECT_FALSE(vectorizeLast(two, 1, 8, 2));
  View shifted = dense({4, 8});
  shifted.data = storage + 1; // 2 bytes past a 16-byte boundary
  View three[1] = {shifted};
  EXPECT_FALSE(vectorizeLast(three, 1, 8, 2));
  // A row stride that is not a multiple of the unit (a slice of 12 of 20).
  View slice = dense({4, 8});
  slice.data = storage;
  slice.strides[0] = 20;
  View four[1] = {slice};
  EXPECT_FALSE(vectorizeLast(four, 1, 8, 2));
  EXPECT_TRUE(vectorizeLast(four, 1, 4, 2));
  EXPECT_EQ(four[0].strides[0], 5);
  // Offsets past 2^31 - 1 need 64-bit arithmetic.
  View big = dense({3, int64_t(1) << 30});
  EXPECT_FALSE(fitsIndex32(&big, 1, big.numel()));
  View wide = dense({2, 1000});
  wide.strides[0] = int64_t(1) << 31;
  EXPECT_FALSE(fitsIndex32(&wide, 1, wide.numel()));
  EXPECT_TRUE(fitsIndex32(&v, 1, v.numel()));
}

TEST(CudaCommon, LaunchShapes) {
  Launch l = linearLaunch(1000, 256);
  EXPECT_EQ(l.block, 256u);
  EXPECT_EQ(l.grid, 4u);
  EXPECT_EQ(linearLaunch(0).grid, 1u);
  EXPECT_EQ(linearLaunch(int64_t(1) << 40).grid, unsigned(65535LL * 32));
  EXPECT_EQ(rowBlock(1), 32);
  EXPECT_EQ(rowBlock(257), 128);
  EXPECT_EQ(rowBlock(1 << 20), 1024);
  EXPECT_EQ(ceilDiv(10, 3), 4);
  EXPECT_EQ(elemSize(ElemType::BF16), 2u);
  EXPECT_EQ(elemSize(ElemType::I64), 8u);
  EXPECT_EQ(elemSize(ElemType::Bool), 1u);
}

TEST(CudaBackend, NoGpuIsAnErrorThatSaysSo) {
  std::string why;
  if (cudaDeviceAvailable(&why))
    GTEST_SKIP() << "this machine has a GPU";
  EXPECT_NE(why.find("--device=cuda: no CUDA device"), std::string::npos)
      << why;
  registerBuiltinComponents();
  absl::StatusOr<const BackendEntry *> entry = findBackend("cuda");
  ASSERT_TRUE(entry.ok()) << entry.status();
  absl::StatusOr<std::unique_ptr<Backend>> backend =
      (*entry)->create(DeviceOptions{});
  ASSERT_FALSE(backend.ok());
  EXPECT_NE(backend.status().message().find("NVIDIA GPU"), std::string::npos)
      << backend.status();
  // --device=auto falls back to the CPU where this build has it.
  absl::StatusOr<const BackendEntry *> chosen = findBackend("auto");
  if (findBackend("cpu").ok()) {
    ASSERT_TRUE(chosen.ok());
    EXPECT_EQ((*chosen)->name, "cpu");
  }
}

} // namespace

namespace merak::runtime::cuda {
namespace {

TEST(CudaKernelTable, EveryOpTheCpuRunsHasACudaKernel) {
  // Registering kernels touches no GPU: the table is complete here too.
  const KernelTable &table = kernelTable();
  for (size_t k = 0; k < kNumOpKinds; ++k) {
    OpKind kind = OpKind(k);
    bool communicator = isCollective(kind) || kind == OpKind::Wait;
    EXPECT_EQ(table.find(kind) != nullptr, !communicator) << opFullName(kind);
  }
}

TEST(CudaKernelTable, ASecondKernelForAKindIsRejected) {
  KernelTable table("CUDA");
  registerReductionKernels(table);
  ASSERT_NE(table.find(OpKind::ReduceSum), nullptr);
  try {
    table.add(OpKind::ReduceSum, [](Ctx &) {});
    FAIL() << "a second kernel for reduce_sum was accepted";
  } catch (const std::logic_error &e) {
    EXPECT_STREQ(e.what(),
                 "the CUDA backend registers two kernels for merak.reduce_sum");
  }
}

} // namespace
} // namespace merak::runtime::cuda
