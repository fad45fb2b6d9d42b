//===- Device.h - the CUDA backend's device code run on the host -*- C++
//-*-===//
//
// Included first into every file of the CUDA backend when it is built for
// the CUDA emulator (MERAK_CUDA_EMULATION: the runtime-emulated variant),
// which runs the backend's own kernels on the CPU so that a machine
// without a GPU checks them against the CPU backend.
//
// A kernel launch runs its blocks one after another; the threads of a
// block are fibers on one host thread, each run until it reaches a
// barrier (`__syncthreads`, `__syncwarp`, a shuffle) or returns, so a
// thread reads another's shared-memory writes only across a barrier, as on
// the GPU. `__shared__` variables are the block's (one block runs at a
// time); a shuffle exchanges values between the lanes of a warp through
// the block. Threads that wait at different barriers, a shuffle naming a
// lane that has returned, and `__trap()` fail the launch with an error
// that names the kernel's launch site, block and thread.
//
// The .cu files are compiled as C++ after one rewrite
// (cmake/MerakCudaEmulationRewrite.cmake): `K<<<grid, block, shared,
// stream>>>(a)` becomes `MERAK_EMULATED_LAUNCH(grid, block, shared,
// stream)([&](auto &&...x) { K(x...); })(a)` and `extern __shared__ T
// name[];` a pointer to the launch's dynamic shared memory.
//
//===----------------------------------------------------------------------===//
#ifndef MERAK_LIB_RUNTIME_CUDA_EMULATION_DEVICE_H
#define MERAK_LIB_RUNTIME_CUDA_EMULATION_DEVICE_H

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

namespace merak::runtime::cuda::emulation {

/// Where the running emulated thread is.
struct ThreadPlace {
  uint3 threadIndex;
  uint3 blockIndex;
  dim3 blockSize;
  dim3 gridSize;
};

/// The running thread's place (outside a kernel: an error).
const ThreadPlace &place();
/// The running thread's lane in its warp.
int lane();
/// `__syncthreads()`; with `predicate`, `__syncthreads_or`'s answer.
int syncBlock(int predicate = 0);
/// `__syncwarp(mask)`.
void syncWarp(unsigned mask);
/// The value lane `source` gave (every lane of `mask` gives one).
uint64_t exchange(unsigned mask, uint64_t value, int source);
/// `__trap()`: fails the launch.
[[noreturn]] void trap();
/// The launch's dynamic shared memory (128-byte aligned).
void *dynamicShared();

/// Where a launch was written, and its configuration.
struct LaunchConfig {
  const char *file;
  int line;
  dim3 grid;
  dim3 block;
  size_t shared = 0;
  cudaStream_t stream = nullptr;
};

/// Runs `thread` for every thread of `config`'s grid. Errors (a bad
/// configuration, a trap, threads at different barriers) become the
/// runtime's sticky error, as a failed launch does on a GPU.
void launch(const LaunchConfig &config, const std::function<void()> &thread);

/// A launch of `kernel` (a generic lambda that calls the kernel with the
/// arguments it is given, so that a kernel template's arguments are
/// deduced as at a `<<<...>>>` launch).
template <typename K> struct KernelLaunch {
  LaunchConfig config;
  K kernel;
  template <typename... A> void operator()(A &&...args) const {
    // The arguments as the launch's parameters hold them (each thread's
    // kernel call copies them into its own parameters).
    std::tuple<std::decay_t<A>...> held(std::forward<A>(args)...);
    launch(config, [&] { std::apply(kernel, held); });
  }
};

struct LaunchBuilder {
  LaunchConfig config;
  template <typename K> KernelLaunch<K> operator()(K kernel) const {
    return {config, kernel};
  }
};

inline LaunchBuilder launchAt(const char *file, int line, dim3 grid, dim3 block,
                              size_t shared = 0,
                              cudaStream_t stream = nullptr) {
  return {{file, line, grid, block, shared, stream}};
}

/// Every lane of `mask` gives `bytes` (at most 64) at `mine`; `all`
/// receives the 32 lanes' (lane-major; lanes outside the mask: zeros).
void gatherWarp(unsigned mask, const void *mine, void *all, size_t bytes);

template <typename T> uint64_t bitsOf(T v) {
  static_assert(sizeof(T) <= sizeof(uint64_t) &&
                    std::is_trivially_copyable_v<T>,
                "a shuffled value must fit in 64 bits");
  uint64_t bits = 0;
  std::memcpy(&bits, &v, sizeof v);
  return bits;
}
template <typename T> T fromBits(uint64_t bits) {
  T v;
  std::memcpy(&v, &bits, sizeof v);
  return v;
}

} // namespace merak::runtime::cuda::emulation

#define MERAK_EMULATED_LAUNCH(...)                                             \
  ::merak::runtime::cuda::emulation::launchAt(__FILE__, __LINE__, __VA_ARGS__)

