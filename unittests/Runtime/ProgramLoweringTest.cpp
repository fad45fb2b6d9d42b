//===- ProgramLoweringTest.cpp - lowering to a rank program and its plan --===//

#include "merak/Dialect/Merak/IR/MerakDialect.h"
#include "merak/Target/RankProgram/RankProgramLowering.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"
#include "gtest/gtest.h"

#include <algorithm>

using namespace mlir;
using namespace merak::runtime;

namespace {

class ProgramLoweringTest : public ::testing::Test {
protected:
  ProgramLoweringTest() {
    DialectRegistry registry;
    merak::registerMerakDialects(registry);
    ctx.appendDialectRegistry(registry);
    ctx.loadAllAvailableDialects();
    ctx.getDiagEngine().registerHandler([this](Diagnostic &d) {
      errors.push_back(d.str());
      return success();
    });
  }

  /// Parses `text` and lowers its first function.
  FailureOr<Program> lower(StringRef text) {
    module = parseSourceString<ModuleOp>(text, &ctx);
    if (!module)
      return failure();
    auto func = *module->getOps<func::FuncOp>().begin();
    return lowerToProgram(func);
  }

  static const Instruction &find(const Program &p, OpKind kind,
                                 int occurrence = 0) {
    for (const Instruction &inst : p.instructions)
      if (inst.kind == kind && occurrence-- == 0)
        return inst;
    ADD_FAILURE() << "no " << opKindName(kind);
    return p.instructions.front();
  }
  static bool releases(const Instruction &inst, ValueId v) {
    return std::count(inst.release.begin(), inst.release.end(), v) > 0;
  }

  MLIRContext ctx;
  OwningOpRef<ModuleOp> module;
  std::vector<std::string> errors;
};

// y = x W^T + b; loss = mean((y - t)^2); gradients by hand; SGD.
constexpr const char *kLinearRegression = R"mlir(
func.func @train_step(%w: tensor<1x4xf32> {merak.param = "w"},
                      %b: tensor<1xf32> {merak.param = "b"},
                      %mw: tensor<1x4xf32> {merak.opt_state = "w/momentum_buffer"},
                      %x: tensor<8x4xf32> {merak.input = "x"},
                      %t: tensor<8x1xf32> {merak.input = "t"},
                      %lr: tensor<f32> {merak.lr},
                      %step: tensor<i64> {merak.step})
    -> (tensor<f32> {merak.loss}, tensor<1x4xf32> {merak.update_arg = 0 : i64},
        tensor<1x4xf32> {merak.update_arg = 2 : i64}) {
  %y = merak.linear %x, %w, %b : (tensor<8x4xf32>, tensor<1x4xf32>, tensor<1xf32>) -> tensor<8x1xf32>
  %d = merak.sub %y, %t : (tensor<8x1xf32>, tensor<8x1xf32>) -> tensor<8x1xf32>
  %sq = merak.mul %d, %d : (tensor<8x1xf32>, tensor<8x1xf32>) -> tensor<8x1xf32>
  %loss = merak.reduce_mean %sq {dims = array<i64>} : (tensor<8x1xf32>) -> tensor<f32>
  %c = merak.constant dense<2.500000e-01> : tensor<f32>
  %g = merak.mul %d, %c : (tensor<8x1xf32>, tensor<f32>) -> tensor<8x1xf32>
  %gt = merak.permute %g {permutation = array<i64: 1, 0>} : (tensor<8x1xf32>) -> tensor<1x8xf32>
  %dw = merak.matmul %gt, %x : (tensor<1x8xf32>, tensor<8x4xf32>) -> tensor<1x4xf32>
  %nw, %nmw = merak.sgd_update %w, %dw, %mw, %lr, %step {dampening = 0.0 : f64, momentum = 0.9 : f64, nesterov = false, weight_decay = 0.0 : f64} : (tensor<1x4xf32>, tensor<1x4xf32>, tensor<1x4xf32>, tensor<f32>, tensor<i64>) -> (tensor<1x4xf32>, tensor<1x4xf32>)
  return %loss, %nw, %nmw : tensor<f32>, tensor<1x4xf32>, tensor<1x4xf32>
}
)mlir";

TEST_F(ProgramLoweringTest, SignatureRolesAndResults) {
  FailureOr<Program> p = lower(kLinearRegression);
  ASSERT_TRUE(succeeded(p)) << (errors.empty() ? "" : errors.front());
  ASSERT_EQ(p->arguments.size(), 7u);
  EXPECT_EQ(p->arguments[0].role, ArgumentRole::Param);
  EXPECT_EQ(p->arguments[0].name, "w");
  EXPECT_EQ(p->arguments[0].updatedBy, 1);
  EXPECT_EQ(p->arguments[1].updatedBy, -1);
  EXPECT_EQ(p->arguments[2].role, ArgumentRole::OptState);
  EXPECT_EQ(p->arguments[3].role, ArgumentRole::Input);
  EXPECT_EQ(p->arguments[5].role, ArgumentRole::LearningRate);
  EXPECT_EQ(p->arguments[6].role, ArgumentRole::Step);
  EXPECT_EQ(p->lossResult, 0);
  EXPECT_EQ(p->results[1].updatesArgument, 0);
  EXPECT_EQ(p->results[2].updatesArgument, 2);
  EXPECT_EQ(p->constants.size(), 1u);
  EXPECT_EQ(p->instructions.size(), 8u);
  const Instruction &linear = find(*p, OpKind::Linear);
  ASSERT_EQ(linear.operands.size(), 3u);
  EXPECT_EQ(linear.operands[2], p->arguments[1].value);
}

