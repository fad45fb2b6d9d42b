//===- Tensor.h - element types, tensor types and host tensors --*- C++ -*-===//
//
// The runtime's vocabulary for tensors without any backend: an element type,
// a static shape, and `HostTensor`, contiguous little-endian bytes in host
// memory (what files hold and what crosses into a backend).
//
//===----------------------------------------------------------------------===//

#ifndef MERAK_RUNTIME_TENSOR_H
#define MERAK_RUNTIME_TENSOR_H

#include "absl/status/statusor.h"

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace merak::runtime {

/// Element types of the merak dialect (i1 is stored as one byte).
enum class DType : uint8_t { F16, BF16, F32, F64, Bool, I32, I64 };

size_t dtypeSize(DType dtype);
bool isFloat(DType dtype);
bool isInteger(DType dtype); // i32 and i64, not i1
/// The MLIR spelling: f16, bf16, f32, f64, i1, i32, i64.
const char *dtypeName(DType dtype);
/// The safetensors spelling: F16, BF16, F32, F64, BOOL, I32, I64.
const char *safetensorsDTypeName(DType dtype);
std::optional<DType> parseSafetensorsDType(const std::string &name);

/// A static tensor type.
struct TensorType {
  DType dtype = DType::F32;
  std::vector<int64_t> shape;

  /// The element count and size in bytes. Both saturate at INT64_MAX
  /// instead of overflowing; a shape read from a file or an option is
  /// checked with `checkedByteSize` first.
  int64_t numElements() const;
  int64_t byteSize() const;
  /// MLIR-like spelling, `2x3xf32` (`f32` for rank 0).
  std::string str() const;
  bool operator==(const TensorType &other) const {
    return dtype == other.dtype && shape == other.shape;
  }
  bool operator!=(const TensorType &other) const { return !(*this == other); }
};

/// The size in bytes of `type`, or an error saying what is wrong with its
/// shape: a negative dimension, or an element count or byte size that does
/// not fit in 64 bits. For shapes that come from files and options.
absl::StatusOr<int64_t> checkedByteSize(const TensorType &type);

/// `a * b` for non-negative sizes, or nullopt when it overflows int64.
std::optional<int64_t> checkedMul(int64_t a, int64_t b);
/// `a + b` for non-negative sizes, or nullopt when it overflows int64.
std::optional<int64_t> checkedAdd(int64_t a, int64_t b);

/// Contiguous row-major little-endian bytes in host memory. Copies share the
/// bytes; `owner` keeps them alive (an allocation or a mapped file).
struct HostTensor {
  TensorType type;
  const void *data = nullptr;
  std::shared_ptr<const void> owner;

  /// A zero-filled tensor that owns its bytes.
  static HostTensor allocate(TensorType type);
  /// `allocate`, or a ResourceExhausted error naming the bytes requested
  /// and `what` they are for when the memory is not there.
  static absl::StatusOr<HostTensor> tryAllocate(TensorType type,
                                                const std::string &what);
  /// A rank-0 tensor holding `value` converted to `dtype`.
  static HostTensor scalar(DType dtype, double value);

  size_t byteSize() const { return type.byteSize(); }
  /// Writable bytes; only for tensors made by `allocate`.
  uint8_t *mutableBytes() const {
    return static_cast<uint8_t *>(const_cast<void *>(data));
  }
  const uint8_t *bytes() const { return static_cast<const uint8_t *>(data); }
  /// Element `i` converted to double (for scalars, logs and tests).
  double elementAsDouble(int64_t i) const;
};

/// Converts `value` to a float of `dtype` and back, as bits: f16 and bf16
/// round to nearest even.
uint16_t floatToHalfBits(float value);
uint16_t floatToBFloat16Bits(float value);
float halfBitsToFloat(uint16_t bits);
float bfloat16BitsToFloat(uint16_t bits);

/// The index of the first NaN or infinite element of a floating tensor, or
/// -1 (always -1 for other types).
int64_t firstNonFinite(const HostTensor &tensor);

} // namespace merak::runtime

#endif // MERAK_RUNTIME_TENSOR_H
