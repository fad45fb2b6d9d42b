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

} // namespace
