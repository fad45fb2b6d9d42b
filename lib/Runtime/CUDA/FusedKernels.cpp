//===- FusedKernels.cpp - CUDA host kernel: fused elementwise chains ------===//
//
// The `fused` instruction: its chain's source compiled by NVRTC (opened
// with dlopen) for the device's architecture on first use, loaded with
// the runtime's library API, and launched as a grid-stride loop over the
// chain's shape, the inputs broadcast to it and read with their strides.
//
//===----------------------------------------------------------------------===//

#include "FusedKernels.h"
#include "CudaKernels.h"
#include "DynamicLibrary.h"
#include "Elementwise.h"
#include "FusedLaunch.h"
#include "KernelCache.h"
#include "Optimizers.h"
#include "merak/Runtime/Fusion.h"

#include "absl/strings/str_cat.h"

#include <nvrtc.h>

#include <algorithm>
#include <map>
#include <mutex>
#include <optional>
#include <vector>

namespace merak::runtime::cuda {
namespace {

static_assert(kFusedMaxOperands == runtime::kMaxFusedOperands,
              "DeviceMath.h and Fusion.h disagree on a chain's operands");
static_assert(kFusedMaxDropouts == runtime::kMaxFusedDropouts,
              "DeviceMath.h and Fusion.h disagree on a chain's masks");

/// DeviceMath.h's text, the one header of every fused kernel.
constexpr const char kDeviceMathSource[] =
#include "DeviceMathSource.inc"
    ;

/// NVRTC's options beside the architecture. Each op rounds as the unfused
/// kernel does: no multiply-add contraction across ops.
constexpr const char *kCompileOptions[] = {"-std=c++17", "--fmad=false",
                                           "-default-device"};

/// The NVRTC functions the backend calls, from the library opened once.
struct Nvrtc {
  void *handle = nullptr;
  std::string error;
  decltype(&::nvrtcVersion) version = nullptr;
  decltype(&::nvrtcGetErrorString) errorString = nullptr;
  decltype(&::nvrtcCreateProgram) create = nullptr;
  decltype(&::nvrtcCompileProgram) compile = nullptr;
  decltype(&::nvrtcGetProgramLogSize) logSize = nullptr;
  decltype(&::nvrtcGetProgramLog) log = nullptr;
  decltype(&::nvrtcGetCUBINSize) cubinSize = nullptr;
  decltype(&::nvrtcGetCUBIN) cubin = nullptr;
  decltype(&::nvrtcDestroyProgram) destroy = nullptr;

