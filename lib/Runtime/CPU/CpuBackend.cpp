//===- CpuBackend.cpp - the CPU backend: every merak op on ATen -----------===//
//
// The `Backend` that runs each instruction by its kind's kernel in the
// kernel table (the family files register them; see CpuKernels.h for their
// numerics), with ATen's CPU allocations counted and a program's results
// placed in its arena.
//
//===----------------------------------------------------------------------===//

#include "Allocator.h"
#include "CpuKernels.h"
#include "merak/Runtime/Fusion.h"
#include "merak/Runtime/Random.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

#include <ATen/CPUGeneratorImpl.h>

#include <cstring>
#include <optional>
#include <stdexcept>

namespace merak::runtime::cpu {

const KernelTable &kernelTable() {
  static const KernelTable table = [] {
    KernelTable t("CPU");
    registerElementwiseKernels(t);
    registerLinearAlgebraKernels(t);
    registerAttentionKernels(t);
    registerNormalizationKernels(t);
    registerShapeKernels(t);
    registerReductionKernels(t);
    registerConvolutionKernels(t);
    registerLossKernels(t);
    registerOptimizerKernels(t);
    return t;
  }();
  return table;
}

namespace {

/// The first line of an ATen error, without its C++ backtrace.
std::string firstLine(const std::string &text) {
  return text.substr(0, text.find('\n'));
}

class CpuBackend final : public Backend {
public:
  explicit CpuBackend(const CpuBackendOptions &options) : arena(options.arena) {
    if (options.threads > 0)
      at::set_num_threads(options.threads);
    configureGemms(options.gemm, options.oneThreadPool);
    generator = at::make_generator<at::CPUGeneratorImpl>(0);
  }

  std::string name() const override { return "cpu"; }
  // Collectives and waits have no kernel: the executor runs them through
  // a communicator.
  bool supports(OpKind kind) const override {
    return kernelTable().find(kind) != nullptr;
  }

  absl::StatusOr<TensorHandle> upload(const HostTensor &host) override {
    return guarded<TensorHandle>(
        [&] {
          at::Tensor t =
              at::empty(host.type.shape, optionsFor(host.type.dtype));
          if (host.byteSize() > 0)
            std::memcpy(t.data_ptr(), host.data, host.byteSize());
          return TensorHandle(std::make_shared<CpuTensor>(std::move(t)));
        },
        host.type.byteSize(), absl::StrCat("a ", host.type.str(), " tensor"));
  }

  absl::StatusOr<HostTensor> download(const DeviceTensor &tensor,
                                      const TensorType &type) override {
    absl::StatusOr<HostTensor> host =
        HostTensor::tryAllocate(type, "a tensor read back from the backend");
    if (!host.ok())
      return host.status();
    return guarded<HostTensor>(
        [&]() -> absl::StatusOr<HostTensor> {
          at::Tensor t = unwrap(tensor).contiguous();
          if (size_t(t.nbytes()) != host->byteSize())
            return absl::InternalError(
                absl::StrCat("download: tensor has ", t.nbytes(),
                             " bytes, expected ", type.str()));
          if (host->byteSize() > 0)
            std::memcpy(host->mutableBytes(), t.data_ptr(), host->byteSize());
          return *host;
        },
        type.byteSize(), absl::StrCat("a ", type.str(), " tensor"));
  }

  absl::StatusOr<TensorHandle> zeros(const TensorType &type) override {
    return guarded<TensorHandle>(
        [&] {
          return TensorHandle(std::make_shared<CpuTensor>(
              at::zeros(type.shape, optionsFor(type.dtype))));
        },
        type.byteSize(), absl::StrCat("a ", type.str(), " tensor"));
  }

  absl::StatusOr<TensorHandle> convert(const DeviceTensor &tensor,
                                       DType to) override {
    const at::Tensor &from = unwrap(tensor);
    return guarded<TensorHandle>(
        [&] {
          return TensorHandle(std::make_shared<CpuTensor>(from.to(toAten(to))));
        },
        from.numel() * int64_t(dtypeSize(to)),
        absl::StrCat("a tensor converted to ", dtypeName(to)));
  }