TEST_F(ProgramLoweringTest, ReleasesEachValueAfterItsLastUse) {
  FailureOr<Program> p = lower(kLinearRegression);
  ASSERT_TRUE(succeeded(p));
  const Instruction &linear = find(*p, OpKind::Linear);
  const Instruction &sub = find(*p, OpKind::Sub);
  const Instruction &square = find(*p, OpKind::Mul, 0);
  const Instruction &mean = find(*p, OpKind::ReduceMean);
  const Instruction &matmul = find(*p, OpKind::Matmul);
  const Instruction &sgd = find(*p, OpKind::SgdUpdate);
  ValueId b = p->arguments[1].value, t = p->arguments[4].value;
  ValueId x = p->arguments[3].value;
  // b and t are read once; x last by the weight gradient.
  EXPECT_TRUE(releases(linear, b));
  EXPECT_TRUE(releases(sub, t));
  EXPECT_TRUE(releases(matmul, x));
  EXPECT_FALSE(releases(linear, x));
  // The square is dead once the mean is taken.
  EXPECT_TRUE(releases(mean, square.results[0]));
  // The loss and the new state are results: never released.
  for (const Instruction &inst : p->instructions) {
    EXPECT_FALSE(releases(inst, mean.results[0]));
    EXPECT_FALSE(releases(inst, sgd.results[0]));
    EXPECT_FALSE(releases(inst, sgd.results[1]));
  }
  EXPECT_EQ(p->values[mean.results[0]].lastUse, kKeepAlive);
  EXPECT_GT(p->plannedPeakBytes, 0);
}

TEST_F(ProgramLoweringTest, ReusesDyingOperandsInPlace) {
  FailureOr<Program> p = lower(kLinearRegression);
  ASSERT_TRUE(succeeded(p));
  // y - t: y dies here with the result's type, so the result takes its
  // storage.
  const Instruction &sub = find(*p, OpKind::Sub);
  EXPECT_EQ(sub.storage[0].kind, ResultStorage::Kind::InPlace);
  EXPECT_EQ(sub.storage[0].operand, 0);
  // d * d: d is read again (by the gradient), so the square is fresh.
  EXPECT_EQ(find(*p, OpKind::Mul, 0).storage[0].kind,
            ResultStorage::Kind::Fresh);
  // d * 0.25: d dies; the rank-0 constant cannot hold the result.
  const Instruction &scale = find(*p, OpKind::Mul, 1);
  EXPECT_EQ(scale.storage[0].kind, ResultStorage::Kind::InPlace);
  EXPECT_EQ(scale.storage[0].operand, 0);
  // permute is a view of its operand.
  EXPECT_EQ(find(*p, OpKind::Permute).storage[0].kind,
            ResultStorage::Kind::View);
  // The update writes the weight and the momentum buffer in place: both
  // are replaced by the step and die after the loss is known.
  const Instruction &sgd = find(*p, OpKind::SgdUpdate);
  EXPECT_EQ(sgd.storage[0].kind, ResultStorage::Kind::InPlace);
  EXPECT_EQ(sgd.storage[0].operand, 0);
  EXPECT_EQ(sgd.storage[1].kind, ResultStorage::Kind::InPlace);
  EXPECT_EQ(sgd.storage[1].operand, 2);
  EXPECT_EQ(p->lossInstruction, 3);
}

// The arena: fresh results that die within the step get offsets; two that
// are alive at the same time never share bytes; results the step returns
// stay off it; its size is at most the planned peak of those results.
TEST_F(ProgramLoweringTest, PlacesTemporariesInTheArena) {
  FailureOr<Program> p = lower(kLinearRegression);
  ASSERT_TRUE(succeeded(p));
  struct Placed {
    int first, last;
    int64_t begin, end;
  };
  std::vector<Placed> placed;
  for (size_t i = 0; i < p->instructions.size(); ++i) {
    const Instruction &inst = p->instructions[i];
    for (size_t r = 0; r < inst.storage.size(); ++r) {
      int64_t offset = inst.storage[r].arenaOffset;
      const ValueInfo &v = p->values[inst.results[r]];
      if (v.lastUse == kKeepAlive) {
        EXPECT_EQ(offset, -1) << "a result of the step in the arena";
        continue;
      }
      if (offset < 0)
        continue;
      EXPECT_EQ(inst.storage[r].kind, ResultStorage::Kind::Fresh);
      EXPECT_EQ(offset % 64, 0);
      EXPECT_LE(offset + v.type.byteSize(), p->arenaBytes);
      // Its storage lives until the last reader of any value in it.
      int last = int(i);
      for (const ValueInfo &other : p->values)
        if (other.buffer == v.buffer && other.lastUse != kKeepAlive)
          last = std::max(last, other.lastUse);
      placed.push_back({int(i), last, offset, offset + v.type.byteSize()});
    }
  }
  // y, d * d and the weight gradient's operands at least.
  EXPECT_GE(placed.size(), 3u);
  for (size_t a = 0; a < placed.size(); ++a)
    for (size_t b = a + 1; b < placed.size(); ++b) {
      bool together = placed[a].first <= placed[b].last &&
                      placed[b].first <= placed[a].last;
      bool share =
          placed[a].begin < placed[b].end && placed[b].begin < placed[a].end;
      EXPECT_FALSE(together && share) << "slots " << a << " and " << b;
    }
  EXPECT_GT(p->arenaBytes, 0);
}

