//===- Tensor.cpp - element types, tensor types and host tensors ----------===//

#include "merak/Runtime/Tensor.h"

#include "absl/strings/str_cat.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <new>
#include <sstream>

namespace merak::runtime {

size_t dtypeSize(DType dtype) {
  switch (dtype) {
  case DType::F16:
  case DType::BF16:
    return 2;
  case DType::F32:
  case DType::I32:
    return 4;
  case DType::F64:
  case DType::I64:
    return 8;
  case DType::Bool:
    return 1;
  }
  return 0;
}

bool isFloat(DType dtype) {
  return dtype == DType::F16 || dtype == DType::BF16 || dtype == DType::F32 ||
         dtype == DType::F64;
}

bool isInteger(DType dtype) {
  return dtype == DType::I32 || dtype == DType::I64;
}

const char *dtypeName(DType dtype) {
  switch (dtype) {
  case DType::F16:
    return "f16";
  case DType::BF16:
    return "bf16";
  case DType::F32:
    return "f32";
  case DType::F64:
    return "f64";
  case DType::Bool:
    return "i1";
  case DType::I32:
    return "i32";
  case DType::I64:
    return "i64";
  }
  return "?";
}

const char *safetensorsDTypeName(DType dtype) {
  switch (dtype) {
  case DType::F16:
    return "F16";
  case DType::BF16:
    return "BF16";
  case DType::F32:
    return "F32";
  case DType::F64:
    return "F64";
  case DType::Bool:
    return "BOOL";
  case DType::I32:
    return "I32";
  case DType::I64:
    return "I64";
  }
  return "?";
}

std::optional<DType> parseSafetensorsDType(const std::string &name) {
  for (DType d : {DType::F16, DType::BF16, DType::F32, DType::F64, DType::Bool,
                  DType::I32, DType::I64})
    if (name == safetensorsDTypeName(d))
      return d;
  return std::nullopt;
}

std::optional<int64_t> checkedMul(int64_t a, int64_t b) {
  int64_t r;
  if (a < 0 || b < 0 || __builtin_mul_overflow(a, b, &r))
    return std::nullopt;
  return r;
}

std::optional<int64_t> checkedAdd(int64_t a, int64_t b) {
  int64_t r;
  if (a < 0 || b < 0 || __builtin_add_overflow(a, b, &r))
    return std::nullopt;
  return r;
}

int64_t TensorType::numElements() const {
  int64_t n = 1;
  for (int64_t d : shape) {
    if (__builtin_mul_overflow(n, d, &n))
      return std::numeric_limits<int64_t>::max();
  }
  return n;
}

int64_t TensorType::byteSize() const {
  int64_t bytes;
  if (__builtin_mul_overflow(numElements(), int64_t(dtypeSize(dtype)), &bytes))
    return std::numeric_limits<int64_t>::max();
  return bytes;
}

absl::StatusOr<int64_t> checkedByteSize(const TensorType &type) {
  for (size_t d = 0; d < type.shape.size(); ++d)
    if (type.shape[d] < 0)
      return absl::InvalidArgumentError(absl::StrCat(
          "dimension ", d, " of its shape is negative (", type.shape[d], ")"));
  std::optional<int64_t> bytes = int64_t(dtypeSize(type.dtype));
  for (int64_t d : type.shape)
    bytes = bytes ? checkedMul(*bytes, d) : std::nullopt;
  // A zero dimension makes an empty tensor whatever the others are.
  if (std::find(type.shape.begin(), type.shape.end(), 0) != type.shape.end())
    return 0;
  if (!bytes)
    return absl::InvalidArgumentError(
        absl::StrCat("its shape ", type.str(),
                     " has more bytes than a 64-bit size can count"));
  return *bytes;
}

std::string TensorType::str() const {
  std::ostringstream os;
  for (int64_t d : shape)
    os << d << 'x';
  os << dtypeName(dtype);
  return os.str();
}

namespace {

/// `bytes` zeroed bytes and one more (which keeps the pointer valid for
/// empty tensors), or null when the memory is not there. Not a bad_alloc to
/// catch: AddressSanitizer's throwing new aborts where it fails, while its
/// nothrow new returns null as in every other build.
std::shared_ptr<uint8_t[]> zeroedBytes(size_t bytes) {
  return std::shared_ptr<uint8_t[]>(new (std::nothrow) uint8_t[bytes + 1]());
}

HostTensor adopt(TensorType type, std::shared_ptr<uint8_t[]> storage) {
  HostTensor t;
  t.type = std::move(type);
  t.data = storage.get();
  t.owner = std::shared_ptr<const void>(storage, storage.get());
  return t;
}

} // namespace

absl::StatusOr<HostTensor> HostTensor::tryAllocate(TensorType type,
                                                   const std::string &what) {
  absl::StatusOr<int64_t> bytes = checkedByteSize(type);
  if (!bytes.ok())
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": ", bytes.status().message()));
  std::shared_ptr<uint8_t[]> storage = zeroedBytes(*bytes);
  if (!storage)
    return absl::ResourceExhaustedError(
        absl::StrCat("cannot allocate ", *bytes, " bytes for ", what, " (",
                     type.str(), "): out of memory"));
  return adopt(std::move(type), std::move(storage));
}

HostTensor HostTensor::allocate(TensorType type) {
  std::shared_ptr<uint8_t[]> storage = zeroedBytes(type.byteSize());
  if (!storage)
    throw std::bad_alloc();
  return adopt(std::move(type), std::move(storage));
}