// The execution-space and memory-space qualifiers: `__shared__` variables
// are the running block's, which is the only one.
#undef __global__
#undef __device__
#undef __host__
#undef __shared__
#undef __forceinline__
#undef __launch_bounds__
#define __global__
#define __device__
#define __host__
#define __shared__ static
#define __forceinline__ inline
#define __launch_bounds__(...)

#define threadIdx (::merak::runtime::cuda::emulation::place().threadIndex)
#define blockIdx (::merak::runtime::cuda::emulation::place().blockIndex)
#define blockDim (::merak::runtime::cuda::emulation::place().blockSize)
#define gridDim (::merak::runtime::cuda::emulation::place().gridSize)
#define warpSize 32

inline void __syncthreads() { ::merak::runtime::cuda::emulation::syncBlock(); }
inline int __syncthreads_or(int predicate) {
  return ::merak::runtime::cuda::emulation::syncBlock(predicate != 0);
}
inline void __syncwarp(unsigned mask = 0xffffffffu) {
  ::merak::runtime::cuda::emulation::syncWarp(mask);
}
[[noreturn]] inline void __trap() { ::merak::runtime::cuda::emulation::trap(); }

template <typename T>
T __shfl_sync(unsigned mask, T v, int source, int width = 32) {
  namespace e = ::merak::runtime::cuda::emulation;
  int l = e::lane();
  int src = (l / width) * width + ((source % width) + width) % width;
  return e::fromBits<T>(e::exchange(mask, e::bitsOf(v), src));
}
template <typename T>
T __shfl_xor_sync(unsigned mask, T v, int laneMask, int width = 32) {
  namespace e = ::merak::runtime::cuda::emulation;
  int l = e::lane();
  int src = l ^ laneMask;
  if (src / width != l / width)
    src = l;
  return e::fromBits<T>(e::exchange(mask, e::bitsOf(v), src));
}
template <typename T>
T __shfl_down_sync(unsigned mask, T v, unsigned delta, int width = 32) {
  namespace e = ::merak::runtime::cuda::emulation;
  int l = e::lane();
  int src = l + int(delta);
  if (src / width != l / width)
    src = l;
  return e::fromBits<T>(e::exchange(mask, e::bitsOf(v), src));
}

// Round-to-nearest arithmetic is the host's IEEE arithmetic.
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fdiv_rn(float a, float b) { return a / b; }
inline float __fsqrt_rn(float a) { return std::sqrt(a); }

/// cuda_runtime.h's overload for a kernel (nvcc's only).
template <typename... P>
cudaError_t cudaFuncSetAttribute(void (*kernel)(P...),
                                 cudaFuncAttribute attribute, int value) {
  return cudaFuncSetAttribute(reinterpret_cast<const void *>(kernel), attribute,
                              value);
}

namespace merak::runtime::cuda::emulation {

/// `mma.sync.aligned.m16n8k16.row.col.f32.T.T.f32` with `c` as both C and
/// D: the lanes' fragments laid out as the PTX ISA lays them out (lane
/// `4 g + t` holds A's rows g and g + 8, columns 2t, 2t + 1, 2t + 8 and
/// 2t + 9; B's rows 2t, 2t + 1, 2t + 8, 2t + 9 of column g; C's rows g and
/// g + 8, columns 2t and 2t + 1), the products summed in float in order.
template <typename T>
void mma16816(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  struct Regs {
    uint32_t a[4], b[2];
  };
  Regs mine{{a[0], a[1], a[2], a[3]}, {b0, b1}};
  Regs all[32];
  gatherWarp(0xffffffffu, &mine, all, sizeof mine);
  auto half = [](uint32_t reg, int which) {
    uint16_t bits = uint16_t(which ? reg >> 16 : reg & 0xffffu);
    T v;
    std::memcpy(&v, &bits, sizeof v);
    return static_cast<float>(v);
  };
  // A[r][k] and B[k][n] from the lanes holding them.
  auto A = [&](int r, int k) {
    int g = r % 8, t = (k % 8) / 2;
    int reg = (r >= 8 ? 1 : 0) + (k >= 8 ? 2 : 0);
    return half(all[4 * g + t].a[reg], k % 2);
  };
  auto B = [&](int k, int n) {
    int t = (k % 8) / 2;
    return half(all[4 * n + t].b[k >= 8 ? 1 : 0], k % 2);
  };
  int l = lane(), g = l / 4, t = l % 4;
  for (int i = 0; i < 4; ++i) {
    int r = g + (i >= 2 ? 8 : 0), n = 2 * t + i % 2;
    float sum = 0;
    for (int k = 0; k < 16; ++k)
      sum += A(r, k) * B(k, n);
    c[i] += sum;
  }
}

} // namespace merak::runtime::cuda::emulation

