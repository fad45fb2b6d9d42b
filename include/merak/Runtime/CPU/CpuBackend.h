//===- CpuBackend.h - the CPU backend: ATen kernels ------------*- C++ -*-===//
#ifndef MERAK_RUNTIME_CPU_CPUBACKEND_H
#define MERAK_RUNTIME_CPU_CPUBACKEND_H

#include "merak/Runtime/Backend.h"

#include <cstdint>
#include <memory>
#include <string>

namespace merak::runtime {

/// The library float32 matrix products run on.
enum class GemmLibrary {
  /// oneDNN's sgemm: JIT kernels for the widest vector instructions the CPU
  /// has (AVX-512 where present). Results agree with PyTorch's to rounding,
  /// not bit for bit: the kernels add the products in their own order.
  OneDnn,
  /// The BLAS ATen calls (`libblas.so.3`, OpenBLAS here): the GEMMs
  /// PyTorch's eager mode runs, bit for bit.
  Blas,
};

struct CpuBackendOptions {
  /// Intra-op threads (at::set_num_threads); 0 keeps ATen's default.
  int threads = 0;
  /// Place the fresh results the plan gives an arena offset in one block
  /// allocated once (false: every result from the allocator).
  bool arena = true;
  /// Run GEMMs on ATen's intra-op threads, each thread calling a
  /// single-threaded BLAS on its own block of rows, instead of letting a
  /// multithreaded BLAS start a second pool of threads that competes with
  /// ATen's for the same cores. Takes effect where the BLAS lets its thread
  /// count be set (OpenBLAS); elsewhere GEMMs call the BLAS as ATen does.
  bool oneThreadPool = true;
  GemmLibrary gemm = GemmLibrary::OneDnn;
};

/// Kernels on ATen, with PyTorch's numerics. Memory statistics count every
/// allocation of ATen's CPU allocator in the process.
std::unique_ptr<Backend> createCpuBackend(const CpuBackendOptions &options);

/// GEMMs of this process so far that ran as more than one block on the
/// kernels' threads (`CpuBackendOptions::oneThreadPool`).
int64_t gemmsSplitOverThreads();

/// Calls of masked_attention and its backward in this process so far that
/// found a causal mask and ran by blocks of rows.
int64_t causalAttentionCalls();

/// Matrix products (or stacks of them) of this process so far that ran on
/// oneDNN's sgemm (`GemmLibrary::OneDnn`) rather than on ATen.
int64_t oneDnnGemmCalls();

/// The GEMM libraries and how GEMMs use them, for reports: "oneDNN 2.6.3
/// sgemm for float32 (AVX-512 kernels), the BLAS for the rest: OpenBLAS
/// ...", or "OpenBLAS 0.3.21 ... (Haswell kernels); GEMMs split over the
/// kernels' threads".
std::string blasDescription();

} // namespace merak::runtime

#endif // MERAK_RUNTIME_CPU_CPUBACKEND_H
