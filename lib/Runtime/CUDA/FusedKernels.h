//===- FusedKernels.h - fused elementwise chains compiled by NVRTC -*- C++
//-*-===//
//
// A `fused` instruction (merak/Runtime/Fusion.h) runs its chain as one
// kernel whose source `fusedKernelSource` writes. NVRTC compiles that
// source for the GPU's architecture the first time a chain with it runs,
// with DeviceMath.h (embedded in the backend at build time) as its one
// header; chains with the same source share the compiled kernel, and the
// machine code is kept on disk for later runs (KernelCache.h). NVRTC
// (libnvrtc, part of the CUDA toolkit) is opened when first needed, so a
// machine that never fuses does not need it.
//
//===----------------------------------------------------------------------===//
#ifndef MERAK_LIB_RUNTIME_CUDA_FUSEDKERNELS_H
#define MERAK_LIB_RUNTIME_CUDA_FUSEDKERNELS_H

#include "absl/status/statusor.h"

#include <string>

namespace merak::runtime::cuda {

/// `source` compiled by NVRTC for `arch` ("sm_90"): the machine code (a
/// cubin), or an error with NVRTC's log. Needs no GPU.
absl::StatusOr<std::string> compileFusedKernel(const std::string &source,
                                               const std::string &arch);

/// What identifies `source` compiled for `arch` by this NVRTC with this
/// backend's header and options: the key of its kept machine code
/// (KernelCache.h).
std::string fusedKernelKey(const std::string &source, const std::string &arch);

/// `compileFusedKernel`, the code then kept on disk for later runs
/// (`--compile-fused-kernels` fills the cache this way, no GPU needed).
absl::StatusOr<std::string> compileAndKeepFusedKernel(const std::string &source,
                                                      const std::string &arch);

/// DeviceMath.h's text, the one header of every fused kernel's source.
const char *deviceMathSource();

/// Whether NVRTC can be opened (fused kernels can be compiled here).
bool nvrtcAvailable();

/// What NVRTC says of itself: "NVRTC 13.0", or why it cannot be opened.
std::string nvrtcDescription();

} // namespace merak::runtime::cuda

#endif // MERAK_LIB_RUNTIME_CUDA_FUSEDKERNELS_H