  static const Nvrtc &get() {
    static const Nvrtc nvrtc = open();
    return nvrtc;
  }

private:
  static Nvrtc open() {
    Nvrtc n;
#if defined(MERAK_CUDA_EMULATION)
    n.error = "the CUDA emulator runs no kernels compiled at run time; run "
              "with --fuse-elementwise=off";
    return n;
#endif
    // The toolkit's major version first, then any.
    std::string why;
    n.handle = openFirstLibrary(
        {"libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so"}, why);
    if (!n.handle) {
      n.error = absl::StrCat("cannot open NVRTC (libnvrtc.so.13, from the CUDA "
                             "toolkit), which compiles fused kernels: ",
                             why, "; run with --fuse-elementwise=off");
      return n;
    }
    bool ok = true;
    auto bind = [&](auto &fn, const char *symbol) {
      ok = bindSymbol(n.handle, fn, symbol) && ok;
    };
    bind(n.version, "nvrtcVersion");
    bind(n.errorString, "nvrtcGetErrorString");
    bind(n.create, "nvrtcCreateProgram");
    bind(n.compile, "nvrtcCompileProgram");
    bind(n.logSize, "nvrtcGetProgramLogSize");
    bind(n.log, "nvrtcGetProgramLog");
    bind(n.cubinSize, "nvrtcGetCUBINSize");
    bind(n.cubin, "nvrtcGetCUBIN");
    bind(n.destroy, "nvrtcDestroyProgram");
    if (!ok)
      n.error = "the NVRTC library lacks a function the backend calls";
    return n;
  }
};

} // namespace

bool nvrtcAvailable() { return Nvrtc::get().error.empty(); }

const char *deviceMathSource() { return kDeviceMathSource; }

std::string nvrtcDescription() {
  const Nvrtc &nvrtc = Nvrtc::get();
  if (!nvrtc.error.empty())
    return nvrtc.error;
  int major = 0, minor = 0;
  nvrtc.version(&major, &minor);
  return absl::StrCat("NVRTC ", major, ".", minor);
}

absl::StatusOr<std::string> compileFusedKernel(const std::string &source,
                                               const std::string &arch) {
  const Nvrtc &nvrtc = Nvrtc::get();
  if (!nvrtc.error.empty())
    return absl::FailedPreconditionError(nvrtc.error);
  nvrtcProgram program;
  const char *headers[] = {kDeviceMathSource};
  const char *headerNames[] = {"DeviceMath.h"};
  if (nvrtcResult r = nvrtc.create(&program, source.c_str(), "merak_fused.cu",
                                   1, headers, headerNames);
      r != NVRTC_SUCCESS)
    return absl::InternalError(
        absl::StrCat("NVRTC: ", nvrtc.errorString(r), " creating a program"));
  std::string archOption = absl::StrCat("--gpu-architecture=", arch);
  const char *options[] = {archOption.c_str(), kCompileOptions[0],
                           kCompileOptions[1], kCompileOptions[2]};
  nvrtcResult compiled = nvrtc.compile(program, 4, options);
  size_t logBytes = 0;
  nvrtc.logSize(program, &logBytes);
  std::string log(logBytes, '\0');
  if (logBytes)
    nvrtc.log(program, log.data());
  if (compiled != NVRTC_SUCCESS) {
    nvrtc.destroy(&program);
    return absl::InternalError(absl::StrCat(
        "NVRTC could not compile a fused kernel for ", arch, " (",
        nvrtc.errorString(compiled), "):\n", log.c_str(), "\n", source));
  }
  size_t bytes = 0;
  nvrtc.cubinSize(program, &bytes);
  std::string cubin(bytes, '\0');
  nvrtc.cubin(program, cubin.data());
  nvrtc.destroy(&program);
  return cubin;
}

std::string fusedKernelKey(const std::string &source, const std::string &arch) {
  std::string key = absl::StrCat(nvrtcDescription(), "\n", arch, "\n");
  for (const char *option : kCompileOptions)
    absl::StrAppend(&key, option, " ");
  absl::StrAppend(&key, "\n", kDeviceMathSource, "\n", source);
  return key;
}

absl::StatusOr<std::string> compileAndKeepFusedKernel(const std::string &source,
                                                      const std::string &arch) {
  absl::StatusOr<std::string> cubin = compileFusedKernel(source, arch);
  if (cubin.ok())
    if (std::optional<KernelDiskCache> disk =
            KernelDiskCache::fromEnvironment())
      disk->store(fusedKernelKey(source, arch), *cubin);
  return cubin;
}

/// The kernels compiled so far, by source, and the libraries holding them.
struct FusedKernelCache {
  std::mutex mutex;
  std::string arch;
  /// Where compiled kernels are kept between runs (KernelCache.h).
  const std::optional<KernelDiskCache> disk =
      KernelDiskCache::fromEnvironment();
  std::map<std::string, cudaKernel_t> kernels;
  std::vector<cudaLibrary_t> libraries;

  ~FusedKernelCache() {
    for (cudaLibrary_t l : libraries)
      cudaLibraryUnload(l);
  }

  cudaKernel_t get(const std::string &source, int device) {
    std::lock_guard<std::mutex> lock(mutex);
    if (auto it = kernels.find(source); it != kernels.end())
      return it->second;
    if (arch.empty()) {
      int major = 0, minor = 0;
      check(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor,
                                   device),
            "fused kernel: the device's compute capability");
      check(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor,
                                   device),
            "fused kernel: the device's compute capability");
      arch = absl::StrCat("sm_", major, minor);
    }
    // The code kept by an earlier run, else NVRTC's (then kept); kept code
    // the driver refuses is compiled again.
    const std::string key = fusedKernelKey(source, arch);
    std::optional<std::string> kept;
    if (disk)
      kept = disk->load(key);
    cudaLibrary_t library = nullptr;
    if (kept && cudaLibraryLoadData(&library, kept->data(), nullptr, nullptr, 0,
                                    nullptr, nullptr, 0) != cudaSuccess) {
      cudaGetLastError();
      library = nullptr;
    }
    if (!library) {
      absl::StatusOr<std::string> cubin = compileFusedKernel(source, arch);
      if (!cubin.ok())
        throw CudaError(std::string(cubin.status().message()));
      check(cudaLibraryLoadData(&library, cubin->data(), nullptr, nullptr, 0,
                                nullptr, nullptr, 0),
            "fused kernel: loading its machine code");
      if (disk)
        disk->store(key, *cubin);
    }
    libraries.push_back(library);
    cudaKernel_t kernel;
    check(cudaLibraryGetKernel(&kernel, library, "merak_fused"),
          "fused kernel: finding merak_fused");
    kernels[source] = kernel;
    return kernel;
  }
};

namespace {

/// Where a group's members find their values among the fused
/// instruction's operands and results.
struct GroupValues {
  Ctx &c;
  const char *op;

