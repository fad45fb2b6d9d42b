//===- DeviceEmulatorTest.cpp - the CUDA emulator's threads and barriers --===//
//
// Built in the runtime-emulated variant only (MERAK_CUDA_EMULATION), with
// lib/Runtime/CUDA/Emulation/Device.h included first, as the CUDA
// backend's files are: kernels written here in CUDA's terms run on the
// emulator's host threads. A kernel that fails leaves the runtime's error
// sticky, as a GPU fault does, so each failing launch runs in a child
// process (EXPECT_EXIT) that prints the runtime's error.
//
//===----------------------------------------------------------------------===//

#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace {

using merak::runtime::cuda::emulation::mma16816;

/// `kernel<<<grid, block, shared>>>(args...)`.
#define LAUNCH(grid, block, shared, kernel, ...)                               \
  MERAK_EMULATED_LAUNCH(grid, block, shared, nullptr)(kernel)(__VA_ARGS__)

template <typename T> T *deviceCopy(const std::vector<T> &host) {
  void *p = nullptr;
  EXPECT_EQ(cudaMalloc(&p, host.size() * sizeof(T)), cudaSuccess);
  cudaMemcpy(p, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice);
  return static_cast<T *>(p);
}

template <typename T> std::vector<T> hostCopy(const T *device, size_t n) {
  std::vector<T> host(n);
  cudaMemcpy(host.data(), device, n * sizeof(T), cudaMemcpyDeviceToHost);
  return host;
}

/// Runs `launch` and exits with 3, printing the runtime's error, when the
/// launch left one (the child of EXPECT_EXIT).
template <typename F> void launchAndReport(F launch) {
  launch();
  cudaError_t e = cudaGetLastError();
  std::fprintf(stderr, "%s: %s\n", cudaGetErrorName(e), cudaGetErrorString(e));
  std::fflush(stderr);
  std::_Exit(e == cudaSuccess ? 0 : 3);
}

//===----------------------------------------------------------------------===//
// Kernels
//===----------------------------------------------------------------------===//

/// Each block sums its 128 values through shared memory, halving.
__global__ void blockSum(const float *in, float *out) {
  __shared__ float partial[128];
  int t = threadIdx.x;
  partial[t] = in[blockIdx.x * 128 + t];
  __syncthreads();
  for (int half = 64; half > 0; half /= 2) {
    if (t < half)
      partial[t] += partial[t + half];
    __syncthreads();
  }
  if (t == 0)
    out[blockIdx.x] = partial[0];
}

/// Shuffles: a butterfly sum, a shift down, a broadcast of lane 3, and a
/// butterfly within groups of 8 lanes.
__global__ void shuffles(const int *in, int *out) {
  int v = in[threadIdx.x];
  int sum = v;
  for (int offset = 16; offset > 0; offset /= 2)
    sum += __shfl_xor_sync(0xffffffffu, sum, offset);
  int down = __shfl_down_sync(0xffffffffu, v, 5);
  int broadcast = __shfl_sync(0xffffffffu, v, 3);
  int group = v;
  for (int offset = 4; offset > 0; offset /= 2)
    group += __shfl_xor_sync(0xffffffffu, group, offset, 8);
  int *o = out + threadIdx.x * 4;
  o[0] = sum;
  o[1] = down;
  o[2] = broadcast;
  o[3] = group;
}

__global__ void voteOr(const int *in, int *out) {
  out[threadIdx.x] = __syncthreads_or(in[threadIdx.x] > 0);
}

/// Reads its neighbour's element of dynamic shared memory after a barrier
/// (`synced`) or without one.
__global__ void neighbour(float *out, bool synced) {
  float *s =
      static_cast<float *>(::merak::runtime::cuda::emulation::dynamicShared());
  int t = threadIdx.x;
  s[t] = float(t);
  if (synced)
    __syncthreads();
  out[t] = s[(t + 1) % blockDim.x];
}

/// Threads 0-15 wait at __syncthreads, the rest of the warp at __syncwarp.
__global__ void divergentBarriers() {
  if (threadIdx.x < 16)
    __syncthreads();
  else
    __syncwarp();
}

