//===- CudaBackend.cpp - the CUDA backend ---------------------------------===//
//
// The `Backend` that runs each instruction by its kind's host kernel in
// the kernel table (the family files register them), on one stream of one
// GPU, with device memory from CUDA's stream-ordered pool and a program's
// temporaries in its arena.
//
//===----------------------------------------------------------------------===//

#include "merak/Runtime/CUDA/CudaBackend.h"
#include "Copy.h"
#include "CublasLt.h"
#include "CudaKernels.h"
#include "merak/Runtime/Random.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

#include <cudnn.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <stdexcept>

namespace merak::runtime::cuda {

CudaTensor::CudaTensor(std::shared_ptr<CudaStorage> storage, int64_t byteOffset,
                       TensorType type, std::vector<int64_t> strides)
    : storage(std::move(storage)), byteOffset(byteOffset),
      type(std::move(type)), strides(std::move(strides)) {
  if (this->strides.empty()) {
    this->strides.resize(this->type.shape.size());
    int64_t s = 1;
    for (size_t d = this->type.shape.size(); d-- > 0;) {
      this->strides[d] = s;
      s *= this->type.shape[d];
    }
  }
}

View CudaTensor::view() const {
  if (type.shape.size() > size_t(kMaxDims))
    throw CudaError(absl::StrCat("a tensor of rank ", type.shape.size(),
                                 " (the CUDA kernels index at most ", kMaxDims,
                                 " dimensions)"));
  View v;
  v.data = data();
  v.type = elemTypeOf(type.dtype);
  v.rank = int(type.shape.size());
  for (int d = 0; d < v.rank; ++d) {
    v.sizes[d] = type.shape[d];
    v.strides[d] = strides[d];
  }
  return v;
}

View denseView(void *data, const TensorType &type) {
  if (type.shape.size() > size_t(kMaxDims))
    throw CudaError(absl::StrCat("a tensor of rank ", type.shape.size(),
                                 " (the CUDA kernels index at most ", kMaxDims,
                                 " dimensions)"));
  View v;
  v.data = data;
  v.type = elemTypeOf(type.dtype);
  v.rank = int(type.shape.size());
  for (int d = 0; d < v.rank; ++d)
    v.sizes[d] = type.shape[d];
  contiguousStrides(v.sizes, v.rank, v.strides);
  return v;
}

CudaTensor &Ctx::in(size_t k) const {
  if (!has(k))
    throw CudaError(absl::StrCat("operand #", k, " is absent"));
  return unwrap(*call.operands[k]);
}

View Ctx::contiguous(const CudaTensor &t) {
  View v = t.view();
  if (v.isContiguous())
    return v;
  CudaTensor &copy = scratch(t.type);
  View dst = copy.view();
  copyStrided(v, dst, stream());
  return dst;
}

View Ctx::contiguous(size_t k) { return contiguous(in(k)); }

double Ctx::scalar(size_t k) {
  if (k < call.hostScalars.size() && call.hostScalars[k])
    return *call.hostScalars[k];
  CudaTensor &t = in(k);
  if (t.type.numElements() != 1)
    throw CudaError(
        absl::StrCat("operand #", k, " (", t.type.str(), ") is not a scalar"));
  TensorType f64{DType::F64, {}};
  CudaTensor &wide = scratch(f64);
  copyStrided(t.view(), wide.view(), stream());
  double value = 0;
  check(cudaMemcpyAsync(&value, wide.data(), sizeof(double),
                        cudaMemcpyDeviceToHost, stream()),
        "reading a scalar operand");
  check(cudaStreamSynchronize(stream()), "reading a scalar operand");
  return value;
}

CudaTensor &Ctx::result(size_t r, bool allowInPlace) {
  if (out.size() <= r)
    out.resize(inst.results.size());
  const TensorType &type = resultType(r);
  if (allowInPlace && r < call.inPlace.size() && call.inPlace[r]) {
    CudaTensor &target = unwrap(*call.inPlace[r]);
    if (target.type == type && target.isContiguous()) {
      out[r] = std::make_shared<CudaTensor>(target);
      return unwrap(*out[r]);
    }
  }
  const ResultStorage &storage = inst.storage[r];
  if (call.arena && storage.kind == ResultStorage::Kind::Fresh &&
      storage.arenaOffset >= 0) {
    CudaTensor &arena = unwrap(*call.arena);
    if (storage.arenaOffset + type.byteSize() <= arena.storage->bytes) {
      out[r] = std::make_shared<CudaTensor>(arena.storage, storage.arenaOffset,
                                            type);
      return unwrap(*out[r]);
    }
  }
  out[r] = std::make_shared<CudaTensor>(
      dev.allocate(std::max<int64_t>(type.byteSize(), 1)), 0, type);
  return unwrap(*out[r]);
}

void Ctx::viewResult(size_t r, size_t k, int64_t byteOffset,
                     std::vector<int64_t> strides) {
  if (out.size() <= r)
    out.resize(inst.results.size());
  CudaTensor &operand = in(k);
  out[r] = std::make_shared<CudaTensor>(operand.storage,
                                        operand.byteOffset + byteOffset,
                                        resultType(r), std::move(strides));
}

CudaTensor &Ctx::scratch(const TensorType &type) {
  temps.push_back(std::make_shared<CudaTensor>(
      dev.allocate(std::max<int64_t>(type.byteSize(), 1)), 0, type));
  return unwrap(*temps.back());
}

void expectFoldable(const TensorType &type, DType compute,
                    const std::string &what) {
  bool narrow = type.dtype == DType::BF16 || type.dtype == DType::F16;
  if (type.dtype != compute && !(compute == DType::F32 && narrow))
    throw CudaError(absl::StrCat(what, " is ", type.str(),
                                 ", the kernel computes in ",
                                 dtypeName(compute)));
}

const KernelTable &kernelTable() {
  static const KernelTable table = [] {
    KernelTable t("CUDA");
    registerElementwiseKernels(t);
    registerShapeKernels(t);
    registerReductionKernels(t);
    registerNormalizationKernels(t);
    registerLossKernels(t);
    registerOptimizerKernels(t);
    registerLinearAlgebraKernels(t);
    registerAttentionKernels(t);
    registerConvolutionKernels(t);
    registerFusedKernels(t);
    return t;
  }();
  return table;
}

namespace {

std::string cudaMessage(cudaError_t status) {
  return absl::StrCat(cudaGetErrorString(status), " (",
                      cudaGetErrorName(status), ")");
}

/// The device `options` asks for, or why there is none.
absl::StatusOr<int> chooseDevice(const CudaBackendOptions &options) {
  int count = 0;
  cudaError_t status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess || count == 0)
    return absl::FailedPreconditionError(absl::StrCat(
        "--device=cuda: no CUDA device can be used on this machine (it "
        "needs an NVIDIA GPU and its driver): ",
        status != cudaSuccess ? cudaMessage(status)
                              : std::string("no device found")));
  int device = options.device;
  if (device < 0) {
    device = 0;
    if (const char *local = std::getenv("LOCAL_RANK"))
      device = std::atoi(local) % count;
  }
  if (device >= count)
    return absl::InvalidArgumentError(
        absl::StrCat("--device=cuda: device ", device,
                     " asked for; this machine has ", count));
  return device;
}

class CudaBackend final : public Backend {
public:
  CudaBackend(int device, const CudaBackendOptions &options)
      : arena(options.arena) {
    state.device = device;
    state.tf32 = options.tf32;
    state.gemmStaging = options.gemmStaging;
    state.flashRegisterTiles = options.flashRegisterTiles;
  }

