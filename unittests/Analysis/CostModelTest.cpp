//===- CostModelTest.cpp - per-op figures of the cost model ---------------===//

#include "AnalysisTestUtils.h"

#include "merak/Analysis/CostModel.h"
#include "merak/Analysis/TrainStep.h"

using namespace mlir;
using namespace merak;
using merak::testing::ParsedModule;

namespace {

/// The first op named `name` in @f.
Operation *firstOp(ParsedModule &m, StringRef name) {
  Operation *found = nullptr;
  m.func("f").walk([&](Operation *op) {
    if (!found && op->getName().getStringRef() == name)
      found = op;
  });
  return found;
}

TEST(CostModel, TensorSizes) {
  ParsedModule m("func.func @f(%a: tensor<2x3xf32>, %b: tensor<4xbf16>, "
                 "%c: tensor<5xi1>, %d: tensor<f64>) { return }");
  ASSERT_TRUE(m.module);
  auto f = m.func("f");
  EXPECT_EQ(numElements(f.getArgument(0).getType()), 6);
  EXPECT_EQ(tensorBytes(f.getArgument(0).getType()), 24);
  EXPECT_EQ(tensorBytes(f.getArgument(1).getType()), 8);
  EXPECT_EQ(tensorBytes(f.getArgument(2).getType()), 5);
  EXPECT_EQ(tensorBytes(f.getArgument(3).getType()), 8);
}

TEST(CostModel, LinearIsTwoMNK) {
  // M = 2*3 rows, K = 8, N = 16: 2*M*N*K multiply-adds plus M*N bias adds.
  ParsedModule m(R"(
    func.func @f(%x: tensor<2x3x8xf32>, %w: tensor<16x8xf32>, %b: tensor<16xf32>) -> tensor<2x3x16xf32> {
      %y = merak.linear %x, %w, %b : (tensor<2x3x8xf32>, tensor<16x8xf32>, tensor<16xf32>) -> tensor<2x3x16xf32>
      return %y : tensor<2x3x16xf32>
    })");
  ASSERT_TRUE(m.module);
  OpCost c = estimateOp(firstOp(m, "merak.linear"));
  EXPECT_DOUBLE_EQ(c.flops, 2.0 * 6 * 16 * 8 + 6 * 16);
  EXPECT_EQ(c.bytesRead, (48 + 128 + 16) * 4);
  EXPECT_EQ(c.bytesWritten, 96 * 4);
  // Its backward by rule: input and weight gradients, twice the forward.
  EXPECT_DOUBLE_EQ(estimateBackwardByRule(firstOp(m, "merak.linear")).flops,
                   2 * c.flops);
}

TEST(CostModel, BatchedMatmul) {
  ParsedModule m(R"(
    func.func @f(%a: tensor<4x5x7xf32>, %b: tensor<4x7x3xf32>) -> tensor<4x5x3xf32> {
      %y = merak.matmul %a, %b : (tensor<4x5x7xf32>, tensor<4x7x3xf32>) -> tensor<4x5x3xf32>
      return %y : tensor<4x5x3xf32>
    })");
  ASSERT_TRUE(m.module);
  EXPECT_DOUBLE_EQ(estimateOp(firstOp(m, "merak.matmul")).flops,
                   2.0 * 4 * 5 * 3 * 7);
}

TEST(CostModel, LinearWeightGradientContractsEveryLeadingDimension) {
  ParsedModule m(R"(
    func.func @f(%g: tensor<4x5x3xf32>, %x: tensor<4x5x7xf32>) -> tensor<3x7xf32> {
      %w = merak.linear_weight_backward %g, %x : (tensor<4x5x3xf32>, tensor<4x5x7xf32>) -> tensor<3x7xf32>
      return %w : tensor<3x7xf32>
    })");
  ASSERT_TRUE(m.module);
  Operation *op = firstOp(m, "merak.linear_weight_backward");
  EXPECT_DOUBLE_EQ(estimateOp(op).flops, 2.0 * 4 * 5 * 3 * 7);
  EXPECT_TRUE(isContraction(op));
  // A run's profile names GEMM kernels by these names.
  for (llvm::StringRef name :
       {"merak.linear", "merak.matmul", "merak.linear_weight_backward",
        "merak.conv2d", "merak.conv2d_backward"})
    EXPECT_TRUE(isGemmOpName(name)) << name.str();
  for (llvm::StringRef name : {"merak.softmax", "merak.masked_attention",
                               "mesh.all_reduce", "merak.bilinear"})
    EXPECT_FALSE(isGemmOpName(name)) << name.str();
}

TEST(CostModel, MaskedAttention) {
  // 2 x 3 stacks of 5 x 5 scores, D = 8, E = 4: forward two products and
  // the softmax, backward (by rule and as an op) four products and the
  // softmax's gradient.
  ParsedModule m(R"(
    func.func @f(%q: tensor<2x3x5x8xf32>, %v: tensor<2x3x5x4xf32>, %m: tensor<5x5xi1>, %p: tensor<2x3x5x5xf32>) {
      %a:2 = merak.masked_attention %q, %q, %v, %m {scale = 0.5 : f64} : (tensor<2x3x5x8xf32>, tensor<2x3x5x8xf32>, tensor<2x3x5x4xf32>, tensor<5x5xi1>) -> (tensor<2x3x5x4xf32>, tensor<2x3x5x5xf32>)
      %b:3 = merak.masked_attention_backward %v, %q, %q, %v, %m, %p {scale = 0.5 : f64} : (tensor<2x3x5x4xf32>, tensor<2x3x5x8xf32>, tensor<2x3x5x8xf32>, tensor<2x3x5x4xf32>, tensor<5x5xi1>, tensor<2x3x5x5xf32>) -> (tensor<2x3x5x8xf32>, tensor<2x3x5x8xf32>, tensor<2x3x5x4xf32>)
      return
    })");
  ASSERT_TRUE(m.module);
  double scores = 2 * 3 * 5 * 5;
  Operation *forward = firstOp(m, "merak.masked_attention");
  EXPECT_DOUBLE_EQ(estimateOp(forward).flops,
                   2 * scores * (8 + 4) + 7 * scores);
  double backward = 4 * scores * (8 + 4) + 6 * scores;
  EXPECT_DOUBLE_EQ(estimateBackwardByRule(forward).flops, backward);
  EXPECT_DOUBLE_EQ(
      estimateOp(firstOp(m, "merak.masked_attention_backward")).flops,
      backward);
}

TEST(CostModel, Conv2d) {
  // Output 1x4x6x6, 3x3 kernel over 2 input channels (groups 1).
  ParsedModule m(R"(
    func.func @f(%x: tensor<1x2x8x8xf32>, %w: tensor<4x2x3x3xf32>) -> tensor<1x4x6x6xf32> {
      %y = merak.conv2d %x, %w {dilation = array<i64: 1, 1>, groups = 1 : i64, padding = array<i64: 0, 0>, stride = array<i64: 1, 1>} : (tensor<1x2x8x8xf32>, tensor<4x2x3x3xf32>) -> tensor<1x4x6x6xf32>
      return %y : tensor<1x4x6x6xf32>
    })");
  ASSERT_TRUE(m.module);
  EXPECT_DOUBLE_EQ(estimateOp(firstOp(m, "merak.conv2d")).flops,
                   2.0 * 144 * 2 * 3 * 3);
}

TEST(CostModel, ElementwiseNormsAndViews) {
  ParsedModule m(R"(
    func.func @f(%x: tensor<4x8xf32>, %g: tensor<8xf32>) -> (tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>, tensor<32xf32>, tensor<4x8xf32>) {
      %a = merak.add %x, %x : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
      %s = merak.softmax %x {dim = 1 : i64} : tensor<4x8xf32>
      %n = merak.layer_norm %x weight %g {eps = 1.0e-5 : f64, normalized_rank = 1 : i64} : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
      %r = merak.reshape %x {shape = array<i64: 32>} : (tensor<4x8xf32>) -> tensor<32xf32>
      %t = merak.tanh %x : tensor<4x8xf32>
      return %a, %s, %n, %r, %t : tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>, tensor<32xf32>, tensor<4x8xf32>
    })");
  ASSERT_TRUE(m.module);
  OpCost add = estimateOp(firstOp(m, "merak.add"));
  EXPECT_DOUBLE_EQ(add.flops, 32);
  EXPECT_EQ(add.bytesRead, 256);
  EXPECT_EQ(add.bytesWritten, 128);
  EXPECT_DOUBLE_EQ(estimateOp(firstOp(m, "merak.softmax")).flops, 5 * 32);
  EXPECT_DOUBLE_EQ(estimateOp(firstOp(m, "merak.layer_norm")).flops, 8 * 32);
  EXPECT_DOUBLE_EQ(estimateOp(firstOp(m, "merak.tanh")).flops, 4 * 32);
  // A reshape is a view: no kernel, no traffic.
  OpCost view = estimateOp(firstOp(m, "merak.reshape"));
  EXPECT_EQ(view.bytes(), 0);
  EXPECT_EQ(view.flops, 0);
}

TEST(CostModel, EmbeddingReadsOnlyItsRows) {
  ParsedModule m(R"(
    func.func @f(%w: tensor<1000x8xf32>, %i: tensor<2x3xi64>) -> tensor<2x3x8xf32> {
      %y = merak.embedding %w, %i : (tensor<1000x8xf32>, tensor<2x3xi64>) -> tensor<2x3x8xf32>
      return %y : tensor<2x3x8xf32>
    })");
  ASSERT_TRUE(m.module);
  OpCost c = estimateOp(firstOp(m, "merak.embedding"));
  EXPECT_EQ(c.flops, 0);
  EXPECT_EQ(c.bytesWritten, 48 * 4);
  EXPECT_EQ(c.bytesRead, 48 * 4 + 6 * 8);
}

TEST(CostModel, RooflineTime) {
  HardwareProfile hw;
  hw.peakFlops = 1e12;
  hw.memoryBandwidth = 1e11;
  hw.linkBandwidth = 1e10;
  hw.linkLatency = 1e-6;
  CostModel model(hw);
  OpCost compute{2e9, 1000, 1000};
  EXPECT_DOUBLE_EQ(model.time(compute), 2e-3);
  OpCost memory{10, 500000, 500000};
  EXPECT_DOUBLE_EQ(model.time(memory), 1e-5);
  EXPECT_DOUBLE_EQ(model.time(OpCost{}), 0);
  EXPECT_DOUBLE_EQ(model.transferTime(1e4), 1e-6 + 1e-6);
  EXPECT_DOUBLE_EQ(model.transferTime(0), 0);
}

/// A two-op training step as --merak-train builds it.
constexpr llvm::StringLiteral kStep = R"(
  func.func @train_step(%w: tensor<16x8xf32> {merak.param = "w"},
                        %x: tensor<4x8xf32> {merak.input = "x"},
                        %lr: tensor<f32> {merak.lr}, %step: tensor<i64> {merak.step})
      -> (tensor<f32> {merak.loss}, tensor<16x8xf32> {merak.update_arg = 0 : i64}, tensor<16x8xf32> {merak.update_arg = 0 : i64}) {
    %one = merak.constant dense<1.0> : tensor<f32>
    %y = merak.linear %x, %w {merak.id = 0 : i64} : (tensor<4x8xf32>, tensor<16x8xf32>) -> tensor<4x16xf32>
    %l = merak.reduce_sum %y {dims = array<i64>, merak.id = 1 : i64} : (tensor<4x16xf32>) -> tensor<f32>
    %g = merak.expand %one {merak.grad_of = 1 : i64, shape = array<i64: 4, 16>} : (tensor<f32>) -> tensor<4x16xf32>
    %gt = merak.permute %g {merak.grad_of = 0 : i64, permutation = array<i64: 1, 0>} : (tensor<4x16xf32>) -> tensor<16x4xf32>
    %gw = merak.matmul %gt, %x {merak.grad_of = 0 : i64} : (tensor<16x4xf32>, tensor<4x8xf32>) -> tensor<16x8xf32>
    %gx = merak.matmul %g, %w {merak.grad_of = 0 : i64} : (tensor<4x16xf32>, tensor<16x8xf32>) -> tensor<4x8xf32>
    %p, %m = merak.sgd_update %w, %gw, %w, %lr, %step {dampening = 0.0 : f64, momentum = 0.0 : f64, nesterov = false, weight_decay = 0.0 : f64} : (tensor<16x8xf32>, tensor<16x8xf32>, tensor<16x8xf32>, tensor<f32>, tensor<i64>) -> (tensor<16x8xf32>, tensor<16x8xf32>)
    return %l, %p, %m : tensor<f32>, tensor<16x8xf32>, tensor<16x8xf32>
  })";

