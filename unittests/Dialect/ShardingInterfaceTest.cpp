//===- ShardingInterfaceTest.cpp - every merak op is shardable ------------===//
//
// Fails for a merak op without mesh::ShardingInterface, and for an op whose
// loop space is malformed on a representative instance (one map per operand
// and result, over the op's loops, with the value's rank; result maps are
// projected permutations; one reduction kind per reduction loop). Every
// registered op must have an instance below, so a new op without a sharding
// rule fails here.
//
//===----------------------------------------------------------------------===//

#include "merak/Dialect/Merak/IR/MerakOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Mesh/IR/MeshOps.h"
#include "mlir/Dialect/Mesh/Interfaces/ShardingInterface.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"
#include "llvm/ADT/StringSet.h"
#include "gtest/gtest.h"

using namespace mlir;

namespace {

/// One instance (or more) of every merak op.
constexpr const char *kInstances = R"mlir(
mesh.mesh @mesh(shape = 2)
func.func @all(%x: tensor<2x3xf32>, %v: tensor<3xf32>, %s: tensor<f32>,
               %b: tensor<2x3xi1>, %i: tensor<4xi64>, %x3: tensor<2x5x8xf32>,
               %w: tensor<16x8xf32>, %bias: tensor<16xf32>, %w8: tensor<8xf32>,
               %img: tensor<2x3x8x8xf32>, %cw: tensor<4x3x3x3xf32>,
               %ch: tensor<3xf32>, %emb: tensor<10x8xf32>, %idx: tensor<2x5xi64>,
               %logits: tensor<8x10xf32>, %t: tensor<8xi64>, %step: tensor<i64>,
               %g4arg: tensor<2x4x6x6xf32>, %gp: tensor<2x3x4x4xf32>, %w8m: tensor<1x8x3xf32>, %cb: tensor<4xf32>,
               %q4: tensor<2x3x5x8xf32>, %v4: tensor<2x3x5x4xf32>, %m4: tensor<1x1x5x5xi1>, %p4: tensor<2x3x5x5xf32>) {
  %c = merak.constant dense<1.0> : tensor<2x3xf32>
  %u0 = merak.neg %x : tensor<2x3xf32>
  %u1 = merak.abs %x : tensor<2x3xf32>
  %u2 = merak.exp %x : tensor<2x3xf32>
  %u3 = merak.log %x : tensor<2x3xf32>
  %u4 = merak.sin %x : tensor<2x3xf32>
  %u5 = merak.cos %x : tensor<2x3xf32>
  %u6 = merak.sqrt %x : tensor<2x3xf32>
  %u7 = merak.rsqrt %x : tensor<2x3xf32>
  %u8 = merak.reciprocal %x : tensor<2x3xf32>
  %u9 = merak.erf %x : tensor<2x3xf32>
  %u10 = merak.tanh %x : tensor<2x3xf32>
  %u11 = merak.sigmoid %x : tensor<2x3xf32>
  %u12 = merak.silu %x : tensor<2x3xf32>
  %u13 = merak.relu %x : tensor<2x3xf32>
  %u14 = merak.not %b : tensor<2x3xi1>
  %u15 = merak.gelu %x : tensor<2x3xf32>
  %u16 = merak.clamp %x {min = 0.0 : f64} : tensor<2x3xf32>
  %u17 = merak.cast %x : tensor<2x3xf32> -> tensor<2x3xbf16>
  %u18 = merak.dropout %x {p = 0.1 : f64, training = true} : tensor<2x3xf32>
  %u19 = merak.tril %x : tensor<2x3xf32>
  %u20 = merak.triu %x {diagonal = 1 : i64} : tensor<2x3xf32>
  %b0 = merak.add %x, %v : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xf32>
  %b1 = merak.sub %x, %s : (tensor<2x3xf32>, tensor<f32>) -> tensor<2x3xf32>
  %b2 = merak.mul %x, %x : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>
  %b3 = merak.div %x, %v : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xf32>
  %b4 = merak.pow %x, %s : (tensor<2x3xf32>, tensor<f32>) -> tensor<2x3xf32>
  %b5 = merak.remainder %i, %i : (tensor<4xi64>, tensor<4xi64>) -> tensor<4xi64>
  %b6 = merak.floor_divide %i, %i : (tensor<4xi64>, tensor<4xi64>) -> tensor<4xi64>
  %b7 = merak.minimum %x, %x : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>
  %b8 = merak.maximum %x, %x : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>
  %b9 = merak.and %b, %b : (tensor<2x3xi1>, tensor<2x3xi1>) -> tensor<2x3xi1>
  %b10 = merak.or %b, %b : (tensor<2x3xi1>, tensor<2x3xi1>) -> tensor<2x3xi1>
  %b11 = merak.compare <lt>, %x, %v : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xi1>
  %b12 = merak.where %b, %x, %s : (tensor<2x3xi1>, tensor<2x3xf32>, tensor<f32>) -> tensor<2x3xf32>
  %l0 = merak.linear %x3, %w, %bias : (tensor<2x5x8xf32>, tensor<16x8xf32>, tensor<16xf32>) -> tensor<2x5x16xf32>
  %l1 = merak.matmul %x3, %w8m : (tensor<2x5x8xf32>, tensor<1x8x3xf32>) -> tensor<2x5x3xf32>
  %n0 = merak.softmax %x3 {dim = -1 : i64} : tensor<2x5x8xf32>
  %n1 = merak.log_softmax %x3 {dim = 1 : i64} : tensor<2x5x8xf32>
  %n2 = merak.layer_norm %x3 weight %w8 bias %w8 {normalized_rank = 1 : i64, eps = 1.0e-5 : f64} : (tensor<2x5x8xf32>, tensor<8xf32>, tensor<8xf32>) -> tensor<2x5x8xf32>
  %n3 = merak.rms_norm %x3 weight %w8 {normalized_rank = 1 : i64, eps = 1.0e-5 : f64} : (tensor<2x5x8xf32>, tensor<8xf32>) -> tensor<2x5x8xf32>
  %n4:3 = merak.batch_norm %img, %ch, %ch, %ch, %ch {training = true, momentum = 0.1 : f64, eps = 1.0e-5 : f64} : (tensor<2x3x8x8xf32>, tensor<3xf32>, tensor<3xf32>, tensor<3xf32>, tensor<3xf32>) -> (tensor<2x3x8x8xf32>, tensor<3xf32>, tensor<3xf32>)
  %e0 = merak.embedding %emb, %idx : (tensor<10x8xf32>, tensor<2x5xi64>) -> tensor<2x5x8xf32>
  %e1 = merak.index %x3, %i {dim = 1 : i64} : (tensor<2x5x8xf32>, tensor<4xi64>) -> tensor<2x4x8xf32>
  %d0 = merak.reshape %x3 {shape = array<i64: 10, 8>} : (tensor<2x5x8xf32>) -> tensor<10x8xf32>
  %d1 = merak.permute %x3 {permutation = array<i64: 2, 0, 1>} : (tensor<2x5x8xf32>) -> tensor<8x2x5xf32>
  %d2 = merak.slice %x3 {dim = 1 : i64, start = 1 : i64, end = 5 : i64, step = 2 : i64} : (tensor<2x5x8xf32>) -> tensor<2x2x8xf32>
  %d3 = merak.select %x3 {dim = 1 : i64, index = 2 : i64} : (tensor<2x5x8xf32>) -> tensor<2x8xf32>
  %d4 = merak.concat %x, %x {dim = 0 : i64} : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<4x3xf32>
  %d5 = merak.expand %v {shape = array<i64: 2, 3>} : (tensor<3xf32>) -> tensor<2x3xf32>
  %d6 = merak.pad %x {low = array<i64: 0, 1>, high = array<i64: 0, 2>} : (tensor<2x3xf32>) -> tensor<2x6xf32>
  %d7 = merak.roll %x {shifts = array<i64: 1>, dims = array<i64: 1>} : tensor<2x3xf32>
  %pos = merak.slice %i {dim = 0 : i64, start = 0 : i64, end = 1 : i64} : (tensor<4xi64>) -> tensor<1xi64>
  %d8 = merak.update_slice %x3, %x3, %pos {dim = 1 : i64} : (tensor<2x5x8xf32>, tensor<2x5x8xf32>, tensor<1xi64>) -> tensor<2x5x8xf32>
  %d9 = merak.cumsum %x3 {dim = 1 : i64} : tensor<2x5x8xf32>
  %r0 = merak.reduce_sum %x3 {dims = array<i64: 1>} : (tensor<2x5x8xf32>) -> tensor<2x8xf32>
  %r1 = merak.reduce_mean %x3 {dims = array<i64: -1>, keepdim = true} : (tensor<2x5x8xf32>) -> tensor<2x5x1xf32>
  %r2 = merak.reduce_max %x3 {dims = array<i64>} : (tensor<2x5x8xf32>) -> tensor<f32>
  %k0 = merak.conv2d %img, %cw, %cb {stride = array<i64: 1, 1>, padding = array<i64: 0, 0>, dilation = array<i64: 1, 1>, groups = 1 : i64} : (tensor<2x3x8x8xf32>, tensor<4x3x3x3xf32>, tensor<4xf32>) -> tensor<2x4x6x6xf32>
  %k1 = merak.max_pool2d %img {kernel = array<i64: 2, 2>, stride = array<i64: 2, 2>, padding = array<i64: 0, 0>, dilation = array<i64: 1, 1>} : (tensor<2x3x8x8xf32>) -> tensor<2x3x4x4xf32>
  %k2 = merak.avg_pool2d %img {kernel = array<i64: 2, 2>, stride = array<i64: 2, 2>, padding = array<i64: 0, 0>} : (tensor<2x3x8x8xf32>) -> tensor<2x3x4x4xf32>
  %k3 = merak.adaptive_avg_pool2d %img {output_size = array<i64: 1, 1>} : (tensor<2x3x8x8xf32>) -> tensor<2x3x1x1xf32>
  %ce0 = merak.cross_entropy %logits, %t : (tensor<8x10xf32>, tensor<8xi64>) -> tensor<f32>
  %g0 = merak.gelu_backward %x, %x : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>
  %gw = merak.linear_weight_backward %x3, %x3 : (tensor<2x5x8xf32>, tensor<2x5x8xf32>) -> tensor<8x8xf32>
  %gs = merak.softmax_backward %x3, %n0 {dim = 2 : i64} : (tensor<2x5x8xf32>, tensor<2x5x8xf32>) -> tensor<2x5x8xf32>
  %at:2 = merak.masked_attention %q4, %q4, %v4, %m4 {scale = 0.5 : f64} : (tensor<2x3x5x8xf32>, tensor<2x3x5x8xf32>, tensor<2x3x5x4xf32>, tensor<1x1x5x5xi1>) -> (tensor<2x3x5x4xf32>, tensor<2x3x5x5xf32>)
  %ab:3 = merak.masked_attention_backward %v4, %q4, %q4, %v4, %m4, %p4 {scale = 0.5 : f64} : (tensor<2x3x5x4xf32>, tensor<2x3x5x8xf32>, tensor<2x3x5x8xf32>, tensor<2x3x5x4xf32>, tensor<1x1x5x5xi1>, tensor<2x3x5x5xf32>) -> (tensor<2x3x5x8xf32>, tensor<2x3x5x8xf32>, tensor<2x3x5x4xf32>)
  %g1:3 = merak.layer_norm_backward %x3, %x3 weight %w8 bias %w8 {eps = 1.0e-5 : f64, normalized_rank = 1 : i64} : (tensor<2x5x8xf32>, tensor<2x5x8xf32>, tensor<8xf32>, tensor<8xf32>) -> (tensor<2x5x8xf32>, tensor<8xf32>, tensor<8xf32>)
  %g2:3 = merak.batch_norm_backward %img, %img, %ch, %ch, %ch {eps = 1.0e-5 : f64, training = true} : (tensor<2x3x8x8xf32>, tensor<2x3x8x8xf32>, tensor<3xf32>, tensor<3xf32>, tensor<3xf32>) -> (tensor<2x3x8x8xf32>, tensor<3xf32>, tensor<3xf32>)
  %g3 = merak.index_backward %e0, %idx {dim = 0 : i64, dim_size = 10 : i64} : (tensor<2x5x8xf32>, tensor<2x5xi64>) -> tensor<10x8xf32>
  %g4 = merak.slice_backward %d2 {dim = 1 : i64, start = 1 : i64, end = 5 : i64, step = 2 : i64, dim_size = 5 : i64} : (tensor<2x2x8xf32>) -> tensor<2x5x8xf32>
  %g5:3 = merak.conv2d_backward %g4arg, %img, %cw {dilation = array<i64: 1, 1>, groups = 1 : i64, padding = array<i64: 0, 0>, stride = array<i64: 1, 1>} : (tensor<2x4x6x6xf32>, tensor<2x3x8x8xf32>, tensor<4x3x3x3xf32>) -> (tensor<2x3x8x8xf32>, tensor<4x3x3x3xf32>, tensor<4xf32>)
  %g6 = merak.max_pool2d_backward %gp, %img {dilation = array<i64: 1, 1>, kernel = array<i64: 2, 2>, padding = array<i64: 0, 0>, stride = array<i64: 2, 2>} : (tensor<2x3x4x4xf32>, tensor<2x3x8x8xf32>) -> tensor<2x3x8x8xf32>
  %g7 = merak.avg_pool2d_backward %gp, %img {kernel = array<i64: 2, 2>, padding = array<i64: 0, 0>, stride = array<i64: 2, 2>} : (tensor<2x3x4x4xf32>, tensor<2x3x8x8xf32>) -> tensor<2x3x8x8xf32>
  %g8 = merak.adaptive_avg_pool2d_backward %gp, %img : (tensor<2x3x4x4xf32>, tensor<2x3x8x8xf32>) -> tensor<2x3x8x8xf32>
  %g9 = merak.cross_entropy_backward %s, %logits, %t : (tensor<f32>, tensor<8x10xf32>, tensor<8xi64>) -> tensor<8x10xf32>
  %o0 = merak.dropout_mask %x {p = 0.25 : f64} : tensor<2x3xf32>
  %o1:2 = merak.sgd_update %x, %x, %x, %s, %step {dampening = 0.0 : f64, momentum = 0.9 : f64, nesterov = false, weight_decay = 0.0 : f64} : (tensor<2x3xf32>, tensor<2x3xf32>, tensor<2x3xf32>, tensor<f32>, tensor<i64>) -> (tensor<2x3xf32>, tensor<2x3xf32>)
  %o2:3 = merak.adamw_update %x, %x, %x, %x, %s, %step {beta1 = 0.9 : f64, beta2 = 0.999 : f64, eps = 1.0e-8 : f64, weight_decay = 0.01 : f64} : (tensor<2x3xf32>, tensor<2x3xf32>, tensor<2x3xf32>, tensor<2x3xf32>, tensor<f32>, tensor<i64>) -> (tensor<2x3xf32>, tensor<2x3xf32>, tensor<2x3xf32>)
  return
}
)mlir";

