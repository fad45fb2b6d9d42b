//===- FlashAttention.cu - tiled masked attention kernels -----------------===//
//
// The kernels of FlashAttention.h. Every product and sum runs in the
// accumulation type (float for bf16 and f16) in a fixed order: a lane
// sums a dot product over the head dimension in order, a warp combines
// its lanes by an xor butterfly (the same value in every lane), and each
// output element is summed by one lane over the tiles in order.
//
//===----------------------------------------------------------------------===//

#include "FlashAttention.h"

#include <mma.h>

#include <string>
#include <type_traits>

namespace merak::runtime::cuda {
namespace {

template <typename A> __device__ A warpMax(A v) {
  for (int offset = 16; offset > 0; offset /= 2) {
    A other = __shfl_xor_sync(0xffffffffu, v, offset);
    v = other > v ? other : v;
  }
  return v;
}

template <typename A> __device__ A warpSum(A v) {
  for (int offset = 16; offset > 0; offset /= 2)
    v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

/// A masked score: `false` masks, a float mask adds.
template <typename A> MERAK_DEVICE A flashMask(A s, bool m) {
  return m ? s : A(-INFINITY);
}
template <typename A, typename T> MERAK_DEVICE A flashMask(A s, T m) {
  return s + A(toAcc(m));
}

/// Whether a tile of query rows [i0, i0 + Rows) and keys [j0, j0 + Keys)
/// of stack `b` has a score the mask lets through (inside the sequence):
/// the block's threads share the tile's mask entries and vote. A tile with
/// none (above a causal mask's diagonal, a padded stretch) contributes
/// nothing and is skipped. Every thread of the block must call it (a
/// barrier).
template <int Rows = kFlashRows, int Keys = kFlashKeys, typename M>
__device__ bool tileVisible(const M *mask, const int64_t *maskRow,
                            int64_t colStride, int64_t t, int64_t i0,
                            int64_t j0) {
  int visible = 0;
  for (int idx = threadIdx.x; idx < Rows * Keys && !visible;
       idx += blockDim.x) {
    int r = idx / Keys;
    int64_t key = j0 + idx % Keys;
    if (i0 + r < t && key < t)
      visible = !flashMaskedOut(mask[maskRow[r] + key * colStride]);
  }
  return __syncthreads_or(visible) != 0;
}

/// Where the mask's rows of query rows [i0, i0 + Rows) of stack `b` start,
/// into shared `maskRow` (computed once per tile: a row's offset takes a
/// division per dimension). Visible after the next barrier.
template <int Rows = kFlashRows>
MERAK_DEVICE void loadMaskRows(int64_t *maskRow, const MaskRows &maskRows,
                               int64_t b, int64_t t, int64_t i0) {
  for (int r = threadIdx.x; r < Rows; r += blockDim.x)
    maskRow[r] = i0 + r < t ? maskRows.rows.offsetOf(b * t + i0 + r) : 0;
}

/// Rows [0, rows) of a `cols`-wide dense tile starting at `src` into
/// shared `dst` (row pitch `pitch`), converted to the accumulation type;
/// rows at or beyond `available` are zero.
template <typename A, typename T>
__device__ void loadTile(A *dst, const T *src, int64_t available, int rows,
                         int cols, int pitch) {
  for (int idx = threadIdx.x; idx < rows * cols; idx += blockDim.x) {
    int r = idx / cols, c = idx % cols;
    dst[r * pitch + c] =
        r < available ? A(toAcc(src[int64_t(r) * cols + c])) : A(0);
  }
}

/// The dot product of shared rows `a` and `b` over `n` elements.
template <typename A> MERAK_DEVICE A dotRow(const A *a, const A *b, int n) {
  A sum = 0;
  for (int x = 0; x < n; ++x)
    sum += a[x] * b[x];
  return sum;
}

/// Per-lane sums of a warp's rows (or keys): element j of row rr is head
/// dimension `lane + 32 j` (below `n`).
template <typename A> using WarpRows = A[kFlashRowsPerWarp][kFlashDimsPerLane];

/// `acc[rr] += sum_c w(r, c) * tile[c]` for the warp's rows (or keys) r
/// of a tile, `w(r, c)` at `w[r * wr + c * wc]` (a transposed read with
/// `wr = 1`), `tile` `count` rows of pitch `pitch`, over dimensions below
/// `n`; c in order.
template <typename A>
MERAK_DEVICE void accumulateRows(WarpRows<A> &acc, const A *w, int wr, int wc,
                                 const A *tile, int pitch, int count, int n,
                                 int warp, int lane) {
#pragma unroll
  for (int rr = 0; rr < kFlashRowsPerWarp; ++rr) {
    int r = warp * kFlashRowsPerWarp + rr;
    for (int c = 0; c < count; ++c) {
      A weight = w[r * wr + c * wc];
#pragma unroll
      for (int j = 0; j < kFlashDimsPerLane; ++j) {
        int x = lane + 32 * j;
        if (x < n)
          acc[rr][j] += weight * tile[c * pitch + x];
      }
    }
  }
}

/// Writes the warp's rows of `acc`, each divided by `divisor[rr]`, to rows
/// `first + warp * kFlashRowsPerWarp + rr` (those below `t`) of the dense
/// `[t, n]` matrix at `dst`.
template <typename T, typename A>
MERAK_DEVICE void storeRows(T *dst, const WarpRows<A> &acc, const A *divisor,
                            int64_t first, int64_t t, int n, int warp,
                            int lane) {
#pragma unroll
  for (int rr = 0; rr < kFlashRowsPerWarp; ++rr) {
    int64_t row = first + warp * kFlashRowsPerWarp + rr;
    if (row >= t)
      continue;
#pragma unroll
    for (int j = 0; j < kFlashDimsPerLane; ++j) {
      int x = lane + 32 * j;
      if (x < n)
        dst[row * n + x] = convertTo<T>(acc[rr][j] / divisor[rr]);
    }
  }
}

/// The stack a block works on (grid y, then z beyond 65535).
MERAK_DEVICE int64_t flashStack() {
  return int64_t(blockIdx.y) + int64_t(blockIdx.z) * gridDim.y;
}

/// The scaled, masked score of a query row whose mask row starts at
/// `maskRow` and key `key`, from their dot product.
template <typename A, typename M>
MERAK_DEVICE A flashScore(A dot, const M *mask, int64_t maskRow,
                          int64_t colStride, int64_t key, A scale,
                          bool divide) {
  A s = divide ? dot / scale : dot * scale;
  return flashMask(s, mask[maskRow + key * colStride]);
}

template <typename T, typename M>
__global__ void __launch_bounds__(kFlashThreads)
    flashForwardKernel(const T *q, const T *k, const T *v, const M *mask,
                       MaskRows maskRows, T *out, float *lse, int64_t n,
                       int64_t t, int d, int e, Acc<T> scale, bool divide) {
  using A = Acc<T>;
  extern __shared__ __align__(16) unsigned char flashShared[];
  const int pd = int(flashPitch(d)), pe = int(flashPitch(e)),
            pk = int(flashPitch(kFlashKeys));
  A *qs = reinterpret_cast<A *>(flashShared);
  A *ks = qs + kFlashRows * pd;
  A *vs = ks + kFlashKeys * pd;
  A *ps = vs + kFlashKeys * pe;
  int64_t b = flashStack();
  if (b >= n)
    return;
  int64_t i0 = int64_t(blockIdx.x) * kFlashRows;
  int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const T *qb = q + b * t * d, *kb = k + b * t * d, *vb = v + b * t * e;
  loadTile(qs, qb + i0 * d, t - i0, kFlashRows, d, pd);
  __shared__ int64_t maskRow[kFlashRows];
  loadMaskRows(maskRow, maskRows, b, t, i0);
  const int64_t colStride = maskRows.colStride;
  __syncthreads();

  OnlineSoftmax<A> row[kFlashRowsPerWarp];
  A acc[kFlashRowsPerWarp][kFlashDimsPerLane];
#pragma unroll
  for (int rr = 0; rr < kFlashRowsPerWarp; ++rr)
#pragma unroll
    for (int j = 0; j < kFlashDimsPerLane; ++j)
      acc[rr][j] = 0;

  for (int64_t j0 = 0; j0 < t; j0 += kFlashKeys) {
    // (A barrier: the last tile's keys and values are read.)
    if (!tileVisible(mask, maskRow, colStride, t, i0, j0))
      continue;
    loadTile(ks, kb + j0 * d, t - j0, kFlashKeys, d, pd);
    loadTile(vs, vb + j0 * e, t - j0, kFlashKeys, e, pe);
    __syncthreads();
    int64_t key = j0 + lane;
#pragma unroll
    for (int rr = 0; rr < kFlashRowsPerWarp; ++rr) {
      int r = warp * kFlashRowsPerWarp + rr;
      int64_t i = i0 + r;
      A s = A(-INFINITY);
      if (key < t && i < t)
        s = flashScore(dotRow(qs + r * pd, ks + lane * pd, d), mask, maskRow[r],
                       colStride, key, scale, divide);
      A factor = row[rr].absorb(warpMax(s));
      A p = row[rr].weight(s);
      row[rr].add(warpSum(p));
      ps[r * pk + lane] = p;
#pragma unroll
      for (int j = 0; j < kFlashDimsPerLane; ++j)
        acc[rr][j] *= factor;
    }
    __syncwarp();
    accumulateRows(acc, ps, pk, 1, vs, pe, kFlashKeys, e, warp, lane);
  }
  // A fully masked row: 0 / 0, NaN, as PyTorch's softmax gives.
  A sums[kFlashRowsPerWarp];
#pragma unroll
  for (int rr = 0; rr < kFlashRowsPerWarp; ++rr)
    sums[rr] = row[rr].l;
  storeRows(out + b * t * e, acc, sums, i0, t, e, warp, lane);
#pragma unroll
  for (int rr = 0; rr < kFlashRowsPerWarp; ++rr) {
    int64_t i = i0 + warp * kFlashRowsPerWarp + rr;
    if (i < t && lane == 0)
      lse[b * t + i] = float(row[rr].logSumExp());
  }
}

/// `sums[row] = sum(grad[row] * out[row])` over the `e` values of each of
/// `rows` rows: the softmax backward's row sums. A warp per row.
template <typename T>
__global__ void flashRowSumsKernel(const T *grad, const T *out, float *sums,
                                   int64_t rows, int e) {
  using A = Acc<T>;
  int lane = threadIdx.x % 32;
  int64_t warps = int64_t(gridDim.x) * (blockDim.x / 32);
  for (int64_t row = int64_t(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
       row < rows; row += warps) {
    A sum = 0;
    for (int x = lane; x < e; x += 32)
      sum += A(toAcc(grad[row * e + x])) * A(toAcc(out[row * e + x]));
    sum = warpSum(sum);
    if (lane == 0)
      sums[row] = float(sum);
  }
}

/// The probability and the scaled score gradient of query row `r` (shared
/// tiles `qs`, `gs`) and key `c` (tiles `ks`, `vs`), 0 outside the
/// sequence.
template <typename A, typename M>
MERAK_DEVICE void
flashGradTerms(const A *qs, const A *gs, const A *ks, const A *vs, int r, int c,
               int pd, int pe, int d, int e, int64_t i, int64_t key, int64_t t,
               const M *mask, int64_t maskRow, int64_t colStride, A rowLse,
               A rowSum, A scale, bool divide, A &p, A &ds) {
  p = 0;
  ds = 0;
  if (i >= t || key >= t)
    return;
  A s = flashScore(dotRow(qs + r * pd, ks + c * pd, d), mask, maskRow,
                   colStride, key, scale, divide);
  p = mathExp(s - rowLse);
  A dp = dotRow(gs + r * pe, vs + c * pe, e);
  A g = p * (dp - rowSum);
  ds = divide ? g / scale : g * scale;
}

/// Key and value gradients: a block per tile of keys, over every tile of
/// query rows.
template <typename T, typename M>
__global__ void __launch_bounds__(kFlashThreads)
    flashKeyValueGradKernel(const T *grad, const T *q, const T *k, const T *v,
                            const M *mask, MaskRows maskRows, const float *lse,
                            const float *rowSums, T *gk, T *gv, int64_t n,
                            int64_t t, int d, int e, Acc<T> scale,
                            bool divide) {
  using A = Acc<T>;
  extern __shared__ __align__(16) unsigned char flashShared[];
  const int pd = int(flashPitch(d)), pe = int(flashPitch(e)),
            pk = int(flashPitch(kFlashKeys));
  A *ks = reinterpret_cast<A *>(flashShared);
  A *vs = ks + kFlashKeys * pd;
  A *qs = vs + kFlashKeys * pe;
  A *gs = qs + kFlashRows * pd;
  A *ps = gs + kFlashRows * pe;
  A *dss = ps + kFlashRows * pk;
  A *lses = dss + kFlashRows * pk;
  A *sums = lses + kFlashRows;
  int64_t b = flashStack();
  if (b >= n)
    return;
  int64_t j0 = int64_t(blockIdx.x) * kFlashKeys;
  int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const T *qb = q + b * t * d, *kb = k + b * t * d, *vb = v + b * t * e,
          *gb = grad + b * t * e;
  loadTile(ks, kb + j0 * d, t - j0, kFlashKeys, d, pd);
  loadTile(vs, vb + j0 * e, t - j0, kFlashKeys, e, pe);

  A dk[kFlashRowsPerWarp][kFlashDimsPerLane];
  A dv[kFlashRowsPerWarp][kFlashDimsPerLane];
#pragma unroll
  for (int cc = 0; cc < kFlashRowsPerWarp; ++cc)
#pragma unroll
    for (int j = 0; j < kFlashDimsPerLane; ++j)
      dk[cc][j] = dv[cc][j] = 0;

  __shared__ int64_t maskRow[kFlashRows];
  const int64_t colStride = maskRows.colStride;
  int64_t key = j0 + lane;
  for (int64_t i0 = 0; i0 < t; i0 += kFlashRows) {
    // The last tile's scores are computed (a barrier followed them), and
    // its mask rows no longer read.
    loadMaskRows(maskRow, maskRows, b, t, i0);
    __syncthreads();
    // (A barrier: the last tile's rows are read.)
    if (!tileVisible(mask, maskRow, colStride, t, i0, j0))
      continue;
    loadTile(qs, qb + i0 * d, t - i0, kFlashRows, d, pd);
    loadTile(gs, gb + i0 * e, t - i0, kFlashRows, e, pe);
    for (int r = threadIdx.x; r < kFlashRows; r += blockDim.x) {
      bool inside = i0 + r < t;
      lses[r] = inside ? A(lse[b * t + i0 + r]) : A(0);
      sums[r] = inside ? A(rowSums[b * t + i0 + r]) : A(0);
    }
    __syncthreads();
    // A warp's rows against the tile's keys, a lane per key.
#pragma unroll
    for (int rr = 0; rr < kFlashRowsPerWarp; ++rr) {
      int r = warp * kFlashRowsPerWarp + rr;
      A p, ds;
      flashGradTerms(qs, gs, ks, vs, r, lane, pd, pe, d, e, i0 + r, key, t,
                     mask, maskRow[r], colStride, lses[r], sums[r], scale,
                     divide, p, ds);
      ps[r * pk + lane] = p;
      dss[r * pk + lane] = ds;
    }
    __syncthreads();
    // A warp's keys summed over the tile's rows (the probabilities and
    // score gradients read transposed), a lane per dimension.
    // (One pass for both: the probability and the score gradient of a
    // (row, key) are read once, and the two sums share the loop.)
#pragma unroll
    for (int cc = 0; cc < kFlashRowsPerWarp; ++cc) {
      int c = warp * kFlashRowsPerWarp + cc;
      for (int r = 0; r < kFlashRows; ++r) {
        A p = ps[r * pk + c], ds = dss[r * pk + c];
#pragma unroll
        for (int j = 0; j < kFlashDimsPerLane; ++j) {
          int x = lane + 32 * j;
          if (x < e)
            dv[cc][j] += p * gs[r * pe + x];
          if (x < d)
            dk[cc][j] += ds * qs[r * pd + x];
        }
      }
    }
  }
  A ones[kFlashRowsPerWarp];
#pragma unroll
  for (int cc = 0; cc < kFlashRowsPerWarp; ++cc)
    ones[cc] = 1;
  storeRows(gv + b * t * e, dv, ones, j0, t, e, warp, lane);
  storeRows(gk + b * t * d, dk, ones, j0, t, d, warp, lane);
}

/// Query gradients: a block per tile of query rows, over every tile of
/// keys.
template <typename T, typename M>
__global__ void __launch_bounds__(kFlashThreads)
    flashQueryGradKernel(const T *grad, const T *q, const T *k, const T *v,
                         const M *mask, MaskRows maskRows, const float *lse,
                         const float *rowSums, T *gq, int64_t n, int64_t t,
                         int d, int e, Acc<T> scale, bool divide) {
  using A = Acc<T>;
  extern __shared__ __align__(16) unsigned char flashShared[];
  const int pd = int(flashPitch(d)), pe = int(flashPitch(e)),
            pk = int(flashPitch(kFlashKeys));
  A *qs = reinterpret_cast<A *>(flashShared);
  A *gs = qs + kFlashRows * pd;
  A *ks = gs + kFlashRows * pe;
  A *vs = ks + kFlashKeys * pd;
  A *dss = vs + kFlashKeys * pe;
  int64_t b = flashStack();
  if (b >= n)
    return;
  int64_t i0 = int64_t(blockIdx.x) * kFlashRows;
  int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const T *qb = q + b * t * d, *kb = k + b * t * d, *vb = v + b * t * e,
          *gb = grad + b * t * e;
  loadTile(qs, qb + i0 * d, t - i0, kFlashRows, d, pd);
  loadTile(gs, gb + i0 * e, t - i0, kFlashRows, e, pe);
  __shared__ int64_t maskRow[kFlashRows];
  loadMaskRows(maskRow, maskRows, b, t, i0);
  const int64_t colStride = maskRows.colStride;
  __syncthreads();

  A rowLse[kFlashRowsPerWarp], rowSum[kFlashRowsPerWarp];
  A dq[kFlashRowsPerWarp][kFlashDimsPerLane];
#pragma unroll
  for (int rr = 0; rr < kFlashRowsPerWarp; ++rr) {
    int64_t i = i0 + warp * kFlashRowsPerWarp + rr;
    rowLse[rr] = i < t ? A(lse[b * t + i]) : A(0);
    rowSum[rr] = i < t ? A(rowSums[b * t + i]) : A(0);
#pragma unroll
    for (int j = 0; j < kFlashDimsPerLane; ++j)
      dq[rr][j] = 0;
  }

  for (int64_t j0 = 0; j0 < t; j0 += kFlashKeys) {
    // (A barrier: the last tile's keys and values are read.)
    if (!tileVisible(mask, maskRow, colStride, t, i0, j0))
      continue;
    loadTile(ks, kb + j0 * d, t - j0, kFlashKeys, d, pd);
    loadTile(vs, vb + j0 * e, t - j0, kFlashKeys, e, pe);
    __syncthreads();
    int64_t key = j0 + lane;
#pragma unroll
    for (int rr = 0; rr < kFlashRowsPerWarp; ++rr) {
      int r = warp * kFlashRowsPerWarp + rr;
      A p, ds;
      flashGradTerms(qs, gs, ks, vs, r, lane, pd, pe, d, e, i0 + r, key, t,
                     mask, maskRow[r], colStride, rowLse[rr], rowSum[rr], scale,
                     divide, p, ds);
      dss[r * pk + lane] = ds;
    }
    __syncwarp();
    accumulateRows(dq, dss, pk, 1, ks, pd, kFlashKeys, d, warp, lane);
  }
  A ones[kFlashRowsPerWarp];
#pragma unroll
  for (int rr = 0; rr < kFlashRowsPerWarp; ++rr)
    ones[rr] = 1;
  storeRows(gq + b * t * d, dq, ones, i0, t, d, warp, lane);
}

//===----------------------------------------------------------------------===//
// The tensor-core form
//===----------------------------------------------------------------------===//

namespace wmma = nvcuda::wmma;

template <typename T>
using MmaA = wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major>;
template <typename T, typename Layout>
using MmaB = wmma::fragment<wmma::matrix_b, 16, 16, 16, T, Layout>;
using MmaC = wmma::fragment<wmma::accumulator, 16, 16, 16, float>;

/// `acc += A B` over `kBlocks` blocks of 16: A is 16 rows at `a` (row
/// pitch `lda`), B 16 columns at `b` (pitch `ldb`) in `Layout`. In order
/// over the blocks, so the sum is the same run after run.
template <typename T, typename Layout>
MERAK_DEVICE void mmaAccumulate(MmaC &acc, const T *a, int lda, const T *b,
                                int ldb, int kBlocks) {
  MmaA<T> fa;
  MmaB<T, Layout> fb;
  constexpr bool rowMajor = std::is_same<Layout, wmma::row_major>::value;
  for (int kb = 0; kb < kBlocks; ++kb) {
    wmma::load_matrix_sync(fa, a + kb * 16, lda);
    wmma::load_matrix_sync(fb, rowMajor ? b + kb * 16 * ldb : b + kb * 16, ldb);
    wmma::mma_sync(acc, fa, fb, acc);
  }
}

/// A warp's 16 x 64 products `A B^T` (B's 64 rows read as columns) into
/// float rows `dst` of pitch `ldd`: scores from query and key rows, or
/// output-gradient products from output-gradient and value rows.
template <typename T>
MERAK_DEVICE void mmaScores(float *dst, int ldd, const T *a, int lda,
                            const T *b, int ldb, int kBlocks) {
#pragma unroll
  for (int cb = 0; cb < kMmaKeys / 16; ++cb) {
    MmaC s;
    wmma::fill_fragment(s, 0.0f);
    mmaAccumulate<T, wmma::col_major>(s, a, lda, b + cb * 16 * ldb, ldb,
                                      kBlocks);
    wmma::store_matrix_sync(dst + cb * 16, s, ldd, wmma::mem_row_major);
  }
}

/// Rows [0, rows) of a `cols`-wide dense tile at `src` into shared `dst`
/// (pitch `pitch`) in 16-byte pieces; rows at or beyond `available` are
/// zero. `cols` is a multiple of 8, `src` 16-byte aligned.
template <typename T>
__device__ void loadTile16(T *dst, const T *src, int64_t available, int rows,
                           int cols, int pitch) {
  const int pieces = cols / 8;
  for (int idx = threadIdx.x; idx < rows * pieces; idx += blockDim.x) {
    int r = idx / pieces, c = idx % pieces * 8;
    uint4 x = make_uint4(0, 0, 0, 0);
    if (r < available)
      x = *reinterpret_cast<const uint4 *>(src + int64_t(r) * cols + c);
    *reinterpret_cast<uint4 *>(dst + r * pitch + c) = x;
  }
}

/// A warp's accumulators (16 rows, `blocks` blocks of 16 columns) to rows
/// `first + r` (below `t`) of the dense `[t, cols]` matrix `dst`, through
/// the warp's float scratch rows `ws` (pitch `lds`).
template <typename T, int DB>
MERAK_DEVICE void storeAccumulators(T *dst, const MmaC (&acc)[DB], int blocks,
                                    float *ws, int lds, int64_t first,
                                    int64_t t, int cols, int lane) {
  __syncwarp();
#pragma unroll
  for (int cb = 0; cb < DB; ++cb)
    if (cb < blocks)
      wmma::store_matrix_sync(ws + cb * 16, acc[cb], lds, wmma::mem_row_major);
  __syncwarp();
  int r = lane / 2, half = lane % 2;
  int64_t row = first + r;
  if (row < t)
    for (int x = half * (cols / 2); x < (half + 1) * (cols / 2); ++x)
      dst[row * cols + x] = convertTo<T>(ws[r * lds + x]);
}

/// A tensor-core kernel's shared arrays (flashMmaLayout) and pitches.
template <typename T> struct MmaTiles {
  T *q, *k, *v, *g, *p, *ds;
  float *scratch, *out, *lse, *sums;
  int64_t *maskRow;
  /// Pitches: 16-bit rows of `d` and `e` elements and of a tile's keys;
  /// float rows of the scratch and of the output accumulators.
  int pd, pe, pk, sp, po;
};

template <typename T>
MERAK_DEVICE MmaTiles<T> mmaTiles(unsigned char *base, FlashKernel kernel,
                                  int d, int e) {
  const FlashMmaLayout l = flashMmaLayout(kernel, d, e);
  MmaTiles<T> m;
  m.q = reinterpret_cast<T *>(base + l.q);
  m.k = reinterpret_cast<T *>(base + l.k);
  m.v = reinterpret_cast<T *>(base + l.v);
  m.g = reinterpret_cast<T *>(base + l.g);
  m.p = reinterpret_cast<T *>(base + l.p);
  m.ds = reinterpret_cast<T *>(base + l.ds);
  m.scratch = reinterpret_cast<float *>(base + l.scratch);
  m.out = reinterpret_cast<float *>(base + l.out);
  m.lse = reinterpret_cast<float *>(base + l.lse);
  m.sums = reinterpret_cast<float *>(base + l.sums);
  m.maskRow = reinterpret_cast<int64_t *>(base + l.maskRow);
  m.pd = int(mmaPitch16(d));
  m.pe = int(mmaPitch16(e));
  m.pk = int(mmaPitch16(kMmaKeys));
  m.sp = int(l.scratchPitch);
  m.po = int(mmaPitch32(e));
  return m;
}

template <typename T, typename M>
__global__ void __launch_bounds__(kMmaThreads)
    flashMmaForwardKernel(const T *q, const T *k, const T *v, const M *mask,
                          MaskRows maskRows, T *out, float *lse, int64_t n,
                          int64_t t, int d, int e, float scale, bool divide) {
#if (defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800) ||                        \
    defined(MERAK_CUDA_EMULATION)
  extern __shared__ __align__(128) unsigned char mmaShared[];
  const MmaTiles<T> m = mmaTiles<T>(mmaShared, FlashKernel::Forward, d, e);
  T *qs = m.q, *ks = m.k, *vs = m.v, *ps = m.p;
  float *os = m.out;
  int64_t *maskRow = m.maskRow;
  const int pd = m.pd, pe = m.pe, pk = m.pk, po = m.po, sp = m.sp;
  int64_t b = flashStack();
  if (b >= n)
    return;
  int64_t i0 = int64_t(blockIdx.x) * kMmaRows;
  int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const T *qb = q + b * t * d, *kb = k + b * t * d, *vb = v + b * t * e;
  loadTile16(qs, qb + i0 * d, t - i0, kMmaRows, d, pd);
  loadMaskRows<kMmaRows>(maskRow, maskRows, b, t, i0);
  for (int idx = threadIdx.x; idx < kMmaRows * po; idx += blockDim.x)
    os[idx] = 0;
  __syncthreads();
  const int64_t colStride = maskRows.colStride;
  float *ws = m.scratch + warp * kMmaWarpRows * sp;
  // Two lanes a row: the row's first or second 32 keys of a tile, and half
  // of its output columns.
  const int rr = lane / 2, half = lane % 2, r = warp * kMmaWarpRows + rr;
  const int64_t i = i0 + r;
  OnlineSoftmax<float> row;
  for (int64_t j0 = 0; j0 < t; j0 += kMmaKeys) {
    // (A barrier: the last tile's keys and values are read.)
    if (!tileVisible<kMmaRows, kMmaKeys>(mask, maskRow, colStride, t, i0, j0))
      continue;
    loadTile16(ks, kb + j0 * d, t - j0, kMmaKeys, d, pd);
    loadTile16(vs, vb + j0 * e, t - j0, kMmaKeys, e, pe);
    __syncthreads();
    mmaScores(ws, sp, qs + warp * kMmaWarpRows * pd, pd, ks, pd, d / 16);
    __syncwarp();
    float *srow = ws + rr * sp + half * 32;
    float tileMax = -INFINITY;
    for (int c = 0; c < 32; ++c) {
      int64_t key = j0 + half * 32 + c;
      float s = -INFINITY;
      if (i < t && key < t)
        s = flashScore(srow[c], mask, maskRow[r], colStride, key, scale,
                       divide);
      srow[c] = s;
      tileMax = s > tileMax ? s : tileMax;
    }
    float other = __shfl_xor_sync(0xffffffffu, tileMax, 1);
    tileMax = other > tileMax ? other : tileMax;
    float factor = row.absorb(tileMax);
    float sum = 0;
    T *prow = ps + r * pk + half * 32;
    for (int c = 0; c < 32; ++c) {
      float p = row.weight(srow[c]);
      sum += p;
      prow[c] = convertTo<T>(p);
    }
    // (a + b == b + a: both lanes of the row hold one sum.)
    sum += __shfl_xor_sync(0xffffffffu, sum, 1);
    row.add(sum);
    float *orow = os + r * po;
    for (int x = half * (e / 2); x < (half + 1) * (e / 2); ++x)
      orow[x] *= factor;
    __syncwarp();
    for (int cb = 0; cb < e / 16; ++cb) {
      MmaC o;
      float *at = os + warp * kMmaWarpRows * po + cb * 16;
      wmma::load_matrix_sync(o, at, po, wmma::mem_row_major);
      mmaAccumulate<T, wmma::row_major>(o, ps + warp * kMmaWarpRows * pk, pk,
                                        vs + cb * 16, pe, kMmaKeys / 16);
      wmma::store_matrix_sync(at, o, po, wmma::mem_row_major);
    }
  }
  __syncwarp();
  if (i < t) {
    // A fully masked row: 0 / 0, NaN, as PyTorch's softmax gives.
    const float *orow = os + r * po;
    for (int x = half * (e / 2); x < (half + 1) * (e / 2); ++x)
      out[(b * t + i) * e + x] = convertTo<T>(orow[x] / row.l);
    if (half == 0)
      lse[b * t + i] = row.logSumExp();
  }
#else
  __trap();
#endif
}

/// Key and value gradients: a block per 64 keys, a warp per 16 of them,
/// over every tile of query rows; `DB` blocks of 16 columns hold the
/// larger head dimension.
template <typename T, typename M, int DB>
__global__ void __launch_bounds__(kMmaThreads)
    flashMmaKeyValueGradKernel(const T *grad, const T *q, const T *k,
                               const T *v, const M *mask, MaskRows maskRows,
                               const float *lse, const float *rowSums, T *gk,
                               T *gv, int64_t n, int64_t t, int d, int e,
                               float scale, bool divide) {
#if (defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800) ||                        \
    defined(MERAK_CUDA_EMULATION)
  extern __shared__ __align__(128) unsigned char mmaShared[];
  const MmaTiles<T> m = mmaTiles<T>(mmaShared, FlashKernel::KeyValueGrad, d, e);
  T *qs = m.q, *ks = m.k, *vs = m.v, *gs = m.g, *ps = m.p, *dss = m.ds;
  float *lses = m.lse, *sums = m.sums;
  int64_t *maskRow = m.maskRow;
  const int pd = m.pd, pe = m.pe, pk = m.pk, sp = m.sp;
  int64_t b = flashStack();
  if (b >= n)
    return;
  int64_t j0 = int64_t(blockIdx.x) * kMmaKeys;
  int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const T *qb = q + b * t * d, *kb = k + b * t * d, *vb = v + b * t * e,
          *gb = grad + b * t * e;
  loadTile16(ks, kb + j0 * d, t - j0, kMmaKeys, d, pd);
  loadTile16(vs, vb + j0 * e, t - j0, kMmaKeys, e, pe);
  float *ws = m.scratch + warp * kMmaWarpRows * sp;
  MmaC dk[DB], dv[DB];
#pragma unroll
  for (int cb = 0; cb < DB; ++cb) {
    wmma::fill_fragment(dk[cb], 0.0f);
    wmma::fill_fragment(dv[cb], 0.0f);
  }
  const int64_t colStride = maskRows.colStride;
  // Two lanes a key: the tile's first or second 32 query rows.
  const int kk = lane / 2, half = lane % 2, c = warp * kMmaWarpRows + kk;
  const int64_t key = j0 + c;
  const T *warpKeys = ks + warp * kMmaWarpRows * pd;
  const T *warpValues = vs + warp * kMmaWarpRows * pe;
  for (int64_t i0 = 0; i0 < t; i0 += kMmaRows) {
    // The last tile's rows, mask rows and products are read.
    __syncthreads();
    loadMaskRows<kMmaRows>(maskRow, maskRows, b, t, i0);
    __syncthreads();
    if (!tileVisible<kMmaRows, kMmaKeys>(mask, maskRow, colStride, t, i0, j0))
      continue;
    loadTile16(qs, qb + i0 * d, t - i0, kMmaRows, d, pd);
    loadTile16(gs, gb + i0 * e, t - i0, kMmaRows, e, pe);
    for (int r = threadIdx.x; r < kMmaRows; r += blockDim.x) {
      bool inside = i0 + r < t;
      lses[r] = inside ? lse[b * t + i0 + r] : 0.0f;
      sums[r] = inside ? rowSums[b * t + i0 + r] : 0.0f;
    }
    __syncthreads();
    // The warp's keys against the tile's rows: scores and output-gradient
    // products, transposed (a row per key).
    mmaScores(ws, sp, warpKeys, pd, qs, pd, d / 16);
    mmaScores(ws + kMmaSecond, sp, warpValues, pe, gs, pe, e / 16);
    __syncwarp();
    T *prow = ps + c * pk, *dsrow = dss + c * pk;
    for (int x = 0; x < 32; ++x) {
      int r = half * 32 + x;
      int64_t i = i0 + r;
      float p = 0, ds = 0;
      if (i < t && key < t) {
        float s = flashScore(ws[kk * sp + r], mask, maskRow[r], colStride, key,
                             scale, divide);
        p = mathExp(s - lses[r]);
        float g = p * (ws[kk * sp + kMmaSecond + r] - sums[r]);
        ds = divide ? g / scale : g * scale;
      }
      prow[r] = convertTo<T>(p);
      dsrow[r] = convertTo<T>(ds);
    }
    __syncwarp();
    const T *warpP = ps + warp * kMmaWarpRows * pk;
    const T *warpDs = dss + warp * kMmaWarpRows * pk;
#pragma unroll
    for (int cb = 0; cb < DB; ++cb) {
      if (cb < e / 16)
        mmaAccumulate<T, wmma::row_major>(dv[cb], warpP, pk, gs + cb * 16, pe,
                                          kMmaRows / 16);
      if (cb < d / 16)
        mmaAccumulate<T, wmma::row_major>(dk[cb], warpDs, pk, qs + cb * 16, pd,
                                          kMmaRows / 16);
    }
  }
  int64_t first = j0 + warp * kMmaWarpRows;
  storeAccumulators(gv + b * t * e, dv, e / 16, ws, sp, first, t, e, lane);
  storeAccumulators(gk + b * t * d, dk, d / 16, ws, sp, first, t, d, lane);
#else
  __trap();
#endif
}

/// Query gradients: a block per 64 query rows, a warp per 16 of them, over
/// every tile of keys.
template <typename T, typename M, int DB>
__global__ void __launch_bounds__(kMmaThreads)
    flashMmaQueryGradKernel(const T *grad, const T *q, const T *k, const T *v,
                            const M *mask, MaskRows maskRows, const float *lse,
                            const float *rowSums, T *gq, int64_t n, int64_t t,
                            int d, int e, float scale, bool divide) {
#if (defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800) ||                        \
    defined(MERAK_CUDA_EMULATION)
  extern __shared__ __align__(128) unsigned char mmaShared[];
  const MmaTiles<T> m = mmaTiles<T>(mmaShared, FlashKernel::QueryGrad, d, e);
  T *qs = m.q, *ks = m.k, *vs = m.v, *gs = m.g, *dss = m.ds;
  int64_t *maskRow = m.maskRow;
  const int pd = m.pd, pe = m.pe, pk = m.pk, sp = m.sp;
  int64_t b = flashStack();
  if (b >= n)
    return;
  int64_t i0 = int64_t(blockIdx.x) * kMmaRows;
  int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const T *qb = q + b * t * d, *kb = k + b * t * d, *vb = v + b * t * e,
          *gb = grad + b * t * e;
  loadTile16(qs, qb + i0 * d, t - i0, kMmaRows, d, pd);
  loadTile16(gs, gb + i0 * e, t - i0, kMmaRows, e, pe);
  loadMaskRows<kMmaRows>(maskRow, maskRows, b, t, i0);
  __syncthreads();
  const int64_t colStride = maskRows.colStride;
  float *ws = m.scratch + warp * kMmaWarpRows * sp;
  // Two lanes a row: the tile's first or second 32 keys.
  const int rr = lane / 2, half = lane % 2, r = warp * kMmaWarpRows + rr;
  const int64_t i = i0 + r;
  const float rowLse = i < t ? lse[b * t + i] : 0.0f;
  const float rowSum = i < t ? rowSums[b * t + i] : 0.0f;
  MmaC dq[DB];
#pragma unroll
  for (int cb = 0; cb < DB; ++cb)
    wmma::fill_fragment(dq[cb], 0.0f);
  const T *warpQ = qs + warp * kMmaWarpRows * pd;
  const T *warpG = gs + warp * kMmaWarpRows * pe;
  for (int64_t j0 = 0; j0 < t; j0 += kMmaKeys) {
    // (A barrier: the last tile's keys and values are read.)
    if (!tileVisible<kMmaRows, kMmaKeys>(mask, maskRow, colStride, t, i0, j0))
      continue;
    loadTile16(ks, kb + j0 * d, t - j0, kMmaKeys, d, pd);
    loadTile16(vs, vb + j0 * e, t - j0, kMmaKeys, e, pe);
    __syncthreads();
    mmaScores(ws, sp, warpQ, pd, ks, pd, d / 16);
    mmaScores(ws + kMmaSecond, sp, warpG, pe, vs, pe, e / 16);
    __syncwarp();
    T *dsrow = dss + r * pk;
    for (int x = 0; x < 32; ++x) {
      int cc = half * 32 + x;
      int64_t key = j0 + cc;
      float ds = 0;
      if (i < t && key < t) {
        float s = flashScore(ws[rr * sp + cc], mask, maskRow[r], colStride, key,
                             scale, divide);
        float p = mathExp(s - rowLse);
        float g = p * (ws[rr * sp + kMmaSecond + cc] - rowSum);
        ds = divide ? g / scale : g * scale;
      }
      dsrow[cc] = convertTo<T>(ds);
    }
    __syncwarp();
    const T *warpDs = dss + warp * kMmaWarpRows * pk;
#pragma unroll
    for (int cb = 0; cb < DB; ++cb)
      if (cb < d / 16)
        mmaAccumulate<T, wmma::row_major>(dq[cb], warpDs, pk, ks + cb * 16, pd,
                                          kMmaKeys / 16);
  }
  storeAccumulators(gq + b * t * d, dq, d / 16, ws, sp,
                    i0 + warp * kMmaWarpRows, t, d, lane);
#else
  __trap();
#endif
}

//===----------------------------------------------------------------------===//
// The register-tile form
//===----------------------------------------------------------------------===//

MERAK_DEVICE uint16_t bitsOf(__nv_bfloat16 x) {
  return __bfloat16_as_ushort(x);
}
MERAK_DEVICE uint16_t bitsOf(__half x) { return __half_as_ushort(x); }

/// Two elements as one 32-bit operand register: `lo` in the low half.
template <typename T> MERAK_DEVICE uint32_t packPair(float lo, float hi) {
  uint32_t low = bitsOf(convertTo<T>(lo)), high = bitsOf(convertTo<T>(hi));
  return low | high << 16;
}
/// The adjacent shared elements `p[0]`, `p[1]` (an even offset).
template <typename T> MERAK_DEVICE uint32_t sharedPair(const T *p) {
  return *reinterpret_cast<const uint32_t *>(p);
}
/// The shared elements `p[0]` and `p[pitch]` (a column's two rows).
template <typename T>
MERAK_DEVICE uint32_t sharedColumnPair(const T *p, int pitch) {
  return uint32_t(bitsOf(p[0])) | uint32_t(bitsOf(p[pitch])) << 16;
}

/// `c += A B` for one 16 x 8 x 16 step, float accumulation.
template <typename T>
MERAK_DEVICE void mma16816(float (&c)[4], const uint32_t (&a)[4], uint32_t b0,
                           uint32_t b1) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  if constexpr (std::is_same_v<T, __nv_bfloat16>)
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
                 "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0),
                   "r"(b1));
  else
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
                 "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0),
                   "r"(b1));
#elif defined(MERAK_CUDA_EMULATION)
  emulation::mma16816<T>(c, a, b0, b1);
#endif
}

/// A warp's left operand for `KB` blocks of 16 columns (those below
/// `cols`) of its 16 rows at `rows` (pitch `pitch`) in shared memory.
template <typename T, int KB>
MERAK_DEVICE void loadLeft(uint32_t (&a)[KB][4], const T *rows, int pitch,
                           int cols, int lane) {
#pragma unroll
  for (int kb = 0; kb < KB; ++kb)
#pragma unroll
    for (int r = 0; r < 4; ++r)
      a[kb][r] = kb * 16 < cols ? sharedPair(rows + fragARow(lane, r) * pitch +
                                             kb * 16 + fragACol(lane, r))
                                : 0u;
}

/// `acc[j] = A B_j^T` for the 8 eight-row tiles j of the 64 rows at `b`
/// (pitch `pitch`): scores from query and key rows, or output-gradient
/// products from output-gradient and value rows; the inner dimension in
/// `KB` blocks of 16 (those below `cols`), in order.
template <typename T, int KB>
MERAK_DEVICE void productRows(float (&acc)[8][4], const uint32_t (&a)[KB][4],
                              const T *b, int pitch, int cols, int lane) {
#pragma unroll
  for (int j = 0; j < 8; ++j) {
#pragma unroll
    for (int i = 0; i < 4; ++i)
      acc[j][i] = 0.0f;
    const T *row = b + (8 * j + fragBCol(lane)) * pitch;
#pragma unroll
    for (int kb = 0; kb < KB; ++kb)
      if (kb * 16 < cols)
        mma16816<T>(acc[j], a[kb],
                    sharedPair(row + kb * 16 + fragBRow(lane, 0)),
                    sharedPair(row + kb * 16 + fragBRow(lane, 1)));
  }
}

/// `out[x] += W B` for the warp's 16 rows: W the 16 x 64 weights in
/// accumulator layout (`w[j]`: columns 8j..8j+7, rounded to `T`), B the 64
/// rows at `b` (pitch `pitch`), `NT` tiles of 8 output columns (those below
/// `cols`). The 64 in order, 16 at a time.
template <typename T, int NT>
MERAK_DEVICE void accumulateWeighted(float (&out)[NT][4],
                                     const float (&w)[8][4], const T *b,
                                     int pitch, int cols, int lane) {
#pragma unroll
  for (int kk = 0; kk < 4; ++kk) {
    uint32_t a[4];
#pragma unroll
    for (int r = 0; r < 4; ++r) {
      const float *c = w[2 * kk + fragFromTile(r)];
      a[r] = packPair<T>(c[fragFromC(r)], c[fragFromC(r) + 1]);
    }
    const T *k0 = b + (16 * kk + fragBRow(lane, 0)) * pitch + fragBCol(lane);
    const T *k1 = b + (16 * kk + fragBRow(lane, 1)) * pitch + fragBCol(lane);
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
      if (nt * 8 < cols)
        mma16816<T>(out[nt], a, sharedColumnPair(k0 + nt * 8, pitch),
                    sharedColumnPair(k1 + nt * 8, pitch));
  }
}

/// The largest (or the sum) of a value over the four lanes holding a row.
MERAK_DEVICE float quadMax(float v) {
  v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 1));
  return fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 2));
}
MERAK_DEVICE float quadSum(float v) {
  v += __shfl_xor_sync(0xffffffffu, v, 1);
  return v + __shfl_xor_sync(0xffffffffu, v, 2);
}

