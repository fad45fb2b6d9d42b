//===- CudaFusedKernelTest.cpp - fused kernels compiled without a GPU -----===//
//
// NVRTC needs no GPU: every op a fused kernel computes, in each float type,
// is compiled for the architectures the backend is built for and
// assembled into machine code. Also the 16-bit conversions the fused
// kernels do in plain arithmetic (DeviceMath.h), against CUDA's own.
//
//===----------------------------------------------------------------------===//

#include "../../lib/Runtime/CUDA/DeviceMath.h"
#include "../../lib/Runtime/CUDA/Elementwise.h"
#include "../../lib/Runtime/CUDA/FusedKernels.h"
#include "../../lib/Runtime/CUDA/FusedLaunch.h"
#include "../../lib/Runtime/CUDA/Optimizers.h"
#include "ProgramBuilder.h"
#include "RandomPrograms.h"
#include "merak/Runtime/Fusion.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>

namespace merak::runtime {
namespace {

using testing::ProgramBuilder;

uint16_t bitsOf(__half h) {
  uint16_t u;
  std::memcpy(&u, &h, 2);
  return u;
}
uint16_t bitsOf(__nv_bfloat16 h) {
  uint16_t u;
  std::memcpy(&u, &h, 2);
  return u;
}
uint32_t floatBits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

TEST(CudaFusedKernel, SixteenBitFloatsToFloatExactly) {
  for (uint32_t u = 0; u < 65536; ++u) {
    __half h;
    __nv_bfloat16 b;
    uint16_t bits = uint16_t(u);
    std::memcpy(&h, &bits, 2);
    std::memcpy(&b, &bits, 2);
    float hf = __half2float(h), bf = __bfloat162float(b);
    float mine = cuda::f16BitsToFloat(bits),
          mineB = cuda::bf16BitsToFloat(bits);
    if (std::isnan(hf))
      EXPECT_TRUE(std::isnan(mine)) << u;
    else
      EXPECT_EQ(floatBits(mine), floatBits(hf)) << u;
    if (std::isnan(bf))
      EXPECT_TRUE(std::isnan(mineB)) << u;
    else
      EXPECT_EQ(floatBits(mineB), floatBits(bf)) << u;
  }
}

TEST(CudaFusedKernel, FloatsRoundedToSixteenBitsAsCudaRoundsThem) {
  std::vector<float> values = {0.0f,
                               -0.0f,
                               1.0f,
                               65504.0f,
                               65519.99f,
                               65520.0f,
                               1e-8f,
                               5.9604645e-8f,
                               2.9802322e-8f,
                               2.9802326e-8f,
                               6.1035156e-5f,
                               6.1e-5f,
                               std::numeric_limits<float>::infinity(),
                               -std::numeric_limits<float>::infinity(),
                               std::numeric_limits<float>::max(),
                               std::numeric_limits<float>::denorm_min()};
  std::mt19937 gen(7);
  std::uniform_int_distribution<uint32_t> bits;
  for (int i = 0; i < 200000; ++i) {
    uint32_t u = bits(gen);
    float f;
    std::memcpy(&f, &u, 4);
    values.push_back(f);
  }
  // Every float near the half range's edges and subnormals, densely.
  for (float f = 1e-9f; f < 1e-3f; f *= 1.001f)
    values.push_back(f);
  for (float f : values) {
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(cuda::f16BitsToFloat(cuda::floatToF16Bits(f))));
      EXPECT_TRUE(std::isnan(cuda::bf16BitsToFloat(cuda::floatToBf16Bits(f))));
      continue;
    }
    EXPECT_EQ(cuda::floatToF16Bits(f), bitsOf(__float2half_rn(f))) << f;
    EXPECT_EQ(cuda::floatToBf16Bits(f), bitsOf(__float2bfloat16_rn(f))) << f;
  }
}