TEST(CostModel, TrainingStepForwardOps) {
  ParsedModule m(kStep);
  ASSERT_TRUE(m.module);
  std::vector<ForwardOpCost> costs = CostModel().analyze(m.func("train_step"));
  ASSERT_EQ(costs.size(), 2u);
  const ForwardOpCost &linear = costs[0];
  EXPECT_EQ(linear.id, 0);
  EXPECT_DOUBLE_EQ(linear.forward.flops, 2.0 * 4 * 16 * 8);
  // Backward: the permute (no FLOPs) and the two matmuls.
  EXPECT_DOUBLE_EQ(linear.backward.flops, 2 * (2.0 * 16 * 8 * 4));
  // The weight-gradient matmul (and the permute feeding only it) are W.
  EXPECT_DOUBLE_EQ(linear.backwardWeight.flops, 2.0 * 16 * 8 * 4);
  EXPECT_EQ(linear.paramBytes, 16 * 8 * 4);
  // Its result is not read by backward: nothing saved. The reduction's
  // gradient is an expand of the seed.
  EXPECT_EQ(linear.savedBytes, 0);
  EXPECT_DOUBLE_EQ(costs[1].forward.flops, 64);
  EXPECT_EQ(costs[1].savedBytes, 0);
}

TEST(TrainStep, WeightGradientOps) {
  ParsedModule m(kStep);
  ASSERT_TRUE(m.module);
  llvm::DenseSet<Operation *> weight = weightGradientOps(m.func("train_step"));
  std::vector<std::string> names;
  for (Operation &op : m.func("train_step").getBody().front())
    if (weight.contains(&op))
      names.push_back(op.getName().getStringRef().str());
  // The weight-gradient matmul and the permute only it reads. The seed's
  // expand also feeds the input gradient, so it is B.
  EXPECT_EQ(names, (std::vector<std::string>{"merak.permute", "merak.matmul"}));
}