/// A mask element as a score bias: `false` and `-inf` mask (`-inf`), a
/// float mask adds.
MERAK_DEVICE float maskBias(bool m) { return m ? 0.0f : -INFINITY; }
template <typename M> MERAK_DEVICE float maskBias(M m) { return toAcc(m); }

/// Stages the mask of query rows [i0, i0 + 64) (mask rows at `maskRow`)
/// and keys [j0, j0 + 64) as float biases, row r at `bias + r *
/// regBiasPitch()`; outside the sequence `-inf`. Returns whether any score
/// of the tile is let through (a barrier: every thread calls it; the
/// biases are visible after it).
template <typename M>
__device__ bool stageBias(float *bias, const M *mask, const int64_t *maskRow,
                          int64_t colStride, int64_t t, int64_t i0,
                          int64_t j0) {
  const int pitch = int(regBiasPitch());
  int visible = 0;
  for (int idx = threadIdx.x; idx < kMmaRows * kMmaKeys; idx += blockDim.x) {
    int r = idx / kMmaKeys, c = idx % kMmaKeys;
    float x = -INFINITY;
    if (i0 + r < t && j0 + c < t)
      x = maskBias(mask[maskRow[r] + (j0 + c) * colStride]);
    bias[r * pitch + c] = x;
    visible |= x != -INFINITY;
  }
  return __syncthreads_or(visible) != 0;
}

