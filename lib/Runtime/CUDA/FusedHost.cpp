//===- FusedHost.cpp - fused kernels' CUDA source run on the host ---------===//
//
// See FusedHost.h.
//
//===----------------------------------------------------------------------===//

#include "merak/Runtime/CUDA/FusedHost.h"
#include "CudaKernels.h"
#include "DeviceMath.h"
#include "Elementwise.h"
#include "FusedKernels.h"
#include "FusedLaunch.h"
#include "merak/Runtime/Executor.h"
#include "merak/Runtime/Fusion.h"
#include "merak/Runtime/Random.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"

#include <dlfcn.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <optional>
#include <random>

namespace merak::runtime {

using cuda::FusedParams;
using cuda::View;
using KernelFn = void (*)(FusedParams);

HostFusedKernels::~HostFusedKernels() {
  if (handle)
    dlclose(handle);
}

absl::StatusOr<std::unique_ptr<HostFusedKernels>>
HostFusedKernels::compile(const std::vector<std::string> &sources,
                          const std::string &directory) {
  auto file = [&](const char *name) { return directory + "/" + name; };
  std::ofstream(file("DeviceMath.h")) << cuda::deviceMathSource();
  {
    std::ofstream unit(file("kernels.cpp"));
    // What the CUDA source names that a host has not: one thread in one
    // block runs the whole grid-stride loop.
    unit << "struct MerakDim3 { unsigned x, y, z; };\n"
            "static const MerakDim3 blockIdx = {0, 0, 0}, threadIdx = {0, 0, "
            "0}, blockDim = {1, 1, 1}, gridDim = {1, 1, 1};\n"
            "#define __global__\n#define __launch_bounds__(n)\n";
    for (size_t k = 0; k < sources.size(); ++k)
      unit << "#define merak_fused merak_fused_" << k << "\n"
           << sources[k] << "\n#undef merak_fused\n";
    if (!unit)
      return absl::UnavailableError(
          absl::StrCat("cannot write ", file("kernels.cpp")));
  }
  const char *cxx = std::getenv("CXX");
  // The shell's quoting of a path (a quote inside closes and reopens).
  auto quoted = [](const std::string &path) {
    return "'" + absl::StrReplaceAll(path, {{"'", "'\\''"}}) + "'";
  };
  // Contraction off, as NVRTC compiles them (--fmad=false).
  std::string command =
      absl::StrCat(cxx && *cxx ? cxx : "c++",
                   " -std=c++17 -O1 -ffp-contract=off -fPIC -shared -w -o ",
                   quoted(file("kernels.so")), " ", quoted(file("kernels.cpp")),
                   " 2> ", quoted(file("compile.log")));
  if (std::system(command.c_str()) != 0) {
    std::ifstream log(file("compile.log"));
    return absl::InternalError(
        absl::StrCat(command, " failed:\n",
                     std::string(std::istreambuf_iterator<char>(log),
                                 std::istreambuf_iterator<char>())));
  }
  std::unique_ptr<HostFusedKernels> k(new HostFusedKernels());
  k->handle = dlopen(file("kernels.so").c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!k->handle)
    return absl::InternalError(absl::StrCat("dlopen: ", dlerror()));
  for (size_t i = 0; i < sources.size(); ++i) {
    void *fn = dlsym(k->handle, absl::StrCat("merak_fused_", i).c_str());
    if (!fn)
      return absl::InternalError(absl::StrCat("no merak_fused_", i));
    k->kernels[sources[i]] = fn;
  }
  return k;
}

absl::Status HostFusedKernels::run(const std::string &source,
                                   const void *params) const {
  auto it = kernels.find(source);
  if (it == kernels.end())
    return absl::InternalError("a chain whose kernel was not compiled");
  reinterpret_cast<KernelFn>(it->second)(
      *static_cast<const FusedParams *>(params));
  return absl::OkStatus();
}

namespace {

/// Element `i` of `t` (a floating-point type) as a double.
double elementOf(const HostTensor &t, int64_t i);

/// Stores `v` as element `i` of `t` (a floating-point type), rounded once.
void storeElement(HostTensor &t, int64_t i, float v) {
  uint8_t *p = t.mutableBytes();
  switch (t.type.dtype) {
  case DType::BF16: {
    uint16_t bits = cuda::floatToBf16Bits(v);
    std::memcpy(p + 2 * i, &bits, 2);
    break;
  }
  case DType::F16: {
    uint16_t bits = cuda::floatToF16Bits(v);
    std::memcpy(p + 2 * i, &bits, 2);
    break;
  }
  case DType::F64: {
    double d = v;
    std::memcpy(p + 8 * i, &d, 8);
    break;
  }
  default:
    std::memcpy(p + 4 * i, &v, 4);
    break;
  }
}

/// Dropout with probability `p` in (0, 1] of a training step as the CUDA
/// backend's dropout kernel computes it (Elementwise.cu), on host memory:
/// `x` times the mask, or the mask alone without `x`. One Philox block of
/// the step's `key` serves four consecutive elements, element `i` taking
/// word `offset + i`; `offset` then moves past the mask's words.
HostTensor dropoutAsOnTheGpu(const HostTensor *x, const TensorType &type,
                             double p, uint64_t key, uint64_t &offset) {
  HostTensor out = HostTensor::allocate(type);
  const int64_t n = type.numElements();
  const uint64_t threshold = cuda::keepThreshold(1 - p);
  float scale = p < 1 ? 1.0f / float(1 - p) : 0.0f;
  if (type.dtype == DType::BF16)
    scale = cuda::roundToBf16(scale);
  else if (type.dtype == DType::F16)
    scale = cuda::roundToF16(scale);
  const uint64_t first = offset >> 2;
  for (int64_t b = 0; b < cuda::dropoutBlocks(offset, n); ++b) {
    const uint64_t block = first + uint64_t(b);
    cuda::Philox4 r = cuda::philox4x32_10(cuda::dropoutBlockCounter(block),
                                          uint32_t(key), uint32_t(key >> 32));
    for (int lane = 0; lane < 4; ++lane) {
      const uint64_t word = block * 4 + uint64_t(lane);
      if (word < offset || word - offset >= uint64_t(n))
        continue;
      const int64_t i = int64_t(word - offset);
      const float m = cuda::philoxKeeps(r.v[lane], threshold) ? scale : 0.0f;
      storeElement(out, i, x ? float(elementOf(*x, i)) * m : m);
    }
  }
  if (p < 1)
    offset = cuda::dropoutOffsetAfter(offset, n);
  return out;
}

/// `inner`, but `fused` chains run on the host as their kernels.
class HostFusedBackend final : public Backend {
public:
  HostFusedBackend(std::unique_ptr<Backend> inner,
                   const HostFusedKernels &kernels)
      : inner(std::move(inner)), kernels(kernels) {}

