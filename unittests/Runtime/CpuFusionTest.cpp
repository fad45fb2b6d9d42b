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
    float *p = reinterpret_cast<float *>(t.mutableBytes());
    for (int64_t i = 0; i < t.type.numElements(); ++i)
      p[i] = normal(gen);
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

} // namespace
} // namespace merak::runtime
