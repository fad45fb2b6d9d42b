//===- CublasLt.h - cuBLASLt's functions, opened on first use ---*- C++ -*-===//
//
// The matrix products' library (Gemm.cu), opened when the CUDA backend
// starts rather than linked into every process (DynamicLibrary.h).
//
//===----------------------------------------------------------------------===//
#ifndef MERAK_LIB_RUNTIME_CUDA_CUBLASLT_H
#define MERAK_LIB_RUNTIME_CUDA_CUBLASLT_H

#include <cublasLt.h>

#include <string>

namespace merak::runtime::cuda {

/// The cuBLASLt functions the backend calls.
struct CublasLt {
  /// Why the library could not be used; empty where every function is
  /// bound.
  std::string error;
  decltype(&::cublasLtGetVersion) getVersion = nullptr;
  decltype(&::cublasLtCreate) create = nullptr;
  decltype(&::cublasLtDestroy) destroy = nullptr;
  decltype(&::cublasLtMatmulDescCreate) matmulDescCreate = nullptr;
  decltype(&::cublasLtMatmulDescDestroy) matmulDescDestroy = nullptr;
  decltype(&::cublasLtMatmulDescSetAttribute) matmulDescSetAttribute = nullptr;
  decltype(&::cublasLtMatrixLayoutCreate) matrixLayoutCreate = nullptr;
  decltype(&::cublasLtMatrixLayoutDestroy) matrixLayoutDestroy = nullptr;
  decltype(&::cublasLtMatrixLayoutSetAttribute) matrixLayoutSetAttribute =
      nullptr;
  decltype(&::cublasLtMatmulPreferenceCreate) preferenceCreate = nullptr;
  decltype(&::cublasLtMatmulPreferenceDestroy) preferenceDestroy = nullptr;
  decltype(&::cublasLtMatmulPreferenceSetAttribute) preferenceSetAttribute =
      nullptr;
  decltype(&::cublasLtMatmulAlgoGetHeuristic) algoGetHeuristic = nullptr;
  decltype(&::cublasLtMatmul) matmul = nullptr;

  /// The library, opened by the first call (libcublasLt.so of the
  /// toolkit's major version first).
  static const CublasLt &get();
};

} // namespace merak::runtime::cuda

#endif // MERAK_LIB_RUNTIME_CUDA_CUBLASLT_H
