//===- FusedHost.h - fused kernels' CUDA source run on the host -*- C++ -*-===//
//
// A check without a GPU of what the fused-kernel generator writes: the
// CUDA source of a chain (`fusedKernelSource`) compiled by the host's C++
// compiler ($CXX, else c++) against DeviceMath.h, which the host compiler,
// nvcc and NVRTC all read, with contraction off as NVRTC compiles it, and
// run on the CPU with the launch parameters the CUDA backend makes
// (`fusedParams`): one thread runs the grid-stride loop. A backend whose
// tensors are host memory (the CPU backend) wrapped by
// `makeHostFusedBackend` runs each `fused` chain so, every other operand
// of rank 2 handed over transposed so that the strided offsets run too,
// and draws a training step's dropout masks as the CUDA backend does
// (Philox counters keyed by the step), fused or not, so that a chain with
// dropout is checked against the unfused dropout kernel's masks. Used by the
// unit tests and `merak-kernel-check --fused-chains`.
//
//===----------------------------------------------------------------------===//

#ifndef MERAK_RUNTIME_CUDA_FUSEDHOST_H
#define MERAK_RUNTIME_CUDA_FUSEDHOST_H

#include "merak/Runtime/Backend.h"
#include "merak/Runtime/Program.h"

#include "absl/status/statusor.h"

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace merak::runtime {

/// The chains' kernels, compiled for the host into one shared object.
class HostFusedKernels {
public:
  ~HostFusedKernels();
  /// Compiles `sources` in `directory` (which must exist); an error
  /// carries the compiler's messages.
  static absl::StatusOr<std::unique_ptr<HostFusedKernels>>
  compile(const std::vector<std::string> &sources,
          const std::string &directory);

  /// Runs the kernel of `source` with `params` (a cuda::FusedParams, as
  /// the CUDA backend launches it: views of host memory).
  absl::Status run(const std::string &source, const void *params) const;

private:
  HostFusedKernels() = default;
  void *handle = nullptr;
  std::map<std::string, void *> kernels;
};

/// `host` (a backend of host memory) with every `fused` chain run as its
/// kernel from `kernels` (an optimizer group is an error), and a training
/// step's `dropout` and `dropout_mask` drawn as the CUDA backend draws
/// them.
std::unique_ptr<Backend> makeHostFusedBackend(std::unique_ptr<Backend> host,
                                              const HostFusedKernels &kernels);

/// The distinct sources of the chains of `program` (bound, fused).
std::vector<std::string> fusedSources(const Program &program);

/// Whether result `a` and `b` (the generated kernel's and the ops') of
/// `type` agree: float32 within the last bits in which the host's math
/// library and the CPU backend's vectorized functions differ (1e-5
/// absolute plus 1e-4 relative: a chain carries them on), bf16 and f16
/// within one rounding step, other types exactly; `why` says where not.
bool fusedResultsAgree(const HostTensor &a, const HostTensor &b,
                       std::string &why);

/// Each distinct chain of `program` (bound to its rank, fused) run alone:
/// its members on `makeHost()` and its kernel on the same wrapped by
/// `makeHostFusedBackend`, on random operands (floats from a normal
/// distribution, booleans and small integers), compiled in `directory`.
/// Per chain: its ops and, where they disagree, why; an error where
/// something cannot run.
struct FusedChainCheck {
  std::string ops;
  std::string mismatch; // empty: every result agrees
};
absl::StatusOr<std::vector<FusedChainCheck>> checkFusedChainsOnHost(
    const Program &program,
    const std::function<std::unique_ptr<Backend>()> &makeHost,
    const std::string &directory);

} // namespace merak::runtime

#endif // MERAK_RUNTIME_CUDA_FUSEDHOST_H