/// A chain with every op a fused kernel computes, on `dtype`.
Program everyOp(DType dtype) {
  ProgramBuilder b;
  ValueId x = b.input(dtype, {4, 8});
  ValueId y = b.input(dtype, {8});
  ValueId e = b.input(dtype, {});
  ValueId v = b.op(OpKind::Add, {x, y});
  for (OpKind k : {OpKind::Neg, OpKind::Abs, OpKind::Exp, OpKind::Log,
                   OpKind::Sin, OpKind::Cos, OpKind::Sqrt, OpKind::Rsqrt,
                   OpKind::Reciprocal, OpKind::Erf, OpKind::Tanh,
                   OpKind::Sigmoid, OpKind::Silu, OpKind::Relu, OpKind::Gelu})
    v = b.op(k, {v});
  OpAttrs tanh;
  tanh.tanhApproximation = true;
  v = b.op(OpKind::Gelu, {v}, tanh);
  for (OpKind k : {OpKind::Sub, OpKind::Mul, OpKind::Div, OpKind::Pow,
                   OpKind::Minimum, OpKind::Maximum, OpKind::GeluBackward})
    v = b.op(k, {v, x});
  v = b.op(OpKind::Pow, {v, e}); // a scalar exponent
  v = b.op(OpKind::GeluBackward, {v, x}, tanh);
  OpAttrs lt;
  lt.predicate = ComparePredicate::Lt;
  ValueId c = b.op(OpKind::Compare, {v, x}, DType::Bool, {4, 8}, lt);
  ValueId nc = b.op(OpKind::Not, {c});
  ValueId both = b.op(OpKind::And, {c, nc});
  ValueId either = b.op(OpKind::Or, {both, c});
  v = b.op(OpKind::Where, {either, v, x}, dtype, {4, 8});
  OpAttrs clamp;
  clamp.min = -2.0;
  clamp.max = 3.0;
  v = b.op(OpKind::Clamp, {v}, clamp);
  ValueId asBool = b.op(OpKind::Cast, {v}, DType::Bool, {4, 8});
  ValueId back = b.op(OpKind::Cast, {asBool}, dtype, {4, 8});
  ValueId other = b.op(OpKind::Cast, {back},
                       dtype == DType::F32 ? DType::BF16 : DType::F32, {4, 8});
  b.result(v);
  b.result(other);
  fuseElementwise(b.program);
  return b.program;
}

TEST(CudaFusedKernel, EveryOpCompilesForEachArchitecture) {
  ASSERT_EQ(cuda::nvrtcDescription().rfind("NVRTC ", 0), 0u)
      << cuda::nvrtcDescription();
  for (DType dtype : {DType::F32, DType::BF16, DType::F16}) {
    // Chains of at most 24 inputs and members: two kernels.
    Program p = everyOp(dtype);
    ASSERT_EQ(p.fusedKernels.size(), 2u) << printProgram(p);
    for (const Instruction &inst : p.instructions)
      ASSERT_EQ(inst.kind, OpKind::Fused) << printProgram(p);
    for (const FusedKernel &k : p.fusedKernels)
      for (const char *arch : {"sm_80", "sm_90"}) {
        absl::StatusOr<std::string> cubin =
            cuda::compileFusedKernel(k.source, arch);
        ASSERT_TRUE(cubin.ok()) << cubin.status();
        // An ELF file of machine code.
        ASSERT_GT(cubin->size(), 4u);
        EXPECT_EQ(cubin->substr(0, 4), "\x7f"
                                       "ELF");
      }
  }
}

/// `testing::dropoutProgram` fused.
Program dropoutChains(DType dtype) {
  Program p = testing::dropoutProgram(dtype, /*trainP=*/1.0);
  fuseElementwise(p);
  return p;
}