__global__ void trapsInBlockOne() {
  if (blockIdx.x == 1 && threadIdx.x == 5)
    __trap();
  __syncthreads();
}

/// Lane 31 returns; the others shuffle with every lane in the mask.
__global__ void shuffleFromReturnedLane(int *out) {
  if (threadIdx.x == 31)
    return;
  out[threadIdx.x] = __shfl_xor_sync(0xffffffffu, int(threadIdx.x), 1);
}

__global__ void writeIndex(int *out) {
  out[blockIdx.x * blockDim.x + threadIdx.x] =
      int(blockIdx.x * blockDim.x + threadIdx.x);
}

uint32_t pack(__nv_bfloat16 lo, __nv_bfloat16 hi) {
  uint16_t l, h;
  std::memcpy(&l, &lo, 2);
  std::memcpy(&h, &hi, 2);
  return uint32_t(l) | uint32_t(h) << 16;
}

/// One m16n8k16 product of A (16 x 16, row-major) and B (16 x 8,
/// row-major here), each lane building its fragments as the PTX ISA lays
/// them out; D written row-major.
__global__ void mmaTile(const __nv_bfloat16 *a, const __nv_bfloat16 *b,
                        float *d) {
  int lane = threadIdx.x, g = lane / 4, t = lane % 4;
  auto A = [&](int r, int c) { return a[r * 16 + c]; };
  auto B = [&](int k, int n) { return b[k * 8 + n]; };
  uint32_t fa[4] = {pack(A(g, 2 * t), A(g, 2 * t + 1)),
                    pack(A(g + 8, 2 * t), A(g + 8, 2 * t + 1)),
                    pack(A(g, 2 * t + 8), A(g, 2 * t + 9)),
                    pack(A(g + 8, 2 * t + 8), A(g + 8, 2 * t + 9))};
  uint32_t b0 = pack(B(2 * t, g), B(2 * t + 1, g));
  uint32_t b1 = pack(B(2 * t + 8, g), B(2 * t + 9, g));
  float c[4] = {1, 1, 1, 1};
  mma16816<__nv_bfloat16>(c, fa, b0, b1);
  d[g * 8 + 2 * t] = c[0];
  d[g * 8 + 2 * t + 1] = c[1];
  d[(g + 8) * 8 + 2 * t] = c[2];
  d[(g + 8) * 8 + 2 * t + 1] = c[3];
}

namespace wmma = nvcuda::wmma;

/// `d = a b^T + d` for 16 x 16 tiles, B read column-major (its rows).
__global__ void wmmaTile(const __nv_bfloat16 *a, const __nv_bfloat16 *b,
                         float *d) {
  wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::row_major> fa;
  wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma::col_major> fb;
  wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
  wmma::load_matrix_sync(acc, d, 16, wmma::mem_row_major);
  wmma::load_matrix_sync(fa, a, 16);
  wmma::load_matrix_sync(fb, b, 16);
  wmma::mma_sync(acc, fa, fb, acc);
  wmma::store_matrix_sync(d, acc, 16, wmma::mem_row_major);
}

//===----------------------------------------------------------------------===//
// Tests
//===----------------------------------------------------------------------===//

TEST(DeviceEmulatorTest, BlocksReduceThroughSharedMemoryAndBarriers) {
  std::vector<float> in(3 * 128);
  for (size_t i = 0; i < in.size(); ++i)
    in[i] = float(i % 128 + 1) * (i < 128 ? 1 : i < 256 ? 2 : -1);
  float *dIn = deviceCopy(in);
  float *dOut = deviceCopy(std::vector<float>(3, 0.f));
  LAUNCH(3, 128, 0, blockSum, dIn, dOut);
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  EXPECT_EQ(hostCopy(dOut, 3), (std::vector<float>{8256, 16512, -8256}));
  cudaFree(dIn);
  cudaFree(dOut);
}