  absl::Status start() {
    if (cudaError_t s = cudaSetDevice(state.device); s != cudaSuccess)
      return absl::FailedPreconditionError(
          absl::StrCat("--device=cuda: cannot use device ", state.device, ": ",
                       cudaMessage(s)));
    if (cudaError_t s =
            cudaStreamCreateWithFlags(&state.stream, cudaStreamNonBlocking);
        s != cudaSuccess)
      return absl::InternalError(
          absl::StrCat("cannot create a CUDA stream: ", cudaMessage(s)));
    // The pool keeps what it has: after the first step, allocations are
    // served from memory the pool already holds.
    cudaMemPool_t pool;
    if (cudaDeviceGetDefaultMemPool(&pool, state.device) == cudaSuccess) {
      uint64_t threshold = std::numeric_limits<uint64_t>::max();
      cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold,
                              &threshold);
    }
    state.allocate = [this](int64_t bytes) { return allocate(bytes); };
    state.allocateOn = [this](int64_t bytes, cudaStream_t stream) {
      return allocate(bytes, stream);
    };
    const CublasLt &api = CublasLt::get();
    if (!api.error.empty())
      return absl::FailedPreconditionError(api.error);
    cublasLtHandle_t lt;
    if (cublasStatus_t s = api.create(&lt); s != CUBLAS_STATUS_SUCCESS)
      return absl::InternalError(
          absl::StrCat("cannot start cuBLASLt: status ", int(s)));
    state.cublasLt = lt;
    state.gemmWorkspaceBytes = size_t(32) << 20;
    if (cudaError_t s =
            cudaMalloc(&state.gemmWorkspace, state.gemmWorkspaceBytes);
        s != cudaSuccess)
      return absl::ResourceExhaustedError(
          absl::StrCat("cannot allocate the GEMM workspace: ", cudaMessage(s)));
    return absl::OkStatus();
  }