TEST(CudaFusedKernel, DropoutChainsCompileForEachArchitecture) {
  for (DType dtype : {DType::F32, DType::BF16, DType::F16}) {
    Program p = dropoutChains(dtype);
    ASSERT_EQ(p.fusedKernels.size(), 2u) << printProgram(p);
    // Four elements a thread, one Philox block of each mask for them.
    const std::string &first = p.fusedKernels[0].source;
    EXPECT_NE(first.find("const Philox4 r1 = fusedDropoutWords(p, 1, g);"),
              std::string::npos)
        << first;
    EXPECT_NE(first.find("fusedDropoutLane(p, 1, r1, lane)"), std::string::npos)
        << first;
    EXPECT_NE(
        p.fusedKernels[1].source.find("v0 * fusedDropoutLane(p, 0, r0, lane)"),
        std::string::npos)
        << p.fusedKernels[1].source;
    for (const FusedKernel &k : p.fusedKernels)
      for (const char *arch : {"sm_80", "sm_90"}) {
        absl::StatusOr<std::string> cubin =
            cuda::compileFusedKernel(k.source, arch);
        ASSERT_TRUE(cubin.ok()) << cubin.status();
        EXPECT_EQ(cubin->substr(0, 4), "\x7f"
                                       "ELF");
      }
  }
}

/// Element `i`'s value of dropout member `k`, as a fused kernel's thread
/// for elements `i / 4 * 4` to `i / 4 * 4 + 3` finds it.
float maskAt(const cuda::FusedParams &p, int k, int64_t i) {
  return cuda::fusedDropoutLane(p, k, cuda::fusedDropoutWords(p, k, i / 4),
                                int(i % 4));
}

TEST(CudaFusedKernel, DropoutParametersFollowTheUnfusedCounters) {
  // bf16: masks of 15 elements from counter 8 on, each moving it past its
  // words rounded up to whole Philox blocks (8 -> 24 -> 40), kept values
  // 1 / (1 - p) rounded to bf16; p = 1 keeps nothing and draws nothing.
  Program p = dropoutChains(DType::BF16);
  cuda::FusedParams first{}, second{};
  uint64_t offset = 8;
  EXPECT_EQ(
      cuda::fusedDropouts(first, p, p.fusedKernels[0], 0x1234, offset, false),
      2);
  EXPECT_EQ(first.key, 0x1234u);
  EXPECT_EQ(first.dropout[0].offset, 8u);
  EXPECT_EQ(first.dropout[1].offset, 24u);
  EXPECT_EQ(offset, 40u);
  EXPECT_EQ(first.dropout[0].threshold, cuda::keepThreshold(1 - 0.1));
  EXPECT_EQ(first.dropout[1].threshold, uint64_t(1) << 31);
  EXPECT_EQ(first.dropout[0].scale, cuda::roundToBf16(1.0f / 0.9f));
  EXPECT_EQ(first.dropout[0].scale, 1.109375f);
  EXPECT_EQ(first.dropout[1].scale, 2.0f);
  cuda::fusedDropouts(second, p, p.fusedKernels[1], 0x1234, offset, false);
  EXPECT_EQ(second.dropout[0].threshold, 0u);
  EXPECT_EQ(second.dropout[0].scale, 0.0f);
  EXPECT_EQ(offset, 40u);
  for (int64_t i = 0; i < 15; ++i)
    EXPECT_EQ(maskAt(second, 0, i), 0.0f);

  // An evaluation step keeps everything, draws nothing and moves nothing.
  cuda::FusedParams eval{};
  offset = 8;
  cuda::fusedDropouts(eval, p, p.fusedKernels[0], 0x1234, offset, true);
  EXPECT_EQ(offset, 8u);
  for (int k = 0; k < 2; ++k) {
    EXPECT_EQ(eval.dropout[k].threshold, uint64_t(1) << 32);
    EXPECT_EQ(maskAt(eval, k, 7), 1.0f);
  }

  // Element i of a mask takes word offset + i, as the dropout kernel
  // draws it: words 8 to 22 of the key's stream for the first mask,
  // words 24 to 38 for the second.
  for (int k = 0; k < 2; ++k)
    for (int64_t i = 0; i < 15; ++i) {
      const uint64_t word = first.dropout[k].offset + uint64_t(i);
      cuda::Philox4 block =
          cuda::philox4x32_10(cuda::dropoutBlockCounter(word / 4), 0x1234, 0);
      float want = uint64_t(block.v[word % 4]) < first.dropout[k].threshold
                       ? first.dropout[k].scale
                       : 0.0f;
      EXPECT_EQ(maskAt(first, k, i), want) << k << " " << i;
    }

  // A counter inside a Philox block, or more masks than the parameters
  // hold, is an error.
  cuda::FusedParams bad{};
  offset = 6;
  EXPECT_THROW(
      cuda::fusedDropouts(bad, p, p.fusedKernels[0], 0x1234, offset, false),
      cuda::CudaError);
  FusedKernel five;
  OpAttrs drop;
  drop.p = 0.5;
  for (int k = 0; k < 5; ++k) {
    Instruction m;
    m.kind = OpKind::DropoutMask;
    m.attrs = drop;
    m.results = {p.fusedKernels[0].members[0].results[0]};
    five.members.push_back(m);
  }
  cuda::FusedParams full{};
  offset = 0;
  EXPECT_THROW(cuda::fusedDropouts(full, p, five, 1, offset, false),
               cuda::CudaError);
}