/// Stores a warp's accumulators (`NT` tiles of 8 columns, those below
/// `cols`) of its rows `first + fragCRow` below `t` into the dense
/// `[t, cols]` matrix `dst`, divided by `divisor[h]` (rows g, g + 8).
template <typename T, int NT>
MERAK_DEVICE void storeFragments(T *dst, const float (&acc)[NT][4],
                                 const float (&divisor)[2], int64_t first,
                                 int64_t t, int cols, int lane) {
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    int64_t row = first + fragCRow(lane, 2 * h);
    if (row >= t)
      continue;
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
      if (nt * 8 < cols) {
        int64_t at = row * cols + nt * 8 + fragCCol(lane, 2 * h);
        *reinterpret_cast<uint32_t *>(dst + at) = packPair<T>(
            acc[nt][2 * h] / divisor[h], acc[nt][2 * h + 1] / divisor[h]);
      }
  }
}

/// A register-tile kernel's shared arrays (flashRegLayout).
template <typename T> struct RegTiles {
  T *q, *k, *v, *g;
  float *bias, *lse, *sums;
  int64_t *maskRow;
  int pd, pe;
};

template <typename T>
MERAK_DEVICE RegTiles<T> regTiles(unsigned char *base, FlashKernel kernel,
                                  int d, int e) {
  const FlashRegLayout l = flashRegLayout(kernel, d, e);
  RegTiles<T> m;
  m.q = reinterpret_cast<T *>(base + l.q);
  m.k = reinterpret_cast<T *>(base + l.k);
  m.v = reinterpret_cast<T *>(base + l.v);
  m.g = reinterpret_cast<T *>(base + l.g);
  m.bias = reinterpret_cast<float *>(base + l.bias);
  m.lse = reinterpret_cast<float *>(base + l.lse);
  m.sums = reinterpret_cast<float *>(base + l.sums);
  m.maskRow = reinterpret_cast<int64_t *>(base + l.maskRow);
  m.pd = int(mmaPitch16(d));
  m.pe = int(mmaPitch16(e));
  return m;
}