class ShardingInterfaceTest : public ::testing::Test {
protected:
  ShardingInterfaceTest() {
    DialectRegistry registry;
    merak::registerMerakDialects(registry);
    ctx.appendDialectRegistry(registry);
    ctx.loadAllAvailableDialects();
  }

  OwningOpRef<ModuleOp> parse(StringRef source) {
    return parseSourceString<ModuleOp>(source, &ctx);
  }

  /// The merak ops of the first function of `module`.
  static SmallVector<Operation *> merakOps(ModuleOp module) {
    SmallVector<Operation *> ops;
    module.walk([&](Operation *op) {
      if (op->getDialect() && op->getDialect()->getNamespace() ==
                                  merak::MerakDialect::getDialectNamespace())
        ops.push_back(op);
    });
    return ops;
  }

  MLIRContext ctx;
};

TEST_F(ShardingInterfaceTest, EveryRegisteredOpImplementsIt) {
  int count = 0;
  for (RegisteredOperationName name : ctx.getRegisteredOperations()) {
    if (name.getDialectNamespace() !=
        merak::MerakDialect::getDialectNamespace())
      continue;
    ++count;
    EXPECT_TRUE(name.hasInterface<mesh::ShardingInterface>())
        << name.getStringRef().str() << " has no ShardingInterface";
  }
  EXPECT_GT(count, 60);
}

