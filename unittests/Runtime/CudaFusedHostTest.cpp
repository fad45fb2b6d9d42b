//===- CudaFusedHostTest.cpp - fused kernels' CUDA source run on the host -===//
//
// The CUDA source that `fusedKernelSource` writes for a chain, compiled by
// the host's C++ compiler against DeviceMath.h (which all three compilers
// read) and run on the CPU with the launch parameters `fusedParams` makes:
// the random programs of CpuFusionTest.cpp, whose chains (broadcast
// operands, comparisons and selects, bf16 round trips, GELU, SiLU,
// clamps) each run as their generated kernel, against the same programs
// unfused on the CPU backend. Half the operands are handed over
// transposed, so the kernels' strided offsets run too. What the GPU adds
// (the grid, NVRTC's code generation) is checked on a GPU; what the
// generator writes is checked here.
//
//===----------------------------------------------------------------------===//

#include "../../lib/Runtime/CUDA/CudaKernels.h"
#include "../../lib/Runtime/CUDA/FusedKernels.h"
#include "../../lib/Runtime/CUDA/FusedLaunch.h"
#include "RandomPrograms.h"
#include "ScratchDir.h"
#include "merak/Runtime/CPU/CpuBackend.h"
#include "merak/Runtime/Fusion.h"

#include "absl/strings/str_cat.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <dlfcn.h>
#include <fstream>
#include <map>
#include <random>

namespace merak::runtime {
namespace {

using KernelFn = void (*)(cuda::FusedParams);

/// Every source of `sources` compiled into one shared object by the host's
/// compiler ($CXX, else c++): kernel k is `merak_fused_k`.
class HostKernels {
public:
  HostKernels(const std::vector<std::string> &sources,
              const merak::testing::ScratchDir &dir) {
    std::ofstream(dir.file("DeviceMath.h")) << cuda::deviceMathSource();
    std::ofstream unit(dir.file("kernels.cpp"));
    // What the CUDA source names that a host has not: one thread in one
    // block runs the whole grid-stride loop.
    unit << "struct MerakDim3 { unsigned x, y, z; };\n"
            "static const MerakDim3 blockIdx = {0, 0, 0}, threadIdx = {0, "
            "0, 0}, blockDim = {1, 1, 1}, gridDim = {1, 1, 1};\n"
            "#define __global__\n#define __launch_bounds__(n)\n";
    for (size_t k = 0; k < sources.size(); ++k)
      unit << "#define merak_fused merak_fused_" << k << "\n"
           << sources[k] << "\n#undef merak_fused\n";
    unit.close();
    const char *cxx = std::getenv("CXX");
    // Contraction off, as NVRTC compiles them (--fmad=false).
    std::string command =
        absl::StrCat(cxx && *cxx ? cxx : "c++",
                     " -std=c++17 -O1 -ffp-contract=off -fPIC -shared -w -o ",
                     dir.file("kernels.so"), " ", dir.file("kernels.cpp"),
                     " 2> ", dir.file("compile.log"));
    if (std::system(command.c_str()) != 0) {
      std::ifstream log(dir.file("compile.log"));
      error = absl::StrCat(command, " failed:\n",
                           std::string(std::istreambuf_iterator<char>(log),
                                       std::istreambuf_iterator<char>()));
      return;
    }
    handle = dlopen(dir.file("kernels.so").c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!handle) {
      error = dlerror();
      return;
    }
    for (size_t k = 0; k < sources.size(); ++k)
      kernels[sources[k]] = reinterpret_cast<KernelFn>(
          dlsym(handle, absl::StrCat("merak_fused_", k).c_str()));
  }
  ~HostKernels() {
    if (handle)
      dlclose(handle);
  }

  std::string error;
  std::map<std::string, KernelFn> kernels;

private:
  void *handle = nullptr;
};

/// The CPU backend, but a `fused` chain runs as its generated kernel on the
/// host: operands downloaded (every other one of rank 2 transposed in
/// memory, read through its strides), results uploaded.
class HostFusedBackend final : public Backend {
public:
  explicit HostFusedBackend(const HostKernels &host)
      : cpu(createCpuBackend({})), host(host) {}

  std::string name() const override { return "cpu with host-run fused"; }
  bool supports(OpKind kind) const override {
    return kind == OpKind::Fused || cpu->supports(kind);
  }
  absl::StatusOr<TensorHandle> upload(const HostTensor &h) override {
    return cpu->upload(h);
  }
  absl::StatusOr<HostTensor> download(const DeviceTensor &t,
                                      const TensorType &type) override {
    return cpu->download(t, type);
  }
  absl::StatusOr<TensorHandle> zeros(const TensorType &type) override {
    return cpu->zeros(type);
  }
  absl::StatusOr<TensorHandle> convert(const DeviceTensor &t,
                                       DType to) override {
    return cpu->convert(t, to);
  }
  absl::Status accumulate(DeviceTensor &into,
                          const DeviceTensor &addend) override {
    return cpu->accumulate(into, addend);
  }
  absl::Status scale(DeviceTensor &t, double factor) override {
    return cpu->scale(t, factor);
  }
  absl::Status beginStep(const StepContext &step) override {
    return cpu->beginStep(step);
  }
  MemoryStats memoryStats() const override { return cpu->memoryStats(); }
  void resetPeak() override { cpu->resetPeak(); }

