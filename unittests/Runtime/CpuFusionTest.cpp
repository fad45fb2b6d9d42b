//===- CpuFusionTest.cpp - fused programs compute what unfused ones do ----===//
//
// Random programs of elementwise ops (with reshapes, reductions, casts and
// broadcast operands between them) run on the CPU backend unfused and
// fused (`fuseElementwise`, whose chains the executor runs member by
// member here): every result must be the same, bit for bit. What this
// checks is the rewrite: which values a chain reads and defines, where it
// stands, what the plan releases.
//
//===----------------------------------------------------------------------===//

#include "ProgramBuilder.h"
#include "merak/Runtime/CPU/CpuBackend.h"
#include "merak/Runtime/Executor.h"
#include "merak/Runtime/Fusion.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>

namespace merak::runtime {
namespace {

using testing::ProgramBuilder;

/// A random program over [4, 8] f32 values, a [8] bias and a scalar.
Program randomProgram(std::mt19937 &gen) {
  ProgramBuilder b;
  std::vector<ValueId> full = {b.input(DType::F32, {4, 8}),
                               b.input(DType::F32, {4, 8})};
  std::vector<ValueId> row = {b.input(DType::F32, {8})};
  ValueId scalar = b.input(DType::F32, {});
  auto pick = [&](const std::vector<ValueId> &v) {
    return v[std::uniform_int_distribution<size_t>(0, v.size() - 1)(gen)];
  };
  std::uniform_int_distribution<int> choice(0, 13);
  for (int i = 0; i < 30; ++i) {
    ValueId x = pick(full);
    switch (choice(gen)) {
    case 0:
      full.push_back(b.op(OpKind::Add, {x, pick(full)}));
      break;
    case 1:
      full.push_back(b.op(OpKind::Mul, {x, pick(row)}));
      break;
    case 2:
      full.push_back(b.op(OpKind::Sub, {x, scalar}));
      break;
    case 3:
      full.push_back(b.op(OpKind::Tanh, {x}));
      break;
    case 4:
      full.push_back(b.op(OpKind::Sigmoid, {x}));
      break;
    case 5:
      full.push_back(b.op(OpKind::Gelu, {x}));
      break;
    case 6:
      full.push_back(b.op(OpKind::Maximum, {x, pick(full)}));
      break;
    case 7: { // x > 0 ? x : other
      OpAttrs gt;
      gt.predicate = ComparePredicate::Gt;
      ValueId c = b.op(OpKind::Compare, {x, scalar}, DType::Bool, {4, 8}, gt);
      full.push_back(
          b.op(OpKind::Where, {c, x, pick(full)}, DType::F32, {4, 8}));
      break;
    }
    case 8: { // through bf16 and back
      ValueId h = b.op(OpKind::Cast, {x}, DType::BF16, {4, 8});
      full.push_back(b.op(OpKind::Cast, {h}, DType::F32, {4, 8}));
      break;
    }
    case 9: { // a view in between: reshaped and back
      ValueId flat = b.op(OpKind::Reshape, {x}, DType::F32, {32});
      ValueId e = b.op(OpKind::Exp, {b.op(OpKind::Neg, {flat})});
      full.push_back(b.op(OpKind::Reshape, {e}, DType::F32, {4, 8}));
      break;
    }
    case 10: { // a reduction: a new row value, then an op on it
      OpAttrs sum;
      sum.dims = {0};
      ValueId r = b.op(OpKind::ReduceSum, {x}, DType::F32, {8}, sum);
      row.push_back(b.op(OpKind::Sqrt, {b.op(OpKind::Abs, {r})}));
      break;
    }
    case 11: {
      OpAttrs clamp;
      clamp.min = -0.5;
      clamp.max = 0.75;
      full.push_back(b.op(OpKind::Clamp, {x}, clamp));
      break;
    }
    case 12:
      full.push_back(b.op(OpKind::Div, {x, b.op(OpKind::Exp, {pick(full)})}));
      break;
    default:
      full.push_back(b.op(OpKind::Silu, {b.op(OpKind::Mul, {x, x})}));
      break;
    }
  }
  // The last value and a few earlier ones are returned.
  b.result(full.back());
  for (int k = 0; k < 3; ++k)
    b.result(pick(full));
  b.result(pick(row));
  return b.program;
}

std::vector<std::vector<uint8_t>> run(Program program, bool fuse,
                                      uint32_t seed) {
  BindOptions options(CollectiveMode::Overlapped, fuse);
  absl::Status bound = bindToRank(program, 0, options);
  EXPECT_TRUE(bound.ok()) << bound;
  std::unique_ptr<Backend> backend = createCpuBackend({});
  auto executor = Executor::create(program, *backend);
  EXPECT_TRUE(executor.ok()) << executor.status();
  std::mt19937 gen(seed);
  std::normal_distribution<float> normal;
  std::vector<TensorHandle> args;
  for (const Argument &arg : program.arguments) {
    HostTensor t = HostTensor::allocate(program.values[arg.value].type);
    for (int64_t i = 0; i < t.type.numElements(); ++i) {
      float x = normal(gen);
      switch (t.type.dtype) {
      case DType::F32:
        reinterpret_cast<float *>(t.mutableBytes())[i] = x;
        break;
      case DType::BF16: { // the float's upper half
        uint32_t bits;
        std::memcpy(&bits, &x, 4);
        reinterpret_cast<uint16_t *>(t.mutableBytes())[i] =
            uint16_t(bits >> 16);
        break;
      }
      case DType::I64: // a class of ten, or -100 (ignored)
        reinterpret_cast<int64_t *>(t.mutableBytes())[i] =
            i % 5 == 4 ? -100 : int64_t(gen() % 10);
        break;
      default:
        ADD_FAILURE() << "no data for an argument of " << t.type.str();
      }
    }
    args.push_back(*backend->upload(t));
  }
  StepContext step;
  auto results = (*executor)->call(step, args);
  EXPECT_TRUE(results.ok()) << results.status();
  std::vector<std::vector<uint8_t>> out;
  for (size_t r = 0; r < results->size(); ++r) {
    auto host = backend->download(
        *(*results)[r], program.values[program.results[r].value].type);
    out.emplace_back(host->bytes(), host->bytes() + host->byteSize());
  }
  return out;
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