TEST_F(ShardingInterfaceTest, EveryOpHasWellFormedLoopsOnAnInstance) {
  OwningOpRef<ModuleOp> module = parse(kInstances);
  ASSERT_TRUE(module);
  llvm::StringSet<> seen;
  for (Operation *op : merakOps(*module)) {
    std::string name = op->getName().getStringRef().str();
    seen.insert(name);
    auto sharding = dyn_cast<mesh::ShardingInterface>(op);
    ASSERT_TRUE(sharding) << name;
    SmallVector<utils::IteratorType> loops = sharding.getLoopIteratorTypes();
    SmallVector<AffineMap> maps = sharding.getIndexingMaps();
    ASSERT_EQ(maps.size(), op->getNumOperands() + op->getNumResults()) << name;
    EXPECT_FALSE(loops.empty()) << name;
    SmallVector<Value> values(op->getOperands());
    llvm::append_range(values, op->getResults());
    for (auto [i, map] : llvm::enumerate(maps)) {
      EXPECT_EQ(map.getNumDims(), loops.size()) << name << " map #" << i;
      EXPECT_EQ((int64_t)map.getNumResults(),
                cast<RankedTensorType>(values[i].getType()).getRank())
          << name << " map #" << i;
      if (i >= op->getNumOperands())
        EXPECT_TRUE(map.isProjectedPermutation()) << name << " map #" << i;
    }
    int64_t reductions = llvm::count(loops, utils::IteratorType::reduction);
    EXPECT_EQ((int64_t)sharding.getReductionLoopIteratorKinds().size(),
              reductions)
        << name;
  }
  for (RegisteredOperationName name : ctx.getRegisteredOperations())
    if (name.getDialectNamespace() ==
        merak::MerakDialect::getDialectNamespace())
      EXPECT_TRUE(seen.contains(name.getStringRef()))
          << name.getStringRef().str()
          << " has no instance in this test: add one";
}

