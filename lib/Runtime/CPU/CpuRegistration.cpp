//===- CpuRegistration.cpp - the CPU backend under the name "cpu" ---------===//

#include "merak/Runtime/CPU/CpuBackend.h"
#include "merak/Runtime/Registry.h"

#include "absl/strings/str_cat.h"

namespace merak::runtime {

namespace {

absl::StatusOr<std::unique_ptr<Backend>>
createFromSettings(const DeviceOptions &options) {
  CpuBackendOptions cpu;
  cpu.threads = options.threads;
  cpu.arena = options.arena;
  for (const auto &[key, value] : options.settings) {
    if (key == "gemm") {
      if (value == "onednn")
        cpu.gemm = GemmLibrary::OneDnn;
      else if (value == "blas")
        cpu.gemm = GemmLibrary::Blas;
      else
        return absl::InvalidArgumentError(
            absl::StrCat("--gemm must be onednn or blas, not '", value, "'"));
    } else if (key == "blas-threads") {
      cpu.oneThreadPool = value != "1";
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat("the cpu backend has no setting '", key, "'"));
    }
  }
  return createCpuBackend(cpu);
}

std::string libraries() {
  std::string text = absl::StrCat(
      "  GEMMs: ", blasDescription(), "; ", oneDnnGemmCalls(), " on oneDNN, ",
      gemmsSplitOverThreads(), " split over threads\n");
  if (int64_t causal = causalAttentionCalls())
    absl::StrAppend(&text, "  attention by causal blocks: ", causal,
                    " calls\n");
  return text;
}

} // namespace

void registerCpuBackend() {
  registerBackend({"cpu",
                   "ATen kernels, float32 GEMMs on oneDNN or the BLAS, "
                   "PyTorch's numerics",
                   createFromSettings, libraries});
}

} // namespace merak::runtime