TEST(CostModel, CollectivesCountTheBytesTheySend) {
  // Ring algorithms over a group of 2 (one axis of the 2x4 mesh) or 8.
  ParsedModule m(R"(
    mesh.mesh @mesh(shape = 2x4)
    func.func @f(%x: tensor<16x8xf32>) -> (tensor<16x8xf32>, tensor<16x8xf32>, tensor<8x8xf32>, tensor<32x8xf32>, tensor<8x8xf32>) {
      %a = mesh.all_reduce %x on @mesh mesh_axes = [0] : tensor<16x8xf32> -> tensor<16x8xf32>
      %b = mesh.all_reduce %x on @mesh mesh_axes = [0, 1] : tensor<16x8xf32> -> tensor<16x8xf32>
      %c = mesh.reduce_scatter %x on @mesh mesh_axes = [0] scatter_axis = 0 : tensor<16x8xf32> -> tensor<8x8xf32>
      %d = mesh.all_gather %x on @mesh mesh_axes = [0] gather_axis = 0 : tensor<16x8xf32> -> tensor<32x8xf32>
      %e = mesh.all_slice %x on @mesh mesh_axes = [0] slice_axis = 0 : tensor<16x8xf32> -> tensor<8x8xf32>
      return %a, %b, %c, %d, %e : tensor<16x8xf32>, tensor<16x8xf32>, tensor<8x8xf32>, tensor<32x8xf32>, tensor<8x8xf32>
    })");
  ASSERT_TRUE(m.module);
  std::vector<OpCost> costs;
  m.func("f").walk([&](Operation *op) {
    if (op->getName().getDialectNamespace() == "mesh")
      costs.push_back(estimateOp(op));
  });
  ASSERT_EQ(costs.size(), 5u);
  int64_t bytes = 16 * 8 * 4;
  EXPECT_EQ(costs[0].bytesCommunicated, bytes);         // 2 (n-1)/n, n = 2
  EXPECT_EQ(costs[1].bytesCommunicated, bytes * 7 / 4); // n = 8
  EXPECT_DOUBLE_EQ(costs[0].flops, 16 * 8);
  EXPECT_EQ(costs[2].bytesCommunicated, bytes / 2);
  EXPECT_EQ(costs[3].bytesCommunicated, bytes); // of the result
  EXPECT_EQ(costs[4].bytesCommunicated, 0);     // local
  EXPECT_EQ(costs[4].collectives, 0);
  // Time: roofline plus latency and the bytes at the collective bandwidth.
  HardwareProfile hw;
  hw.collectiveBandwidth = 1e9;
  hw.collectiveLatency = 1e-5;
  CostModel model(hw);
  OpCost local = costs[0];
  local.bytesCommunicated = 0;
  local.collectives = 0;
  EXPECT_DOUBLE_EQ(model.time(costs[0]),
                   model.time(local) + 1e-5 + double(bytes) / 1e9);
}

