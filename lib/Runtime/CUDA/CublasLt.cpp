//===- CublasLt.cpp - cuBLASLt's functions, opened on first use -----------===//

#include "CublasLt.h"
#include "DynamicLibrary.h"

namespace merak::runtime::cuda {
namespace {

CublasLt open() {
  CublasLt lt;
  std::string why;
  void *handle = openFirstLibrary(
      {"libcublasLt.so.13", "libcublasLt.so.12", "libcublasLt.so"}, why);
  if (!handle) {
    lt.error = "cannot open cuBLASLt (libcublasLt.so.13, from the CUDA "
               "toolkit), which the CUDA backend's matrix products call: " +
               why;
    return lt;
  }
  bool ok =
      bindSymbol(handle, lt.getVersion, "cublasLtGetVersion") &&
      bindSymbol(handle, lt.create, "cublasLtCreate") &&
      bindSymbol(handle, lt.destroy, "cublasLtDestroy") &&
      bindSymbol(handle, lt.matmulDescCreate, "cublasLtMatmulDescCreate") &&
      bindSymbol(handle, lt.matmulDescDestroy, "cublasLtMatmulDescDestroy") &&
      bindSymbol(handle, lt.matmulDescSetAttribute,
                 "cublasLtMatmulDescSetAttribute") &&
      bindSymbol(handle, lt.matrixLayoutCreate, "cublasLtMatrixLayoutCreate") &&
      bindSymbol(handle, lt.matrixLayoutDestroy,
                 "cublasLtMatrixLayoutDestroy") &&
      bindSymbol(handle, lt.matrixLayoutSetAttribute,
                 "cublasLtMatrixLayoutSetAttribute") &&
      bindSymbol(handle, lt.preferenceCreate,
                 "cublasLtMatmulPreferenceCreate") &&
      bindSymbol(handle, lt.preferenceDestroy,
                 "cublasLtMatmulPreferenceDestroy") &&
      bindSymbol(handle, lt.preferenceSetAttribute,
                 "cublasLtMatmulPreferenceSetAttribute") &&
      bindSymbol(handle, lt.algoGetHeuristic,
                 "cublasLtMatmulAlgoGetHeuristic") &&
      bindSymbol(handle, lt.matmul, "cublasLtMatmul");
  if (!ok)
    lt.error = "the cuBLASLt library lacks a function the backend calls";
  return lt;
}

} // namespace

const CublasLt &CublasLt::get() {
  static const CublasLt lt = open();
  return lt;
}

} // namespace merak::runtime::cuda