/// Forward: a block per 64 query rows, a warp per 16; `KB` blocks of 16
/// hold the query's head dimension, `NT` tiles of 8 the value's.
template <typename T, typename M, int KB, int NT>
__global__ void __launch_bounds__(kRegThreads)
    flashRegForwardKernel(const T *q, const T *k, const T *v, const M *mask,
                          MaskRows maskRows, T *out, float *lse, int64_t n,
                          int64_t t, int d, int e, float scale, bool divide) {
#if (defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800) ||                        \
    defined(MERAK_CUDA_EMULATION)
  extern __shared__ __align__(128) unsigned char regShared[];
  const RegTiles<T> m = regTiles<T>(regShared, FlashKernel::Forward, d, e);
  const int pd = m.pd, pe = m.pe, pb = int(regBiasPitch());
  int64_t b = flashStack();
  if (b >= n)
    return;
  int64_t i0 = int64_t(blockIdx.x) * kMmaRows;
  int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const T *kb = k + b * t * d, *vb = v + b * t * e;
  loadTile16(m.q, q + b * t * d + i0 * d, t - i0, kMmaRows, d, pd);
  loadMaskRows<kMmaRows>(m.maskRow, maskRows, b, t, i0);
  __syncthreads();
  uint32_t qa[KB][4];
  loadLeft<T, KB>(qa, m.q + warp * kMmaWarpRows * pd, pd, d, lane);
  float o[NT][4];
#pragma unroll
  for (int nt = 0; nt < NT; ++nt)
#pragma unroll
    for (int i = 0; i < 4; ++i)
      o[nt][i] = 0.0f;
  OnlineSoftmax<float> rows[2]; // rows fragCRow(lane, 0) and (lane, 2)
  const float *warpBias = m.bias + warp * kMmaWarpRows * pb;
  for (int64_t j0 = 0; j0 < t; j0 += kMmaKeys) {
    __syncthreads(); // the last tile's keys, values and biases are read
    if (!stageBias(m.bias, mask, m.maskRow, maskRows.colStride, t, i0, j0))
      continue;
    loadTile16(m.k, kb + j0 * d, t - j0, kMmaKeys, d, pd);
    loadTile16(m.v, vb + j0 * e, t - j0, kMmaKeys, e, pe);
    __syncthreads();
    float s[8][4];
    productRows<T, KB>(s, qa, m.k, pd, d, lane);
    float tileMax[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int j = 0; j < 8; ++j)
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        float x = flashBiasedScore(
            s[j][i],
            warpBias[fragCRow(lane, i) * pb + 8 * j + fragCCol(lane, i)], scale,
            divide);
        s[j][i] = x;
        tileMax[i >> 1] = fmaxf(tileMax[i >> 1], x);
      }
    float factor[2], sum[2] = {0.0f, 0.0f};
#pragma unroll
    for (int h = 0; h < 2; ++h)
      factor[h] = rows[h].absorb(quadMax(tileMax[h]));
#pragma unroll
    for (int j = 0; j < 8; ++j)
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        float p = rows[i >> 1].weight(s[j][i]);
        s[j][i] = p;
        sum[i >> 1] += p;
      }