TEST(DeviceEmulatorTest, ShufflesExchangeTheLanesValues) {
  std::vector<int> in(64);
  for (int i = 0; i < 64; ++i)
    in[size_t(i)] = i * i;
  int *dIn = deviceCopy(in);
  int *dOut = deviceCopy(std::vector<int>(64 * 4, 0));
  LAUNCH(1, 64, 0, shuffles, dIn, dOut);
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  std::vector<int> out = hostCopy(dOut, 64 * 4);
  for (int i = 0; i < 64; ++i) {
    int warp = i / 32, lane = i % 32, sum = 0, group = 0;
    for (int l = 0; l < 32; ++l)
      sum += in[size_t(warp * 32 + l)];
    for (int l = lane / 8 * 8; l < lane / 8 * 8 + 8; ++l)
      group += in[size_t(warp * 32 + l)];
    SCOPED_TRACE(i);
    EXPECT_EQ(out[size_t(i) * 4], sum);
    // Past the warp's end, a lane keeps its own value.
    EXPECT_EQ(out[size_t(i) * 4 + 1], in[size_t(lane + 5 < 32 ? i + 5 : i)]);
    EXPECT_EQ(out[size_t(i) * 4 + 2], in[size_t(warp * 32 + 3)]);
    EXPECT_EQ(out[size_t(i) * 4 + 3], group);
  }
  cudaFree(dIn);
  cudaFree(dOut);
}

TEST(DeviceEmulatorTest, SyncthreadsOrVotesOverTheBlock) {
  int *none = deviceCopy(std::vector<int>(96, 0));
  std::vector<int> one(96, 0);
  one[77] = 1;
  int *some = deviceCopy(one);
  int *out = deviceCopy(std::vector<int>(96, -1));
  LAUNCH(1, 96, 0, voteOr, none, out);
  EXPECT_EQ(hostCopy(out, 96), std::vector<int>(96, 0));
  LAUNCH(1, 96, 0, voteOr, some, out);
  EXPECT_EQ(hostCopy(out, 96), std::vector<int>(96, 1));
  cudaFree(none);
  cudaFree(some);
  cudaFree(out);
}

TEST(DeviceEmulatorTest, AMissingBarrierShowsInTheResult) {
  float *out = deviceCopy(std::vector<float>(64, 0.f));
  LAUNCH(1, 64, 64 * sizeof(float), neighbour, out, true);
  std::vector<float> synced = hostCopy(out, 64);
  for (int t = 0; t < 64; ++t)
    EXPECT_EQ(synced[size_t(t)], float((t + 1) % 64));
  // Without the barrier a thread runs to its end before the next one
  // starts: it reads shared memory its neighbour has not written yet,
  // which starts as NaNs.
  LAUNCH(1, 64, 64 * sizeof(float), neighbour, out, false);
  std::vector<float> racing = hostCopy(out, 64);
  EXPECT_TRUE(std::isnan(racing[0]));
  EXPECT_EQ(racing[63], 0.f);
  cudaFree(out);
}

TEST(DeviceEmulatorTest, AConfigurationErrorIsReportedOnceAndNotKept) {
  int *out = deviceCopy(std::vector<int>(64, 0));
  LAUNCH(1, 2048, 0, writeIndex, out);
  cudaError_t e = cudaGetLastError();
  EXPECT_EQ(e, cudaErrorInvalidConfiguration);
  EXPECT_NE(std::string(cudaGetErrorString(e)).find("block 2048x1x1"),
            std::string::npos)
      << cudaGetErrorString(e);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  LAUNCH(2, 32, 0, writeIndex, out);
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  std::vector<int> got = hostCopy(out, 64);
  for (int i = 0; i < 64; ++i)
    EXPECT_EQ(got[size_t(i)], i);
  cudaFree(out);
}

