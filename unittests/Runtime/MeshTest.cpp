//===- MeshTest.cpp - ranks, coordinates, groups and shard blocks ---------===//

#include "merak/Runtime/Mesh.h"

#include "gtest/gtest.h"

#include <cstring>
#include <numeric>

using namespace merak::runtime;

namespace {

using Shape = std::vector<int64_t>;

TEST(MeshTest, CoordinatesAreRowMajor) {
  // docs/sharding.md: on a 2x2 mesh rank 3 is (dp=1, tp=1).
  EXPECT_EQ(meshCoordinates({2, 2}, 3), (Shape{1, 1}));
  EXPECT_EQ(meshCoordinates({2, 2}, 1), (Shape{0, 1}));
  EXPECT_EQ(meshCoordinates({2, 3, 4}, 17), (Shape{1, 1, 1}));
  EXPECT_EQ(meshCoordinates({}, 0), Shape{});
  for (int64_t r = 0; r < 24; ++r)
    EXPECT_EQ(meshLinearIndex({2, 3, 4}, meshCoordinates({2, 3, 4}, r)), r);
}

TEST(MeshTest, GroupsAgreeOnTheOtherAxes) {
  // 2x2 (dp, tp): tensor-parallel peers are neighbours.
  GroupMembership tp = processGroup({2, 2}, 2, {1});
  EXPECT_EQ(tp.ranks, (Shape{2, 3}));
  EXPECT_EQ(tp.index, 0);
  GroupMembership dp = processGroup({2, 2}, 3, {0});
  EXPECT_EQ(dp.ranks, (Shape{1, 3}));
  EXPECT_EQ(dp.index, 1);
  // All axes: every rank, in rank order.
  GroupMembership all = processGroup({2, 2}, 2, {0, 1});
  EXPECT_EQ(all.ranks, (Shape{0, 1, 2, 3}));
  EXPECT_EQ(all.index, 2);
  // The listed order decides the group order: over [1, 0] the first axis
  // listed varies slowest.
  GroupMembership swapped = processGroup({2, 2}, 2, {1, 0});
  EXPECT_EQ(swapped.ranks, (Shape{0, 2, 1, 3}));
  EXPECT_EQ(swapped.index, 1);
  // No axes: the rank alone.
  GroupMembership alone = processGroup({2, 2}, 1, {});
  EXPECT_EQ(alone.ranks, (Shape{1}));
  EXPECT_EQ(alone.index, 0);
}

TEST(MeshTest, GroupsOnAThreeAxisMesh) {
  // 2x3x2: rank 7 is (1, 0, 1); over axes [0, 2] its group varies axes 0
  // and 2 with axis 1 fixed at 0.
  EXPECT_EQ(meshCoordinates({2, 3, 2}, 7), (Shape{1, 0, 1}));
  GroupMembership g = processGroup({2, 3, 2}, 7, {0, 2});
  EXPECT_EQ(g.ranks, (Shape{0, 1, 6, 7}));
  EXPECT_EQ(g.index, 3);
  EXPECT_EQ(groupSize({2, 3, 2}, {0, 2}), 4);
  // Every rank is in exactly one group per axis set, at its own index.
  for (int64_t r = 0; r < 12; ++r) {
    GroupMembership m = processGroup({2, 3, 2}, r, {1});
    ASSERT_EQ(m.ranks.size(), 3u);
    EXPECT_EQ(m.ranks[m.index], r);
    for (int64_t peer : m.ranks)
      EXPECT_EQ(processGroup({2, 3, 2}, peer, {1}).ranks, m.ranks);
  }
}

TEST(MeshTest, ShardingText) {
  EXPECT_EQ(Sharding{}.str(), "replicated");
  EXPECT_EQ((Sharding{{{}, {}}}).str(), "replicated");
  EXPECT_EQ((Sharding{{{0}, {}}}).str(), "[[0], []]");
  EXPECT_EQ((Sharding{{{0, 1}}}).str(), "[[0, 1]]");
  EXPECT_TRUE((Sharding{{{0}}}) == (Sharding{{{0}, {}}}));
  EXPECT_FALSE((Sharding{{{0}}}) == (Sharding{{{1}}}));
}

TEST(MeshTest, VerifySharding) {
  EXPECT_TRUE(verifySharding(Sharding{{{0}, {1}}}, 2, {2, 2}).ok());
  absl::Status unknown = verifySharding(Sharding{{{2}}}, 1, {2, 2});
  EXPECT_FALSE(unknown.ok());
  EXPECT_NE(unknown.message().find("mesh axis 2"), std::string::npos);
  EXPECT_FALSE(verifySharding(Sharding{{{0}, {0}}}, 2, {2, 2}).ok());
  EXPECT_FALSE(verifySharding(Sharding{{{}, {1}}}, 1, {2, 2}).ok());
}

TEST(MeshTest, BlocksOnATwoDimensionalMesh) {
  // A [8, 6] tensor on 2x2 (dp, tp) split [[0], [1]]: rank (dp, tp) holds
  // rows dp*4.. and columns tp*3...
  Sharding s{{{0}, {1}}};
  for (int64_t r = 0; r < 4; ++r) {
    absl::StatusOr<TensorBlock> b = shardBlock({8, 6}, s, {2, 2}, r);
    ASSERT_TRUE(b.ok()) << b.status();
    EXPECT_EQ(b->offsets, (Shape{(r / 2) * 4, (r % 2) * 3}));
    EXPECT_EQ(b->sizes, (Shape{4, 3}));
  }
  EXPECT_EQ(globalShape({4, 3}, s, {2, 2}), (Shape{8, 6}));
  // Replicated on dp: ranks 0 and 2 hold the same block.
  Sharding tpOnly{{{}, {1}}};
  EXPECT_EQ(shardBlock({8, 6}, tpOnly, {2, 2}, 0)->offsets,
            shardBlock({8, 6}, tpOnly, {2, 2}, 2)->offsets);
  EXPECT_TRUE(ownsBlock(tpOnly, {2, 2}, 0));
  EXPECT_TRUE(ownsBlock(tpOnly, {2, 2}, 1));
  EXPECT_FALSE(ownsBlock(tpOnly, {2, 2}, 2));
  EXPECT_FALSE(ownsBlock(tpOnly, {2, 2}, 3));
  EXPECT_TRUE(ownsBlock(Sharding{}, {2, 2}, 0));
  EXPECT_FALSE(ownsBlock(Sharding{}, {2, 2}, 1));
}

TEST(MeshTest, OneDimensionSplitOverTwoAxes) {
  // Dimension 0 split over [0, 1] of 2x2: block index dp * 2 + tp; over
  // [1, 0]: tp * 2 + dp.
  for (int64_t r = 0; r < 4; ++r) {
    int64_t dp = r / 2, tp = r % 2;
    EXPECT_EQ(shardBlock({8}, Sharding{{{0, 1}}}, {2, 2}, r)->offsets[0],
              (dp * 2 + tp) * 2);
    EXPECT_EQ(shardBlock({8}, Sharding{{{1, 0}}}, {2, 2}, r)->offsets[0],
              (tp * 2 + dp) * 2);
  }
  EXPECT_EQ(globalShape({2}, Sharding{{{1, 0}}}, {2, 2}), Shape{8});
}

TEST(MeshTest, UnevenSplitIsAnError) {
  absl::StatusOr<TensorBlock> b = shardBlock({5, 4}, Sharding{{{0}}}, {2}, 1);
  ASSERT_FALSE(b.ok());
  EXPECT_NE(b.status().message().find("dimension 0 of size 5"),
            std::string::npos)
      << b.status();
}

HostTensor iota(Shape shape) {
  HostTensor t = HostTensor::allocate({DType::F32, shape});
  float *p = reinterpret_cast<float *>(t.mutableBytes());
  for (int64_t i = 0; i < t.type.numElements(); ++i)
    p[i] = float(i);
  return t;
}

float at(const HostTensor &t, int64_t i) {
  float v;
  std::memcpy(&v, t.bytes() + 4 * i, 4);
  return v;
}

TEST(MeshTest, CutShardCopiesTheBlock) {
  // [4, 6] = 0..23 on 2x2 split [[1], [0]]: rank 1 (dp 0, tp 1) holds
  // rows 2..4 and columns 0..3.
  HostTensor global = iota({4, 6});
  absl::StatusOr<HostTensor> shard =
      cutShard(global, Sharding{{{1}, {0}}}, {2, 2}, 1);
  ASSERT_TRUE(shard.ok()) << shard.status();
  EXPECT_EQ(shard->type.shape, (Shape{2, 3}));
  std::vector<float> expected = {12, 13, 14, 18, 19, 20};
  for (int64_t i = 0; i < 6; ++i)
    EXPECT_EQ(at(*shard, i), expected[i]);
  // A replicated tensor is the global one itself, not a copy.
  absl::StatusOr<HostTensor> whole = cutShard(global, Sharding{}, {2, 2}, 3);
  ASSERT_TRUE(whole.ok());
  EXPECT_EQ(whole->data, global.data);
}

TEST(MeshTest, ShardsAssembleIntoTheGlobalTensor) {
  // Every rank's block of a rank-3 tensor on a 2x3 mesh, one dimension over
  // two axes, copied back into place, gives the global tensor again.
  Shape mesh = {2, 3};
  Sharding s{{{}, {1, 0}, {}}};
  HostTensor global = iota({3, 12, 5});
  HostTensor assembled = HostTensor::allocate(global.type);
  for (int64_t r = 0; r < 6; ++r) {
    absl::StatusOr<TensorBlock> block = shardBlock({3, 12, 5}, s, mesh, r);
    ASSERT_TRUE(block.ok());
    absl::StatusOr<HostTensor> shard = cutShard(global, s, mesh, r);
    ASSERT_TRUE(shard.ok());
    EXPECT_EQ(shard->type.shape, (Shape{3, 2, 5}));
    copyRegion(*shard, {{0, 0, 0}, shard->type.shape}, assembled,
               block->offsets);
  }
  EXPECT_EQ(std::memcmp(assembled.bytes(), global.bytes(), global.byteSize()),
            0);
}

TEST(MeshTest, IntersectBoxes) {
  TensorBlock a{{0, 0}, {4, 4}}, b{{2, 3}, {4, 4}};
  std::optional<TensorBlock> c = intersect(a, b);
  ASSERT_TRUE(c);
  EXPECT_EQ(c->offsets, (Shape{2, 3}));
  EXPECT_EQ(c->sizes, (Shape{2, 1}));
  EXPECT_FALSE(intersect(a, TensorBlock{{4, 0}, {1, 4}}));
}

TEST(MeshTest, MeshText) {
  MeshLayout mesh{"mesh", {2, 4}, {"dp", "tp"}};
  EXPECT_EQ(mesh.size(), 8);
  EXPECT_EQ(mesh.str(), "2x4 (dp, tp)");
  EXPECT_EQ(mesh.axisName(1), "tp");
  EXPECT_EQ((MeshLayout{"m", {3}, {}}).str(), "3");
}

} // namespace
