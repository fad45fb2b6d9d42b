//===- CudaRegistration.cpp - the CUDA backend under the name "cuda" ------===//

#include "FusedKernels.h"
#include "merak/Runtime/CUDA/CudaBackend.h"
#include "merak/Runtime/CUDA/IpcLink.h"
#include "merak/Runtime/Registry.h"

#include "absl/strings/str_cat.h"

namespace merak::runtime {

namespace {

absl::StatusOr<std::unique_ptr<Backend>>
createFromSettings(const DeviceOptions &options) {
  CudaBackendOptions cuda;
  cuda.arena = options.arena;
  for (const auto &[key, value] : options.settings) {
    if (key == "tf32") {
      if (value != "0" && value != "1")
        return absl::InvalidArgumentError(
            absl::StrCat("--tf32 must be 0 or 1, not '", value, "'"));
      cuda.tf32 = value == "1";
    } else if (key == "gemm-staging") {
      if (value != "0" && value != "1")
        return absl::InvalidArgumentError(
            absl::StrCat("--gemm-staging must be 0 or 1, not '", value, "'"));
      cuda.gemmStaging = value == "1";
    } else if (key == "flash-kernels") {
      if (value != "registers" && value != "wmma")
        return absl::InvalidArgumentError(absl::StrCat(
            "--flash-kernels must be registers or wmma, not '", value, "'"));
      cuda.flashRegisterTiles = value == "registers";
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat("the cuda backend has no setting '", key, "'"));
    }
  }
  return createCudaBackend(cuda);
}

} // namespace

void registerCudaBackend() {
  registerBackend({"cuda",
                   "this project's CUDA kernels, GEMMs on cuBLASLt, "
                   "convolutions on cuDNN, one GPU per rank (LOCAL_RANK)",
                   createFromSettings,
                   [] { return "  " + cudaDescription() + "\n"; },
                   cudaDeviceAvailable, cuda::nvrtcAvailable,
                   cuda::compileAndKeepFusedKernel, createIpcPeerLink});
}

} // namespace merak::runtime
