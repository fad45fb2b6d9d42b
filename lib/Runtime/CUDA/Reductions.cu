//===- Reductions.cu - CUDA kernels: sum, mean and max over dimensions ----===//

#include "Copy.h"
#include "Reductions.h"

#include <limits>
#include <type_traits>

namespace merak::runtime::cuda {

namespace {

template <typename A> struct SumOp {
  static MERAK_DEVICE A identity() { return A(0); }
  static MERAK_DEVICE A combine(A a, A b) { return a + b; }
};

/// ATen's amax: NaN wins over everything.
template <typename A> struct MaxOp {
  static MERAK_DEVICE A identity() {
    if constexpr (std::numeric_limits<A>::has_infinity)
      return -std::numeric_limits<A>::infinity();
    else
      return std::numeric_limits<A>::lowest();
  }
  static MERAK_DEVICE A combine(A a, A b) { return a != a || a > b ? a : b; }
};

template <typename A> __device__ A shuffleDown(A v, int delta) {
  if constexpr (std::is_same_v<A, bool>)
    return __shfl_down_sync(0xffffffffu, int(v), delta) != 0;
  else
    return __shfl_down_sync(0xffffffffu, v, delta);
}

/// The value an output is written as: the accumulator, divided by
/// `divisor` for a mean (0: not divided).
template <typename Out, typename A>
__device__ Out finish(A acc, int64_t divisor) {
  if (divisor > 0)
    acc = acc / A(divisor);
  return convertTo<Out>(acc);
}

/// One warp per (output, chunk) item, `item = m * splits + s`: the lanes
/// take every 32nd element of the chunk, then combine by a fixed tree.
template <typename In, typename Out, typename A, typename Op>
__global__ void reduceRowsKernel(const In *base, View kept, View reduced,
                                 int64_t M, int64_t K, ReducePass pass,
                                 Out *out, int64_t divisor) {
  int lane = threadIdx.x & 31;
  int64_t warp = (blockIdx.x * int64_t(blockDim.x) + threadIdx.x) >> 5;
  int64_t warps = (int64_t(gridDim.x) * blockDim.x) >> 5;
  int64_t items = M * pass.splits;
  for (int64_t item = warp; item < items; item += warps) {
    int64_t m = item / pass.splits, s = item % pass.splits;
    int64_t begin = s * pass.chunk;
    int64_t end = begin + pass.chunk < K ? begin + pass.chunk : K;
    const In *p = base + kept.offsetOf(m);
    A acc = Op::identity();
    for (int64_t k = begin + lane; k < end; k += 32)
      acc = Op::combine(acc, A(toAcc(p[offsetIn(reduced, k)])));
    for (int delta = 16; delta > 0; delta >>= 1)
      acc = Op::combine(acc, shuffleDown(acc, delta));
    if (lane == 0)
      out[item] = finish<Out>(acc, divisor);
  }
}

/// One thread per (output, chunk) item, `item = s * M + m`, adjacent
/// threads on adjacent outputs: each runs through its chunk in order.
template <typename In, typename Out, typename A, typename Op>
__global__ void reduceColumnsKernel(const In *base, View kept, View reduced,
                                    int64_t M, int64_t K, ReducePass pass,
                                    Out *out, int64_t divisor) {
  int64_t items = M * pass.splits;
  for (int64_t item = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
       item < items; item += int64_t(gridDim.x) * blockDim.x) {
    int64_t s = item / M, m = item % M;
    int64_t begin = s * pass.chunk;
    int64_t end = begin + pass.chunk < K ? begin + pass.chunk : K;
    const In *p = base + kept.offsetOf(m);
    A acc = Op::identity();
    for (int64_t k = begin; k < end; ++k)
      acc = Op::combine(acc, A(toAcc(p[offsetIn(reduced, k)])));
    out[item] = finish<Out>(acc, divisor);
  }
}

template <typename In, typename Out, typename A, typename Op>
void launchPass(const In *base, const View &kept, const View &reduced,
                int64_t M, int64_t K, bool columns, ReducePass pass, Out *out,
                int64_t divisor, cudaStream_t stream) {
  int64_t items = M * pass.splits;
  if (columns) {
    Launch l = linearLaunch(items);
    reduceColumnsKernel<In, Out, A, Op><<<l.grid, l.block, 0, stream>>>(
        base, kept, reduced, M, K, pass, out, divisor);
  } else {
    constexpr int kWarps = 8;
    Launch l = linearLaunch(items, kWarps);
    reduceRowsKernel<In, Out, A, Op><<<l.grid, 32 * kWarps, 0, stream>>>(
        base, kept, reduced, M, K, pass, out, divisor);
  }
  checkLaunch("reduction");
}

/// Every pass of one reduction: the first reads `T`, the later ones the
/// partials (`A`) of the one before; the last writes `dst`.
template <typename T, template <typename> class OpOf>
void reduce(const View &kept0, const View &reduced0, const View &dst,
            void *scratch, bool mean, cudaStream_t stream) {
  using A = Acc<T>;
  using Op = OpOf<A>;
  int64_t M = kept0.numel(), K0 = reduced0.numel();
  bool columns = reduceByColumns(kept0, reduced0);
  int64_t divisor = mean ? K0 : 0;
  T *out = dst.ptr<T>();

  ReducePass pass = planReducePass(M, K0, columns);
  if (pass.splits == 1) {
    launchPass<T, T, A, Op>(kept0.ptr<T>(), kept0, reduced0, M, K0, columns,
                            pass, out, divisor, stream);
    return;
  }
  A *buffers[2] = {static_cast<A *>(scratch), nullptr};
  int64_t firstBytes = M * pass.splits * int64_t(sizeof(A));
  buffers[1] = reinterpret_cast<A *>(static_cast<char *>(scratch) +
                                     (firstBytes + 255) / 256 * 256);
  int turn = 0;
  launchPass<T, A, A, Op>(kept0.ptr<T>(), kept0, reduced0, M, K0, columns, pass,
                          buffers[turn], 0, stream);
  // The partials as `[M, splits]` (rows) or `[splits, M]` (columns).
  for (int64_t K = pass.splits;;) {
    View kept, reduced;
    kept.rank = reduced.rank = 1;
    kept.sizes[0] = M;
    reduced.sizes[0] = K;
    kept.strides[0] = columns ? 1 : K;
    reduced.strides[0] = columns ? M : 1;
    const A *in = buffers[turn];
    pass = planReducePass(M, K, columns);
    if (pass.splits == 1) {
      launchPass<A, T, A, Op>(in, kept, reduced, M, K, columns, pass, out,
                              divisor, stream);
      return;
    }
    turn ^= 1;
    launchPass<A, A, A, Op>(in, kept, reduced, M, K, columns, pass,
                            buffers[turn], 0, stream);
    K = pass.splits;
  }
}

/// One thread per line along the summed dimension: `lines` views the
/// other dimensions, `along` the summed one (rank 1, or 0 for size 1).
template <typename T>
__global__ void cumsumKernel(View srcLines, View srcAlong, View dstLines,
                             View dstAlong, bool reverse, int64_t lines) {
  const T *in = srcLines.ptr<T>();
  T *out = dstLines.ptr<T>();
  int64_t n = srcAlong.rank ? srcAlong.sizes[0] : 1;
  int64_t inStride = srcAlong.rank ? srcAlong.strides[0] : 0;
  int64_t outStride = dstAlong.rank ? dstAlong.strides[0] : 0;
  for (int64_t l = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; l < lines;
       l += int64_t(gridDim.x) * blockDim.x) {
    const T *from = in + offsetIn(srcLines, l);
    T *to = out + offsetIn(dstLines, l);
    Acc<T> acc = Acc<T>(0);
    for (int64_t j = 0; j < n; ++j) {
      int64_t k = reverse ? n - 1 - j : j;
      acc += convertTo<Acc<T>>(from[k * inStride]);
      to[k * outStride] = convertTo<T>(acc);
    }
  }
}

} // namespace

void launchCumsum(const View &src, const View &dst, int dim, bool reverse,
                  cudaStream_t stream) {
  int64_t n = src.numel();
  if (n == 0)
    return;
  if (dim < 0 || dim >= src.rank || dst.rank != src.rank || dst.numel() != n ||
      dst.type != src.type)
    throw CudaError("cumsum: the result does not match the operand");
  if (src.type == ElemType::Bool)
    throw CudaError("cumsum: no kernel for i1");
  bool along[kMaxDims] = {};
  along[dim] = true;
  View srcLines, srcAlong, dstLines, dstAlong;
  splitReduction(src, along, srcLines, srcAlong);
  splitReduction(dst, along, dstLines, dstAlong);
  int64_t lines = n / src.sizes[dim];
  Launch l = linearLaunch(lines);
  MERAK_CUDA_DISPATCH_ALL(
      src.type, "cumsum", T,
      cumsumKernel<T><<<l.grid, l.block, 0, stream>>>(
          srcLines, srcAlong, dstLines, dstAlong, reverse, lines));
  checkLaunch("cumsum");
}

void launchReduction(ReduceKind kind, const View &kept, const View &reduced,
                     const View &dst, void *scratch, cudaStream_t stream) {
  int64_t M = kept.numel(), K = reduced.numel();
  if (M == 0)
    return;
  if (dst.numel() != M || dst.type != kept.type)
    throw CudaError("reduction: the result does not match the kept "
                    "dimensions");
  if (K == 0) {
    if (kind == ReduceKind::Max)
      throw CudaError("reduce_max: a maximum over a dimension of size 0");
    fill(dst, kind == ReduceKind::Sum ? 0.0 : std::nan(""), stream);
    return;
  }
  switch (kind) {
  case ReduceKind::Sum:
    if (kept.type == ElemType::Bool)
      throw CudaError("reduce_sum: no kernel for i1");
    MERAK_CUDA_DISPATCH_ALL(
        kept.type, "reduce_sum", T,
        reduce<T, SumOp>(kept, reduced, dst, scratch, false, stream));
    break;
  case ReduceKind::Mean:
    MERAK_CUDA_DISPATCH_FLOAT(
        kept.type, "reduce_mean", T,
        reduce<T, SumOp>(kept, reduced, dst, scratch, true, stream));
    break;
  case ReduceKind::Max:
    MERAK_CUDA_DISPATCH_ALL(
        kept.type, "reduce_max", T,
        reduce<T, MaxOp>(kept, reduced, dst, scratch, false, stream));
    break;
  }
}

} // namespace merak::runtime::cuda