  ~CudaBackend() override {
    if (state.stream)
      cudaStreamSynchronize(state.stream);
    if (state.cudnn)
      cudnnDestroy(static_cast<cudnnHandle_t>(state.cudnn));
    if (state.cublasLt)
      CublasLt::get().destroy(static_cast<cublasLtHandle_t>(state.cublasLt));
    if (state.gemmWorkspace)
      cudaFree(state.gemmWorkspace);
    // Tensors still alive free into a stream that is gone: they are leaked
    // with the process rather than freed on a dead stream.
    destroyed->store(true);
    if (state.stream)
      cudaStreamDestroy(state.stream);
  }

  std::string name() const override { return "cuda"; }
  DeviceState &deviceState() { return state; }
  bool supports(OpKind kind) const override {
    return kernelTable().find(kind) != nullptr;
  }

  absl::StatusOr<TensorHandle> upload(const HostTensor &host) override {
    return guarded<TensorHandle>(
        [&] {
          auto t = std::make_shared<CudaTensor>(
              allocate(std::max<int64_t>(host.byteSize(), 1)), 0, host.type);
          if (host.byteSize() > 0) {
            check(cudaMemcpyAsync(t->data(), host.data, host.byteSize(),
                                  cudaMemcpyHostToDevice, state.stream),
                  "copying to the GPU");
            // The host bytes may go away when this returns.
            check(cudaStreamSynchronize(state.stream), "copying to the GPU");
          }
          return TensorHandle(std::move(t));
        },
        absl::StrCat("uploading a ", host.type.str(), " tensor"));
  }

  absl::StatusOr<HostTensor> download(const DeviceTensor &tensor,
                                      const TensorType &type) override {
    absl::StatusOr<HostTensor> host =
        HostTensor::tryAllocate(type, "a tensor read back from the GPU");
    if (!host.ok())
      return host.status();
    return guarded<HostTensor>(
        [&]() -> HostTensor {
          const CudaTensor &t = unwrap(tensor);
          if (t.type.byteSize() != type.byteSize())
            throw CudaError(absl::StrCat("download: the tensor is ",
                                         t.type.str(), ", expected ",
                                         type.str()));
          std::shared_ptr<CudaStorage> keep;
          const void *src = t.data();
          if (!t.isContiguous()) {
            keep = allocate(std::max<int64_t>(t.type.byteSize(), 1));
            copyStrided(t.view(), denseView(keep->ptr, t.type), state.stream);
            src = keep->ptr;
          }
          if (host->byteSize() > 0)
            check(cudaMemcpyAsync(host->mutableBytes(), src, host->byteSize(),
                                  cudaMemcpyDeviceToHost, state.stream),
                  "copying from the GPU");
          check(cudaStreamSynchronize(state.stream), "copying from the GPU");
          return *host;
        },
        absl::StrCat("downloading a ", type.str(), " tensor"));
  }