// A partitioned step: the collectives and local forms --merak-spmdize
// builds carry no role; the optimizer step's reductions do not get one.
constexpr llvm::StringLiteral kPartitionedStep = R"(
  mesh.mesh @mesh(shape = 2x2) {merak.axes = ["dp", "tp"]}
  func.func @train_step(%x: tensor<4x8xf32>, %w: tensor<16x8xf32> {merak.param = "w"}, %lr: tensor<f32>, %step: tensor<i64>) -> (tensor<f32>, tensor<16x8xf32>, tensor<16x8xf32>) {
    %y = merak.linear %x, %w {merak.id = 0 : i64} : (tensor<4x8xf32>, tensor<16x8xf32>) -> tensor<4x16xf32>
    %r = mesh.all_reduce %y on @mesh mesh_axes = [1] : tensor<4x16xf32> -> tensor<4x16xf32>
    %l = merak.reduce_sum %r {dims = array<i64>, merak.id = 1 : i64} : (tensor<4x16xf32>) -> tensor<f32>
    %g = merak.expand %l {merak.grad_of = 1 : i64, shape = array<i64: 4, 16>} : (tensor<f32>) -> tensor<4x16xf32>
    %n = merak.neg %g : tensor<4x16xf32>
    %gt = merak.permute %n {merak.grad_of = 0 : i64, permutation = array<i64: 1, 0>} : (tensor<4x16xf32>) -> tensor<16x4xf32>
    %gw = merak.matmul %gt, %x {merak.grad_of = 0 : i64} : (tensor<16x4xf32>, tensor<4x8xf32>) -> tensor<16x8xf32>
    %s = mesh.all_reduce %gw on @mesh mesh_axes = [0] : tensor<16x8xf32> -> tensor<16x8xf32>
    %p, %m = merak.sgd_update %w, %s, %s, %lr, %step {dampening = 0.0 : f64, momentum = 0.0 : f64, nesterov = false, weight_decay = 0.0 : f64} : (tensor<16x8xf32>, tensor<16x8xf32>, tensor<16x8xf32>, tensor<f32>, tensor<i64>) -> (tensor<16x8xf32>, tensor<16x8xf32>)
    %q = mesh.all_gather %p on @mesh mesh_axes = [1] gather_axis = 0 : tensor<16x8xf32> -> tensor<32x8xf32>
    return %l, %p, %m : tensor<f32>, tensor<16x8xf32>, tensor<16x8xf32>
  })";