TEST_F(ProgramLoweringTest, StateIsNotOverwrittenBeforeTheLoss) {
  // exp(w) is w's last use but comes before the loss: writing it into w
  // would lose the weights if the step were dropped for a NaN loss.
  FailureOr<Program> p = lower(R"mlir(
func.func @train_step(%w: tensor<4xf32> {merak.param = "w"},
                      %lr: tensor<f32> {merak.lr}, %step: tensor<i64> {merak.step})
    -> (tensor<f32> {merak.loss}, tensor<4xf32> {merak.update_arg = 0 : i64}) {
  %e = merak.exp %w : tensor<4xf32>
  %l = merak.reduce_sum %e {dims = array<i64>} : (tensor<4xf32>) -> tensor<f32>
  %n = merak.neg %e : tensor<4xf32>
  return %l, %n : tensor<f32>, tensor<4xf32>
}
)mlir");
  ASSERT_TRUE(succeeded(p));
  EXPECT_EQ(find(*p, OpKind::Exp).storage[0].kind, ResultStorage::Kind::Fresh);
  // After the loss, a dying temporary is fair game.
  EXPECT_EQ(find(*p, OpKind::Neg).storage[0].kind,
            ResultStorage::Kind::InPlace);
}

TEST_F(ProgramLoweringTest, LiveViewsAndBroadcastsBlockReuse) {
  FailureOr<Program> p = lower(R"mlir(
func.func @forward(%x: tensor<2x3xf32> {merak.input = "x"},
                   %v: tensor<3xf32> {merak.input = "v"})
    -> (tensor<2x3xf32>, tensor<3x2xf32>, tensor<2x3xf32>) {
  %a = merak.exp %x : tensor<2x3xf32>
  %t = merak.permute %a {permutation = array<i64: 1, 0>} : (tensor<2x3xf32>) -> tensor<3x2xf32>
  %b = merak.neg %a : tensor<2x3xf32>
  %e = merak.expand %v {shape = array<i64: 2, 3>} : (tensor<3xf32>) -> tensor<2x3xf32>
  %c = merak.tanh %e : tensor<2x3xf32>
  return %b, %t, %c : tensor<2x3xf32>, tensor<3x2xf32>, tensor<2x3xf32>
}
)mlir");
  ASSERT_TRUE(succeeded(p));
  // a's last direct use is neg, but its view t is a result.
  EXPECT_EQ(find(*p, OpKind::Neg).storage[0].kind, ResultStorage::Kind::Fresh);
  // An expanded view has repeated elements and can never be written.
  EXPECT_EQ(find(*p, OpKind::Tanh).storage[0].kind, ResultStorage::Kind::Fresh);
  // Inputs are never written either (exp reads x, its last use).
  EXPECT_EQ(find(*p, OpKind::Exp).storage[0].kind, ResultStorage::Kind::Fresh);
  // Without merak.loss, no rank-0 float result means no loss.
  EXPECT_EQ(p->lossResult, -1);
}

TEST_F(ProgramLoweringTest, ForwardWithoutMarkedLossUsesItsScalarResult) {
  FailureOr<Program> p = lower(R"mlir(
func.func @forward(%x: tensor<2x3xf32> {merak.input = "x"})
    -> (tensor<2x3xf32>, tensor<f32>) {
  %s = merak.reduce_sum %x {dims = array<i64>} : (tensor<2x3xf32>) -> tensor<f32>
  return %x, %s : tensor<2x3xf32>, tensor<f32>
}
)mlir");
  ASSERT_TRUE(succeeded(p));
  EXPECT_EQ(p->lossResult, 1);
  EXPECT_FALSE(p->trains());
}

TEST_F(ProgramLoweringTest, OptimizerConfigurationGivesTheDefaultRate) {
  FailureOr<Program> p = lower(R"mlir(
func.func @train_step(%w: tensor<4xf32> {merak.param = "w"},
                      %lr: tensor<f32> {merak.lr}, %step: tensor<i64> {merak.step})
    -> (tensor<f32> {merak.loss})
    attributes {merak.optimizer = {lr = 5.000000e-02 : f64, optimizer = "sgd"}} {
  %l = merak.reduce_sum %w {dims = array<i64>} : (tensor<4xf32>) -> tensor<f32>
  return %l : tensor<f32>
}
)mlir");
  ASSERT_TRUE(succeeded(p));
  const Argument *lr = p->findArgument(ArgumentRole::LearningRate);
  ASSERT_TRUE(lr && lr->defaultLearningRate);
  EXPECT_DOUBLE_EQ(*lr->defaultLearningRate, 0.05);
}

TEST_F(ProgramLoweringTest, UnsupportedOpsAreNamedWithTheirLocation) {
  FailureOr<Program> p = lower(R"mlir(
func.func @forward(%x: tensor<2xf32> {merak.input = "x"}) -> tensor<2xf32> {
  %y = arith.addf %x, %x : tensor<2xf32> loc("model.py":7:3)
  %z = arith.mulf %y, %y : tensor<2xf32> loc("model.py":8:3)
  return %z : tensor<2xf32>
}
)mlir");
  EXPECT_TRUE(failed(p));
  ASSERT_EQ(errors.size(), 2u);
  EXPECT_EQ(errors[0], "merak-exec has no kernel for 'arith.addf'");
  EXPECT_EQ(errors[1], "merak-exec has no kernel for 'arith.mulf'");
}

