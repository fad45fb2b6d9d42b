//===- ShapeInferenceTest.cpp - shape rules of merak ops ------------------===//

#include "merak/Dialect/Merak/IR/MerakOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "gtest/gtest.h"

using namespace mlir;
using namespace merak;

namespace {

class ShapeInferenceTest : public ::testing::Test {
protected:
  ShapeInferenceTest() : builder(&ctx) {
    DialectRegistry registry;
    registerMerakDialects(registry);
    ctx.appendDialectRegistry(registry);
    ctx.loadAllAvailableDialects();
    module = ModuleOp::create(builder.getUnknownLoc());
    builder.setInsertionPointToEnd(module->getBody());
    ctx.getDiagEngine().registerHandler([this](Diagnostic &d) {
      lastError = d.str();
      return success();
    });
  }

  /// A block argument of the given shape and element type.
  Value arg(ArrayRef<int64_t> shape, Type elem = {}) {
    if (!elem)
      elem = builder.getF32Type();
    if (!block) {
      auto func = builder.create<func::FuncOp>(builder.getUnknownLoc(), "f",
                                               builder.getFunctionType({}, {}));
      block = func.addEntryBlock();
      builder.setInsertionPointToStart(block);
    }
    return block->addArgument(RankedTensorType::get(shape, elem),
                              builder.getUnknownLoc());
  }

  static ArrayRef<int64_t> shapeOf(Value v) {
    return cast<RankedTensorType>(v.getType()).getShape();
  }

  MLIRContext ctx;
  OpBuilder builder;
  OwningOpRef<ModuleOp> module;
  Block *block = nullptr;
  std::string lastError;
};

TEST(BroadcastShapes, NumPyRules) {
  SmallVector<int64_t> out;
  EXPECT_TRUE(broadcastShapes({2, 1, 4}, {3, 1}, out));
  EXPECT_EQ(out, (SmallVector<int64_t>{2, 3, 4}));
  EXPECT_TRUE(broadcastShapes({}, {5}, out));
  EXPECT_EQ(out, (SmallVector<int64_t>{5}));
  int64_t bad = -1;
  EXPECT_FALSE(broadcastShapes({2, 3}, {4, 3}, out, &bad));
  EXPECT_EQ(bad, 0);
}

TEST_F(ShapeInferenceTest, LinearKeepsLeadingDims) {
  Value x = arg({2, 5, 8}), w = arg({16, 8}), b = arg({16});
  auto op = builder.create<LinearOp>(builder.getUnknownLoc(), x, w, b);
  EXPECT_EQ(shapeOf(op), (ArrayRef<int64_t>{2, 5, 16}));
}

TEST_F(ShapeInferenceTest, MatmulBroadcastsBatch) {
  Value a = arg({4, 1, 3, 5}), b = arg({6, 5, 7});
  auto op = builder.create<MatmulOp>(builder.getUnknownLoc(), a, b);
  EXPECT_EQ(shapeOf(op), (ArrayRef<int64_t>{4, 6, 3, 7}));
}

TEST_F(ShapeInferenceTest, MatmulReportsContractingMismatch) {
  Value a = arg({3, 5}), b = arg({4, 7});
  SmallVector<Type> types;
  EXPECT_TRUE(failed(MatmulOp::inferReturnTypes(&ctx, builder.getUnknownLoc(),
                                                ValueRange{a, b}, nullptr,
                                                nullptr, {}, types)));
  EXPECT_NE(lastError.find("lhs dimension 1 is 5, rhs dimension 0 is 4"),
            std::string::npos)
      << lastError;
}

TEST_F(ShapeInferenceTest, Conv2dOutputSize) {
  Value x = arg({2, 3, 32, 32}), w = arg({8, 3, 7, 7});
  auto op = builder.create<Conv2dOp>(builder.getUnknownLoc(), x, w, Value(),
                                     builder.getDenseI64ArrayAttr({2, 2}),
                                     builder.getDenseI64ArrayAttr({3, 3}),
                                     builder.getDenseI64ArrayAttr({1, 1}),
                                     builder.getI64IntegerAttr(1));
  EXPECT_EQ(shapeOf(op), (ArrayRef<int64_t>{2, 8, 16, 16}));
}

TEST_F(ShapeInferenceTest, MaxPoolCeilMode) {
  // PyTorch: 5x5 input, kernel 2, stride 2, ceil_mode -> 3x3.
  Value x = arg({1, 1, 5, 5});
  auto op = builder.create<MaxPool2dOp>(
      builder.getUnknownLoc(), x, builder.getDenseI64ArrayAttr({2, 2}),
      builder.getDenseI64ArrayAttr({2, 2}),
      builder.getDenseI64ArrayAttr({0, 0}),
      builder.getDenseI64ArrayAttr({1, 1}), builder.getBoolAttr(true));
  EXPECT_EQ(shapeOf(op), (ArrayRef<int64_t>{1, 1, 3, 3}));
}

TEST_F(ShapeInferenceTest, SliceWithStep) {
  Value x = arg({4, 9});
  auto op = builder.create<SliceOp>(builder.getUnknownLoc(), x, 1, 1, 9, 2);
  EXPECT_EQ(shapeOf(op), (ArrayRef<int64_t>{4, 4}));
}

TEST_F(ShapeInferenceTest, ReduceKeepdim) {
  Value x = arg({2, 3, 4});
  auto op = builder.create<ReduceMeanOp>(builder.getUnknownLoc(), x,
                                         ArrayRef<int64_t>{-1}, true);
  EXPECT_EQ(shapeOf(op), (ArrayRef<int64_t>{2, 3, 1}));
  auto all = builder.create<ReduceSumOp>(builder.getUnknownLoc(), x,
                                         ArrayRef<int64_t>{}, false);
  EXPECT_EQ(shapeOf(all), (ArrayRef<int64_t>{}));
}

TEST_F(ShapeInferenceTest, EmbeddingAppendsFeatureDim) {
  Value w = arg({100, 16}), idx = arg({2, 7}, builder.getI64Type());
  auto op = builder.create<EmbeddingOp>(builder.getUnknownLoc(), w, idx,
                                        IntegerAttr());
  EXPECT_EQ(shapeOf(op), (ArrayRef<int64_t>{2, 7, 16}));
}

} // namespace