  size_t operand(ValueId v) const {
    auto it = std::find(c.inst.operands.begin(), c.inst.operands.end(), v);
    if (it == c.inst.operands.end())
      throw CudaError(absl::StrCat("fused ", op,
                                   ": a member's operand is not one of the "
                                   "instruction's"));
    return size_t(it - c.inst.operands.begin());
  }
  /// The instruction's result `v` is, or -1 where nothing outside the
  /// group reads it.
  int resultIndex(ValueId v) const {
    auto it = std::find(c.inst.results.begin(), c.inst.results.end(), v);
    return it == c.inst.results.end() ? -1 : int(it - c.inst.results.begin());
  }
  /// Where member result `v` (of `type`) is written: the instruction's
  /// result, or memory for this call where nothing reads it.
  float *output(ValueId v) const {
    int r = resultIndex(v);
    CudaTensor &t =
        r >= 0 ? c.result(size_t(r)) : c.scratch(c.program.values[v].type);
    return static_cast<float *>(t.data());
  }
  /// Throws unless a member's operands `0..last` have one type.
  const TensorType &sameType(const Instruction &m, int last) const {
    const TensorType &type = c.program.values[m.operands[0]].type;
    for (int k = 1; k <= last; ++k)
      if (c.program.values[m.operands[k]].type != type)
        throw CudaError(
            absl::StrCat("fused ", op, ": a member's operands differ in type"));
    return type;
  }
};

/// A group of float32 AdamW updates (`fuseOptimizerUpdates`): every
/// member's operands and results found among the fused instruction's, then
/// one multi-tensor launch per `kTensorsPerLaunch` tensors.
void adamwGroup(Ctx &c, const FusedKernel &group) {
  GroupValues g{c, "adamw_update"};
  const Instruction &first = group.members.front();
  const OpAttrs &a = first.attrs;
  AdamwScalars s = adamwScalars(c.scalar(g.operand(first.operands[4])),
                                c.scalar(g.operand(first.operands[5])), a.beta1,
                                a.beta2, a.eps, a.weightDecay);
  std::vector<AdamwTensor> tensors;
  for (const Instruction &m : group.members) {
    g.sameType(m, 3);
    View param = c.contiguous(g.operand(m.operands[0])),
         grad = c.contiguous(g.operand(m.operands[1])),
         expAvg = c.contiguous(g.operand(m.operands[2])),
         expAvgSq = c.contiguous(g.operand(m.operands[3]));
    tensors.push_back(
        AdamwTensor{param.ptr<const float>(), grad.ptr<const float>(),
                    expAvg.ptr<const float>(), expAvgSq.ptr<const float>(),
                    g.output(m.results[0]), g.output(m.results[1]),
                    g.output(m.results[2]), param.numel()});
  }
  adamwMultiTensor(tensors.data(), int(tensors.size()), s, c.stream());
}

/// A group of float32 SGD updates: as `adamwGroup`. Without momentum each
/// member's buffer passes through, its result a view of its operand (as
/// the plan says, `viewOperand` in Program.cpp), and the kernel reads and
/// writes no buffer; on the first step with momentum it only writes it.
void sgdGroup(Ctx &c, const FusedKernel &group) {
  GroupValues g{c, "sgd_update"};
  const Instruction &first = group.members.front();
  const OpAttrs &a = first.attrs;
  SgdScalars s;
  s.lr = c.scalar(g.operand(first.operands[3]));
  s.weightDecay = a.weightDecay;
  s.momentum = a.momentum;
  s.dampening = a.dampening;
  s.nesterov = a.nesterov;
  s.firstStep = int64_t(c.scalar(g.operand(first.operands[4]))) == 1;
  std::vector<SgdTensor> tensors;
  for (const Instruction &m : group.members) {
    g.sameType(m, 2);
    View param = c.contiguous(g.operand(m.operands[0])),
         grad = c.contiguous(g.operand(m.operands[1]));
    SgdTensor t{param.ptr<const float>(),
                grad.ptr<const float>(),
                nullptr,
                g.output(m.results[0]),
                nullptr,
                param.numel()};
    if (s.momentum == 0) {
      if (int r = g.resultIndex(m.results[1]); r >= 0)
        c.viewResult(size_t(r), g.operand(m.operands[2]), 0,
                     c.in(g.operand(m.operands[2])).strides);
    } else {
      if (!s.firstStep)
        t.buffer = c.contiguous(g.operand(m.operands[2])).ptr<const float>();
      t.newBuffer = g.output(m.results[1]);
    }
    tensors.push_back(t);
  }
  sgdMultiTensor(tensors.data(), int(tensors.size()), s, c.stream());
}

} // namespace

