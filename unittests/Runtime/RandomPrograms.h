//===- RandomPrograms.h - random elementwise programs -----------*- C++ -*-===//
//
// Random programs of elementwise ops (with reshapes, reductions, casts,
// dropout masks and broadcast operands between them), and running one on a
// backend with arguments drawn from a seed: what the fusion tests run fused and
// not (CpuFusionTest.cpp) and with their fused chains' CUDA source compiled for
// the host (CudaFusedHostTest.cpp).
//
//===----------------------------------------------------------------------===//
#ifndef MERAK_UNITTESTS_RUNTIME_RANDOMPROGRAMS_H
#define MERAK_UNITTESTS_RUNTIME_RANDOMPROGRAMS_H

#include "ProgramBuilder.h"
#include "merak/Runtime/Backend.h"
#include "merak/Runtime/Executor.h"
#include "merak/Runtime/Program.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

namespace merak::runtime::testing {

/// A random program over [4, 8] f32 values, a [8] bias and a scalar.
inline Program randomProgram(std::mt19937 &gen) {
  ProgramBuilder b;
  std::vector<ValueId> full = {b.input(DType::F32, {4, 8}),
                               b.input(DType::F32, {4, 8})};
  std::vector<ValueId> row = {b.input(DType::F32, {8})};
  ValueId scalar = b.input(DType::F32, {});
  auto pick = [&](const std::vector<ValueId> &v) {
    return v[std::uniform_int_distribution<size_t>(0, v.size() - 1)(gen)];
  };
  std::uniform_int_distribution<int> choice(0, 15);
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
    case 13: { // dropout as training writes it: the input times a mask
      OpAttrs drop;
      drop.p = 0.25;
      ValueId mask = b.op(OpKind::DropoutMask, {x}, drop);
      full.push_back(b.op(OpKind::Mul, {x, mask}));
      break;
    }
    case 14: { // a training dropout not expanded
      OpAttrs drop;
      drop.p = 0.5;
      drop.training = true;
      full.push_back(b.op(OpKind::Dropout, {x}, drop));
      break;
    }
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

/// Dropout as training writes it, of sizes that are no multiple of the
/// generator's four words: a residual chain with two masks (p = 0.1 and
/// 0.5: the mask, its product, the residual add, the second mask and its
/// product), then GELU and a training dropout of `trainP` not expanded,
/// which draws after the chain. Unfused; two chains once fused.
inline Program dropoutProgram(DType dtype, double trainP) {
  ProgramBuilder b;
  ValueId x = b.input(dtype, {3, 5});
  ValueId residual = b.input(dtype, {3, 5});
  OpAttrs drop;
  drop.p = 0.1;
  ValueId m1 = b.op(OpKind::DropoutMask, {x}, drop);
  ValueId y = b.op(OpKind::Add, {b.op(OpKind::Mul, {x, m1}), residual});
  OpAttrs half;
  half.p = 0.5;
  ValueId m2 = b.op(OpKind::DropoutMask, {y}, half);
  b.result(m1);
  b.result(b.op(OpKind::Mul, {y, m2}));
  OpAttrs train;
  train.p = trainP;
  train.training = true;
  ValueId z = b.op(OpKind::Dropout, {b.op(OpKind::Gelu, {residual})}, train);
  b.result(b.op(OpKind::Sub, {z, x}));
  return b.program;
}

/// `program`'s results (bytes) on `backend` for arguments drawn from
/// `seed`, its chains fused (`fuse`) or not.
inline std::vector<std::vector<uint8_t>>
runRandomProgram(Program program, bool fuse, uint32_t seed, Backend &backend) {
  BindOptions options(CollectiveMode::Overlapped, fuse);
  absl::Status bound = bindToRank(program, 0, options);
  EXPECT_TRUE(bound.ok()) << bound;
  auto executor = Executor::create(program, backend);
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
    args.push_back(*backend.upload(t));
  }
  StepContext step;
  auto results = (*executor)->call(step, args);
  EXPECT_TRUE(results.ok()) << results.status();
  std::vector<std::vector<uint8_t>> out;
  for (size_t r = 0; r < results->size(); ++r) {
    auto host = backend.download(*(*results)[r],
                                 program.values[program.results[r].value].type);
    out.emplace_back(host->bytes(), host->bytes() + host->byteSize());
  }
  return out;
}

} // namespace merak::runtime::testing

#endif // MERAK_UNITTESTS_RUNTIME_RANDOMPROGRAMS_H