#pragma unroll
    for (int h = 0; h < 2; ++h)
      rows[h].add(quadSum(sum[h]));
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
      for (int i = 0; i < 4; ++i)
        o[nt][i] *= factor[i >> 1];
    accumulateWeighted<T, NT>(o, s, m.v, pe, e, lane);
  }
  // A fully masked row: 0 / 0, NaN, as PyTorch's softmax gives.
  const int64_t first = i0 + warp * kMmaWarpRows;
  const float divisor[2] = {rows[0].l, rows[1].l};
  storeFragments<T, NT>(out + b * t * e, o, divisor, first, t, e, lane);
  if (fragPair(lane) == 0)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      int64_t i = first + fragCRow(lane, 2 * h);
      if (i < t)
        lse[b * t + i] = rows[h].logSumExp();
    }
#else
  __trap();
#endif
}

/// Key and value gradients: a block per 64 keys, a warp per 16 of them,
/// over every tile of query rows (head dimensions up to 64).
template <typename T, typename M>
__global__ void __launch_bounds__(kRegThreads)
    flashRegKeyValueGradKernel(const T *grad, const T *q, const T *k,
                               const T *v, const M *mask, MaskRows maskRows,
                               const float *lse, const float *rowSums, T *gk,
                               T *gv, int64_t n, int64_t t, int d, int e,
                               float scale, bool divide) {
#if (defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800) ||                        \
    defined(MERAK_CUDA_EMULATION)
  extern __shared__ __align__(128) unsigned char regShared[];
  const RegTiles<T> m = regTiles<T>(regShared, FlashKernel::KeyValueGrad, d, e);
  const int pd = m.pd, pe = m.pe, pb = int(regBiasPitch());
  int64_t b = flashStack();
  if (b >= n)
    return;
  int64_t j0 = int64_t(blockIdx.x) * kMmaKeys;
  int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const T *qb = q + b * t * d, *gb = grad + b * t * e;
  loadTile16(m.k, k + b * t * d + j0 * d, t - j0, kMmaKeys, d, pd);
  loadTile16(m.v, v + b * t * e + j0 * e, t - j0, kMmaKeys, e, pe);
  __syncthreads();
  uint32_t ka[4][4], va[4][4];
  loadLeft<T, 4>(ka, m.k + warp * kMmaWarpRows * pd, pd, d, lane);
  loadLeft<T, 4>(va, m.v + warp * kMmaWarpRows * pe, pe, e, lane);
  float dk[8][4], dv[8][4];
#pragma unroll
  for (int nt = 0; nt < 8; ++nt)
#pragma unroll
    for (int i = 0; i < 4; ++i)
      dk[nt][i] = dv[nt][i] = 0.0f;
  // The warp's keys are the rows of its products (scores transposed).
  const int keyRow = warp * kMmaWarpRows;
  for (int64_t i0 = 0; i0 < t; i0 += kMmaRows) {
    __syncthreads(); // the last tile's rows, biases and mask rows are read
    loadMaskRows<kMmaRows>(m.maskRow, maskRows, b, t, i0);
    __syncthreads();
    if (!stageBias(m.bias, mask, m.maskRow, maskRows.colStride, t, i0, j0))
      continue;
    loadTile16(m.q, qb + i0 * d, t - i0, kMmaRows, d, pd);
    loadTile16(m.g, gb + i0 * e, t - i0, kMmaRows, e, pe);
    for (int r = threadIdx.x; r < kMmaRows; r += blockDim.x) {
      bool inside = i0 + r < t;
      m.lse[r] = inside ? lse[b * t + i0 + r] : 0.0f;
      m.sums[r] = inside ? rowSums[b * t + i0 + r] : 0.0f;
    }
    __syncthreads();
    float st[8][4], dpt[8][4];
    productRows<T, 4>(st, ka, m.q, pd, d, lane);
    productRows<T, 4>(dpt, va, m.g, pe, e, lane);
#pragma unroll
    for (int j = 0; j < 8; ++j)
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        int c = keyRow + fragCRow(lane, i), r = 8 * j + fragCCol(lane, i);
        FlashScoreGrad g;
        if (i0 + r < t && j0 + c < t)
          g = flashScoreGrad(st[j][i], m.bias[r * pb + c], dpt[j][i], m.lse[r],
                             m.sums[r], scale, divide);
        st[j][i] = g.p;
        dpt[j][i] = g.ds;
      }
    accumulateWeighted<T, 8>(dv, st, m.g, pe, e, lane);
    accumulateWeighted<T, 8>(dk, dpt, m.q, pd, d, lane);
  }
  const float one[2] = {1.0f, 1.0f};
  int64_t first = j0 + keyRow;
  storeFragments<T, 8>(gv + b * t * e, dv, one, first, t, e, lane);
  storeFragments<T, 8>(gk + b * t * d, dk, one, first, t, d, lane);