  std::string name() const override {
    return inner->name() + " (fused chains on the host)";
  }
  bool supports(OpKind kind) const override {
    return kind == OpKind::Fused || inner->supports(kind);
  }
  absl::StatusOr<TensorHandle> upload(const HostTensor &h) override {
    return inner->upload(h);
  }
  absl::StatusOr<HostTensor> download(const DeviceTensor &t,
                                      const TensorType &type) override {
    return inner->download(t, type);
  }
  absl::StatusOr<TensorHandle> zeros(const TensorType &type) override {
    return inner->zeros(type);
  }
  absl::StatusOr<TensorHandle> convert(const DeviceTensor &t,
                                       DType to) override {
    return inner->convert(t, to);
  }
  absl::Status accumulate(DeviceTensor &into,
                          const DeviceTensor &addend) override {
    return inner->accumulate(into, addend);
  }
  absl::Status scale(DeviceTensor &t, double factor) override {
    return inner->scale(t, factor);
  }
  absl::Status beginStep(const StepContext &step) override {
    dropoutKey = stepSeed(step.seed, step.globalStep, RandomStream::Dropout);
    dropoutOffset = 0;
    return inner->beginStep(step);
  }
  MemoryStats memoryStats() const override { return inner->memoryStats(); }
  void resetPeak() override { inner->resetPeak(); }

