//===- GemmLayout.h - how sgemm reads a strided matrix ----------*- C++ -*-===//
//
// oneDNN's sgemm takes row-major matrices, each either as it is ('N') or
// transposed ('T'), with a leading dimension: the distance between rows of
// the stored matrix. A strided view (a transpose, a narrow) can be read in
// place when one of its dimensions is unit-stride; this header decides how,
// without ATen, so the rule is unit-tested on its own.
//
//===----------------------------------------------------------------------===//

#ifndef MERAK_LIB_RUNTIME_CPU_GEMMLAYOUT_H
#define MERAK_LIB_RUNTIME_CPU_GEMMLAYOUT_H

#include <cstdint>
#include <optional>

namespace merak::runtime {

/// How sgemm reads a `rows x cols` matrix: 'N' with row `i` at `i * ld`,
/// or 'T' (the transpose of a `cols x rows` row-major matrix) with column
/// `j` at `j * ld`.
struct GemmLayout {
  char trans;
  int64_t ld;
};

/// The layout of a `rows x cols` matrix whose element `(i, j)` is at
/// `i * rowStride + j * colStride`, or none where sgemm cannot read it in
/// place (a broadcast dimension of stride 0 with more than one element,
/// strides in both dimensions, overlapping rows). Sizes are positive. A
/// dimension of size 1 has no stride that matters: the leading dimension
/// then is the other size, the smallest sgemm accepts.
inline std::optional<GemmLayout>
gemmLayout(int64_t rows, int64_t cols, int64_t rowStride, int64_t colStride) {
  if ((cols == 1 || colStride == 1) && (rows == 1 || rowStride >= cols))
    return GemmLayout{'N', rows == 1 ? cols : rowStride};
  if ((rows == 1 || rowStride == 1) && (cols == 1 || colStride >= rows))
    return GemmLayout{'T', cols == 1 ? rows : colStride};
  return std::nullopt;
}

} // namespace merak::runtime

#endif // MERAK_LIB_RUNTIME_CPU_GEMMLAYOUT_H