TEST(DeviceEmulatorTest, TheMmaFragmentsAreThePtxLayouts) {
  std::vector<__nv_bfloat16> a(16 * 16), b(16 * 8);
  for (int i = 0; i < 256; ++i)
    a[size_t(i)] = __float2bfloat16(float((i * 7) % 13 - 6) / 4);
  for (int i = 0; i < 128; ++i)
    b[size_t(i)] = __float2bfloat16(float((i * 5) % 11 - 5) / 8);
  auto *dA = deviceCopy(a);
  auto *dB = deviceCopy(b);
  float *dD = deviceCopy(std::vector<float>(16 * 8, 0.f));
  LAUNCH(1, 32, 0, mmaTile, dA, dB, dD);
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  std::vector<float> d = hostCopy(dD, 128);
  for (int r = 0; r < 16; ++r)
    for (int n = 0; n < 8; ++n) {
      float want = 1;
      for (int k = 0; k < 16; ++k)
        want += __bfloat162float(a[size_t(r * 16 + k)]) *
                __bfloat162float(b[size_t(k * 8 + n)]);
      EXPECT_FLOAT_EQ(d[size_t(r * 8 + n)], want) << r << ", " << n;
    }
  cudaFree(dA);
  cudaFree(dB);
  cudaFree(dD);
}

TEST(DeviceEmulatorTest, WmmaProductsAccumulate) {
  std::vector<__nv_bfloat16> a(256), b(256);
  std::vector<float> d(256);
  for (int i = 0; i < 256; ++i) {
    a[size_t(i)] = __float2bfloat16(float(i % 9 - 4) / 2);
    b[size_t(i)] = __float2bfloat16(float(i % 7 - 3) / 4);
    d[size_t(i)] = float(i) / 16;
  }
  auto *dA = deviceCopy(a);
  auto *dB = deviceCopy(b);
  float *dD = deviceCopy(d);
  LAUNCH(1, 32, 0, wmmaTile, dA, dB, dD);
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  std::vector<float> got = hostCopy(dD, 256);
  for (int i = 0; i < 16; ++i)
    for (int j = 0; j < 16; ++j) {
      // B column-major: element (k, j) at j * 16 + k.
      float want = d[size_t(i * 16 + j)];
      for (int k = 0; k < 16; ++k)
        want += __bfloat162float(a[size_t(i * 16 + k)]) *
                __bfloat162float(b[size_t(j * 16 + k)]);
      EXPECT_FLOAT_EQ(got[size_t(i * 16 + j)], want) << i << ", " << j;
    }
  cudaFree(dA);
  cudaFree(dB);
  cudaFree(dD);
}

TEST(DeviceEmulatorDeathTest, ThreadsAtDifferentBarriersFailTheLaunch) {
  EXPECT_EXIT(launchAndReport([] { LAUNCH(2, 32, 0, divergentBarriers); }),
              ::testing::ExitedWithCode(3),
              "cudaErrorLaunchFailure: the kernel launched at "
              "DeviceEmulatorTest.cpp:[0-9]+ failed: the block's threads "
              "wait at different barriers: block \\(0, 0, 0\\), thread "
              "\\(0, 0, 0\\) at __syncthreads, block \\(0, 0, 0\\), thread "
              "\\(16, 0, 0\\) at a warp barrier or shuffle");
}

TEST(DeviceEmulatorDeathTest, ATrapFailsTheLaunchAndEveryLaterCall) {
  EXPECT_EXIT(launchAndReport([] {
                LAUNCH(3, 64, 0, trapsInBlockOne);
                void *p = nullptr;
                // Sticky: later calls fail too, and launches do nothing.
                if (cudaMalloc(&p, 16) != cudaErrorLaunchFailure)
                  std::_Exit(4);
              }),
              ::testing::ExitedWithCode(3),
              "failed: __trap\\(\\) at block \\(1, 0, 0\\), thread \\(5, 0, "
              "0\\)");
}

TEST(DeviceEmulatorDeathTest, AShuffleNamingAReturnedLaneFails) {
  EXPECT_EXIT(launchAndReport([] {
                int *out = nullptr;
                cudaMalloc(reinterpret_cast<void **>(&out), 32 * sizeof(int));
                LAUNCH(1, 32, 0, shuffleFromReturnedLane, out);
              }),
              ::testing::ExitedWithCode(3),
              "names lane 31 in its mask, which has returned");
}

} // namespace