  absl::Status execute(KernelCall &call) override {
    const Instruction &inst = *call.instruction;
    const bool evaluating = call.step && call.step->evaluate;
    if (drawsDropoutMask(inst) && !evaluating && inst.attrs.p > 0)
      return dropout(call);
    if (inst.kind != OpKind::Fused)
      return inner->execute(call);
    const Program &program = *call.program;
    if (isOptimizerGroup(program, int(inst.attrs.index)))
      return absl::UnimplementedError(
          "an optimizer group does not run on the host");
    const FusedKernel &chain = program.fusedKernels[inst.attrs.index];
    std::vector<HostTensor> buffers;
    std::vector<View> views;
    for (size_t k = 0; k < inst.operands.size(); ++k) {
      const TensorType &type = program.values[inst.operands[k]].type;
      absl::StatusOr<HostTensor> h = inner->download(*call.operands[k], type);
      if (!h.ok())
        return h.status();
      View v = cuda::denseView(nullptr, type);
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
    try {
      cuda::FusedParams params =
          cuda::fusedParams(views, inst.operands.size(), chain.shape);
      cuda::fusedDropouts(params, program, chain, dropoutKey, dropoutOffset,
                          evaluating);
      if (absl::Status s = kernels.run(chain.source, &params); !s.ok())
        return s;
    } catch (const std::exception &e) {
      return absl::InternalError(e.what());
    }
    call.results.clear();
    for (size_t r = 0; r < inst.results.size(); ++r) {
      absl::StatusOr<TensorHandle> up =
          inner->upload(buffers[inst.operands.size() + r]);
      if (!up.ok())
        return up.status();
      call.results.push_back(*std::move(up));
    }
    return absl::OkStatus();
  }

private:
  /// A training step's `dropout` or `dropout_mask` as the CUDA backend
  /// draws it (`dropoutAsOnTheGpu`).
  absl::Status dropout(KernelCall &call) {
    const Instruction &inst = *call.instruction;
    const TensorType &type = call.program->values[inst.results[0]].type;
    if (type.dtype != DType::F32 && type.dtype != DType::BF16 &&
        type.dtype != DType::F16)
      return absl::UnimplementedError(
          absl::StrCat("dropout of ", type.str(), " on the host"));
    std::optional<HostTensor> x;
    if (inst.kind == OpKind::Dropout) {
      absl::StatusOr<HostTensor> h = inner->download(
          *call.operands[0], call.program->values[inst.operands[0]].type);
      if (!h.ok())
        return h.status();
      x = *std::move(h);
    }
    absl::StatusOr<TensorHandle> up = inner->upload(dropoutAsOnTheGpu(
        x ? &*x : nullptr, type, inst.attrs.p, dropoutKey, dropoutOffset));
    if (!up.ok())
      return up.status();
    call.results.clear();
    call.results.push_back(*std::move(up));
    return absl::OkStatus();
  }

  std::unique_ptr<Backend> inner;
  const HostFusedKernels &kernels;
  /// The step's dropout key and the counter of its next mask, kept as the
  /// CUDA backend keeps them.
  uint64_t dropoutKey = 0, dropoutOffset = 0;
};

/// Element `i` of `t` (a floating-point type) as a double.
double elementOf(const HostTensor &t, int64_t i) {
  const uint8_t *p = t.bytes();
  switch (t.type.dtype) {
  case DType::BF16: {
    uint16_t bits;
    std::memcpy(&bits, p + 2 * i, 2);
    return cuda::bf16BitsToFloat(bits);
  }
  case DType::F16: {
    uint16_t bits;
    std::memcpy(&bits, p + 2 * i, 2);
    return cuda::f16BitsToFloat(bits);
  }
  case DType::F64: {
    double x;
    std::memcpy(&x, p + 8 * i, 8);
    return x;
  }
  default: {
    float x;
    std::memcpy(&x, p + 4 * i, 4);
    return x;
  }
  }
}

/// A random value of `type`: floats from a normal distribution, booleans,
/// small integers.
HostTensor randomTensor(const TensorType &type, std::mt19937 &gen) {
  HostTensor t = HostTensor::allocate(type);
  std::normal_distribution<float> normal;
  uint8_t *p = t.mutableBytes();
  for (int64_t i = 0; i < type.numElements(); ++i) {
    float x = normal(gen);
    switch (type.dtype) {
    case DType::F32:
    case DType::F64:
    case DType::BF16:
    case DType::F16:
      storeElement(t, i, x);
      break;
    case DType::Bool:
      p[i] = uint8_t(gen() & 1);
      break;
    case DType::I32: {
      int32_t v = int32_t(gen() % 10);
      std::memcpy(p + 4 * i, &v, 4);
      break;
    }
    case DType::I64: {
      int64_t v = int64_t(gen() % 10);
      std::memcpy(p + 8 * i, &v, 8);
      break;
    }
    }
  }
  return t;
}

/// `program` with `instructions` alone, reading `fused`'s operands as its
/// arguments and returning its results.
Program chainProgram(const Program &program, const Instruction &fused,
                     std::vector<Instruction> instructions) {
  Program p;
  p.function = "chain";
  p.values = program.values;
  for (ValueInfo &v : p.values) // the plan finds what defines each
    v.definedBy = -1;
  for (ValueId v : fused.operands) {
    Argument a;
    a.value = v;
    p.arguments.push_back(a);
  }
  for (Instruction &inst : instructions) {
    inst.storage.clear();
    inst.release.clear();
    inst.waitAt = inst.completes = -1;
    p.instructions.push_back(std::move(inst));
  }
  for (ValueId v : fused.results) {
    ResultInfo r;
    r.value = v;
    p.results.push_back(r);
  }
  return p;
}

/// `program`'s results on `backend` for `args`.
absl::StatusOr<std::vector<HostTensor>>
runOn(Program program, Backend &backend, const std::vector<HostTensor> &args) {
  if (absl::Status s = planProgram(program); !s.ok())
    return s;
  absl::StatusOr<std::unique_ptr<Executor>> executor =
      Executor::create(program, backend);
  if (!executor.ok())
    return executor.status();
  std::vector<TensorHandle> handles;
  for (const HostTensor &a : args) {
    absl::StatusOr<TensorHandle> h = backend.upload(a);
    if (!h.ok())
      return h.status();
    handles.push_back(*std::move(h));
  }
  StepContext step;
  absl::StatusOr<std::vector<TensorHandle>> results =
      (*executor)->call(step, handles);
  if (!results.ok())
    return results.status();
  std::vector<HostTensor> out;
  for (size_t r = 0; r < results->size(); ++r) {
    absl::StatusOr<HostTensor> h = backend.download(
        *(*results)[r], program.values[program.results[r].value].type);
    if (!h.ok())
      return h.status();
    out.push_back(*std::move(h));
  }
  return out;
}

} // namespace

std::unique_ptr<Backend> makeHostFusedBackend(std::unique_ptr<Backend> host,
                                              const HostFusedKernels &kernels) {
  return std::make_unique<HostFusedBackend>(std::move(host), kernels);
}

std::vector<std::string> fusedSources(const Program &program) {
  std::vector<std::string> sources;
  for (const FusedKernel &k : program.fusedKernels)
    if (!k.source.empty() &&
        std::find(sources.begin(), sources.end(), k.source) == sources.end())
      sources.push_back(k.source);
  return sources;
}

bool fusedResultsAgree(const HostTensor &a, const HostTensor &b,
                       std::string &why) {
  if (a.type != b.type) {
    why = absl::StrCat(a.type.str(), " against ", b.type.str());
    return false;
  }
  const DType t = a.type.dtype;
  if (t != DType::F32 && t != DType::BF16 && t != DType::F16 &&
      t != DType::F64) {
    for (size_t i = 0; i < a.byteSize(); ++i)
      if (a.bytes()[i] != b.bytes()[i]) {
        why = absl::StrCat("byte ", i, " differs");
        return false;
      }
    return true;
  }
  const double rtol = t == DType::BF16  ? 1.0 / 128
                      : t == DType::F16 ? 1.0 / 1024
                                        : 1e-4;
  for (int64_t i = 0; i < a.type.numElements(); ++i) {
    double x = elementOf(a, i), y = elementOf(b, i);
    if ((std::isnan(x) && std::isnan(y)) || x == y)
      continue;
    if (!(std::fabs(x - y) <= 1e-5 + rtol * std::fabs(y))) {
      why = absl::StrCat("element ", i, ": ", x, " against ", y);
      return false;
    }
  }
  return true;
}

absl::StatusOr<std::vector<FusedChainCheck>> checkFusedChainsOnHost(
    const Program &program,
    const std::function<std::unique_ptr<Backend>()> &makeHost,
    const std::string &directory) {
  std::vector<std::string> sources = fusedSources(program);
  std::vector<FusedChainCheck> checks;
  if (sources.empty())
    return checks;
  absl::StatusOr<std::unique_ptr<HostFusedKernels>> kernels =
      HostFusedKernels::compile(sources, directory);
  if (!kernels.ok())
    return kernels.status();
  std::mt19937 gen(2026);
  for (const std::string &source : sources) {
    // The first instruction that runs this chain.
    const Instruction *fused = nullptr;
    for (const Instruction &inst : program.instructions)
      if (!fused && inst.kind == OpKind::Fused &&
          program.fusedKernels[inst.attrs.index].source == source)
        fused = &inst;
    if (!fused)
      continue;
    const FusedKernel &chain = program.fusedKernels[fused->attrs.index];
    FusedChainCheck check;
    std::vector<std::string> ops;
    for (const Instruction &m : chain.members)
      ops.push_back(opKindName(m.kind));
    check.ops = absl::StrJoin(ops, ", ");
    std::vector<HostTensor> args;
    for (ValueId v : fused->operands)
      args.push_back(randomTensor(program.values[v].type, gen));

    Program members = chainProgram(program, *fused, chain.members);
    Instruction one = *fused;
    one.attrs.index = 0;
    Program kernel = chainProgram(program, *fused, {one});
    kernel.fusedKernels = {chain};
    std::unique_ptr<Backend> host = makeHost(), inner = makeHost();
    if (!host || !inner)
      return absl::InternalError("cannot create the host backend");
    // Both draw dropout masks as the CUDA backend does.
    std::unique_ptr<Backend> reference =
        makeHostFusedBackend(std::move(host), **kernels);
    std::unique_ptr<Backend> onHost =
        makeHostFusedBackend(std::move(inner), **kernels);
    absl::StatusOr<std::vector<HostTensor>> want =
        runOn(std::move(members), *reference, args);
    if (!want.ok())
      return absl::Status(want.status().code(),
                          absl::StrCat("the ops of chain (", check.ops,
                                       "): ", want.status().message()));
    absl::StatusOr<std::vector<HostTensor>> got =
        runOn(std::move(kernel), *onHost, args);
    if (!got.ok())
      return absl::Status(got.status().code(),
                          absl::StrCat("the kernel of chain (", check.ops,
                                       "): ", got.status().message()));
    for (size_t r = 0; r < want->size() && check.mismatch.empty(); ++r) {
      std::string why;
      if (!fusedResultsAgree((*got)[r], (*want)[r], why))
        check.mismatch =
            absl::StrCat("result ", r, " (", (*want)[r].type.str(), "): ", why);
    }
    checks.push_back(std::move(check));
  }
  return checks;
}

} // namespace merak::runtime