FusedParams fusedParams(std::vector<View> views, size_t inputs,
                        const std::vector<int64_t> &shape) {
  // Every operand as a view of the chain's shape, merged into as few
  // dimensions as all of them allow.
  int64_t sizes[kMaxDims] = {};
  for (size_t d = 0; d < shape.size(); ++d)
    sizes[d] = shape[d];
  const int rank = int(shape.size());
  for (size_t k = 0; k < inputs; ++k) {
    View b;
    if (!broadcastView(views[k], sizes, rank, b))
      throw CudaError(absl::StrCat("fused chain: input #", k,
                                   " does not broadcast to the chain's shape"));
    views[k] = b;
  }
  coalesceDims(views.data(), int(views.size()));
  FusedParams p{};
  p.n = 1;
  for (int64_t s : shape)
    p.n *= s;
  p.rank = views[0].rank;
  bool dense = true;
  for (int d = 0; d < p.rank; ++d)
    p.sizes[d] = views[0].sizes[d];
  for (size_t k = 0; k < views.size(); ++k) {
    p.data[k] = views[k].data;
    for (int d = 0; d < p.rank; ++d) {
      p.strides[k][d] = views[k].strides[d];
      dense = dense && p.rank == 1 && views[k].strides[d] == 1;
    }
  }
  p.dense = dense ? 1 : 0;
  return p;
}

int fusedDropouts(FusedParams &p, const Program &program,
                  const FusedKernel &chain, uint64_t key, uint64_t &offset,
                  bool evaluating) {
  p.key = key;
  int k = 0;
  for (const Instruction &m : chain.members) {
    if (!drawsDropoutMask(m))
      continue;
    if (k == kFusedMaxDropouts)
      throw CudaError(absl::StrCat("a fused chain with more than ",
                                   kFusedMaxDropouts, " dropout masks"));
    const TensorType &type = program.values[m.results[0]].type;
    const double keep = evaluating ? 1.0 : 1.0 - m.attrs.p;
    if (offset % 4 != 0)
      throw CudaError(absl::StrCat("a fused chain's dropout mask at counter ",
                                   offset, ", not a whole Philox block"));
    FusedDropout &d = p.dropout[k++];
    d.offset = offset;
    d.threshold = keepThreshold(keep);
    // A kept element's value as the dropout kernel makes it: 1 / (1 - p)
    // in float, rounded to the element type.
    float scale = keep > 0 ? 1.0f / float(keep) : 0.0f;
    if (type.dtype == DType::BF16)
      scale = roundToBf16(scale);
    else if (type.dtype == DType::F16)
      scale = roundToF16(scale);
    d.scale = scale;
    if (keep > 0 && keep < 1)
      offset = dropoutOffsetAfter(offset, type.numElements());
  }
  return k;
}

namespace {

void fused(Ctx &c) {
  const FusedKernel &chain = c.program.fusedKernels[c.a.index];
  if (isOptimizerGroup(c.program, int(c.a.index)))
    return chain.members.front().kind == OpKind::SgdUpdate
               ? sgdGroup(c, chain)
               : adamwGroup(c, chain);
  const size_t inputs = c.inst.operands.size();
  const size_t outputs = c.inst.results.size();
  if (inputs + outputs > size_t(kFusedMaxOperands))
    throw CudaError(absl::StrCat("a fused chain of ", inputs, " inputs and ",
                                 outputs, " outputs; a kernel takes at most ",
                                 kFusedMaxOperands));
  std::vector<View> views;
  for (size_t k = 0; k < inputs; ++k)
    views.push_back(c.view(k));
  for (size_t r = 0; r < outputs; ++r)
    views.push_back(c.result(r).view());
  FusedParams p = fusedParams(views, inputs, chain.shape);
  if (p.n == 0)
    return;
  // A chain with dropout masks takes four elements a thread.
  const int masks = fusedDropouts(p, c.program, chain, c.dev.dropoutKey,
                                  c.dev.dropoutOffset, c.evaluating());
  if (!c.dev.fusedKernels)
    c.dev.fusedKernels = std::make_shared<FusedKernelCache>();
  cudaKernel_t kernel = c.dev.fusedKernels->get(chain.source, c.dev.device);
  Launch l = linearLaunch(masks > 0 ? (p.n + 3) / 4 : p.n, 256);
  void *args[] = {&p};
  check(cudaLaunchKernel(reinterpret_cast<const void *>(kernel), dim3(l.grid),
                         dim3(l.block), args, 0, c.stream()),
        "fused kernel launch");
}

} // namespace

void registerFusedKernels(KernelTable &table) {
  table.add(OpKind::Fused, fused);
}

} // namespace merak::runtime::cuda