#else
  __trap();
#endif
}

/// Query gradients: a block per 64 query rows, a warp per 16 of them, over
/// every tile of keys (head dimensions up to 64).
template <typename T, typename M>
__global__ void __launch_bounds__(kRegThreads)
    flashRegQueryGradKernel(const T *grad, const T *q, const T *k, const T *v,
                            const M *mask, MaskRows maskRows, const float *lse,
                            const float *rowSums, T *gq, int64_t n, int64_t t,
                            int d, int e, float scale, bool divide) {
#if (defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800) ||                        \
    defined(MERAK_CUDA_EMULATION)
  extern __shared__ __align__(128) unsigned char regShared[];
  const RegTiles<T> m = regTiles<T>(regShared, FlashKernel::QueryGrad, d, e);
  const int pd = m.pd, pe = m.pe, pb = int(regBiasPitch());
  int64_t b = flashStack();
  if (b >= n)
    return;
  int64_t i0 = int64_t(blockIdx.x) * kMmaRows;
  int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const T *kb = k + b * t * d, *vb = v + b * t * e;
  loadTile16(m.q, q + b * t * d + i0 * d, t - i0, kMmaRows, d, pd);
  loadTile16(m.g, grad + b * t * e + i0 * e, t - i0, kMmaRows, e, pe);
  loadMaskRows<kMmaRows>(m.maskRow, maskRows, b, t, i0);
  __syncthreads();
  uint32_t qa[4][4], ga[4][4];
  loadLeft<T, 4>(qa, m.q + warp * kMmaWarpRows * pd, pd, d, lane);
  loadLeft<T, 4>(ga, m.g + warp * kMmaWarpRows * pe, pe, e, lane);
  const int64_t first = i0 + warp * kMmaWarpRows;
  float rowLse[2], rowSum[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    int64_t i = first + fragCRow(lane, 2 * h);
    rowLse[h] = i < t ? lse[b * t + i] : 0.0f;
    rowSum[h] = i < t ? rowSums[b * t + i] : 0.0f;
  }
  float dq[8][4];
#pragma unroll
  for (int nt = 0; nt < 8; ++nt)
#pragma unroll
    for (int i = 0; i < 4; ++i)
      dq[nt][i] = 0.0f;
  const float *warpBias = m.bias + warp * kMmaWarpRows * pb;
  for (int64_t j0 = 0; j0 < t; j0 += kMmaKeys) {
    __syncthreads(); // the last tile's keys, values and biases are read
    if (!stageBias(m.bias, mask, m.maskRow, maskRows.colStride, t, i0, j0))
      continue;
    loadTile16(m.k, kb + j0 * d, t - j0, kMmaKeys, d, pd);
    loadTile16(m.v, vb + j0 * e, t - j0, kMmaKeys, e, pe);
    __syncthreads();
    float s[8][4], dp[8][4];
    productRows<T, 4>(s, qa, m.k, pd, d, lane);
    productRows<T, 4>(dp, ga, m.v, pe, e, lane);
#pragma unroll
    for (int j = 0; j < 8; ++j)
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        int r = fragCRow(lane, i), c = 8 * j + fragCCol(lane, i);
        FlashScoreGrad g;
        if (first + r < t && j0 + c < t)
          g = flashScoreGrad(s[j][i], warpBias[r * pb + c], dp[j][i],
                             rowLse[i >> 1], rowSum[i >> 1], scale, divide);
        s[j][i] = g.ds;
      }
    accumulateWeighted<T, 8>(dq, s, m.k, pd, d, lane);
  }
  const float one[2] = {1.0f, 1.0f};
  storeFragments<T, 8>(gq + b * t * d, dq, one, first, t, d, lane);
