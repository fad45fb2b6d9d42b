//===- CudaBackend.h - the CUDA backend: kernels on an NVIDIA GPU -*- C++
//-*-===//
//
// Built where the CUDA toolkit is (MERAK_CUDA_BACKEND): every op runs as
// this project's kernels, GEMMs on cuBLASLt and convolutions on cuDNN, on
// one stream of one GPU; memory comes from CUDA's stream-ordered pool,
// which keeps what it has (no allocator calls once the first step has
// run), and a program's temporaries live in its arena. See
// docs/runtime.md, "The CUDA backend".
//
//===----------------------------------------------------------------------===//
#ifndef MERAK_RUNTIME_CUDA_CUDABACKEND_H
#define MERAK_RUNTIME_CUDA_CUDABACKEND_H

#include "merak/Runtime/Backend.h"

#include "absl/status/statusor.h"

#include <memory>
#include <string>

namespace merak::runtime {

struct CudaBackendOptions {
  /// The GPU: -1 takes `LOCAL_RANK` (0 without it) modulo the devices.
  int device = -1;
  /// Place the fresh results the plan gives an arena offset in one block
  /// allocated once.
  bool arena = true;
  /// TF32 tensor cores for float32 GEMMs (PyTorch's
  /// `allow_tf32`); off by default, as PyTorch's matmul default is.
  bool tf32 = false;
  /// Stage a large GEMM matrix whose rows are not 16 bytes apart through
  /// an aligned copy (`--gemm-staging`, lib/Runtime/CUDA/Gemm.h).
  bool gemmStaging = true;
  /// The FlashAttention form's bf16 and f16 kernels keep their tiles in
  /// registers (`--flash-kernels=registers`), or run the WMMA kernels
  /// (`wmma`); lib/Runtime/CUDA/FlashAttention.h.
  bool flashRegisterTiles = true;
};

/// The backend on the chosen GPU, or an error saying why there is none (no
/// driver, no device, a device index out of range).
absl::StatusOr<std::unique_ptr<Backend>>
createCudaBackend(const CudaBackendOptions &options);

/// Whether a CUDA device can be used; `why` says why not.
bool cudaDeviceAvailable(std::string *why = nullptr);

/// The GPU and library versions, for --profile and reports.
std::string cudaDescription();

} // namespace merak::runtime

#endif // MERAK_RUNTIME_CUDA_CUDABACKEND_H