  absl::Status execute(KernelCall &call) override {
    const Instruction &inst = *call.instruction;
    if (inst.kind != OpKind::Fused)
      return cpu->execute(call);
    const Program &program = *call.program;
    const FusedKernel &chain = program.fusedKernels[inst.attrs.index];
    auto kernel = host.kernels.find(chain.source);
    if (kernel == host.kernels.end() || !kernel->second)
      return absl::InternalError("a chain whose kernel was not compiled");
    std::vector<HostTensor> buffers;
    std::vector<cuda::View> views;
    for (size_t k = 0; k < inst.operands.size(); ++k) {
      const TensorType &type = program.values[inst.operands[k]].type;
      absl::StatusOr<HostTensor> h = cpu->download(*call.operands[k], type);
      if (!h.ok())
        return h.status();
      cuda::View v = cuda::denseView(nullptr, type);
      if (type.shape.size() == 2 && k % 2 == 1) {
        // Column-major: element (i, j) at j * rows + i.
        HostTensor t = HostTensor::allocate(type);
        const int64_t rows = type.shape[0], cols = type.shape[1];
        const size_t size = dtypeSize(type.dtype);
        for (int64_t i = 0; i < rows; ++i)
          for (int64_t j = 0; j < cols; ++j)
            std::memcpy(t.mutableBytes() + (j * rows + i) * size,
                        h->bytes() + (i * cols + j) * size, size);
        v.strides[0] = 1;
        v.strides[1] = rows;
        *h = std::move(t);
      }
      buffers.push_back(*std::move(h));
      views.push_back(v);
    }
    for (ValueId r : inst.results) {
      buffers.push_back(HostTensor::allocate(program.values[r].type));
      views.push_back(cuda::denseView(nullptr, program.values[r].type));
    }
    for (size_t k = 0; k < views.size(); ++k)
      views[k].data = buffers[k].mutableBytes();
    ++chainsRun;
    try {
      kernel->second(
          cuda::fusedParams(views, inst.operands.size(), chain.shape));
    } catch (const std::exception &e) {
      return absl::InternalError(e.what());
    }
    call.results.clear();
    for (size_t r = 0; r < inst.results.size(); ++r) {
      absl::StatusOr<TensorHandle> up =
          cpu->upload(buffers[inst.operands.size() + r]);
      if (!up.ok())
        return up.status();
      call.results.push_back(*std::move(up));
    }
    return absl::OkStatus();
  }

  /// How many chains ran as their generated kernel.
  int64_t chainsRun = 0;

private:
  std::unique_ptr<Backend> cpu;
  const HostKernels &host;
};

/// The distinct sources of `program`'s chains once fused.
std::vector<std::string> chainSources(Program program) {
  EXPECT_TRUE(bindToRank(program, 0,
                         BindOptions(CollectiveMode::Overlapped, /*fuse=*/true))
                  .ok());
  std::vector<std::string> sources;
  for (const FusedKernel &k : program.fusedKernels)
    if (!k.source.empty() &&
        std::find(sources.begin(), sources.end(), k.source) == sources.end())
      sources.push_back(k.source);
  return sources;
}

/// Element `i` of `bytes` (of `dtype`) as a float.
float elementOf(const std::vector<uint8_t> &bytes, DType dtype, size_t i) {
  if (dtype == DType::BF16) {
    uint16_t half;
    std::memcpy(&half, bytes.data() + 2 * i, 2);
    uint32_t bits = uint32_t(half) << 16;
    float x;
    std::memcpy(&x, &bits, 4);
    return x;
  }
  float x;
  std::memcpy(&x, bytes.data() + 4 * i, 4);
  return x;
}

/// Whether result `a` (the generated kernels') and `b` (the CPU backend's)
/// of `type` agree: float32 within the last bits in which the math
/// library's functions and ATen's vectorized ones differ (a chain carries
/// them on), bf16 within one rounding step, anything else exactly.
bool close(const std::vector<uint8_t> &a, const std::vector<uint8_t> &b,
           const TensorType &type, std::string &why) {
  if (a.size() != b.size()) {
    why = "sizes differ";
    return false;
  }
  if (type.dtype != DType::F32 && type.dtype != DType::BF16) {
    why = "bytes differ";
    return a == b;
  }
  const float rtol = type.dtype == DType::BF16 ? 1.0f / 128 : 1e-4f;
  for (int64_t i = 0; i < type.numElements(); ++i) {
    float x = elementOf(a, type.dtype, size_t(i)),
          y = elementOf(b, type.dtype, size_t(i));
    if (std::isnan(x) && std::isnan(y))
      continue;
    if (!(std::fabs(x - y) <= 1e-5f + rtol * std::fabs(y))) {
      why = absl::StrCat("element ", i, ": ", x, " against ", y);
      return false;
    }
  }
  return true;
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
  HostKernels host(sources, dir);
  ASSERT_EQ(host.error, "");
  int64_t chainsRun = 0;
  for (size_t t = 0; t < programs.size(); ++t) {
    std::unique_ptr<Backend> cpu = createCpuBackend({});
    HostFusedBackend fusedOnHost(host);
    auto unfused = testing::runRandomProgram(programs[t], false, t, *cpu);
    auto fused = testing::runRandomProgram(programs[t], true, t, fusedOnHost);
    ASSERT_EQ(unfused.size(), fused.size());
    for (size_t r = 0; r < fused.size(); ++r) {
      std::string why;
      EXPECT_TRUE(close(fused[r], unfused[r],
                        programs[t].values[programs[t].results[r].value].type,
                        why))
          << "program " << t << ", result " << r << ": " << why;
    }
    chainsRun += fusedOnHost.chainsRun;
  }
  EXPECT_GE(chainsRun, int64_t(sources.size()));
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

} // namespace
} // namespace merak::runtime