/// The option an op derives from annotations on its operands.
FailureOr<mesh::ShardingOption>
optionFrom(Operation *op, ArrayRef<mesh::MeshShardingAttr> operands) {
  return cast<mesh::ShardingInterface>(op).getShardingOption(
      operands, SmallVector<mesh::MeshShardingAttr>(op->getNumResults()));
}

TEST_F(ShardingInterfaceTest, NeverSplitLoopsAreDropped) {
  OwningOpRef<ModuleOp> module = parse(R"mlir(
mesh.mesh @mesh(shape = 2)
func.func @f(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %0 = merak.softmax %x {dim = 1 : i64} : tensor<4x8xf32>
  return %0 : tensor<4x8xf32>
}
)mlir");
  ASSERT_TRUE(module);
  Operation *softmax = merakOps(*module)[0];
  auto meshRef = FlatSymbolRefAttr::get(&ctx, "mesh");
  auto split = [&](SmallVector<SmallVector<mesh::MeshAxis>> axes) {
    return mesh::MeshShardingAttr::get(&ctx, meshRef, axes);
  };
  // The batch dimension stays split...
  FailureOr<mesh::ShardingOption> rows = optionFrom(softmax, {split({{0}})});
  ASSERT_TRUE(succeeded(rows));
  ASSERT_EQ(rows->shardingArray.size(), 1u);
  EXPECT_EQ(rows->shardingArray[0], SmallVector<mesh::MeshAxis>{0});
  // ... the softmax dimension does not.
  FailureOr<mesh::ShardingOption> cols =
      optionFrom(softmax, {split({{}, {0}})});
  ASSERT_TRUE(succeeded(cols));
  EXPECT_FALSE(cols->empty);
  EXPECT_TRUE(cols->shardingArray.empty());
}