// WMMA (<mma.h>): every lane holds the whole tile, so a fragment's
// elements are the tile's in row-major order in every lane; loads, stores
// and products are warp barriers, as their `_sync` says.
namespace nvcuda::wmma {

struct matrix_a {};
struct matrix_b {};
struct accumulator {};
struct row_major {};
struct col_major {};
enum layout_t { mem_row_major, mem_col_major };

template <typename Use, int M, int N, int K, typename T, typename Layout = void>
struct fragment {
  static constexpr int kRows = std::is_same_v<Use, matrix_b> ? K : M;
  static constexpr int kCols = std::is_same_v<Use, matrix_a> ? K : N;
  static constexpr int num_elements = kRows * kCols;
  using element_type = T;
  T x[num_elements];
};

template <typename Use, int M, int N, int K, typename T, typename L>
void fill_fragment(fragment<Use, M, N, K, T, L> &f, T v) {
  for (T &e : f.x)
    e = v;
}

template <typename Use, int M, int N, int K, typename T, typename L>
void load_matrix_sync(fragment<Use, M, N, K, T, L> &f, const T *p,
                      unsigned ldm) {
  using F = fragment<Use, M, N, K, T, L>;
  ::merak::runtime::cuda::emulation::syncWarp(0xffffffffu);
  for (int r = 0; r < F::kRows; ++r)
    for (int c = 0; c < F::kCols; ++c)
      f.x[r * F::kCols + c] = std::is_same_v<L, col_major>
                                  ? p[size_t(c) * ldm + r]
                                  : p[size_t(r) * ldm + c];
}

template <int M, int N, int K, typename T>
void load_matrix_sync(fragment<accumulator, M, N, K, T> &f, const T *p,
                      unsigned ldm, layout_t layout) {
  ::merak::runtime::cuda::emulation::syncWarp(0xffffffffu);
  for (int r = 0; r < M; ++r)
    for (int c = 0; c < N; ++c)
      f.x[r * N + c] = layout == mem_col_major ? p[size_t(c) * ldm + r]
                                               : p[size_t(r) * ldm + c];
}

template <int M, int N, int K, typename T>
void store_matrix_sync(T *p, const fragment<accumulator, M, N, K, T> &f,
                       unsigned ldm, layout_t layout) {
  ::merak::runtime::cuda::emulation::syncWarp(0xffffffffu);
  for (int r = 0; r < M; ++r)
    for (int c = 0; c < N; ++c)
      (layout == mem_col_major ? p[size_t(c) * ldm + r]
                               : p[size_t(r) * ldm + c]) = f.x[r * N + c];
  ::merak::runtime::cuda::emulation::syncWarp(0xffffffffu);
}

template <int M, int N, int K, typename T, typename LA, typename LB, typename C>
void mma_sync(fragment<accumulator, M, N, K, C> &d,
              const fragment<matrix_a, M, N, K, T, LA> &a,
              const fragment<matrix_b, M, N, K, T, LB> &b,
              const fragment<accumulator, M, N, K, C> &c) {
  ::merak::runtime::cuda::emulation::syncWarp(0xffffffffu);
  C out[M * N];
  for (int i = 0; i < M; ++i)
    for (int j = 0; j < N; ++j) {
      float sum = 0;
      for (int k = 0; k < K; ++k)
        sum += static_cast<float>(a.x[i * K + k]) *
               static_cast<float>(b.x[k * N + j]);
      out[i * N + j] = c.x[i * N + j] + sum;
    }
  std::memcpy(d.x, out, sizeof out);
}

} // namespace nvcuda::wmma

// CUB's radix sort of key-value pairs (index_backward's), run on the host:
// stable, over the key bits [beginBit, endBit), as CUB's is.
namespace cub {
struct DeviceRadixSort {
  template <typename K, typename V>
  static cudaError_t
  SortPairs(void *storage, size_t &bytes, const K *keysIn, K *keysOut,
            const V *valuesIn, V *valuesOut, int count, int beginBit = 0,
            int endBit = sizeof(K) * 8, cudaStream_t = nullptr) {
    if (!storage) {
      bytes = 1;
      return cudaSuccess;
    }
    const int width = endBit - beginBit;
    const uint64_t bitsMask =
        width >= 64 ? ~uint64_t(0) : (uint64_t(1) << width) - 1;
    auto key = [&](int i) {
      return (uint64_t(keysIn[i]) >> beginBit) & bitsMask;
    };
    std::vector<int> order(size_t(count > 0 ? count : 0));
    for (int i = 0; i < count; ++i)
      order[size_t(i)] = i;
    std::stable_sort(order.begin(), order.end(),
                     [&](int a, int b) { return key(a) < key(b); });
    std::vector<K> keys(order.size());
    std::vector<V> values(order.size());
    for (size_t i = 0; i < order.size(); ++i) {
      keys[i] = keysIn[order[i]];
      values[i] = valuesIn[order[i]];
    }
    std::copy(keys.begin(), keys.end(), keysOut);
    std::copy(values.begin(), values.end(), valuesOut);
    return cudaSuccess;
  }
};
} // namespace cub

#endif // MERAK_LIB_RUNTIME_CUDA_EMULATION_DEVICE_H