TEST_F(ProgramLoweringTest, ArgumentsNeedARole) {
  FailureOr<Program> p = lower(R"mlir(
func.func @forward(%x: tensor<2xf32>) -> tensor<2xf32> {
  return %x : tensor<2xf32>
}
)mlir");
  EXPECT_TRUE(failed(p));
  ASSERT_FALSE(errors.empty());
  EXPECT_NE(errors[0].find("argument #0 has none of the attributes"),
            std::string::npos);
}

TEST_F(ProgramLoweringTest, StoredShapesAreReadAndChecked) {
  FailureOr<Program> p = lower(R"mlir(
func.func @forward(%w: tensor<3x2x4xf32> {merak.param = "w", merak.stored_shape = array<i64: 6, 4>}) -> tensor<3x2x4xf32> {
  return %w : tensor<3x2x4xf32>
}
)mlir");
  ASSERT_TRUE(succeeded(p));
  EXPECT_EQ(p->arguments[0].storedShape, (std::vector<int64_t>{6, 4}));
  // Another element count, or an argument that is not state: an error.
  for (const char *text : {R"mlir(
func.func @forward(%w: tensor<3x2x4xf32> {merak.param = "w", merak.stored_shape = array<i64: 6, 5>}) -> tensor<3x2x4xf32> {
  return %w : tensor<3x2x4xf32>
}
)mlir",
                           R"mlir(
func.func @forward(%x: tensor<6xf32> {merak.input = "x", merak.stored_shape = array<i64: 2, 3>}) -> tensor<6xf32> {
  return %x : tensor<6xf32>
}
)mlir"}) {
    errors.clear();
    EXPECT_TRUE(failed(lower(text)));
    ASSERT_FALSE(errors.empty());
    EXPECT_NE(errors[0].find("merak.stored_shape"), std::string::npos)
        << errors[0];
    EXPECT_NE(errors[0].find("must be a parameter's, buffer's or optimizer "
                             "state's, with as many elements as its global"),
              std::string::npos)
        << errors[0];
  }
}

TEST_F(ProgramLoweringTest, UpdatesMustMatchTheirArgument) {
  FailureOr<Program> p = lower(R"mlir(
func.func @train_step(%w: tensor<4xf32> {merak.param = "w"})
    -> (tensor<2xf32> {merak.update_arg = 0 : i64}) {
  %s = merak.slice %w {dim = 0 : i64, end = 2 : i64, start = 0 : i64} : (tensor<4xf32>) -> tensor<2xf32>
  return %s : tensor<2xf32>
}
)mlir");
  EXPECT_TRUE(failed(p));
  ASSERT_FALSE(errors.empty());
  EXPECT_NE(errors[0].find("updates argument #0 but its type differs"),
            std::string::npos)
      << errors[0];
}

