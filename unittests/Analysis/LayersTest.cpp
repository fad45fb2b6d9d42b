//===- LayersTest.cpp - layer detection and stage balancing ---------------===//

#include "AnalysisTestUtils.h"

#include "merak/Analysis/Layers.h"

using namespace mlir;
using namespace merak;
using merak::testing::ParsedModule;

namespace {

/// Three linear+relu layers and a residual add that keeps two values live
/// across the second layer.
constexpr llvm::StringLiteral kMlp = R"(
  func.func @f(%x: tensor<4x8xf32> {merak.input = "x"},
               %w0: tensor<8x8xf32> {merak.param = "w0"},
               %w1: tensor<8x8xf32> {merak.param = "w1"},
               %w2: tensor<8x8xf32> {merak.param = "w2"},
               %mask: tensor<4x8xi1> {merak.buffer = "mask"}) -> tensor<4x8xf32> {
    %a = merak.linear %x, %w0 : (tensor<4x8xf32>, tensor<8x8xf32>) -> tensor<4x8xf32>
    %ra = merak.relu %a : tensor<4x8xf32>
    %b = merak.linear %ra, %w1 : (tensor<4x8xf32>, tensor<8x8xf32>) -> tensor<4x8xf32>
    %rb = merak.relu %b : tensor<4x8xf32>
    %s = merak.add %ra, %rb : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
    %m = merak.not %mask : tensor<4x8xi1>
    %c = merak.linear %s, %w2 : (tensor<4x8xf32>, tensor<8x8xf32>) -> tensor<4x8xf32>
    %z = merak.constant dense<0.0> : tensor<f32>
    %rc = merak.where %m, %c, %z : (tensor<4x8xi1>, tensor<4x8xf32>, tensor<f32>) -> tensor<4x8xf32>
    return %rc : tensor<4x8xf32>
  })";

TEST(Layers, CutsWhereFewestValuesAreLive) {
  ParsedModule m(kMlp);
  ASSERT_TRUE(m.module);
  CostModel model;
  LayerAnalysis layers(m.func("f"), model);
  // The constant and the mask (computed from a buffer only) are not
  // forward positions: every stage recomputes them.
  ASSERT_EQ(layers.forwardOps().size(), 7u);
  // Live after each op: %a | %ra | %ra,%b | %ra,%rb | %s | %c.
  EXPECT_EQ(layers.liveCount(0), 1u);
  EXPECT_EQ(layers.liveCount(2), 2u);
  EXPECT_EQ(layers.liveCount(3), 2u);
  EXPECT_EQ(layers.liveCount(4), 1u);
  EXPECT_EQ(layers.liveBytes(4), 4 * 8 * 4);
  // Layers: [linear, relu], [linear, relu, add], [linear, where]; the
  // spans without a contraction join the layer before them.
  ASSERT_EQ(layers.layers().size(), 3u);
  EXPECT_EQ(layers.layers()[0].begin, 0u);
  EXPECT_EQ(layers.layers()[0].end, 2u);
  EXPECT_EQ(layers.layers()[1].end, 5u);
  EXPECT_EQ(layers.layers()[2].end, 7u);
  EXPECT_EQ(layers.layers()[0].paramBytes, 8 * 8 * 4);
  EXPECT_EQ(layers.layers()[0].outBytes, 4 * 8 * 4);
  EXPECT_EQ(layers.layers()[2].outBytes, 0);
  EXPECT_GT(layers.layers()[1].forwardTime, 0);
  EXPECT_GT(layers.layers()[1].backwardTime, layers.layers()[1].forwardTime);
}

TEST(Layers, ValuesReadByEveryLayerDoNotHideCuts) {
  // A bias computed once and added in three layers is live everywhere; the
  // cuts are still the layer boundaries.
  ParsedModule m(R"(
    func.func @f(%x: tensor<4x8xf32> {merak.input = "x"},
                 %wb: tensor<8x8xf32> {merak.param = "wb"},
                 %w: tensor<8x8xf32> {merak.param = "w"}) -> tensor<4x8xf32> {
      %b = merak.linear %x, %wb : (tensor<4x8xf32>, tensor<8x8xf32>) -> tensor<4x8xf32>
      %l0 = merak.linear %x, %w : (tensor<4x8xf32>, tensor<8x8xf32>) -> tensor<4x8xf32>
      %a0 = merak.add %l0, %b : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
      %l1 = merak.linear %a0, %w : (tensor<4x8xf32>, tensor<8x8xf32>) -> tensor<4x8xf32>
      %a1 = merak.add %l1, %b : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
      %l2 = merak.linear %a1, %w : (tensor<4x8xf32>, tensor<8x8xf32>) -> tensor<4x8xf32>
      %a2 = merak.add %l2, %b : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
      return %a2 : tensor<4x8xf32>
    })");
  ASSERT_TRUE(m.module);
  LayerAnalysis layers(m.func("f"), CostModel());
  // [bias], [l0, a0], [l1, a1], [l2, a2].
  ASSERT_EQ(layers.layers().size(), 4u);
  EXPECT_EQ(layers.layers()[1].begin, 1u);
  EXPECT_EQ(layers.layers()[1].end, 3u);
  // The bias is not counted, its bytes are.
  EXPECT_EQ(layers.liveCount(2), 1u);
  EXPECT_EQ(layers.liveBytes(2), 2 * 4 * 8 * 4);
}

TEST(Layers, BalanceEqualLayers) {
  SmallVector<double> time(8, 1.0), bytes(8, 100.0);
  EXPECT_EQ(balanceStages(time, bytes, 4), (SmallVector<unsigned>{0, 2, 4, 6}));
  EXPECT_EQ(balanceStages(time, bytes, 1), (SmallVector<unsigned>{0}));
  EXPECT_EQ(balanceStages(time, bytes, 8),
            (SmallVector<unsigned>{0, 1, 2, 3, 4, 5, 6, 7}));
  // More stages than layers: no split.
  EXPECT_TRUE(balanceStages(time, bytes, 9).empty());
}

TEST(Layers, BalanceUnequalLayers) {
  // One heavy layer gets a stage of its own.
  SmallVector<double> time = {1, 1, 6, 1, 1, 1};
  SmallVector<double> bytes(6, 1.0);
  EXPECT_EQ(balanceStages(time, bytes, 3), (SmallVector<unsigned>{0, 2, 3}));
}

TEST(Layers, BalancePrefersCheapCuts) {
  // Splitting after layer 1 or after layer 2 gives stages of 3 vs 2 or 2
  // vs 3 (equally slow): the cut with fewer bytes wins.
  SmallVector<double> time = {1, 1, 1, 1, 1};
  SmallVector<double> cheapSecond = {100, 100, 10, 100, 0};
  EXPECT_EQ(balanceStages(time, cheapSecond, 2), (SmallVector<unsigned>{0, 3}));
  SmallVector<double> cheapFirst = {100, 10, 100, 100, 0};
  EXPECT_EQ(balanceStages(time, cheapFirst, 2), (SmallVector<unsigned>{0, 2}));
}

} // namespace
