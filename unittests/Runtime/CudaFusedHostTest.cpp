//===- CudaFusedHostTest.cpp - fused kernels' CUDA source run on the host -===//
//
// The CUDA source that `fusedKernelSource` writes for a chain, compiled by
// the host's C++ compiler against DeviceMath.h (which all three compilers
// read) and run on the CPU with the launch parameters `fusedParams` makes:
// the random programs of CpuFusionTest.cpp, whose chains (broadcast
// operands, comparisons and selects, bf16 round trips, GELU, SiLU,
// clamps, dropout masks) each run as their generated kernel, against the
// same programs unfused on the CPU backend (dropout masks drawn as the
// CUDA backend draws them, fused or not). Half the operands are handed over
// transposed, so the kernels' strided offsets run too. What the GPU adds
// (the grid, NVRTC's code generation) is checked on a GPU; what the
// generator writes is checked here.
//
//===----------------------------------------------------------------------===//

#include "RandomPrograms.h"
#include "ScratchDir.h"
#include "merak/Runtime/CPU/CpuBackend.h"
#include "merak/Runtime/CUDA/FusedHost.h"
#include "merak/Runtime/Fusion.h"

#include "absl/strings/str_cat.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>

namespace merak::runtime {
namespace {

/// The distinct sources of `program`'s chains once fused.
std::vector<std::string> chainSources(Program program) {
  EXPECT_TRUE(bindToRank(program, 0,
                         BindOptions(CollectiveMode::Overlapped, /*fuse=*/true))
                  .ok());
  return fusedSources(program);
}

/// Runs `programs` unfused on the CPU backend and fused, each chain as its
/// generated kernel compiled for the host; every result must agree.
void expectHostKernelsAgree(const std::vector<Program> &programs) {
  std::vector<std::string> sources;
  for (const Program &p : programs)
    for (std::string &s : chainSources(p))
      if (std::find(sources.begin(), sources.end(), s) == sources.end())
        sources.push_back(std::move(s));
  ASSERT_FALSE(sources.empty());
  merak::testing::ScratchDir dir("merak-fused-host");
  absl::StatusOr<std::unique_ptr<HostFusedKernels>> kernels =
      HostFusedKernels::compile(sources, dir.path);
  ASSERT_TRUE(kernels.ok()) << kernels.status();
  for (size_t t = 0; t < programs.size(); ++t) {
    // Both draw dropout masks as the CUDA backend does; the unfused
    // program has no chain to run.
    std::unique_ptr<Backend> cpu =
        makeHostFusedBackend(createCpuBackend({}), **kernels);
    std::unique_ptr<Backend> fusedOnHost =
        makeHostFusedBackend(createCpuBackend({}), **kernels);
    auto unfused = testing::runRandomProgram(programs[t], false, t, *cpu);
    auto fused = testing::runRandomProgram(programs[t], true, t, *fusedOnHost);
    ASSERT_EQ(unfused.size(), fused.size());
    for (size_t r = 0; r < fused.size(); ++r) {
      const TensorType &type =
          programs[t].values[programs[t].results[r].value].type;
      HostTensor a = HostTensor::allocate(type), b = HostTensor::allocate(type);
      ASSERT_EQ(fused[r].size(), a.byteSize());
      std::memcpy(a.mutableBytes(), fused[r].data(), fused[r].size());
      std::memcpy(b.mutableBytes(), unfused[r].data(), unfused[r].size());
      std::string why;
      EXPECT_TRUE(fusedResultsAgree(a, b, why))
          << "program " << t << ", result " << r << ": " << why;
    }
  }
}

TEST(CudaFusedHost, GeneratedKernelsComputeWhatTheUnfusedOpsDo) {
  std::mt19937 gen(2026);
  std::vector<Program> programs;
  for (int trial = 0; trial < 40; ++trial)
    programs.push_back(testing::randomProgram(gen));
  expectHostKernelsAgree(programs);
}

TEST(CudaFusedHost, MixedPrecisionChainsRoundAsTheOpsDo) {
  // A bf16 step's residual adds and activations: bf16 values loaded from
  // their bits, widened, summed with float32 ones and a broadcast bias,
  // rounded back to bf16 once; GELU and SiLU between casts.
  testing::ProgramBuilder b;
  ValueId x = b.input(DType::BF16, {4, 8});
  ValueId residual = b.input(DType::F32, {4, 8});
  ValueId bias = b.input(DType::F32, {8});
  ValueId wide = b.op(OpKind::Cast, {x}, DType::F32, {4, 8});
  ValueId sum = b.op(OpKind::Add, {wide, residual});
  ValueId biased = b.op(OpKind::Add, {sum, bias});
  b.result(sum);
  b.result(b.op(OpKind::Cast, {biased}, DType::BF16, {4, 8}));
  ValueId g = b.op(OpKind::Gelu, {wide});
  ValueId s = b.op(OpKind::Silu, {b.op(OpKind::Mul, {g, residual})});
  b.result(b.op(OpKind::Cast, {s}, DType::BF16, {4, 8}));
  expectHostKernelsAgree({b.program});
}

/// Result `r` of `program` as floats.
std::vector<float> floatsOf(const Program &program,
                            const std::vector<std::vector<uint8_t>> &results,
                            size_t r) {
  std::vector<float> out(results[r].size() / 4);
  EXPECT_EQ(program.values[program.results[r].value].type.dtype, DType::F32);
  std::memcpy(out.data(), results[r].data(), out.size() * 4);
  return out;
}

TEST(CudaFusedHost, FusedDropoutDrawsTheUnfusedKernelsMasks) {
  // A residual block's dropouts as training writes them (the input times
  // a drawn mask), in f32 and bf16: chains with two masks, then one whose
  // dropout draws after them. The chains' kernels draw each mask from the
  // counters the unfused kernels draw it from.
  for (DType dtype : {DType::F32, DType::BF16}) {
    Program program = testing::dropoutProgram(dtype, /*trainP=*/0.6);
    Program probe = program;
    ASSERT_TRUE(
        bindToRank(probe, 0, BindOptions(CollectiveMode::Overlapped, true))
            .ok());
    ASSERT_EQ(probe.fusedKernels.size(), 2u) << printProgram(probe);
    expectHostKernelsAgree({program});
  }
}

TEST(CudaFusedHost, DropoutMasksKeepTheirShareAndScale) {
  // One mask of 4,099 elements with p = 0.25, fused with its product:
  // about three quarters kept, each 1 / 0.75, the rest 0; and the host's
  // kernel equal to the unfused draw.
  testing::ProgramBuilder b;
  ValueId x = b.input(DType::F32, {4099});
  OpAttrs drop;
  drop.p = 0.25;
  ValueId mask = b.op(OpKind::DropoutMask, {x}, drop);
  b.result(b.op(OpKind::Mul, {x, mask}));
  b.result(mask);
  std::vector<std::string> sources = chainSources(b.program);
  ASSERT_EQ(sources.size(), 1u);
  EXPECT_NE(sources[0].find("fusedDropoutLane(p, 0, r0, lane)"),
            std::string::npos)
      << sources[0];
  merak::testing::ScratchDir dir("merak-fused-host");
  auto kernels = HostFusedKernels::compile(sources, dir.path);
  ASSERT_TRUE(kernels.ok()) << kernels.status();
  std::unique_ptr<Backend> fused =
      makeHostFusedBackend(createCpuBackend({}), **kernels);
  std::unique_ptr<Backend> unfused =
      makeHostFusedBackend(createCpuBackend({}), **kernels);
  auto a = testing::runRandomProgram(b.program, true, 3, *fused);
  auto u = testing::runRandomProgram(b.program, false, 3, *unfused);
  ASSERT_EQ(a, u);
  std::vector<float> m = floatsOf(b.program, a, 1);
  int kept = 0;
  for (float v : m) {
    ASSERT_TRUE(v == 0.0f || v == 1.0f / 0.75f) << v;
    kept += v != 0;
  }
  EXPECT_GT(kept, 4099 * 0.72);
  EXPECT_LT(kept, 4099 * 0.78);
}

TEST(CudaFusedHost, EachChainAloneAgainstItsOps) {
  // `checkFusedChainsOnHost` (merak-kernel-check --fused-chains): each
  // distinct chain of a bound program run alone on random operands.
  std::mt19937 gen(7);
  Program program = testing::randomProgram(gen);
  ASSERT_TRUE(
      bindToRank(program, 0, BindOptions(CollectiveMode::Overlapped, true))
          .ok());
  merak::testing::ScratchDir dir("merak-fused-host");
  auto checks = checkFusedChainsOnHost(
      program, [] { return createCpuBackend({}); }, dir.path);
  ASSERT_TRUE(checks.ok()) << checks.status();
  EXPECT_EQ(checks->size(), fusedSources(program).size());
  ASSERT_FALSE(checks->empty());
  for (const FusedChainCheck &c : *checks) {
    EXPECT_FALSE(c.ops.empty());
    EXPECT_EQ(c.mismatch, "") << c.ops;
  }
  // A compiler that cannot compile the sources is an error with its log.
  std::string broken = program.fusedKernels.front().source + "\n}";
  EXPECT_NE(HostFusedKernels::compile({broken}, dir.path)
                .status()
                .message()
                .find("failed:"),
            std::string::npos);
}

TEST(CudaFusedHost, ResultsAgreeWithinTheirTypesRounding) {
  auto tensor = [](DType dtype, std::vector<float> values) {
    HostTensor t = HostTensor::allocate({dtype, {int64_t(values.size())}});
    for (size_t i = 0; i < values.size(); ++i)
      if (dtype == DType::F32)
        std::memcpy(t.mutableBytes() + 4 * i, &values[i], 4);
      else if (dtype == DType::Bool)
        t.mutableBytes()[i] = values[i] != 0;
    return t;
  };
  std::string why;
  EXPECT_TRUE(fusedResultsAgree(tensor(DType::F32, {1, NAN, 1e6f}),
                                tensor(DType::F32, {1.00001f, NAN, 1.00005e6f}),
                                why));
  EXPECT_FALSE(fusedResultsAgree(tensor(DType::F32, {1, 2}),
                                 tensor(DType::F32, {1, 2.01f}), why));
  EXPECT_EQ(why, "element 1: 2 against 2.01");
  EXPECT_FALSE(fusedResultsAgree(tensor(DType::F32, {NAN}),
                                 tensor(DType::F32, {0}), why));
  EXPECT_FALSE(fusedResultsAgree(tensor(DType::Bool, {1, 0}),
                                 tensor(DType::Bool, {1, 1}), why));
  EXPECT_EQ(why, "byte 1 differs");
}

} // namespace
} // namespace merak::runtime