TEST_F(ProgramLoweringTest, DecodesAttributesOnce) {
  FailureOr<Program> p = lower(R"mlir(
func.func @forward(%x: tensor<4x10xf32> {merak.input = "x"},
                   %t: tensor<4xi64> {merak.input = "t"}) -> tensor<f32> {
  %s = merak.slice %x {dim = 1 : i64, end = 8 : i64, start = 1 : i64, step = 3 : i64} : (tensor<4x10xf32>) -> tensor<4x3xf32>
  %l = merak.cross_entropy %s, %t {ignore_index = 2 : i64, label_smoothing = 1.000000e-01 : f64, reduction = #merak.reduction<sum>} : (tensor<4x3xf32>, tensor<4xi64>) -> tensor<f32>
  return %l : tensor<f32>
}
)mlir");
  ASSERT_TRUE(succeeded(p));
  const OpAttrs &slice = find(*p, OpKind::Slice).attrs;
  EXPECT_EQ(slice.dim, 1);
  EXPECT_EQ(slice.start, 1);
  EXPECT_EQ(slice.end, 8);
  EXPECT_EQ(slice.step, 3);
  const OpAttrs &ce = find(*p, OpKind::CrossEntropy).attrs;
  EXPECT_EQ(ce.ignoreIndex, 2);
  EXPECT_EQ(ce.reduction, LossReduction::Sum);
  EXPECT_DOUBLE_EQ(ce.labelSmoothing, 0.1);
}

//===----------------------------------------------------------------------===//
// SPMD programs: the mesh, shardings, collectives and binding to a rank
//===----------------------------------------------------------------------===//

constexpr const char *kSpmd = R"mlir(
mesh.mesh @mesh(shape = 2x2) {merak.axes = ["dp", "tp"]}
func.func @forward(%w: tensor<4x3xf32> {merak.param = "w", merak.sharding = #mesh.shard<@mesh, [[1]]>},
                   %x: tensor<2x8xf32> {merak.input = "x", merak.sharding = #mesh.shard<@mesh, [[0], [1]]>})
    -> (tensor<f32>, tensor<4x8xf32> {merak.sharding = #mesh.shard<@mesh, [[0]]>}) {
  %a = mesh.all_to_all %x on @mesh mesh_axes = [1] split_axis = 0 concat_axis = 1 : tensor<2x8xf32> -> tensor<1x16xf32>
  %g = mesh.all_gather %x on @mesh mesh_axes = [0] gather_axis = 0 : tensor<2x8xf32> -> tensor<4x8xf32>
  %r = mesh.reduce_scatter %g on @mesh mesh_axes = [1, 0] reduction = <max> scatter_axis = 1 : tensor<4x8xf32> -> tensor<4x2xf32>
  %s = mesh.all_slice %g on @mesh mesh_axes = [1] slice_axis = 1 : tensor<4x8xf32> -> tensor<4x4xf32>
  %b = mesh.broadcast %w on @mesh mesh_axes = [0] root = [1] : (tensor<4x3xf32>) -> tensor<4x3xf32>
  %m = merak.reduce_sum %s {dims = array<i64>} : (tensor<4x4xf32>) -> tensor<f32>
  %l = mesh.all_reduce %m on @mesh mesh_axes = [0, 1] reduction = <average> : tensor<f32> -> tensor<f32>
  return %l, %g : tensor<f32>, tensor<4x8xf32>
}
)mlir";

TEST_F(ProgramLoweringTest, ReadsTheMeshShardingsAndCollectives) {
  FailureOr<Program> p = lower(kSpmd);
  ASSERT_TRUE(succeeded(p)) << (errors.empty() ? "" : errors.front());
  ASSERT_TRUE(p->mesh);
  EXPECT_EQ(p->mesh->shape, (std::vector<int64_t>{2, 2}));
  EXPECT_EQ(p->mesh->axisNames, (std::vector<std::string>{"dp", "tp"}));
  EXPECT_EQ(p->worldSize(), 4);
  EXPECT_EQ(p->arguments[0].sharding.str(), "[[1]]");
  EXPECT_EQ(p->arguments[1].sharding.str(), "[[0], [1]]");
  EXPECT_TRUE(p->results[0].sharding.isReplicated());
  EXPECT_EQ(p->results[1].sharding.str(), "[[0]]");

  const OpAttrs &a2a = find(*p, OpKind::AllToAll).attrs;
  EXPECT_EQ(a2a.meshAxes, (std::vector<int64_t>{1}));
  EXPECT_EQ(a2a.dim, 0);
  EXPECT_EQ(a2a.concatDim, 1);
  EXPECT_EQ(find(*p, OpKind::AllGather).attrs.dim, 0);
  const OpAttrs &rs = find(*p, OpKind::ReduceScatter).attrs;
  EXPECT_EQ(rs.meshAxes, (std::vector<int64_t>{1, 0}));
  EXPECT_EQ(rs.collectiveReduction, CollectiveReduction::Max);
  EXPECT_EQ(rs.dim, 1);
  EXPECT_EQ(find(*p, OpKind::AllSlice).attrs.dim, 1);
  EXPECT_EQ(find(*p, OpKind::Broadcast).attrs.root, (std::vector<int64_t>{1}));
  EXPECT_EQ(find(*p, OpKind::AllReduce).attrs.collectiveReduction,
            CollectiveReduction::Average);
  EXPECT_EQ(opFullName(OpKind::AllReduce), "mesh.all_reduce");
  EXPECT_EQ(opFullName(OpKind::Linear), "merak.linear");
}

TEST_F(ProgramLoweringTest, BindingToARankMakesItsGroups) {
  FailureOr<Program> p = lower(kSpmd);
  ASSERT_TRUE(succeeded(p));
  // Rank 2 is (dp 1, tp 0).
  ASSERT_TRUE(bindToRank(*p, 2).ok());
  EXPECT_EQ(p->rank, 2);
  // One group per distinct axis list, in order of first use.
  ASSERT_EQ(p->groups.size(), 4u);
  EXPECT_EQ(p->groups[0].meshAxes, (std::vector<int64_t>{1}));
  EXPECT_EQ(p->groups[0].members.ranks, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(p->groups[1].members.ranks, (std::vector<int64_t>{0, 2}));
  EXPECT_EQ(p->groups[1].members.index, 1);
  EXPECT_EQ(p->groups[2].members.ranks,
            (std::vector<int64_t>{0, 2, 1, 3})); // over [1, 0]
  EXPECT_EQ(find(*p, OpKind::AllToAll).attrs.group, 0);
  EXPECT_EQ(find(*p, OpKind::AllGather).attrs.group, 1);
  // all_slice became a slice of this rank's block: tp 0 of 2 along dim 1.
  const Instruction &slice = find(*p, OpKind::Slice);
  EXPECT_EQ(slice.attrs.dim, 1);
  EXPECT_EQ(slice.attrs.start, 0);
  EXPECT_EQ(slice.attrs.end, 4);
  EXPECT_EQ(slice.storage[0].kind, ResultStorage::Kind::View);
  // all_reduce may reduce into its dying operand.
  EXPECT_EQ(find(*p, OpKind::AllReduce).storage[0].kind,
            ResultStorage::Kind::InPlace);
  std::string listing = printProgram(*p);
  EXPECT_NE(listing.find("all_gather %1 : 4x8xf32 {gather dim 0 over mesh "
                         "axes [0] (dp): group 1 = ranks 0, 2}"),
            std::string::npos)
      << listing;

  // Rank 3 (tp 1) slices the second half.
  FailureOr<Program> q = lower(kSpmd);
  ASSERT_TRUE(succeeded(q));
  ASSERT_TRUE(bindToRank(*q, 3).ok());
  EXPECT_EQ(find(*q, OpKind::Slice).attrs.start, 4);
  EXPECT_FALSE(bindToRank(*q, 4).ok());
}

TEST_F(ProgramLoweringTest, CollectivesOverAnAxisOfOneAreIdentities) {
  FailureOr<Program> p = lower(R"mlir(
mesh.mesh @mesh(shape = 1x2)
func.func @forward(%x: tensor<4xf32> {merak.input = "x"}) -> tensor<4xf32> {
  %r = mesh.all_reduce %x on @mesh mesh_axes = [0] : tensor<4xf32> -> tensor<4xf32>
  %s = mesh.all_reduce %r on @mesh mesh_axes = [1] : tensor<4xf32> -> tensor<4xf32>
  return %s : tensor<4xf32>
}
)mlir");
  ASSERT_TRUE(succeeded(p)) << (errors.empty() ? "" : errors.front());
  ASSERT_TRUE(bindToRank(*p, 1).ok());
  const Instruction &first = find(*p, OpKind::AllReduce, 0);
  const Instruction &second = find(*p, OpKind::AllReduce, 1);
  EXPECT_TRUE(first.attrs.identity);
  EXPECT_EQ(first.storage[0].kind, ResultStorage::Kind::View);
  EXPECT_FALSE(second.attrs.identity);
  ASSERT_EQ(p->groups.size(), 1u);
  EXPECT_EQ(p->groups[0].members.ranks, (std::vector<int64_t>{0, 1}));
  // A pass-through needs no wait; the other one is waited for at the end.
  EXPECT_EQ(first.waitAt, -1);
  ASSERT_EQ(second.waitAt, 2);
  EXPECT_EQ(p->instructions[2].kind, OpKind::Wait);
}

//===----------------------------------------------------------------------===//
// Overlapped collectives: where the waits go, and what the plan keeps
//===----------------------------------------------------------------------===//

/// The kinds of the program's instructions in order.
std::vector<OpKind> kinds(const Program &p) {
  std::vector<OpKind> result;
  for (const Instruction &inst : p.instructions)
    result.push_back(inst.kind);
  return result;
}

TEST_F(ProgramLoweringTest, AWaitGoesRightBeforeTheFirstRead) {
  const char *text = R"mlir(
mesh.mesh @mesh(shape = 2)
func.func @forward(%x: tensor<4xf32> {merak.input = "x"},
                   %y: tensor<4xf32> {merak.input = "y"}) -> tensor<4xf32> {
  %r = mesh.all_reduce %x on @mesh mesh_axes = [0] : tensor<4xf32> -> tensor<4xf32>
  %a = merak.exp %y : tensor<4xf32>
  %c = merak.reshape %r {shape = array<i64: 2, 2>} : (tensor<4xf32>) -> tensor<2x2xf32>
  %b = merak.tanh %a : tensor<4xf32>
  %e = merak.reshape %c {shape = array<i64: 4>} : (tensor<2x2xf32>) -> tensor<4xf32>
  %d = merak.neg %b : tensor<4xf32>
  %f = merak.add %d, %e : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  return %f : tensor<4xf32>
}
)mlir";
  FailureOr<Program> p = lower(text);
  ASSERT_TRUE(succeeded(p)) << (errors.empty() ? "" : errors.front());
  ASSERT_TRUE(bindToRank(*p, 0).ok());
  // The all_reduce starts where it stands; exp, tanh and neg run while it
  // is in flight; the reshapes of its result (views, no data read) move
  // behind the wait, which comes right before add, its first reader.
  EXPECT_EQ(kinds(*p),
            (std::vector<OpKind>{OpKind::AllReduce, OpKind::Exp, OpKind::Tanh,
                                 OpKind::Neg, OpKind::Wait, OpKind::Reshape,
                                 OpKind::Reshape, OpKind::Add}));
  const Instruction &reduce = p->instructions[0];
  const Instruction &wait = p->instructions[4];
  EXPECT_EQ(reduce.waitAt, 4);
  EXPECT_EQ(wait.completes, 0);
  EXPECT_EQ(wait.operands, reduce.results);
  // %x, an input, is not reduced into: Gloo reads it until the wait, which
  // releases it.
  ValueId x = p->arguments[0].value;
  EXPECT_EQ(reduce.storage[0].kind, ResultStorage::Kind::Fresh);
  EXPECT_FALSE(releases(reduce, x));
  EXPECT_TRUE(releases(wait, x));
  std::string listing = printProgram(*p);
  EXPECT_NE(listing.find("#0 %2 = all_reduce %0 : 4xf32 {sum over mesh axes "
                         "[0]: group 0 = ranks 0, 1} {wait #4}"),
            std::string::npos)
      << listing;
  EXPECT_NE(listing.find("#4 wait %2 {all_reduce #0} release %0"),
            std::string::npos)
      << listing;

  // Blocking: the program's own order, no waits.
  FailureOr<Program> q = lower(text);
  ASSERT_TRUE(succeeded(q));
  ASSERT_TRUE(bindToRank(*q, 0, CollectiveMode::Blocking).ok());
  EXPECT_EQ(kinds(*q),
            (std::vector<OpKind>{OpKind::AllReduce, OpKind::Exp,
                                 OpKind::Reshape, OpKind::Tanh, OpKind::Reshape,
                                 OpKind::Neg, OpKind::Add}));
  EXPECT_EQ(q->instructions[0].waitAt, -1);
  EXPECT_TRUE(releases(q->instructions[0], x));

  // Binding again (here: blocking after overlapped) starts afresh.
  auto waits = [&] {
    std::vector<OpKind> k = kinds(*p);
    return std::count(k.begin(), k.end(), OpKind::Wait);
  };
  ASSERT_TRUE(bindToRank(*p, 1, CollectiveMode::Blocking).ok());
  EXPECT_EQ(waits(), 0);
  ASSERT_TRUE(bindToRank(*p, 1).ok());
  EXPECT_EQ(waits(), 1);
}

TEST_F(ProgramLoweringTest, StorageAPendingCollectiveReadsWaitsForIt) {
  const char *text = R"mlir(
mesh.mesh @mesh(shape = 2)
func.func @forward(%x: tensor<4xf32> {merak.input = "x"}) -> tensor<f32> {
  %a = merak.exp %x : tensor<4xf32>
  %g = mesh.all_gather %a on @mesh mesh_axes = [0] gather_axis = 0 : tensor<4xf32> -> tensor<8xf32>
  %b = merak.neg %a : tensor<4xf32>
  %c = merak.tanh %b : tensor<4xf32>
  %sc = merak.reduce_sum %c {dims = array<i64>} : (tensor<4xf32>) -> tensor<f32>
  %sg = merak.reduce_sum %g {dims = array<i64>} : (tensor<8xf32>) -> tensor<f32>
  %s = merak.add %sg, %sc : (tensor<f32>, tensor<f32>) -> tensor<f32>
  return %s : tensor<f32>
}
)mlir";
  FailureOr<Program> p = lower(text);
  ASSERT_TRUE(succeeded(p)) << (errors.empty() ? "" : errors.front());
  ASSERT_TRUE(bindToRank(*p, 0).ok());
  EXPECT_EQ(kinds(*p),
            (std::vector<OpKind>{OpKind::Exp, OpKind::AllGather, OpKind::Neg,
                                 OpKind::Tanh, OpKind::ReduceSum, OpKind::Wait,
                                 OpKind::ReduceSum, OpKind::Add}));
  // neg reads %a for the last time, but the gather still reads %a's
  // storage until its wait: neg must not write into it, and %a lives (and
  // counts in the planned peak) until the wait.
  const Instruction &neg = find(*p, OpKind::Neg);
  ValueId a = neg.operands[0];
  EXPECT_EQ(neg.storage[0].kind, ResultStorage::Kind::Fresh);
  EXPECT_FALSE(releases(neg, a));
  EXPECT_TRUE(releases(p->instructions[5], a));
  EXPECT_EQ(p->values[a].lastUse, 5);
  // tanh may still reuse neg's result, which no collective reads.
  EXPECT_EQ(find(*p, OpKind::Tanh).storage[0].kind,
            ResultStorage::Kind::InPlace);
  int64_t overlappedPeak = p->plannedPeakBytes;

  // Blocking, the gather is done when neg runs: neg may write into %a.
  FailureOr<Program> q = lower(text);
  ASSERT_TRUE(succeeded(q));
  ASSERT_TRUE(bindToRank(*q, 0, CollectiveMode::Blocking).ok());
  const Instruction &blockingNeg = find(*q, OpKind::Neg);
  EXPECT_EQ(blockingNeg.storage[0].kind, ResultStorage::Kind::InPlace);
  EXPECT_TRUE(releases(blockingNeg, a));
  EXPECT_GT(overlappedPeak, q->plannedPeakBytes);
}

/// A data-parallel training step: a linear model's squared error averaged
/// over `dp`, its gradient summed over `dp`, an SGD update; the loss's
/// average either right after the local loss or, as the partitioner
/// leaves it, just before the return.
std::string dataParallelStep(bool lossLast) {
  std::string loss =
      "  %loss = mesh.all_reduce %l on @mesh mesh_axes = [0] reduction = "
      "<average> : tensor<f32> -> tensor<f32>\n";
  std::string head = R"mlir(
mesh.mesh @mesh(shape = 2) {merak.axes = ["dp"]}
func.func @train_step(%w: tensor<1x4xf32> {merak.param = "w"},
                      %mw: tensor<1x4xf32> {merak.opt_state = "w/momentum_buffer"},
                      %x: tensor<4x4xf32> {merak.input = "x"},
                      %lr: tensor<f32> {merak.lr},
                      %step: tensor<i64> {merak.step})
    -> (tensor<f32> {merak.loss}, tensor<1x4xf32> {merak.update_arg = 0 : i64},
        tensor<1x4xf32> {merak.update_arg = 1 : i64}) {
  %y = merak.linear %x, %w : (tensor<4x4xf32>, tensor<1x4xf32>) -> tensor<4x1xf32>
  %sq = merak.mul %y, %y : (tensor<4x1xf32>, tensor<4x1xf32>) -> tensor<4x1xf32>
  %l = merak.reduce_mean %sq {dims = array<i64>} : (tensor<4x1xf32>) -> tensor<f32>
)mlir";
  std::string tail =
      R"mlir(  %yt = merak.permute %y {permutation = array<i64: 1, 0>} : (tensor<4x1xf32>) -> tensor<1x4xf32>
  %dw = merak.matmul %yt, %x : (tensor<1x4xf32>, tensor<4x4xf32>) -> tensor<1x4xf32>
  %g = mesh.all_reduce %dw on @mesh mesh_axes = [0] : tensor<1x4xf32> -> tensor<1x4xf32>
  %nw, %nmw = merak.sgd_update %w, %g, %mw, %lr, %step {dampening = 0.0 : f64, momentum = 0.9 : f64, nesterov = false, weight_decay = 0.0 : f64} : (tensor<1x4xf32>, tensor<1x4xf32>, tensor<1x4xf32>, tensor<f32>, tensor<i64>) -> (tensor<1x4xf32>, tensor<1x4xf32>)
)mlir";
  std::string ret =
      R"mlir(  return %loss, %nw, %nmw : tensor<f32>, tensor<1x4xf32>, tensor<1x4xf32>
}
)mlir";
  return lossLast ? head + tail + loss + ret : head + loss + tail + ret;
}

