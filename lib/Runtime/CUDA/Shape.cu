//===- Shape.cu - CUDA kernels: pad, roll, gathers and scatter-adds -------===//

#include "Shape.h"

#include <cub/device/device_radix_sort.cuh>

#include <cmath>
#include <limits>
#include <type_traits>

namespace merak::runtime::cuda {

namespace {

#define MERAK_GRID_STRIDE(i, n)                                                \
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < (n);    \
       i += int64_t(gridDim.x) * blockDim.x)

/// The pad amounts travel by value with the views.
struct PadArgs {
  int64_t low[kMaxDims];
};

template <typename T>
__global__ void padValueKernel(View src, View dst, PadArgs args, T value,
                               int64_t n) {
  const T *in = src.ptr<T>();
  T *out = dst.ptr<T>();
  MERAK_GRID_STRIDE(i, n) {
    int64_t offset;
    out[i] =
        padSource(src, args.low, dst.sizes, i, offset) ? in[offset] : value;
  }
}

struct RollArgs {
  int64_t shifts[kMaxDims];
};

template <typename T>
__global__ void rollKernel(View src, View dst, RollArgs args, int64_t n) {
  const T *in = src.ptr<T>();
  T *out = dst.ptr<T>();
  MERAK_GRID_STRIDE(i, n) { out[i] = in[rollSource(src, args.shifts, i)]; }
}

template <typename T>
__global__ void rollFlatKernel(View src, View dst, int64_t shift, int64_t n) {
  const T *in = src.ptr<T>();
  T *out = dst.ptr<T>();
  MERAK_GRID_STRIDE(i, n) {
    int64_t from = i - shift;
    if (from < 0)
      from += n;
    out[i] = in[src.offsetOf(from)];
  }
}

/// What an out-of-range index reads: NaN where the type has one.
template <typename T> __device__ T outOfRangeValue() {
  if constexpr (std::is_floating_point_v<Acc<T>>)
    return convertTo<T>(std::numeric_limits<Acc<T>>::quiet_NaN());
  else
    return T(0);
}

template <typename T, typename I>
__global__ void gatherKernel(View src, GatherGeometry g, const I *indices,
                             int64_t count, T *out, int64_t n) {
  const T *in = src.ptr<T>();
  MERAK_GRID_STRIDE(i, n) {
    int64_t row = int64_t(indices[(i / g.inner) % count]);
    out[i] = row >= 0 && row < g.dimSize ? in[gatherSource(g, count, i, row)]
                                         : outOfRangeValue<T>();
  }
}

template <typename T, typename I>
__global__ void updateSliceKernel(View update, const I *position, int64_t rows,
                                  int64_t inner, int64_t dimSize, T *out,
                                  int64_t n) {
  int64_t at = int64_t(position[0]);
  if (at < 0 || at > dimSize - rows)
    return;
  const T *in = update.ptr<T>();
  MERAK_GRID_STRIDE(i, n) {
    out[updateSliceTarget(i, rows, inner, dimSize, at)] =
        in[update.offsetOf(i)];
  }
}

/// The sort keys (the index, or `dimSize` when out of range) and the
/// positions 0..count-1 they are sorted with.
template <typename I>
__global__ void scatterKeysKernel(const I *indices, int64_t count,
                                  int64_t dimSize, uint32_t *keys,
                                  int32_t *positions) {
  MERAK_GRID_STRIDE(i, count) {
    int64_t row = int64_t(indices[i]);
    keys[i] = uint32_t(row >= 0 && row < dimSize ? row : dimSize);
    positions[i] = int32_t(i);
  }
}

/// One block per (outer, sorted position) pair that starts a run of equal
/// keys: its threads sum the run's slices of `grad`, column by column, in
/// index order, into the row.
template <typename T>
__global__ void scatterAddKernel(const T *grad, const uint32_t *keys,
                                 const int32_t *positions, int64_t count,
                                 int64_t outer, int64_t dimSize, int64_t inner,
                                 int64_t paddingRow, T *out) {
  for (int64_t b = blockIdx.x; b < outer * count; b += gridDim.x) {
    int64_t o = b / count, p = b % count;
    uint32_t key = keys[p];
    if ((p > 0 && keys[p - 1] == key) || int64_t(key) >= dimSize ||
        int64_t(key) == paddingRow)
      continue;
    const T *g = grad + o * count * inner;
    T *row = out + (o * dimSize + key) * inner;
    for (int64_t j = threadIdx.x; j < inner; j += blockDim.x) {
      Acc<T> sum = Acc<T>(0);
      for (int64_t q = p; q < count && keys[q] == key; ++q)
        sum += toAcc(g[int64_t(positions[q]) * inner + j]);
      row[j] = convertTo<T>(sum);
    }
  }
}

/// The scratch of a scatter-add: keys and positions in and out, then CUB's
/// temporary storage.
struct ScatterScratch {
  uint32_t *keysIn, *keysOut;
  int32_t *positionsIn, *positionsOut;
  void *sortStorage;
  size_t sortBytes;
};

size_t sortStorageBytes(int64_t count, int64_t dimSize) {
  size_t bytes = 0;
  check(cub::DeviceRadixSort::SortPairs(
            nullptr, bytes, static_cast<const uint32_t *>(nullptr),
            static_cast<uint32_t *>(nullptr),
            static_cast<const int32_t *>(nullptr),
            static_cast<int32_t *>(nullptr), int(count), 0,
            sortKeyBits(dimSize), cudaStream_t(nullptr)),
        "index_backward: sizing the sort");
  return bytes;
}

ScatterScratch carveScratch(void *base, int64_t count, int64_t dimSize) {
  char *p = static_cast<char *>(base);
  int64_t keyBytes = alignScratch(count * int64_t(sizeof(uint32_t)));
  ScatterScratch s;
  s.keysIn = reinterpret_cast<uint32_t *>(p);
  s.keysOut = reinterpret_cast<uint32_t *>(p + keyBytes);
  s.positionsIn = reinterpret_cast<int32_t *>(p + 2 * keyBytes);
  s.positionsOut = reinterpret_cast<int32_t *>(p + 3 * keyBytes);
  s.sortStorage = p + 4 * keyBytes;
  s.sortBytes = sortStorageBytes(count, dimSize);
  return s;
}

} // namespace