TEST_F(ShardingInterfaceTest, ReshapeSplitsOnlyMajorDimensions) {
  OwningOpRef<ModuleOp> module = parse(R"mlir(
func.func @f(%x: tensor<2x16x32xf32>) -> tensor<2x16x4x8xf32> {
  %0 = merak.reshape %x {shape = array<i64: 2, 16, 4, 8>} : (tensor<2x16x32xf32>) -> tensor<2x16x4x8xf32>
  return %0 : tensor<2x16x4x8xf32>
}
func.func @g(%x: tensor<2x16x96xf32>) -> tensor<32x96xf32> {
  %0 = merak.reshape %x {shape = array<i64: 32, 96>} : (tensor<2x16x96xf32>) -> tensor<32x96xf32>
  return %0 : tensor<32x96xf32>
}
)mlir");
  ASSERT_TRUE(module);
  SmallVector<Operation *> ops = merakOps(*module);
  auto maps = [](Operation *op) {
    std::string s;
    llvm::raw_string_ostream os(s);
    for (AffineMap m : cast<mesh::ShardingInterface>(op).getIndexingMaps())
      os << m << "; ";
    return s;
  };
  EXPECT_EQ(maps(ops[0]), "(d0, d1, d2, d3) -> (d0, d1, d2); "
                          "(d0, d1, d2, d3) -> (d0, d1, d2, d3); ");
  EXPECT_EQ(maps(ops[1]), "(d0, d1) -> (d0, 0, d1); (d0, d1) -> (d0, d1); ");
}

} // namespace