TEST_F(ProgramLoweringTest, TheLossIsKnownBeforeStateIsOverwritten) {
  FailureOr<Program> p = lower(dataParallelStep(false));
  ASSERT_TRUE(succeeded(p)) << (errors.empty() ? "" : errors.front());
  ASSERT_TRUE(bindToRank(*p, 0).ok());
  // Nothing reads the loss, but sgd_update may write the new weights into
  // the old ones only once the loss is known (a non-finite one drops the
  // step): the loss's wait comes before it, not at the end.
  EXPECT_EQ(kinds(*p), (std::vector<OpKind>{
                           OpKind::Linear, OpKind::Mul, OpKind::ReduceMean,
                           OpKind::AllReduce, OpKind::Permute, OpKind::Matmul,
                           OpKind::AllReduce, OpKind::Wait, OpKind::Wait,
                           OpKind::SgdUpdate}));
  EXPECT_EQ(p->instructions[3].waitAt, 7);
  EXPECT_EQ(p->instructions[6].waitAt, 8);
  EXPECT_EQ(p->lossInstruction, 7);
  const Instruction &update = find(*p, OpKind::SgdUpdate);
  EXPECT_EQ(update.storage[0].kind, ResultStorage::Kind::InPlace);
  EXPECT_EQ(update.storage[1].kind, ResultStorage::Kind::InPlace);
}