void launchPad(const View &src, const View &dst, const int64_t *low,
               double value, cudaStream_t stream) {
  int64_t n = dst.numel();
  if (n == 0)
    return;
  if (src.rank != dst.rank)
    throw CudaError("pad: the result's rank differs from the operand's");
  PadArgs args{};
  for (int d = 0; d < src.rank; ++d)
    args.low[d] = low[d];
  Launch l = linearLaunch(n);
  MERAK_CUDA_DISPATCH_ALL(src.type, "pad", T,
                          padValueKernel<T><<<l.grid, l.block, 0, stream>>>(
                              src, dst, args, convertTo<T>(value), n));
  checkLaunch("pad");
}

void launchRoll(const View &src, const View &dst, const int64_t *shifts,
                bool flat, cudaStream_t stream) {
  int64_t n = dst.numel();
  if (n == 0)
    return;
  Launch l = linearLaunch(n);
  if (flat) {
    int64_t shift = positiveMod(shifts[0], n);
    MERAK_CUDA_DISPATCH_ALL(
        src.type, "roll", T,
        rollFlatKernel<T><<<l.grid, l.block, 0, stream>>>(src, dst, shift, n));
  } else {
    RollArgs args{};
    for (int d = 0; d < src.rank; ++d)
      args.shifts[d] = positiveMod(shifts[d], src.sizes[d]);
    MERAK_CUDA_DISPATCH_ALL(
        src.type, "roll", T,
        rollKernel<T><<<l.grid, l.block, 0, stream>>>(src, dst, args, n));
  }
  checkLaunch("roll");
}

void launchGather(const View &src, int dim, const void *indices,
                  ElemType indexType, int64_t count, const View &dst,
                  cudaStream_t stream) {
  int64_t n = dst.numel();
  if (n == 0)
    return;
  GatherGeometry g = gatherGeometry(src, dim);
  if (g.outer * count * g.inner != n)
    throw CudaError("gather: the result does not have outer * indices * "
                    "inner elements");
  Launch l = linearLaunch(n);
  auto run = [&](auto *idx) {
    MERAK_CUDA_DISPATCH_ALL(src.type, "gather", T,
                            gatherKernel<T><<<l.grid, l.block, 0, stream>>>(
                                src, g, idx, count, dst.ptr<T>(), n));
  };
  if (indexType == ElemType::I64)
    run(static_cast<const int64_t *>(indices));
  else if (indexType == ElemType::I32)
    run(static_cast<const int32_t *>(indices));
  else
    throw CudaError(std::string("gather: indices of type ") +
                    elemTypeName(indexType));
  checkLaunch("gather");
}

