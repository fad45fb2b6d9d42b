//===- Emulator.h - the CUDA emulator's runtime state ----------*- C++ -*-===//
//
// What the emulator's threads (Threads.cpp) and its CUDA runtime
// (Runtime.cpp) share: the error state a launch leaves, as the CUDA
// runtime keeps it.
//
//===----------------------------------------------------------------------===//
#ifndef MERAK_LIB_RUNTIME_CUDA_EMULATION_EMULATOR_H
#define MERAK_LIB_RUNTIME_CUDA_EMULATION_EMULATOR_H

#include <cuda_runtime.h>

#include <cstddef>
#include <string>

namespace merak::runtime::cuda::emulation {

/// The most dynamic shared memory a block may have (an H100's 227 KiB).
constexpr size_t kMaxSharedBytes = size_t(227) << 10;

/// A launch refused for its configuration: `cudaGetLastError` reports it
/// once, as CUDA does.
void recordLaunchError(cudaError_t error, const std::string &message);
/// A kernel that failed while it ran (a trap, threads at different
/// barriers): every later call fails with it, as after a GPU fault.
void recordKernelFailure(const std::string &message);
/// False after a kernel failed (launches do nothing then).
bool launchesAllowed();

} // namespace merak::runtime::cuda::emulation

#endif // MERAK_LIB_RUNTIME_CUDA_EMULATION_EMULATOR_H