  absl::StatusOr<TensorHandle> allocateArena(int64_t bytes) override {
    if (!arena)
      return TensorHandle();
    return guarded<TensorHandle>(
        [&] {
          return TensorHandle(
              std::make_shared<CpuTensor>(at::empty({bytes}, at::kByte)));
        },
        bytes, "the program's arena (its planned temporaries)");
  }

  absl::Status accumulate(DeviceTensor &into,
                          const DeviceTensor &addend) override {
    c10::InferenceMode guard;
    try {
      const_cast<at::Tensor &>(unwrap(into)).add_(unwrap(addend));
    } catch (const std::exception &e) {
      return absl::InternalError(std::string("accumulate: ") + e.what());
    }
    return absl::OkStatus();
  }

  absl::Status scale(DeviceTensor &tensor, double factor) override {
    c10::InferenceMode guard;
    try {
      const_cast<at::Tensor &>(unwrap(tensor)).mul_(factor);
    } catch (const std::exception &e) {
      return absl::InternalError(std::string("scale: ") + e.what());
    }
    return absl::OkStatus();
  }

  absl::Status beginStep(const StepContext &step) override {
    generator = at::make_generator<at::CPUGeneratorImpl>(
        stepSeed(step.seed, step.globalStep, RandomStream::Dropout));
    return absl::OkStatus();
  }

  absl::Status execute(KernelCall &call) override {
    c10::InferenceMode guard;
    const Instruction &inst = *call.instruction;
    Kernel kernel = kernelTable().find(inst.kind);
    if (!kernel)
      return absl::UnimplementedError(absl::StrCat(
          "the 'cpu' backend has no kernel for ", opFullName(inst.kind),
          isCollective(inst.kind) || inst.kind == OpKind::Wait
              ? " (the executor runs it through a communicator)"
              : ""));
    Ctx c{call, inst, inst.attrs, *call.program, generator, {}};
    c.out.resize(inst.results.size());
    try {
      try {
        if (std::optional<DType> compute =
                foldedComputeType(*call.program, inst)) {
          // Casts folded into the op (Fusion.h): it computes in `compute`.
          CastFolding f = castFolding(inst.kind);
          runWidened(kernel, call, inst, c,
                     [&](size_t k) -> std::optional<DType> {
                       if (k < 32 && (f.operands >> k & 1))
                         return *compute;
                       return std::nullopt;
                     });
        } else {
          ArenaScope slots(call, inst);
          kernel(c);
        }
      } catch (const c10::Error &e) {
        // ATen's CPU kernels of some ops (the matrix products among them)
        // take no float16: those compute in float32 and round once, as a
        // GPU accumulates float16 products in float32.
        if (!isHalfUnimplemented(e))
          throw;
        computeInFloat32(kernel, call, inst, c);
      }
    } catch (const c10::Error &e) {
      return absl::InvalidArgumentError(firstLine(e.what_without_backtrace()));
    } catch (const std::exception &e) {
      return absl::InvalidArgumentError(firstLine(e.what()));
    }
    call.results.resize(inst.results.size());
    for (size_t r = 0; r < inst.results.size(); ++r) {
      at::Tensor &t = c.out[r];
      const TensorType &type = c.resultType(r);
      if (!t.defined())
        return absl::InternalError(
            absl::StrCat("the CPU kernel produced no result #", r));
      std::optional<DType> dtype = fromAten(t.scalar_type());
      if (!dtype || *dtype != type.dtype ||
          !std::equal(t.sizes().begin(), t.sizes().end(), type.shape.begin(),
                      type.shape.end()))
        return absl::InternalError(absl::StrCat("the CPU kernel produced ",
                                                toString(t), " for result #", r,
                                                ", expected ", type.str()));
      // The plan assumes a fresh result owns its storage; an ATen shortcut
      // that returns an operand (or a view of one) would break in-place reuse.
      if (inst.storage[r].kind == ResultStorage::Kind::Fresh)
        for (DeviceTensor *operand : call.operands)
          if (operand && t.is_alias_of(unwrap(*operand))) {
            t = t.clone();
            break;
          }
      call.results[r] = std::make_shared<CpuTensor>(std::move(t));
    }
    return absl::OkStatus();
  }