TEST(TrainStep, OptimizerStepOpsAndRoles) {
  ParsedModule m(kPartitionedStep);
  ASSERT_TRUE(m.module);
  func::FuncOp step = m.func("train_step");
  auto find = [&](StringRef name, unsigned n = 0) -> Operation * {
    for (Operation &op : step.getBody().front())
      if (op.getName().getStringRef() == name && n-- == 0)
        return &op;
    return nullptr;
  };
  Operation *forwardReduce = find("mesh.all_reduce", 0);
  Operation *gradReduce = find("mesh.all_reduce", 1);
  Operation *gather = find("mesh.all_gather");
  Operation *neg = find("merak.neg");
  Operation *update = find("merak.sgd_update");
  llvm::DenseSet<Operation *> optimizer = optimizerStepOps(step);
  EXPECT_TRUE(optimizer.contains(gradReduce));
  EXPECT_TRUE(optimizer.contains(gather));
  EXPECT_FALSE(optimizer.contains(forwardReduce));
  EXPECT_EQ(getUpdateGradientSource(update, optimizer),
            gradReduce->getOperand(0));

  // The forward all-reduce becomes a forward op with a fresh id; the neg,
  // which reads a backward value, joins backward; the optimizer's ops keep
  // no role.
  EXPECT_EQ(tagUntaggedOps(step), 2u);
  EXPECT_EQ(getForwardId(forwardReduce), std::optional<int64_t>(2));
  EXPECT_EQ(getGradOf(neg), std::optional<int64_t>(1));
  EXPECT_TRUE(isUntagged(gradReduce));
  EXPECT_TRUE(isUntagged(gather));
}

} // namespace
