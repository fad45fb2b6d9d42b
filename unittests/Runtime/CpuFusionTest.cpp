//===- CpuFusionTest.cpp - fused programs compute what unfused ones do ----===//
//
// Random programs of elementwise ops (with reshapes, reductions, casts,
// dropout masks and broadcast operands between them) run on the CPU
// backend unfused and fused (`fuseElementwise`, whose chains the executor runs
// member by member here): every result must be the same, bit for bit. What this
// checks is the rewrite: which values a chain reads and defines, where it
// stands, what the plan releases.
//
//===----------------------------------------------------------------------===//

#include "ProgramBuilder.h"
#include "RandomPrograms.h"
#include "merak/Runtime/CPU/CpuBackend.h"
#include "merak/Runtime/Executor.h"
#include "merak/Runtime/Fusion.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>

namespace merak::runtime {
namespace {

using testing::ProgramBuilder;
using testing::randomProgram;
using testing::runRandomProgram;

/// `program`'s results on the CPU backend.
std::vector<std::vector<uint8_t>> run(Program program, bool fuse,
                                      uint32_t seed) {
  std::unique_ptr<Backend> backend = createCpuBackend({});
  return runRandomProgram(std::move(program), fuse, seed, *backend);
}

TEST(CpuFusion, RandomProgramsComputeTheSameFusedAndNot) {
  std::mt19937 gen(2026);
  int fusedPrograms = 0;
  for (int trial = 0; trial < 60; ++trial) {
    Program program = randomProgram(gen);
    Program probe = program;
    ASSERT_TRUE(bindToRank(probe, 0,
                           BindOptions(CollectiveMode::Overlapped,
                                       /*fuseElementwise=*/true))
                    .ok());
    fusedPrograms += !probe.fusedKernels.empty();
    auto unfused = run(program, false, trial);
    auto fused = run(program, true, trial);
    ASSERT_EQ(unfused.size(), fused.size());
    for (size_t r = 0; r < fused.size(); ++r)
      ASSERT_TRUE(unfused[r] == fused[r])
          << "trial " << trial << ", result " << r << "\n"
          << printProgram(probe);
  }
  EXPECT_GT(fusedPrograms, 50);
}

/// The `fused` instructions of `program` bound with fusion, by their ops.
std::vector<std::string> chainsOf(Program program) {
  EXPECT_TRUE(bindToRank(program, 0,
                         BindOptions(CollectiveMode::Overlapped,
                                     /*fuseElementwise=*/true))
                  .ok());
  std::vector<std::string> chains;
  for (const Instruction &inst : program.instructions)
    if (inst.kind == OpKind::Fused)
      chains.push_back(describeFusedKernel(program, int(inst.attrs.index)));
  return chains;
}

TEST(CpuFusion, DropoutMasksAreDrawnInProgramOrder) {
  // The CPU's generator draws mask after mask: a chain that draws one
  // runs where its last member stands, so it must not grow past another
  // mask drawn in between. Here `a`'s chain (mask, mul) would take the exp
  // after `c`'s mask and draw its own after it: it is closed there.
  ProgramBuilder b;
  ValueId a = b.input(DType::F32, {4, 8});
  ValueId c = b.input(DType::F32, {2, 8});
  OpAttrs drop;
  drop.p = 0.5;
  ValueId ya = b.op(OpKind::Mul, {a, b.op(OpKind::DropoutMask, {a}, drop)});
  ValueId yc = b.op(OpKind::Mul, {c, b.op(OpKind::DropoutMask, {c}, drop)});
  b.result(b.op(OpKind::Exp, {ya}));
  b.result(yc);
  EXPECT_EQ(
      chainsOf(b.program),
      (std::vector<std::string>{"dropout_mask, mul", "dropout_mask, mul"}));
  for (uint32_t seed : {1u, 2u, 3u})
    EXPECT_TRUE(run(b.program, false, seed) == run(b.program, true, seed));

  // A chain draws at most four masks (its kernel's parameters).
  ProgramBuilder many;
  ValueId v = many.input(DType::F32, {4, 8});
  for (int k = 0; k < 6; ++k)
    v = many.op(OpKind::Mul, {v, many.op(OpKind::DropoutMask, {v}, drop)});
  many.result(v);
  std::vector<std::string> chains = chainsOf(many.program);
  ASSERT_EQ(chains.size(), 2u);
  EXPECT_EQ(chains[0], "dropout_mask, mul, dropout_mask, mul, dropout_mask, "
                       "mul, dropout_mask, mul");
  EXPECT_TRUE(run(many.program, false, 5) == run(many.program, true, 5));

  // Evaluation and p = 0 draw nothing; a dropout outside training is its
  // operand (a view), not a member.
  ProgramBuilder eval;
  ValueId e = eval.input(DType::F32, {4, 8});
  OpAttrs off;
  off.p = 0.5;
  off.training = false;
  eval.result(eval.op(OpKind::Exp, {eval.op(OpKind::Dropout, {e}, off)}));
  EXPECT_TRUE(chainsOf(eval.program).empty());
}

/// A mixed-precision program's norms and loss with the casts around them
/// (bf16 logits widened for the loss and its gradient, the gradient and
/// the norms' outputs narrowed, a bf16 gradient widened for layer norm's
/// backward): folded or not, the same results bit for bit.
TEST(CpuFusion, FoldedCastsComputeTheSame) {
  for (double smoothing : {0.0, 0.1}) {
    ProgramBuilder b;
    OpAttrs norm;
    norm.normalizedRank = 1;
    norm.eps = 1e-5;
    OpAttrs loss;
    loss.labelSmoothing = smoothing;
    ValueId x = b.input(DType::F32, {4, 8});
    ValueId w = b.input(DType::F32, {8});
    ValueId bias = b.input(DType::F32, {8});
    ValueId logits = b.input(DType::BF16, {5, 10});
    ValueId target = b.input(DType::I64, {5});
    ValueId grad = b.input(DType::F32, {});
    ValueId dyNarrow = b.input(DType::BF16, {4, 8});
    ValueId y = b.op(OpKind::LayerNorm, {x, w, bias}, norm);
    b.result(b.op(OpKind::Cast, {y}, DType::BF16, {4, 8}));
    ValueId r = b.op(OpKind::RmsNorm, {x, w}, norm);
    b.result(b.op(OpKind::Cast, {r}, DType::BF16, {4, 8}));
    ValueId wide = b.op(OpKind::Cast, {logits}, DType::F32, {5, 10});
    b.result(b.op(OpKind::CrossEntropy, {wide, target}, DType::F32, {}, loss));
    ValueId g = b.op(OpKind::CrossEntropyBackward, {grad, wide, target},
                     DType::F32, {5, 10}, loss);
    b.result(b.op(OpKind::Cast, {g}, DType::BF16, {5, 10}));
    ValueId dy = b.op(OpKind::Cast, {dyNarrow}, DType::F32, {4, 8});
    for (ValueId v :
         b.ops(OpKind::LayerNormBackward, {dy, x, w, bias},
               {{DType::F32, {4, 8}}, {DType::F32, {8}}, {DType::F32, {8}}},
               norm))
      b.result(v);

    Program probe = b.program;
    ASSERT_TRUE(bindToRank(probe, 0,
                           BindOptions(CollectiveMode::Overlapped,
                                       /*fuseElementwise=*/true))
                    .ok());
    for (const Instruction &inst : probe.instructions)
      EXPECT_NE(inst.kind, OpKind::Cast) << printProgram(probe);
    auto unfolded = run(b.program, false, 7);
    auto folded = run(b.program, true, 7);
    ASSERT_EQ(unfolded.size(), folded.size());
    for (size_t k = 0; k < folded.size(); ++k)
      EXPECT_TRUE(unfolded[k] == folded[k])
          << "smoothing " << smoothing << ", result " << k;
  }
}

} // namespace
} // namespace merak::runtime