#else
  __trap();
#endif
}

/// Stacks, rows and head dimensions of dense `[n, t, d]` views.
struct FlashShape {
  int64_t n = 0, t = 0, d = 0, e = 0;
};

FlashShape flashShape(const View &q, const View &k, const View &v,
                      const View &mask, const char *what) {
  auto fail = [&](const std::string &why) {
    throw CudaError(std::string(what) + ": " + why);
  };
  if (q.rank < 2 || k.rank != q.rank || v.rank != q.rank)
    fail("query, key and value must be [..., t, d] of one rank");
  if (!q.isContiguous() || !k.isContiguous() || !v.isContiguous())
    fail("query, key and value must be dense");
  if (k.type != q.type || v.type != q.type)
    fail("query, key and value must have one element type");
  if (mask.type != ElemType::Bool && mask.type != q.type)
    fail(std::string("a ") + elemTypeName(mask.type) + " mask on " +
         elemTypeName(q.type) + " scores");
  FlashShape s;
  s.t = q.sizes[q.rank - 2];
  s.d = q.sizes[q.rank - 1];
  s.e = v.sizes[v.rank - 1];
  s.n = s.t > 0 && s.d > 0 ? q.numel() / (s.t * s.d) : 0;
  if (k.numel() != q.numel() || v.numel() != s.n * s.t * s.e)
    fail("key or value does not match the query's stacks");
  if (const char *why = flashUnsupported(s.t, s.d, s.e))
    fail(why);
  return s;
}

static_assert(kMmaThreads == kFlashThreads && kRegThreads == kFlashThreads,
              "launchFlash launches every form with kFlashThreads");

/// Launches `kernel` with `l`, raising its shared-memory limit first when
/// it needs more than the default 48 KiB.
template <typename Kernel, typename... Args>
void launchFlash(Kernel kernel, const FlashLaunch &l, cudaStream_t stream,
                 const char *what, Args... args) {
  if (l.sharedBytes > 48 * 1024)
    check(cudaFuncSetAttribute(kernel,
                               cudaFuncAttributeMaxDynamicSharedMemorySize,
                               int(l.sharedBytes)),
          what);
  dim3 grid(l.tiles, l.stacks, l.stacksZ);
  kernel<<<grid, kFlashThreads, size_t(l.sharedBytes), stream>>>(args...);
  checkLaunch(what);
}

/// Whether the tensor-core kernels take these operands: bf16 or f16, head
/// dimensions they support, every operand 16-byte aligned.
bool mmaTakes(const FlashShape &s, std::initializer_list<const View *> views) {
  ElemType type = (*views.begin())->type;
  if (type != ElemType::BF16 && type != ElemType::F16)
    return false;
  if (flashMmaUnsupported(s.d, s.e))
    return false;
  for (const View *x : views)
    if (reinterpret_cast<uintptr_t>(x->data) % 16 != 0)
      return false;
  return true;
}

/// Calls `body` with the tensor-core element type of `type` (bf16 or f16)
/// as a value of that type.
template <typename Body> void dispatchMmaType(ElemType type, Body body) {
  if (type == ElemType::BF16)
    body(__nv_bfloat16());
  else
    body(__half());
}

} // namespace

void flashAttentionForward(const View &q, const View &k, const View &v,
                           const View &mask, const View &out, const View &lse,
                           float scale, bool divide, bool registerTiles,
                           cudaStream_t stream) {
  const char *what = "flash attention";
  FlashShape s = flashShape(q, k, v, mask, what);
  if (!out.isContiguous() || out.type != q.type ||
      out.numel() != s.n * s.t * s.e || !lse.isContiguous() ||
      lse.type != ElemType::F32 || lse.numel() != s.n * s.t)
    throw CudaError("flash attention: the output must be dense [n, t, e] of "
                    "the query's type and the log-sum-exp dense f32 [n, t]");
  if (s.n == 0)
    return;
  if (mmaTakes(s, {&q, &k, &v, &out})) {
    flashMmaForward(q, k, v, mask, out, lse, s.n, s.t, s.d, s.e, scale, divide,
                    registerTiles, stream);
    return;
  }
  MaskRows m = maskRowsOf(mask);
  MERAK_CUDA_DISPATCH_FLOAT(q.type, what, T, {
    FlashLaunch l = flashLaunch(FlashKernel::Forward, s.n, s.t, s.d, s.e,
                                int64_t(sizeof(Acc<T>)));
    if (mask.type == ElemType::Bool)
      launchFlash(flashForwardKernel<T, bool>, l, stream, what,
                  q.ptr<const T>(), k.ptr<const T>(), v.ptr<const T>(),
                  mask.ptr<const bool>(), m, out.ptr<T>(), lse.ptr<float>(),
                  s.n, s.t, int(s.d), int(s.e), Acc<T>(scale), divide);
    else
      launchFlash(flashForwardKernel<T, T>, l, stream, what, q.ptr<const T>(),
                  k.ptr<const T>(), v.ptr<const T>(), mask.ptr<const T>(), m,
                  out.ptr<T>(), lse.ptr<float>(), s.n, s.t, int(s.d), int(s.e),
                  Acc<T>(scale), divide);
  });
}