  absl::StatusOr<TensorHandle> zeros(const TensorType &type) override {
    return guarded<TensorHandle>(
        [&] {
          auto t = std::make_shared<CudaTensor>(
              allocate(std::max<int64_t>(type.byteSize(), 1)), 0, type);
          check(cudaMemsetAsync(t->data(), 0, size_t(type.byteSize()),
                                state.stream),
                "zeros");
          return TensorHandle(std::move(t));
        },
        absl::StrCat("a ", type.str(), " tensor of zeros"));
  }

  absl::StatusOr<TensorHandle> convert(const DeviceTensor &tensor,
                                       DType to) override {
    const CudaTensor &from = unwrap(tensor);
    return guarded<TensorHandle>(
        [&] {
          TensorType type{to, from.type.shape};
          auto t = std::make_shared<CudaTensor>(
              allocate(std::max<int64_t>(type.byteSize(), 1)), 0, type);
          copyStrided(from.view(), t->view(), state.stream);
          return TensorHandle(std::move(t));
        },
        absl::StrCat("converting a tensor to ", dtypeName(to)));
  }

  absl::StatusOr<TensorHandle> allocateArena(int64_t bytes) override {
    if (!arena)
      return TensorHandle();
    return guarded<TensorHandle>(
        [&] {
          return TensorHandle(std::make_shared<CudaTensor>(
              allocate(std::max<int64_t>(bytes, 1)), 0,
              TensorType{DType::Bool, {bytes}}));
        },
        "the program's arena (its planned temporaries)");
  }

  absl::Status accumulate(DeviceTensor &into,
                          const DeviceTensor &addend) override {
    return guarded<bool>(
               [&] {
                 addInto(unwrap(into).view(), unwrap(addend).view(),
                         state.stream);
                 return true;
               },
               "accumulate")
        .status();
  }

  absl::Status scale(DeviceTensor &tensor, double factor) override {
    return guarded<bool>(
               [&] {
                 scaleInPlace(unwrap(tensor).view(), factor, state.stream);
                 return true;
               },
               "scale")
        .status();
  }

  absl::Status synchronize() override {
    if (cudaError_t s = cudaStreamSynchronize(state.stream); s != cudaSuccess)
      return absl::InternalError(
          absl::StrCat("a CUDA kernel failed: ", cudaMessage(s)));
    return absl::OkStatus();
  }

  absl::Status beginStep(const StepContext &step) override {
    state.dropoutKey =
        stepSeed(step.seed, step.globalStep, RandomStream::Dropout);
    state.dropoutOffset = 0;
    return absl::OkStatus();
  }

  absl::Status execute(KernelCall &call) override {
    const Instruction &inst = *call.instruction;
    Kernel kernel = kernelTable().find(inst.kind);
    if (!kernel)
      return absl::UnimplementedError(absl::StrCat(
          "the 'cuda' backend has no kernel for ", opFullName(inst.kind),
          isCollective(inst.kind) || inst.kind == OpKind::Wait
              ? " (the executor runs it through a communicator)"
              : ""));
    Ctx c{call, inst, inst.attrs, *call.program, state, {}, {}};
    c.out.resize(inst.results.size());
    try {
      kernel(c);
    } catch (const std::exception &e) {
      return absl::InvalidArgumentError(e.what());
    }
    call.results.resize(inst.results.size());
    for (size_t r = 0; r < inst.results.size(); ++r) {
      if (!c.out[r])
        return absl::InternalError(
            absl::StrCat("the CUDA kernel produced no result #", r));
      const CudaTensor &t = unwrap(*c.out[r]);
      if (t.type != c.resultType(r))
        return absl::InternalError(absl::StrCat(
            "the CUDA kernel produced ", t.type.str(), " for result #", r,
            ", expected ", c.resultType(r).str()));
      call.results[r] = std::move(c.out[r]);
    }
    return absl::OkStatus();
  }

  MemoryStats memoryStats() const override {
    return {counters->live.load(), counters->peak.load(), 0};
  }
  void resetPeak() override { counters->peak.store(counters->live.load()); }

private:
  struct Counters {
    std::atomic<int64_t> live{0};
    std::atomic<int64_t> peak{0};
  };