void launchUpdateSlice(const View &update, int dim, const void *position,
                       ElemType positionType, const View &dst,
                       cudaStream_t stream) {
  int64_t n = update.numel();
  if (n == 0)
    return;
  if (update.rank != dst.rank || dim < 0 || dim >= dst.rank)
    throw CudaError("update_slice: an update of another rank, or a dimension "
                    "out of range");
  int64_t inner = 1;
  for (int d = dim + 1; d < dst.rank; ++d)
    inner *= dst.sizes[d];
  int64_t rows = update.sizes[dim], dimSize = dst.sizes[dim];
  Launch l = linearLaunch(n);
  auto run = [&](auto *at) {
    MERAK_CUDA_DISPATCH_ALL(
        dst.type, "update_slice", T,
        updateSliceKernel<T><<<l.grid, l.block, 0, stream>>>(
            update, at, rows, inner, dimSize, dst.ptr<T>(), n));
  };
  if (positionType == ElemType::I64)
    run(static_cast<const int64_t *>(position));
  else if (positionType == ElemType::I32)
    run(static_cast<const int32_t *>(position));
  else
    throw CudaError(std::string("update_slice: a position of type ") +
                    elemTypeName(positionType));
  checkLaunch("update_slice");
}

int64_t scatterAddScratchBytes(int64_t count, int64_t dimSize) {
  if (count == 0)
    return 0;
  return 4 * alignScratch(count * int64_t(sizeof(uint32_t))) +
         int64_t(sortStorageBytes(count, dimSize));
}

void launchScatterAdd(const View &grad, const void *indices, ElemType indexType,
                      int64_t count, int64_t outer, int64_t dimSize,
                      int64_t inner, int64_t paddingRow, const View &dst,
                      void *scratch, cudaStream_t stream) {
  int64_t n = dst.numel();
  if (n == 0)
    return;
  check(cudaMemsetAsync(dst.data, 0, size_t(n) * elemSize(dst.type), stream),
        "index_backward: zeroing the result");
  if (count == 0 || outer * inner == 0)
    return;
  if (count > std::numeric_limits<int32_t>::max() ||
      dimSize >= std::numeric_limits<int32_t>::max())
    throw CudaError("index_backward: more than 2^31 indices or rows");
  ScatterScratch s = carveScratch(scratch, count, dimSize);
  Launch l = linearLaunch(count);
  if (indexType == ElemType::I64)
    scatterKeysKernel<<<l.grid, l.block, 0, stream>>>(
        static_cast<const int64_t *>(indices), count, dimSize, s.keysIn,
        s.positionsIn);
  else if (indexType == ElemType::I32)
    scatterKeysKernel<<<l.grid, l.block, 0, stream>>>(
        static_cast<const int32_t *>(indices), count, dimSize, s.keysIn,
        s.positionsIn);
  else
    throw CudaError(std::string("index_backward: indices of type ") +
                    elemTypeName(indexType));
  checkLaunch("index_backward: sort keys");
  // A stable sort: equal keys keep their positions in index order.
  check(cub::DeviceRadixSort::SortPairs(
            s.sortStorage, s.sortBytes, s.keysIn, s.keysOut, s.positionsIn,
            s.positionsOut, int(count), 0, sortKeyBits(dimSize), stream),
        "index_backward: sorting the indices");
  int block = rowBlock(inner, 1);
  if (block > 256)
    block = 256;
  int64_t blocks = outer * count;
  unsigned grid = unsigned(blocks < 65535LL * 32 ? blocks : 65535LL * 32);
  MERAK_CUDA_DISPATCH_FLOAT(dst.type, "index_backward", T,
                            scatterAddKernel<T><<<grid, block, 0, stream>>>(
                                grad.ptr<T>(), s.keysOut, s.positionsOut, count,
                                outer, dimSize, inner, paddingRow,
                                dst.ptr<T>()));
  checkLaunch("index_backward");
}

#undef MERAK_GRID_STRIDE

} // namespace merak::runtime::cuda