void flashAttentionBackward(const View &grad, const View &q, const View &k,
                            const View &v, const View &mask, const View &out,
                            const View &lse, const View &gq, const View &gk,
                            const View &gv, float *rowSums, float scale,
                            bool divide, bool registerTiles,
                            cudaStream_t stream) {
  const char *what = "flash attention backward";
  FlashShape s = flashShape(q, k, v, mask, what);
  auto dense = [&](const View &x, int64_t numel) {
    return x.isContiguous() && x.type == q.type && x.numel() == numel;
  };
  if (!dense(grad, s.n * s.t * s.e) || !dense(out, s.n * s.t * s.e) ||
      !dense(gq, s.n * s.t * s.d) || !dense(gk, s.n * s.t * s.d) ||
      !dense(gv, s.n * s.t * s.e) || !lse.isContiguous() ||
      lse.type != ElemType::F32 || lse.numel() != s.n * s.t)
    throw CudaError("flash attention backward: the gradients, output and "
                    "log-sum-exp must be dense, of the query's stacks");
  if (s.n == 0)
    return;
  MaskRows m = maskRowsOf(mask);
  MERAK_CUDA_DISPATCH_FLOAT(q.type, what, T, {
    int64_t rows = s.n * s.t;
    Launch sums = linearLaunch(rows * 32, 256);
    flashRowSumsKernel<T><<<sums.grid, sums.block, 0, stream>>>(
        grad.ptr<const T>(), out.ptr<const T>(), rowSums, rows, int(s.e));
    checkLaunch(what);
    if (mmaTakes(s, {&grad, &q, &k, &v, &gq, &gk, &gv})) {
      flashMmaBackward(grad, q, k, v, mask, lse, rowSums, gq, gk, gv, s.n, s.t,
                       s.d, s.e, scale, divide, registerTiles, stream);
      return;
    }
    int64_t acc = int64_t(sizeof(Acc<T>));
    FlashLaunch kv =
        flashLaunch(FlashKernel::KeyValueGrad, s.n, s.t, s.d, s.e, acc);
    FlashLaunch qg =
        flashLaunch(FlashKernel::QueryGrad, s.n, s.t, s.d, s.e, acc);
    if (mask.type == ElemType::Bool) {
      launchFlash(flashKeyValueGradKernel<T, bool>, kv, stream, what,
                  grad.ptr<const T>(), q.ptr<const T>(), k.ptr<const T>(),
                  v.ptr<const T>(), mask.ptr<const bool>(), m,
                  lse.ptr<const float>(), (const float *)rowSums, gk.ptr<T>(),
                  gv.ptr<T>(), s.n, s.t, int(s.d), int(s.e), Acc<T>(scale),
                  divide);
      launchFlash(flashQueryGradKernel<T, bool>, qg, stream, what,
                  grad.ptr<const T>(), q.ptr<const T>(), k.ptr<const T>(),
                  v.ptr<const T>(), mask.ptr<const bool>(), m,
                  lse.ptr<const float>(), (const float *)rowSums, gq.ptr<T>(),
                  s.n, s.t, int(s.d), int(s.e), Acc<T>(scale), divide);
    } else {
      launchFlash(flashKeyValueGradKernel<T, T>, kv, stream, what,
                  grad.ptr<const T>(), q.ptr<const T>(), k.ptr<const T>(),
                  v.ptr<const T>(), mask.ptr<const T>(), m,
                  lse.ptr<const float>(), (const float *)rowSums, gk.ptr<T>(),
                  gv.ptr<T>(), s.n, s.t, int(s.d), int(s.e), Acc<T>(scale),
                  divide);
      launchFlash(flashQueryGradKernel<T, T>, qg, stream, what,
                  grad.ptr<const T>(), q.ptr<const T>(), k.ptr<const T>(),
                  v.ptr<const T>(), mask.ptr<const T>(), m,
                  lse.ptr<const float>(), (const float *)rowSums, gq.ptr<T>(),
                  s.n, s.t, int(s.d), int(s.e), Acc<T>(scale), divide);
    }
  });
}

void flashMmaForward(const View &q, const View &k, const View &v,
                     const View &mask, const View &out, const View &lse,
                     int64_t n, int64_t t, int64_t d, int64_t e, float scale,
                     bool divide, bool registerTiles, cudaStream_t stream) {
  const char *what = "flash attention (tensor cores)";
  MaskRows m = maskRowsOf(mask);
  if (registerTiles && !flashRegUnsupported(FlashKernel::Forward, d, e)) {
    FlashLaunch l = flashRegLaunch(FlashKernel::Forward, n, t, d, e);
    bool wide = d > 64 || e > 64;
    dispatchMmaType(q.type, [&](auto zero) {
      using T = decltype(zero);
      auto run = [&](auto kernel, auto maskPtr) {
        launchFlash(kernel, l, stream, what, q.ptr<const T>(), k.ptr<const T>(),
                    v.ptr<const T>(), maskPtr, m, out.ptr<T>(),
                    lse.ptr<float>(), n, t, int(d), int(e), scale, divide);
      };
      if (mask.type == ElemType::Bool) {
        const bool *mp = mask.ptr<const bool>();
        wide ? run(flashRegForwardKernel<T, bool, 8, 16>, mp)
             : run(flashRegForwardKernel<T, bool, 4, 8>, mp);
      } else {
        const T *mp = mask.ptr<const T>();
        wide ? run(flashRegForwardKernel<T, T, 8, 16>, mp)
             : run(flashRegForwardKernel<T, T, 4, 8>, mp);
      }
    });
    return;
  }
  FlashLaunch l = flashMmaLaunch(FlashKernel::Forward, n, t, d, e);
  dispatchMmaType(q.type, [&](auto zero) {
    using T = decltype(zero);
    if (mask.type == ElemType::Bool)
      launchFlash(flashMmaForwardKernel<T, bool>, l, stream, what,
                  q.ptr<const T>(), k.ptr<const T>(), v.ptr<const T>(),
                  mask.ptr<const bool>(), m, out.ptr<T>(), lse.ptr<float>(), n,
                  t, int(d), int(e), scale, divide);
    else
      launchFlash(flashMmaForwardKernel<T, T>, l, stream, what,
                  q.ptr<const T>(), k.ptr<const T>(), v.ptr<const T>(),
                  mask.ptr<const T>(), m, out.ptr<T>(), lse.ptr<float>(), n, t,
                  int(d), int(e), scale, divide);
  });
}

namespace {

template <typename T, typename M, int DB>
void launchMmaBackward(const View &grad, const View &q, const View &k,
                       const View &v, const View &mask, const View &lse,
                       const float *rowSums, const View &gq, const View &gk,
                       const View &gv, int64_t n, int64_t t, int64_t d,
                       int64_t e, float scale, bool divide,
                       cudaStream_t stream) {
  const char *what = "flash attention backward (tensor cores)";
  MaskRows m = maskRowsOf(mask);
  launchFlash(flashMmaKeyValueGradKernel<T, M, DB>,
              flashMmaLaunch(FlashKernel::KeyValueGrad, n, t, d, e), stream,
              what, grad.ptr<const T>(), q.ptr<const T>(), k.ptr<const T>(),
              v.ptr<const T>(), mask.ptr<const M>(), m, lse.ptr<const float>(),
              rowSums, gk.ptr<T>(), gv.ptr<T>(), n, t, int(d), int(e), scale,
              divide);
  launchFlash(flashMmaQueryGradKernel<T, M, DB>,
              flashMmaLaunch(FlashKernel::QueryGrad, n, t, d, e), stream, what,
              grad.ptr<const T>(), q.ptr<const T>(), k.ptr<const T>(),
              v.ptr<const T>(), mask.ptr<const M>(), m, lse.ptr<const float>(),
              rowSums, gq.ptr<T>(), n, t, int(d), int(e), scale, divide);
}

template <typename T, typename M>
void launchRegBackward(const View &grad, const View &q, const View &k,
                       const View &v, const View &mask, const View &lse,
                       const float *rowSums, const View &gq, const View &gk,
                       const View &gv, int64_t n, int64_t t, int64_t d,
                       int64_t e, float scale, bool divide,
                       cudaStream_t stream) {
  const char *what = "flash attention backward (tensor cores)";
  MaskRows m = maskRowsOf(mask);
  launchFlash(flashRegKeyValueGradKernel<T, M>,
              flashRegLaunch(FlashKernel::KeyValueGrad, n, t, d, e), stream,
              what, grad.ptr<const T>(), q.ptr<const T>(), k.ptr<const T>(),
              v.ptr<const T>(), mask.ptr<const M>(), m, lse.ptr<const float>(),
              rowSums, gk.ptr<T>(), gv.ptr<T>(), n, t, int(d), int(e), scale,
              divide);
  launchFlash(flashRegQueryGradKernel<T, M>,
              flashRegLaunch(FlashKernel::QueryGrad, n, t, d, e), stream, what,
              grad.ptr<const T>(), q.ptr<const T>(), k.ptr<const T>(),
              v.ptr<const T>(), mask.ptr<const M>(), m, lse.ptr<const float>(),
              rowSums, gq.ptr<T>(), n, t, int(d), int(e), scale, divide);
}

} // namespace

void flashMmaBackward(const View &grad, const View &q, const View &k,
                      const View &v, const View &mask, const View &lse,
                      const float *rowSums, const View &gq, const View &gk,
                      const View &gv, int64_t n, int64_t t, int64_t d,
                      int64_t e, float scale, bool divide, bool registerTiles,
                      cudaStream_t stream) {
  bool wide = flashMmaDimBlocks(d, e) > 4;
  bool registers =
      registerTiles && !flashRegUnsupported(FlashKernel::KeyValueGrad, d, e);
  dispatchMmaType(q.type, [&](auto zero) {
    using T = decltype(zero);
    auto run = [&](auto launch) {
      launch(grad, q, k, v, mask, lse, rowSums, gq, gk, gv, n, t, d, e, scale,
             divide, stream);
    };
    if (registers)
      mask.type == ElemType::Bool ? run(launchRegBackward<T, bool>)
                                  : run(launchRegBackward<T, T>);
    else if (mask.type == ElemType::Bool)
      wide ? run(launchMmaBackward<T, bool, 8>)
           : run(launchMmaBackward<T, bool, 4>);
    else
      wide ? run(launchMmaBackward<T, T, 8>) : run(launchMmaBackward<T, T, 4>);
  });
}

} // namespace merak::runtime::cuda
