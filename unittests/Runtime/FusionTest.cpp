//===- FusionTest.cpp - elementwise chains found and their sources --------===//

#include "merak/Runtime/Fusion.h"
#include "ProgramBuilder.h"

#include <gtest/gtest.h>

#include <algorithm>

namespace merak::runtime {
namespace {

using testing::ProgramBuilder;

const Instruction &onlyFused(const Program &p) {
  for (const Instruction &inst : p.instructions)
    if (inst.kind == OpKind::Fused)
      return inst;
  ADD_FAILURE() << "no fused instruction in\n" << printProgram(p);
  return p.instructions.front();
}

TEST(Fusion, ChainBecomesOneInstructionReadingItsInputs) {
  ProgramBuilder b;
  ValueId x = b.input(DType::F32, {4, 8});
  ValueId bias = b.input(DType::F32, {8});
  ValueId scale = b.input(DType::F32, {});
  ValueId a = b.op(OpKind::Add, {x, bias});
  ValueId g = b.op(OpKind::Gelu, {a});
  ValueId m = b.op(OpKind::Mul, {g, scale});
  b.result(m);
  fuseElementwise(b.program);
  ASSERT_TRUE(planProgram(b.program).ok());

  ASSERT_EQ(b.program.instructions.size(), 1u);
  const Instruction &f = onlyFused(b.program);
  EXPECT_EQ(f.operands, (std::vector<ValueId>{x, bias, scale}));
  EXPECT_EQ(f.results, (std::vector<ValueId>{m}));
  EXPECT_EQ(f.location, "test.py:0");
  const FusedKernel &k = b.program.fusedKernels[f.attrs.index];
  EXPECT_EQ(k.shape, (std::vector<int64_t>{4, 8}));
  EXPECT_EQ(describeFusedKernel(b.program, int(f.attrs.index)),
            "add, gelu, mul");
  // The intermediates stay inside: only the result is written.
  EXPECT_NE(k.source.find("const float v1 = geluOf(v0); // gelu"),
            std::string::npos)
      << k.source;
  EXPECT_NE(k.source.find("static_cast<float *>(p.data[3])[i] = v2;"),
            std::string::npos)
      << k.source;
  EXPECT_EQ(k.source.find("p.data[4]"), std::string::npos) << k.source;
  // Nothing releases the values that live inside the kernel.
  EXPECT_EQ(b.program.values[a].definedBy, -1);
  EXPECT_EQ(b.program.values[g].definedBy, -1);
  for (ValueId v : f.release)
    EXPECT_TRUE(v != a && v != g) << v;
}

TEST(Fusion, OutputTakesTheStorageOfAnInputThatDiesThere) {
  ProgramBuilder b;
  ValueId x = b.input(DType::F32, {4, 8});
  ValueId bias = b.input(DType::F32, {8});
  ValueId d = b.op(OpKind::Tril, {x}); // a fresh 4x8 value, not fused
  ValueId a = b.op(OpKind::Add, {d, bias});
  ValueId g = b.op(OpKind::Gelu, {a});
  b.result(g);
  fuseElementwise(b.program);
  ASSERT_TRUE(planProgram(b.program).ok());
  ASSERT_EQ(b.program.instructions.size(), 2u);
  const Instruction &f = b.program.instructions[1];
  ASSERT_EQ(f.kind, OpKind::Fused);
  ASSERT_EQ(f.storage.size(), 1u);
  // Into tril's result, not the argument x nor the broadcast bias.
  EXPECT_EQ(f.storage[0].kind, ResultStorage::Kind::InPlace);
  EXPECT_EQ(f.operands[f.storage[0].operand], d);
}

TEST(Fusion, ValueReadOutsideEndsTheChainItIsIn) {
  // exp's result is read by a reshape before neg would join: neg may not
  // run after that reader, so nothing fuses.
  ProgramBuilder b;
  ValueId x = b.input(DType::F32, {4, 8});
  ValueId e = b.op(OpKind::Exp, {x});
  OpAttrs flat;
  ValueId r = b.op(OpKind::Reshape, {e}, DType::F32, {32}, flat);
  ValueId n = b.op(OpKind::Neg, {e});
  b.result(r);
  b.result(n);
  fuseElementwise(b.program);
  EXPECT_EQ(b.count(OpKind::Fused), 0);
  EXPECT_EQ(b.program.instructions.size(), 3u);
}

TEST(Fusion, ValuesReadAfterTheChainAreItsOutputs) {
  ProgramBuilder b;
  ValueId x = b.input(DType::F32, {4, 8});
  ValueId e = b.op(OpKind::Exp, {x});
  ValueId n = b.op(OpKind::Neg, {e});
  ValueId r = b.op(OpKind::Reshape, {e}, DType::F32, {32});
  b.result(n);
  b.result(r);
  fuseElementwise(b.program);
  ASSERT_TRUE(planProgram(b.program).ok());
  ASSERT_EQ(b.program.instructions.size(), 2u);
  EXPECT_EQ(b.program.instructions[0].kind, OpKind::Fused);
  EXPECT_EQ(b.program.instructions[0].results, (std::vector<ValueId>{e, n}));
  EXPECT_EQ(b.program.instructions[1].kind, OpKind::Reshape);
}

TEST(Fusion, ChainsHaveOneShapeAndReadOtherShapesAsInputs) {
  ProgramBuilder b;
  ValueId x = b.input(DType::F32, {4, 8});
  ValueId y = b.input(DType::F32, {8});
  ValueId p = b.input(DType::F32, {8});
  ValueId a = b.op(OpKind::Add, {x, y}); // 4x8
  ValueId s = b.op(OpKind::Sqrt, {p});   // 8: its own chain, alone
  ValueId m = b.op(OpKind::Mul, {a, s}); // 4x8, reads s broadcast
  b.result(m);
  fuseElementwise(b.program);
  ASSERT_TRUE(planProgram(b.program).ok());
  ASSERT_EQ(b.count(OpKind::Fused), 1);
  EXPECT_EQ(b.count(OpKind::Sqrt), 1);
  const Instruction &f = onlyFused(b.program);
  EXPECT_EQ(f.operands, (std::vector<ValueId>{x, y, s}));
  // The fused instruction stands where its last member stood: after sqrt.
  EXPECT_EQ(b.program.instructions.back().kind, OpKind::Fused);
}

TEST(Fusion, TwoChainsJoinedByABinaryOp) {
  ProgramBuilder b;
  ValueId x = b.input(DType::BF16, {16});
  ValueId y = b.input(DType::BF16, {16});
  ValueId ex = b.op(OpKind::Exp, {x});
  ValueId ty = b.op(OpKind::Tanh, {y});
  ValueId s = b.op(OpKind::Sub, {ex, ty});
  b.result(s);
  fuseElementwise(b.program);
  ASSERT_EQ(b.program.instructions.size(), 1u);
  const Instruction &f = onlyFused(b.program);
  EXPECT_EQ(b.program.fusedKernels[f.attrs.index].members.size(), 3u);
  const std::string &src = b.program.fusedKernels[f.attrs.index].source;
  // bf16 loads, each op rounded to bf16, a bf16 store.
  EXPECT_NE(src.find("bf16BitsToFloat(static_cast<const uint16_t *>"),
            std::string::npos)
      << src;
  EXPECT_NE(src.find("roundToBf16(mathExp(x0))"), std::string::npos) << src;
  EXPECT_NE(src.find("floatToBf16Bits(v2)"), std::string::npos) << src;
}

TEST(Fusion, CastsComparesAndWhereInOneChain) {
  ProgramBuilder b;
  ValueId x = b.input(DType::F32, {8});
  ValueId zero = b.input(DType::F32, {});
  OpAttrs gt;
  gt.predicate = ComparePredicate::Gt;
  ValueId c = b.op(OpKind::Compare, {x, zero}, DType::Bool, {8}, gt);
  ValueId w = b.op(OpKind::Where, {c, x, zero}, DType::F32, {8});
  ValueId h = b.op(OpKind::Cast, {w}, DType::F16, {8});
  OpAttrs clamp;
  clamp.min = -1.5;
  ValueId k = b.op(OpKind::Clamp, {h}, clamp);
  b.result(k);
  fuseElementwise(b.program);
  ASSERT_EQ(b.program.instructions.size(), 1u);
  const std::string &src =
      b.program.fusedKernels[onlyFused(b.program).attrs.index].source;
  EXPECT_NE(src.find("const bool v0 = x0 > x1; // compare"), std::string::npos)
      << src;
  EXPECT_NE(src.find("const float v1 = v0 ? x0 : x1; // where"),
            std::string::npos)
      << src;
  EXPECT_NE(src.find("const float v2 = roundToF16(v1); // cast"),
            std::string::npos)
      << src;
  // -1.5f exactly, by its bits.
  EXPECT_NE(src.find("floatFromBits(0xbfc00000u)"), std::string::npos) << src;
}

TEST(Fusion, WaitsAndCollectivesRenumbered) {
  ProgramBuilder b;
  ValueId x = b.input(DType::F32, {8});
  ValueId y = b.input(DType::F32, {8});
  ValueId g = b.op(OpKind::AllReduce, {y}); // #0, waited for at #3
  ValueId e = b.op(OpKind::Exp, {x});       // #1
  ValueId n = b.op(OpKind::Neg, {e});       // #2
  Instruction wait;
  wait.kind = OpKind::Wait;
  wait.operands = {g};
  wait.completes = 0;
  b.program.instructions[0].waitAt = 3;
  b.program.instructions.push_back(wait); // #3
  ValueId s = b.op(OpKind::Add, {g, g});  // #4: reads the reduced value
  b.result(n);
  b.result(s);
  fuseElementwise(b.program);
  // all_reduce, fused {exp, neg}, wait, add.
  ASSERT_EQ(b.program.instructions.size(), 4u);
  EXPECT_EQ(b.program.instructions[1].kind, OpKind::Fused);
  EXPECT_EQ(b.program.instructions[0].waitAt, 2);
  EXPECT_EQ(b.program.instructions[2].kind, OpKind::Wait);
  EXPECT_EQ(b.program.instructions[2].completes, 0);
}

TEST(Fusion, ChainReadsAtMostTheKernelsOperands) {
  ProgramBuilder b;
  ValueId acc = b.input(DType::F32, {8});
  for (int i = 0; i < 40; ++i)
    acc = b.op(OpKind::Add, {acc, b.input(DType::F32, {8})});
  b.result(acc);
  fuseElementwise(b.program);
  ASSERT_TRUE(planProgram(b.program).ok());
  int members = 0;
  for (const Instruction &inst : b.program.instructions) {
    ASSERT_EQ(inst.kind, OpKind::Fused);
    EXPECT_LE(inst.operands.size() + inst.results.size(),
              size_t(kMaxFusedOperands));
    members += int(b.program.fusedKernels[inst.attrs.index].members.size());
  }
  EXPECT_EQ(members, 40);
  EXPECT_GE(b.program.instructions.size(), 2u);
}

TEST(Fusion, OnlyElementwiseOpsOfFusibleTypes) {
  ProgramBuilder b;
  ValueId x = b.input(DType::F64, {8});
  ValueId i = b.input(DType::I64, {8});
  ValueId f = b.input(DType::F32, {8});
  b.op(OpKind::Exp, {x});
  b.op(OpKind::Neg, {i});
  b.op(OpKind::Cast, {f}, DType::F32, {8}); // to its own type: a view
  OpAttrs none;
  b.op(OpKind::Clamp, {f}, none); // without bounds: a view
  b.op(OpKind::Dropout, {f});
  for (const Instruction &inst : b.program.instructions)
    EXPECT_FALSE(fusible(b.program, inst)) << opKindName(inst.kind);
  Instruction sum = b.program.instructions[0];
  sum.kind = OpKind::ReduceSum;
  EXPECT_FALSE(fusible(b.program, sum));
}

/// An AdamW update of `param` with its state, the step's `lr` and `step`.
ValueId adamw(ProgramBuilder &b, ValueId param, ValueId lr, ValueId step,
              double eps = 1e-8) {
  const TensorType t = b.program.values[param].type;
  ValueId grad = b.input(t.dtype, t.shape), m = b.input(t.dtype, t.shape),
          v = b.input(t.dtype, t.shape);
  OpAttrs a;
  a.beta1 = 0.9;
  a.beta2 = 0.999;
  a.eps = eps;
  a.weightDecay = 0.01;
  ValueId p = b.op(OpKind::AdamwUpdate, {param, grad, m, v, lr, step}, a);
  // Three results, as the op has.
  ValueId m2 = b.value(t.dtype, t.shape), v2 = b.value(t.dtype, t.shape);
  b.program.instructions.back().results = {p, m2, v2};
  for (ValueId r : {p, m2, v2})
    b.result(r);
  return p;
}

TEST(Fusion, AdamwUpdatesSharingTheirScalarsBecomeOneInstruction) {
  ProgramBuilder b;
  ValueId lr = b.input(DType::F32, {}), step = b.input(DType::F32, {});
  ValueId w1 = b.input(DType::F32, {8, 4}), w2 = b.input(DType::F32, {4});
  ValueId w3 = b.input(DType::F32, {3}), w4 = b.input(DType::F64, {3});
  adamw(b, w1, lr, step);
  adamw(b, w2, lr, step);
  adamw(b, w3, lr, step, /*eps=*/1e-6); // another eps: its own
  adamw(b, w4, lr, step);               // float64: not grouped
  fuseOptimizerUpdates(b.program);
  ASSERT_EQ(b.count(OpKind::Fused), 1);
  EXPECT_EQ(b.count(OpKind::AdamwUpdate), 2);
  const Instruction &f = onlyFused(b.program);
  EXPECT_TRUE(isOptimizerGroup(b.program, int(f.attrs.index)));
  EXPECT_EQ(describeFusedKernel(b.program, int(f.attrs.index)),
            "2 x adamw_update");
  EXPECT_EQ(f.results.size(), 6u);
  EXPECT_TRUE(b.program.fusedKernels[f.attrs.index].source.empty());
  // --print-fused-kernels lists no source for it.
  EXPECT_EQ(listFusedKernels(b.program).find("adamw"), std::string::npos);
}

TEST(Fusion, AdamwGroupUpdatesEachTensorInPlace) {
  // State the step replaces, updated after the loss: each update in place
  // of its own operands, as unfused.
  ProgramBuilder b;
  ValueId lr = b.input(DType::F32, {}), step = b.input(DType::F32, {});
  ValueId w1 = b.input(DType::F32, {4}), w2 = b.input(DType::F32, {4});
  ValueId p1 = adamw(b, w1, lr, step);
  ValueId p2 = adamw(b, w2, lr, step);
  for (Argument &arg : b.program.arguments)
    arg.role = ArgumentRole::Param;
  for (size_t r = 0; r < b.program.results.size(); ++r) {
    ValueId v = b.program.results[r].value;
    for (size_t a = 0; a < b.program.arguments.size(); ++a)
      for (const Instruction &inst : b.program.instructions)
        for (size_t k = 0; k < 4 && k < inst.operands.size(); ++k)
          if (k < inst.results.size() && inst.results[k] == v &&
              inst.operands[k] == b.program.arguments[a].value) {
            b.program.arguments[a].updatedBy = int(r);
            b.program.results[r].updatesArgument = int(a);
          }
  }
  fuseOptimizerUpdates(b.program);
  ASSERT_TRUE(planProgram(b.program).ok());
  const Instruction &f = onlyFused(b.program);
  for (ValueId p : {p1, p2}) {
    size_t r =
        std::find(f.results.begin(), f.results.end(), p) - f.results.begin();
    ASSERT_LT(r, f.storage.size());
    EXPECT_EQ(f.storage[r].kind, ResultStorage::Kind::InPlace);
    EXPECT_EQ(f.operands[f.storage[r].operand], p == p1 ? w1 : w2);
  }
}

/// An SGD update of `param`: its two results (parameter and momentum
/// buffer) returned; returns the buffer's.
ValueId sgd(ProgramBuilder &b, ValueId param, ValueId lr, ValueId step,
            double momentum) {
  const TensorType t = b.program.values[param].type;
  ValueId grad = b.input(t.dtype, t.shape), buf = b.input(t.dtype, t.shape);
  OpAttrs a;
  a.momentum = momentum;
  a.weightDecay = 1e-4;
  ValueId p = b.op(OpKind::SgdUpdate, {param, grad, buf, lr, step}, a);
  ValueId buf2 = b.value(t.dtype, t.shape);
  b.program.instructions.back().results = {p, buf2};
  b.result(p);
  b.result(buf2);
  return buf2;
}

TEST(Fusion, SgdUpdatesSharingTheirScalarsBecomeOneInstruction) {
  ProgramBuilder b;
  ValueId lr = b.input(DType::F32, {}), lr2 = b.input(DType::F32, {}),
          step = b.input(DType::F32, {});
  ValueId w[6];
  for (ValueId &x : w)
    x = b.input(DType::F32, {8});
  sgd(b, w[0], lr, step, 0.9);
  sgd(b, w[1], lr, step, 0.9);
  sgd(b, w[2], lr, step, 0);    // another momentum: a group of its own
  sgd(b, w[3], lr2, step, 0.9); // another learning rate: alone, unfused
  sgd(b, w[4], lr, step, 0);
  adamw(b, w[5], lr, step); // another kind: alone, unfused
  fuseOptimizerUpdates(b.program);
  EXPECT_EQ(b.count(OpKind::Fused), 2);
  EXPECT_EQ(b.count(OpKind::SgdUpdate), 1);
  EXPECT_EQ(b.count(OpKind::AdamwUpdate), 1);
  std::vector<size_t> sizes;
  for (const Instruction &inst : b.program.instructions)
    if (inst.kind == OpKind::Fused) {
      EXPECT_TRUE(isOptimizerGroup(b.program, int(inst.attrs.index)));
      EXPECT_EQ(describeFusedKernel(b.program, int(inst.attrs.index)),
                "2 x sgd_update");
      sizes.push_back(inst.results.size());
    }
  EXPECT_EQ(sizes, (std::vector<size_t>{4, 4}));
}

TEST(Fusion, AMomentumFreeSgdGroupPassesItsBuffersThrough) {
  // Without momentum the buffer a step returns is the one it was given: a
  // view of that operand in the group as in the unfused update, which the
  // CUDA backend's group makes without a copy.
  ProgramBuilder b;
  ValueId lr = b.input(DType::F32, {}), step = b.input(DType::F32, {});
  ValueId w1 = b.input(DType::F32, {4}), w2 = b.input(DType::F32, {6});
  ValueId b1 = sgd(b, w1, lr, step, 0), b2 = sgd(b, w2, lr, step, 0);
  fuseOptimizerUpdates(b.program);
  ASSERT_TRUE(planProgram(b.program).ok());
  const Instruction &f = onlyFused(b.program);
  const FusedKernel &group = b.program.fusedKernels[f.attrs.index];
  for (ValueId buf : {b1, b2}) {
    size_t r =
        std::find(f.results.begin(), f.results.end(), buf) - f.results.begin();
    ASSERT_LT(r, f.storage.size());
    EXPECT_EQ(f.storage[r].kind, ResultStorage::Kind::View);
    const Instruction &m = group.members[buf == b1 ? 0 : 1];
    EXPECT_EQ(f.operands[f.storage[r].operand], m.operands[2]);
    EXPECT_EQ(b.program.values[buf].buffer,
              b.program.values[m.operands[2]].buffer);
  }
  // With momentum the buffers are written: no views.
  ProgramBuilder c;
  lr = c.input(DType::F32, {});
  step = c.input(DType::F32, {});
  ValueId v1 = c.input(DType::F32, {4}), v2 = c.input(DType::F32, {6});
  sgd(c, v1, lr, step, 0.5);
  sgd(c, v2, lr, step, 0.5);
  fuseOptimizerUpdates(c.program);
  ASSERT_TRUE(planProgram(c.program).ok());
  for (const ResultStorage &st : onlyFused(c.program).storage)
    EXPECT_NE(st.kind, ResultStorage::Kind::View);
}

//===----------------------------------------------------------------------===//
// foldCasts
//===----------------------------------------------------------------------===//

/// The loss of bf16 logits cast to f32.
struct NarrowLogitsLoss {
  ValueId logits, target, wide, loss;
  explicit NarrowLogitsLoss(ProgramBuilder &b) {
    logits = b.input(DType::BF16, {4, 10});
    target = b.input(DType::I64, {4});
    wide = b.op(OpKind::Cast, {logits}, DType::F32, {4, 10});
    loss = b.op(OpKind::CrossEntropy, {wide, target}, DType::F32, {});
  }
};

/// A mixed-precision program's head: bf16 logits cast to f32 for the loss
/// and its gradient, the gradient cast back to bf16.
struct LossHead {
  ProgramBuilder b;
  ValueId logits, target, wide, loss, grad, gradLogits, narrowGrad;
  explicit LossHead(bool returnWide = false) {
    NarrowLogitsLoss l(b);
    logits = l.logits;
    target = l.target;
    wide = l.wide;
    loss = l.loss;
    grad = b.input(DType::F32, {});
    gradLogits = b.op(OpKind::CrossEntropyBackward, {grad, wide, target},
                      DType::F32, {4, 10});
    narrowGrad = b.op(OpKind::Cast, {gradLogits}, DType::BF16, {4, 10});
    b.result(loss);
    b.result(narrowGrad);
    if (returnWide)
      b.result(wide);
  }
};

TEST(FoldCasts, LossReadsNarrowLogitsAndItsGradientWritesNarrow) {
  LossHead h;
  foldCasts(h.b.program);
  ASSERT_TRUE(planProgram(h.b.program).ok()) << printProgram(h.b.program);
  EXPECT_EQ(h.b.count(OpKind::Cast), 0) << printProgram(h.b.program);
  const auto &insts = h.b.program.instructions;
  ASSERT_EQ(insts.size(), 2u);
  EXPECT_EQ(insts[0].kind, OpKind::CrossEntropy);
  EXPECT_EQ(insts[0].operands, (std::vector<ValueId>{h.logits, h.target}));
  EXPECT_EQ(insts[1].kind, OpKind::CrossEntropyBackward);
  EXPECT_EQ(insts[1].operands,
            (std::vector<ValueId>{h.grad, h.logits, h.target}));
  EXPECT_EQ(insts[1].results, (std::vector<ValueId>{h.narrowGrad}));
  EXPECT_EQ(h.b.program.values[h.narrowGrad].definedBy, 1);
  EXPECT_EQ(h.b.program.values[h.gradLogits].definedBy, -1);
  EXPECT_EQ(h.b.program.values[h.wide].definedBy, -1);
  EXPECT_EQ(*foldedComputeType(h.b.program, insts[0]), DType::F32);
  EXPECT_EQ(*foldedComputeType(h.b.program, insts[1]), DType::F32);
}

TEST(FoldCasts, ACastTheProgramReturnsStays) {
  LossHead h(/*returnWide=*/true);
  foldCasts(h.b.program);
  ASSERT_TRUE(planProgram(h.b.program).ok());
  // The widening cast is a result; the narrowing one still folds.
  EXPECT_EQ(h.b.count(OpKind::Cast), 1);
  EXPECT_EQ(h.b.program.instructions[1].operands[0], h.wide);
  EXPECT_FALSE(foldedComputeType(h.b.program, h.b.program.instructions[1]));
}

TEST(FoldCasts, AWideningCastStaysWhenAnyReaderTakesOnlyItsType) {
  ProgramBuilder b;
  NarrowLogitsLoss l(b);
  ValueId doubled = b.op(OpKind::Add, {l.wide, l.wide});
  b.result(l.loss);
  b.result(doubled);
  foldCasts(b.program);
  EXPECT_EQ(b.count(OpKind::Cast), 1);
  EXPECT_EQ(b.program.instructions[1].operands[0], l.wide);
}

TEST(FoldCasts, ANormWritesTheNarrowInputOfTheNextOp) {
  ProgramBuilder b;
  OpAttrs norm;
  norm.normalizedRank = 1;
  norm.eps = 1e-5;
  ValueId x = b.input(DType::F32, {4, 8});
  ValueId w = b.input(DType::F32, {8});
  ValueId bias = b.input(DType::F32, {8});
  ValueId y = b.op(OpKind::LayerNorm, {x, w, bias}, norm);
  ValueId narrow = b.op(OpKind::Cast, {y}, DType::BF16, {4, 8});
  ValueId r = b.op(OpKind::RmsNorm, {x, w}, norm);
  ValueId half = b.op(OpKind::Cast, {r}, DType::F16, {4, 8});
  // Rounded twice (to bf16, then to f16): the second cast stays.
  ValueId twice = b.op(OpKind::LayerNorm, {x, w, bias}, norm);
  ValueId once = b.op(OpKind::Cast, {twice}, DType::BF16, {4, 8});
  ValueId again = b.op(OpKind::Cast, {once}, DType::F16, {4, 8});
  b.result(again);
  // Read twice: the norm's f32 result must stay.
  ValueId r2 = b.op(OpKind::RmsNorm, {x, w}, norm);
  ValueId kept = b.op(OpKind::Cast, {r2}, DType::BF16, {4, 8});
  ValueId other = b.op(OpKind::Neg, {r2});
  for (ValueId v : {narrow, half, kept, other})
    b.result(v);
  foldCasts(b.program);
  ASSERT_TRUE(planProgram(b.program).ok()) << printProgram(b.program);
  EXPECT_EQ(b.count(OpKind::Cast), 2) << printProgram(b.program);
  const auto &insts = b.program.instructions;
  EXPECT_EQ(insts[0].results, (std::vector<ValueId>{narrow}));
  EXPECT_EQ(insts[1].results, (std::vector<ValueId>{half}));
  EXPECT_EQ(insts[2].results, (std::vector<ValueId>{once}));
  EXPECT_EQ(insts[3].kind, OpKind::Cast);
  EXPECT_EQ(insts[3].operands, (std::vector<ValueId>{once}));
  EXPECT_EQ(insts[3].results, (std::vector<ValueId>{again}));
  EXPECT_EQ(insts[4].results, (std::vector<ValueId>{r2}));
  EXPECT_EQ(insts[5].operands, (std::vector<ValueId>{r2}));
  EXPECT_EQ(insts[5].results, (std::vector<ValueId>{kept}));
}

TEST(FoldCasts, OnlyWhereTheOpComputesInFloat32) {
  ProgramBuilder b;
  OpAttrs norm;
  norm.normalizedRank = 1;
  norm.eps = 1e-5;
  // A bf16 norm rounds to bf16 itself: its cast to f16 is a second rounding.
  ValueId x = b.input(DType::BF16, {4, 8});
  ValueId y = b.op(OpKind::LayerNorm, {x, kNoValue, kNoValue}, norm);
  ValueId half = b.op(OpKind::Cast, {y}, DType::F16, {4, 8});
  // The layer norm gradient of an f32 input reads a bf16 gradient...
  ValueId x32 = b.input(DType::F32, {4, 8});
  ValueId dyNarrow = b.input(DType::BF16, {4, 8});
  ValueId dy = b.op(OpKind::Cast, {dyNarrow}, DType::F32, {4, 8});
  auto backward = [&](ValueId grad, ValueId x, DType t) {
    return b.ops(OpKind::LayerNormBackward, {grad, x, kNoValue, kNoValue},
                 {{t, {4, 8}}, {t, {0}}, {t, {0}}}, norm)[0];
  };
  ValueId dx = backward(dy, x32, DType::F32);
  // ...but not an f64 one's.
  ValueId x64 = b.input(DType::F64, {4, 8});
  ValueId dy64 = b.op(OpKind::Cast, {dyNarrow}, DType::F64, {4, 8});
  ValueId dx64 = backward(dy64, x64, DType::F64);
  b.result(half);
  b.result(dx);
  b.result(dx64);
  foldCasts(b.program);
  ASSERT_TRUE(planProgram(b.program).ok()) << printProgram(b.program);
  EXPECT_EQ(b.count(OpKind::Cast), 2) << printProgram(b.program);
  EXPECT_EQ(b.program.instructions[2].kind, OpKind::LayerNormBackward);
  EXPECT_EQ(b.program.instructions[2].operands[0], dyNarrow);
  EXPECT_EQ(b.program.instructions[4].operands[0], dy64);
}

TEST(FoldCasts, WaitsAndCollectivesRenumbered) {
  ProgramBuilder b;
  NarrowLogitsLoss l(b);
  ValueId summed = b.op(OpKind::AllReduce, {l.loss});
  b.program.instructions.back().waitAt = 3;
  Instruction wait;
  wait.kind = OpKind::Wait;
  wait.operands = {summed};
  wait.completes = 2;
  b.program.instructions.push_back(wait);
  b.result(summed);
  foldCasts(b.program);
  ASSERT_EQ(b.program.instructions.size(), 3u);
  EXPECT_EQ(b.program.instructions[1].waitAt, 2);
  EXPECT_EQ(b.program.instructions[2].completes, 1);
}

} // namespace
} // namespace merak::runtime