TEST(CudaFusedKernel, CompileErrorsCarryTheLogAndTheSource) {
  absl::StatusOr<std::string> bad =
      cuda::compileFusedKernel("this is not CUDA", "sm_90");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("NVRTC could not compile"),
            std::string::npos)
      << bad.status();
  EXPECT_NE(bad.status().message().find("this is not CUDA"), std::string::npos);
}

TEST(CudaFusedKernel, ThirtyTwoBitOffsetsAreTheSixtyFourBitOnes) {
  // A [3, 5, 7] chain: a dense input, a broadcast row, a transposed view
  // with strides past 2^32 elements.
  cuda::FusedParams p{};
  p.rank = 3;
  p.n = 3 * 5 * 7;
  int64_t sizes[3] = {3, 5, 7};
  int64_t strides[3][3] = {
      {35, 7, 1}, {0, 0, 1}, {int64_t(1) << 33, 1, int64_t(5) << 33}};
  for (int d = 0; d < 3; ++d) {
    p.sizes[d] = sizes[d];
    for (int k = 0; k < 3; ++k)
      p.strides[k][d] = strides[k][d];
  }
  for (int64_t i = 0; i < p.n; ++i) {
    int64_t wide[3], narrow[3];
    cuda::fusedOffsets(p, i, 3, wide);
    cuda::fusedOffsets32(p, uint32_t(i), 3, narrow);
    for (int k = 0; k < 3; ++k)
      ASSERT_EQ(wide[k], narrow[k]) << i << " " << k;
    EXPECT_EQ(wide[0], i);
    EXPECT_EQ(wide[1], i % 7);
  }
}

cuda::View denseView(std::vector<int64_t> shape, uintptr_t at) {
  cuda::View v;
  v.data = reinterpret_cast<void *>(at);
  v.rank = int(shape.size());
  for (int d = 0; d < v.rank; ++d)
    v.sizes[d] = shape[d];
  cuda::contiguousStrides(v.sizes, v.rank, v.strides);
  return v;
}