TEST_F(ProgramLoweringTest, TheLossCollectiveMovesUpToItsOperand) {
  // The partitioner leaves the loss's average at the return, after the
  // optimizer; bound to a rank, it is issued right after the local loss,
  // so the loss is known before the update and the update writes in place.
  for (CollectiveMode mode :
       {CollectiveMode::Overlapped, CollectiveMode::Blocking}) {
    SCOPED_TRACE(mode == CollectiveMode::Overlapped ? "overlapped"
                                                    : "blocking");
    FailureOr<Program> p = lower(dataParallelStep(true));
    ASSERT_TRUE(succeeded(p)) << (errors.empty() ? "" : errors.front());
    ASSERT_TRUE(bindToRank(*p, 0, mode).ok());
    std::vector<OpKind> expected = {
        OpKind::Linear,  OpKind::Mul,    OpKind::ReduceMean, OpKind::AllReduce,
        OpKind::Permute, OpKind::Matmul, OpKind::AllReduce,  OpKind::SgdUpdate};
    if (mode == CollectiveMode::Overlapped)
      expected.insert(expected.begin() + 7, {OpKind::Wait, OpKind::Wait});
    EXPECT_EQ(kinds(*p), expected);
    EXPECT_LT(p->lossInstruction, int(p->instructions.size()) - 1);
    const Instruction &update = find(*p, OpKind::SgdUpdate);
    EXPECT_EQ(update.storage[0].kind, ResultStorage::Kind::InPlace);
    EXPECT_EQ(update.storage[1].kind, ResultStorage::Kind::InPlace);
  }
}