uint16_t floatToHalfBits(float value) {
  uint32_t x;
  std::memcpy(&x, &value, 4);
  uint32_t sign = (x >> 16) & 0x8000;
  int32_t exp = int32_t((x >> 23) & 0xff) - 127 + 15;
  uint32_t mant = x & 0x7fffff;
  if (((x >> 23) & 0xff) == 0xff) // inf or nan
    return uint16_t(sign | 0x7c00 | (mant ? 0x200 : 0));
  if (exp >= 31)
    return uint16_t(sign | 0x7c00);
  if (exp <= 0) {
    if (exp < -10)
      return uint16_t(sign);
    mant |= 0x800000;
    uint32_t shift = uint32_t(14 - exp);
    uint32_t half = mant >> shift;
    uint32_t rest = mant & ((1u << shift) - 1);
    uint32_t midpoint = 1u << (shift - 1);
    if (rest > midpoint || (rest == midpoint && (half & 1)))
      ++half;
    return uint16_t(sign | half);
  }
  uint32_t half = (uint32_t(exp) << 10) | (mant >> 13);
  uint32_t rest = mant & 0x1fff;
  if (rest > 0x1000 || (rest == 0x1000 && (half & 1)))
    ++half; // may carry into the exponent, which is the right rounding
  return uint16_t(sign | half);
}

float halfBitsToFloat(uint16_t bits) {
  uint32_t sign = uint32_t(bits & 0x8000) << 16;
  uint32_t exp = (bits >> 10) & 0x1f;
  uint32_t mant = bits & 0x3ff;
  uint32_t x;
  if (exp == 0) {
    if (mant == 0) {
      x = sign;
    } else {
      int e = -1;
      do {
        ++e;
        mant <<= 1;
      } while (!(mant & 0x400));
      x = sign | (uint32_t(127 - 15 - e) << 23) | ((mant & 0x3ff) << 13);
    }
  } else if (exp == 31) {
    x = sign | 0x7f800000 | (mant << 13);
  } else {
    x = sign | ((exp + 127 - 15) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &x, 4);
  return f;
}

uint16_t floatToBFloat16Bits(float value) {
  uint32_t x;
  std::memcpy(&x, &value, 4);
  if ((x & 0x7fffffff) > 0x7f800000)
    return uint16_t((x >> 16) | 0x40); // quiet nan
  uint32_t rounding = 0x7fff + ((x >> 16) & 1);
  return uint16_t((x + rounding) >> 16);
}

float bfloat16BitsToFloat(uint16_t bits) {
  uint32_t x = uint32_t(bits) << 16;
  float f;
  std::memcpy(&f, &x, 4);
  return f;
}

HostTensor HostTensor::scalar(DType dtype, double value) {
  HostTensor t = allocate(TensorType{dtype, {}});
  uint8_t *p = t.mutableBytes();
  switch (dtype) {
  case DType::F16: {
    uint16_t bits = floatToHalfBits(float(value));
    std::memcpy(p, &bits, 2);
    break;
  }
  case DType::BF16: {
    uint16_t bits = floatToBFloat16Bits(float(value));
    std::memcpy(p, &bits, 2);
    break;
  }
  case DType::F32: {
    float f = float(value);
    std::memcpy(p, &f, 4);
    break;
  }
  case DType::F64:
    std::memcpy(p, &value, 8);
    break;
  case DType::Bool:
    *p = value != 0;
    break;
  case DType::I32: {
    int32_t i = int32_t(value);
    std::memcpy(p, &i, 4);
    break;
  }
  case DType::I64: {
    int64_t i = int64_t(value);
    std::memcpy(p, &i, 8);
    break;
  }
  }
  return t;
}

double HostTensor::elementAsDouble(int64_t i) const {
  const uint8_t *p = bytes() + i * dtypeSize(type.dtype);
  switch (type.dtype) {
  case DType::F16: {
    uint16_t bits;
    std::memcpy(&bits, p, 2);
    return halfBitsToFloat(bits);
  }
  case DType::BF16: {
    uint16_t bits;
    std::memcpy(&bits, p, 2);
    return bfloat16BitsToFloat(bits);
  }
  case DType::F32: {
    float f;
    std::memcpy(&f, p, 4);
    return f;
  }
  case DType::F64: {
    double d;
    std::memcpy(&d, p, 8);
    return d;
  }
  case DType::Bool:
    return *p ? 1 : 0;
  case DType::I32: {
    int32_t v;
    std::memcpy(&v, p, 4);
    return v;
  }
  case DType::I64: {
    int64_t v;
    std::memcpy(&v, p, 8);
    return double(v);
  }
  }
  return 0;
}

int64_t firstNonFinite(const HostTensor &tensor) {
  const int64_t n = tensor.type.numElements();
  const uint8_t *bytes = tensor.bytes();
  // NaN and the infinities are the values whose exponent bits are all set.
  auto scan16 = [&](uint16_t exponent) -> int64_t {
    for (int64_t i = 0; i < n; ++i) {
      uint16_t bits;
      std::memcpy(&bits, bytes + 2 * i, 2);
      if ((bits & exponent) == exponent)
        return i;
    }
    return -1;
  };
  switch (tensor.type.dtype) {
  case DType::F16:
    return scan16(0x7c00);
  case DType::BF16:
    return scan16(0x7f80);
  case DType::F32:
    for (int64_t i = 0; i < n; ++i) {
      float v;
      std::memcpy(&v, bytes + 4 * i, 4);
      if (!std::isfinite(v))
        return i;
    }
    return -1;
  case DType::F64:
    for (int64_t i = 0; i < n; ++i) {
      double v;
      std::memcpy(&v, bytes + 8 * i, 8);
      if (!std::isfinite(v))
        return i;
    }
    return -1;
  default:
    return -1;
  }
}

} // namespace merak::runtime