TEST(CudaFusedKernel, LaunchParametersBroadcastAndMergeTheOperands) {
  // Dense operands of one shape: one dense run of 32 elements.
  cuda::FusedParams all =
      cuda::fusedParams({denseView({4, 8}, 0x1000), denseView({4, 8}, 0x2000),
                         denseView({4, 8}, 0x3000)},
                        2, {4, 8});
  EXPECT_EQ(all.n, 32);
  EXPECT_EQ(all.rank, 1);
  EXPECT_EQ(all.dense, 1);
  EXPECT_EQ(all.data[2], reinterpret_cast<void *>(0x3000));

  // A bias row and a scalar broadcast: two dimensions, stride 0 where
  // broadcast, the output dense.
  cuda::FusedParams b =
      cuda::fusedParams({denseView({4, 8}, 0x1000), denseView({8}, 0x2000),
                         denseView({}, 0x3000), denseView({4, 8}, 0x4000)},
                        3, {4, 8});
  EXPECT_EQ(b.dense, 0);
  ASSERT_EQ(b.rank, 2);
  EXPECT_EQ(b.sizes[0], 4);
  EXPECT_EQ(b.sizes[1], 8);
  EXPECT_EQ(b.strides[0][0], 8);
  EXPECT_EQ(b.strides[0][1], 1);
  EXPECT_EQ(b.strides[1][0], 0);
  EXPECT_EQ(b.strides[1][1], 1);
  EXPECT_EQ(b.strides[2][0], 0);
  EXPECT_EQ(b.strides[2][1], 0);
  int64_t off[3];
  cuda::fusedOffsets(b, 13, 3, off); // row 1, column 5
  EXPECT_EQ(off[0], 13);
  EXPECT_EQ(off[1], 5);
  EXPECT_EQ(off[2], 0);

  // A transposed input: read with its own strides.
  cuda::View t = denseView({8, 4}, 0x1000);
  std::swap(t.sizes[0], t.sizes[1]);
  std::swap(t.strides[0], t.strides[1]);
  cuda::FusedParams tp =
      cuda::fusedParams({t, denseView({4, 8}, 0x2000)}, 1, {4, 8});
  EXPECT_EQ(tp.dense, 0);
  cuda::fusedOffsets(tp, 13, 1, off);
  EXPECT_EQ(off[0], 5 * 4 + 1);

  // An input that does not broadcast is an error naming it.
  try {
    cuda::fusedParams({denseView({3}, 0x1000), denseView({4, 8}, 0x2000)}, 1,
                      {4, 8});
    ADD_FAILURE() << "a [3] input broadcast to [4, 8]";
  } catch (const cuda::CudaError &e) {
    EXPECT_NE(std::string(e.what()).find("input #0 does not broadcast"),
              std::string::npos)
        << e.what();
  }
}

TEST(CudaFusedKernel, MultiTensorLaunchesCoverEveryTensor) {
  std::vector<int64_t> sizes = {0, 1, 4096, 4097, int64_t(1) << 30};
  for (int i = 0; i < 35; ++i)
    sizes.push_back(768 * (i + 1));
  std::vector<cuda::MultiTensorLaunch> launches =
      cuda::planMultiTensor(sizes.data(), int(sizes.size()));
  ASSERT_EQ(launches.size(), 2u); // 40 tensors, 32 to a launch
  EXPECT_EQ(launches[0].first, 0);
  EXPECT_EQ(launches[0].count, 32);
  EXPECT_EQ(launches[1].first, 32);
  EXPECT_EQ(launches[1].count, 8);
  const cuda::MultiTensorLaunch &l = launches[0];
  EXPECT_EQ(l.blockStart[0], 0);
  EXPECT_EQ(l.blockStart[1] - l.blockStart[0], 1);    // empty: one block
  EXPECT_EQ(l.blockStart[2] - l.blockStart[1], 1);    // one element
  EXPECT_EQ(l.blockStart[3] - l.blockStart[2], 1);    // 4,096
  EXPECT_EQ(l.blockStart[4] - l.blockStart[3], 2);    // 4,097
  EXPECT_EQ(l.blockStart[5] - l.blockStart[4], 1024); // capped
  // The kernel's search: block b belongs to the tensor whose range holds it.
  for (const cuda::MultiTensorLaunch &launch : launches)
    for (int32_t b = 0; b < launch.blockStart[launch.count]; ++b) {
      int t = 0;
      while (t + 1 < launch.count && launch.blockStart[t + 1] <= b)
        ++t;
      ASSERT_GE(b, launch.blockStart[t]);
      ASSERT_LT(b, launch.blockStart[t + 1]);
    }
}

} // namespace
} // namespace merak::runtime
