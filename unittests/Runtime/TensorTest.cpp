//===- TensorTest.cpp - sizes of tensor types, checked and saturating -----===//

#include "merak/Runtime/Tensor.h"

#include "gtest/gtest.h"

#include <cstring>
#include <limits>

using namespace merak::runtime;

namespace {

constexpr int64_t kMax = std::numeric_limits<int64_t>::max();

TEST(TensorTest, CheckedByteSizeCountsOrSaysWhatIsWrong) {
  EXPECT_EQ(*checkedByteSize({DType::F32, {2, 3}}), 24);
  EXPECT_EQ(*checkedByteSize({DType::I64, {}}), 8);
  // A zero dimension empties the tensor whatever the others are.
  EXPECT_EQ(*checkedByteSize({DType::F32, {0, kMax}}), 0);

  absl::StatusOr<int64_t> negative = checkedByteSize({DType::F32, {2, -3}});
  ASSERT_FALSE(negative.ok());
  EXPECT_EQ(negative.status().message(),
            "dimension 1 of its shape is negative (-3)");

  // 2^60 x 2 x 16 f32 is 2^67 bytes, which wraps to 0 in 64 bits.
  absl::StatusOr<int64_t> wraps =
      checkedByteSize({DType::F32, {int64_t(1) << 60, 2, 16}});
  ASSERT_FALSE(wraps.ok());
  EXPECT_EQ(wraps.status().message(),
            "its shape 1152921504606846976x2x16xf32 has more bytes than a "
            "64-bit size can count");
  // The elements fit, their bytes do not.
  EXPECT_FALSE(checkedByteSize({DType::F64, {int64_t(1) << 61}}).ok());
  EXPECT_EQ(*checkedByteSize({DType::Bool, {int64_t(1) << 62}}), int64_t(1)
                                                                     << 62);
}

TEST(TensorTest, SizesSaturateInsteadOfOverflowing) {
  TensorType huge{DType::F32, {int64_t(1) << 40, int64_t(1) << 40}};
  EXPECT_EQ(huge.numElements(), kMax);
  EXPECT_EQ(huge.byteSize(), kMax);
  TensorType bytes{DType::F64, {int64_t(1) << 61}};
  EXPECT_EQ(bytes.numElements(), int64_t(1) << 61);
  EXPECT_EQ(bytes.byteSize(), kMax);
}

TEST(TensorTest, CheckedArithmetic) {
  EXPECT_EQ(checkedMul(3, 4), 12);
  EXPECT_EQ(checkedMul(kMax, 2), std::nullopt);
  EXPECT_EQ(checkedMul(-1, 2), std::nullopt);
  EXPECT_EQ(checkedAdd(kMax - 1, 1), kMax);
  EXPECT_EQ(checkedAdd(kMax, 1), std::nullopt);
  EXPECT_EQ(checkedAdd(1, -1), std::nullopt);
}

TEST(TensorTest, TryAllocateNamesTheBytesAndWhatFor) {
  absl::StatusOr<HostTensor> small =
      HostTensor::tryAllocate({DType::F32, {2, 2}}, "input 'x'");
  ASSERT_TRUE(small.ok());
  EXPECT_EQ(small->byteSize(), 16u);

  // 2^62 bytes: more than any address space holds.
  absl::StatusOr<HostTensor> huge = HostTensor::tryAllocate(
      {DType::F32, {int64_t(1) << 30, int64_t(1) << 30}}, "input 'x'");
  ASSERT_FALSE(huge.ok());
  EXPECT_EQ(huge.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(huge.status().message(),
            "cannot allocate 4611686018427387904 bytes for input 'x' "
            "(1073741824x1073741824xf32): out of memory");

  absl::StatusOr<HostTensor> wraps = HostTensor::tryAllocate(
      {DType::F32, {int64_t(1) << 60, 2, 16}}, "input 'x'");
  ASSERT_FALSE(wraps.ok());
  EXPECT_NE(wraps.status().message().find(
                "input 'x': its shape 1152921504606846976x2x16xf32 has more "
                "bytes than a 64-bit size can count"),
            std::string::npos)
      << wraps.status();
}

TEST(TensorTest, FirstNonFiniteFindsNaNAndInfinityInEveryFloatType) {
  auto withValue = [](DType dtype, int64_t at, double value) {
    HostTensor t = HostTensor::allocate({dtype, {5}});
    for (int64_t i = 0; i < 5; ++i) {
      double v = i == at ? value : 1.5 * double(i) - 2;
      uint8_t *p = t.mutableBytes() + i * int64_t(dtypeSize(dtype));
      if (dtype == DType::F32) {
        float f = float(v);
        std::memcpy(p, &f, 4);
      } else if (dtype == DType::F64) {
        std::memcpy(p, &v, 8);
      } else {
        uint16_t bits = dtype == DType::F16 ? floatToHalfBits(float(v))
                                            : floatToBFloat16Bits(float(v));
        std::memcpy(p, &bits, 2);
      }
    }
    return t;
  };
  const double inf = std::numeric_limits<double>::infinity();
  const double nan = std::numeric_limits<double>::quiet_NaN();
  for (DType dtype : {DType::F16, DType::BF16, DType::F32, DType::F64}) {
    SCOPED_TRACE(dtypeName(dtype));
    EXPECT_EQ(firstNonFinite(withValue(dtype, -1, 0)), -1);
    EXPECT_EQ(firstNonFinite(withValue(dtype, 3, nan)), 3);
    EXPECT_EQ(firstNonFinite(withValue(dtype, 0, inf)), 0);
    EXPECT_EQ(firstNonFinite(withValue(dtype, 4, -inf)), 4);
  }
  // The largest finite values are finite.
  EXPECT_EQ(firstNonFinite(withValue(DType::F16, 2, 65504.0)), -1);
  EXPECT_EQ(firstNonFinite(withValue(DType::F32, 2, 3.0e38)), -1);
  // Integers and booleans have no non-finite values.
  HostTensor ints = HostTensor::allocate({DType::I32, {2}});
  std::memset(ints.mutableBytes(), 0xff, ints.byteSize());
  EXPECT_EQ(firstNonFinite(ints), -1);
}

} // namespace