TEST_F(ProgramLoweringTest, SpmdErrorsNameTheProblem) {
  auto firstError = [&](const char *text) {
    errors.clear();
    EXPECT_TRUE(failed(lower(text)));
    return errors.empty() ? std::string() : errors.front();
  };
  EXPECT_EQ(firstError(R"mlir(
mesh.mesh @mesh(shape = 2)
func.func @forward(%x: tensor<4xf32> {merak.input = "x", merak.sharding = #mesh.shard<@mesh, [[]], partial = sum[0]>}) -> tensor<4xf32> {
  return %x : tensor<4xf32>
}
)mlir"),
            "argument #0 is a partial value (#mesh.shard<@mesh, [[]], "
            "partial = sum[0]>); arguments and results must be reduced");
  EXPECT_EQ(firstError(R"mlir(
mesh.mesh @mesh(shape = 2)
func.func @forward(%x: tensor<4xf32> {merak.input = "x", merak.sharding = #mesh.shard<@mesh, [[], [0]]>}) -> tensor<4xf32> {
  return %x : tensor<4xf32>
}
)mlir"),
            "argument #0: sharding [[], [0]] splits dimension 1 of a rank-1 "
            "tensor");
  EXPECT_EQ(firstError(R"mlir(
mesh.mesh @mesh(shape = 2)
func.func @forward(%x: tensor<4xf32> {merak.input = "x"}) -> (tensor<4xf32> {merak.sharding = #mesh.shard<@elsewhere, [[0]]>}) {
  return %x : tensor<4xf32>
}
)mlir"),
            "result #0 is sharded on @elsewhere, which is not the module's "
            "mesh");
  EXPECT_EQ(firstError(R"mlir(
mesh.mesh @a(shape = 2)
mesh.mesh @b(shape = 2)
func.func @forward(%x: tensor<4xf32> {merak.input = "x"}) -> tensor<4xf32> {
  return %x : tensor<4xf32>
}
)mlir"),
            "merak-exec runs programs on one mesh; @a is already defined");
}

} // namespace
