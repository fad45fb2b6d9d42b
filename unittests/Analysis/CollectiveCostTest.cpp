//===- CollectiveCostTest.cpp - ring bytes per collective -----------------===//

#include "merak/Hardware/CollectiveCost.h"

#include "gtest/gtest.h"

using namespace merak;

namespace {

TEST(CollectiveCostTest, RingBytesPerRank) {
  // 4 ranks, 1024 local input bytes.
  EXPECT_DOUBLE_EQ(collectiveBytes(CollectiveKind::AllReduce, 4, 1024, 1024),
                   1536);
  EXPECT_DOUBLE_EQ(collectiveBytes(CollectiveKind::ReduceScatter, 4, 1024, 256),
                   768);
  EXPECT_DOUBLE_EQ(collectiveBytes(CollectiveKind::AllToAll, 4, 1024, 1024),
                   768);
  // An all-gather sends its (n - 1) other shards' worth: of the result.
  EXPECT_DOUBLE_EQ(collectiveBytes(CollectiveKind::AllGather, 4, 256, 1024),
                   768);
  EXPECT_DOUBLE_EQ(collectiveBytes(CollectiveKind::AllSlice, 4, 1024, 256), 0);
}

TEST(CollectiveCostTest, GroupOfOneSendsNothing) {
  for (CollectiveKind kind :
       {CollectiveKind::AllReduce, CollectiveKind::ReduceScatter,
        CollectiveKind::AllToAll, CollectiveKind::AllGather})
    EXPECT_EQ(collectiveBytes(kind, 1, 1024, 1024), 0);
}

TEST(CollectiveCostTest, RingAndTreeAllReduces) {
  using A = CollectiveAlgorithm;
  // Steps: 2 (n - 1) around a ring, 2 ceil(log2 n) down and up a tree.
  EXPECT_EQ(allReduceSteps(A::Ring, 8), 14);
  EXPECT_EQ(allReduceSteps(A::Tree, 8), 6);
  EXPECT_EQ(allReduceSteps(A::Tree, 5), 6);
  EXPECT_EQ(allReduceSteps(A::Ring, 2), allReduceSteps(A::Tree, 2));
  EXPECT_EQ(allReduceSteps(A::Tree, 1), 0);
  // Bytes: the ring's 2 (n - 1) / n for both where n is a power of two;
  // twice the tensor for a tree over any other n.
  EXPECT_DOUBLE_EQ(allReduceBytes(A::Ring, 4, 1024), 1536);
  EXPECT_DOUBLE_EQ(allReduceBytes(A::Tree, 4, 1024), 1536);
  EXPECT_DOUBLE_EQ(allReduceBytes(A::Ring, 3, 3072), 4096);
  EXPECT_DOUBLE_EQ(allReduceBytes(A::Tree, 3, 3072), 6144);
  EXPECT_EQ(allReduceBytes(A::Tree, 1, 1024), 0);
  EXPECT_STREQ(collectiveAlgorithmName(A::Tree), "tree");
}

} // namespace