  std::shared_ptr<CudaStorage> allocate(int64_t bytes) {
    return allocate(bytes, state.stream);
  }
  std::shared_ptr<CudaStorage> allocate(int64_t bytes, cudaStream_t on) {
    void *ptr = nullptr;
    cudaError_t s = cudaMallocAsync(&ptr, size_t(bytes), on);
    if (s != cudaSuccess) {
      cudaGetLastError(); // clear the sticky-free error state
      size_t freeBytes = 0, totalBytes = 0;
      cudaMemGetInfo(&freeBytes, &totalBytes);
      throw CudaError(absl::StrFormat(
          "cannot allocate %d bytes on GPU %d (%s): %d of %d bytes free, %d "
          "held by this run",
          bytes, state.device, cudaGetErrorString(s), int64_t(freeBytes),
          int64_t(totalBytes), counters->live.load()));
    }
    int64_t live = counters->live.fetch_add(bytes) + bytes;
    int64_t peak = counters->peak.load();
    while (live > peak && !counters->peak.compare_exchange_weak(peak, live)) {
    }
    auto storage = std::make_shared<CudaStorage>();
    storage->ptr = ptr;
    storage->bytes = bytes;
    cudaStream_t stream = state.stream;
    storage->release = [counters = counters, destroyed = destroyed,
                        stream](void *p, int64_t n) {
      counters->live.fetch_sub(n);
      if (!destroyed->load())
        cudaFreeAsync(p, stream);
    };
    return storage;
  }

  /// Runs `make` and turns a `CudaError` (a failed launch, no memory) into
  /// a status naming `what`.
  template <typename T, typename F>
  static absl::StatusOr<T> guarded(F make, const std::string &what) {
    try {
      return make();
    } catch (const CudaError &e) {
      std::string text = e.what();
      if (text.find("cannot allocate") != std::string::npos)
        return absl::ResourceExhaustedError(absl::StrCat(what, ": ", text));
      return absl::InternalError(absl::StrCat(what, ": ", text));
    } catch (const std::exception &e) {
      return absl::InternalError(absl::StrCat(what, ": ", e.what()));
    }
  }

  DeviceState state;
  bool arena;
  std::shared_ptr<Counters> counters = std::make_shared<Counters>();
  std::shared_ptr<std::atomic<bool>> destroyed =
      std::make_shared<std::atomic<bool>>(false);
};

} // namespace

DeviceState *deviceStateOf(Backend &backend) {
  if (backend.name() != "cuda")
    return nullptr;
  return &static_cast<CudaBackend &>(backend).deviceState();
}

} // namespace merak::runtime::cuda

namespace merak::runtime {

bool cudaDeviceAvailable(std::string *why) {
  absl::StatusOr<int> device = cuda::chooseDevice(CudaBackendOptions{});
  if (!device.ok() && why)
    *why = std::string(device.status().message());
  return device.ok();
}

absl::StatusOr<std::unique_ptr<Backend>>
createCudaBackend(const CudaBackendOptions &options) {
  absl::StatusOr<int> device = cuda::chooseDevice(options);
  if (!device.ok())
    return device.status();
  auto backend = std::make_unique<cuda::CudaBackend>(*device, options);
  if (absl::Status s = backend->start(); !s.ok())
    return s;
  return std::unique_ptr<Backend>(std::move(backend));
}

std::string cudaDescription() {
  int runtime = 0, driver = 0;
  cudaRuntimeGetVersion(&runtime);
  cudaDriverGetVersion(&driver);
  const cuda::CublasLt &lt = cuda::CublasLt::get();
  std::string text = absl::StrFormat(
      "CUDA runtime %d.%d, driver %d.%d, cuBLASLt %s, cuDNN %d", runtime / 1000,
      (runtime % 1000) / 10, driver / 1000, (driver % 1000) / 10,
      lt.error.empty() ? std::to_string(lt.getVersion()) : "not found",
      int(cudnnGetVersion()));
  int device = 0;
  cudaDeviceProp prop;
  if (cudaGetDevice(&device) == cudaSuccess &&
      cudaGetDeviceProperties(&prop, device) == cudaSuccess)
    absl::StrAppendFormat(&text, "; GPU %d: %s (sm_%d%d, %d SMs, %.1f GiB)",
                          device, prop.name, prop.major, prop.minor,
                          prop.multiProcessorCount,
                          double(prop.totalGlobalMem) / (1 << 30));
  return text;
}

} // namespace merak::runtime
