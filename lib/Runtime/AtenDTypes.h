//===- AtenDTypes.h - runtime dtypes <-> ATen scalar types ------*- C++ -*-===//
//
// Internal to the runtime's LibTorch translation units (the CPU kernels and
// the TorchScript loader).
//
//===----------------------------------------------------------------------===//
#ifndef MERAK_LIB_RUNTIME_ATENDTYPES_H
#define MERAK_LIB_RUNTIME_ATENDTYPES_H

#include "merak/Runtime/Tensor.h"

#include <c10/core/ScalarType.h>

#include <optional>

namespace merak::runtime {

inline at::ScalarType toAten(DType dtype) {
  switch (dtype) {
  case DType::F16:
    return at::kHalf;
  case DType::BF16:
    return at::kBFloat16;
  case DType::F32:
    return at::kFloat;
  case DType::F64:
    return at::kDouble;
  case DType::Bool:
    return at::kBool;
  case DType::I32:
    return at::kInt;
  case DType::I64:
    return at::kLong;
  }
  return at::kFloat;
}

/// The runtime element type of an ATen scalar type; none for types the
/// runtime does not have (uint8, complex, ...).
inline std::optional<DType> fromAten(at::ScalarType t) {
  switch (t) {
  case at::kHalf:
    return DType::F16;
  case at::kBFloat16:
    return DType::BF16;
  case at::kFloat:
    return DType::F32;
  case at::kDouble:
    return DType::F64;
  case at::kBool:
    return DType::Bool;
  case at::kInt:
    return DType::I32;
  case at::kLong:
    return DType::I64;
  default:
    return std::nullopt;
  }
}

} // namespace merak::runtime

#endif // MERAK_LIB_RUNTIME_ATENDTYPES_H