  static bool isHalfUnimplemented(const c10::Error &e) {
    return absl::StrContains(e.what_without_backtrace(),
                             "not implemented for 'Half'");
  }

  /// Runs `kernel` on float32 copies of the float16 operands, then rounds
  /// its float16 results into the planned storage.
  void computeInFloat32(Kernel &kernel, KernelCall &call,
                        const Instruction &inst, Ctx &c) {
    runWidened(kernel, call, inst, c, [&](size_t k) -> std::optional<DType> {
      if (call.operands[k] &&
          unwrap(*call.operands[k]).scalar_type() == at::kHalf)
        return DType::F32;
      return std::nullopt;
    });
  }

  /// Runs `kernel` on copies of the operands that `widen(k)` gives a type
  /// (outside the arena: they are not the planned sizes), then rounds each
  /// floating result it computed in another type than the planned one into
  /// the planned storage.
  template <typename Widen>
  void runWidened(Kernel &kernel, KernelCall &call, const Instruction &inst,
                  Ctx &c, Widen widen) {
    KernelCall wide = call;
    std::vector<CpuTensor> widened;
    widened.reserve(call.operands.size());
    for (size_t k = 0; k < wide.operands.size(); ++k) {
      DeviceTensor *&operand = wide.operands[k];
      if (!operand)
        continue;
      if (std::optional<DType> to = widen(k);
          to && unwrap(*operand).scalar_type() != toAten(*to)) {
        widened.emplace_back(unwrap(*operand).to(toAten(*to)));
        operand = &widened.back();
      }
    }
    std::fill(wide.inPlace.begin(), wide.inPlace.end(), nullptr);
    Ctx w{wide, inst, inst.attrs, *call.program, generator, {}};
    w.out.resize(inst.results.size());
    kernel(w);
    ArenaScope slots(call, inst);
    for (size_t r = 0; r < inst.results.size(); ++r) {
      at::ScalarType planned = toAten(c.resultType(r).dtype);
      c.out[r] = w.out[r].defined() && w.out[r].is_floating_point() &&
                         at::isFloatingType(planned) &&
                         w.out[r].scalar_type() != planned
                     ? w.out[r].to(planned)
                     : w.out[r];
    }
  }

  MemoryStats memoryStats() const override { return allocationStats(); }

  void resetPeak() override { resetAllocationPeak(); }

private:
  /// Runs `make` (which allocates `bytes` for `what`) and turns ATen's
  /// errors and a failed allocation into a Status.
  template <typename T, typename F>
  static absl::StatusOr<T> guarded(F make, int64_t bytes,
                                   const std::string &what) {
    c10::InferenceMode guard;
    auto outOfMemory = [&](const std::string &detail) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "cannot allocate ", bytes, " bytes for ", what, ": ", detail));
    };
    try {
      return make();
    } catch (const std::bad_alloc &) {
      return outOfMemory("out of memory");
    } catch (const c10::Error &e) {
      std::string text = firstLine(e.what_without_backtrace());
      if (text.find("allocate") != std::string::npos)
        return outOfMemory(text);
      return absl::InternalError(absl::StrCat(what, ": ", text));
    } catch (const std::exception &e) {
      return absl::InternalError(absl::StrCat(what, ": ", firstLine(e.what())));
    }
  }

  static std::string toString(const at::Tensor &t) {
    std::string s;
    for (int64_t d : t.sizes())
      s += std::to_string(d) + "x";
    std::optional<DType> dtype = fromAten(t.scalar_type());
    return s + (dtype ? dtypeName(*dtype) : c10::toString(t.scalar_type()));
  }

  at::Generator generator;
  bool arena;
};

} // namespace
} // namespace merak::runtime::cpu

namespace merak::runtime {

std::unique_ptr<Backend> createCpuBackend(const CpuBackendOptions &options) {
  cpu::installCountingAllocator();
  return std::make_unique<cpu::CpuBackend>(options);
}

} // namespace merak::runtime
