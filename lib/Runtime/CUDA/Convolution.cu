//===- Convolution.cu - CUDA kernels: pooling, batch norm, conv bias ------===//
//
// One thread per output element for the forwards, one per input element
// for the backwards (gathering from the windows that read it), and
// per-channel reductions in two fixed-order steps (blocks of a channel's
// chunk, then the chunks in order). Semantics follow ATen's CPU kernels
// (cpu_max_pool, cpu_avg_pool, cpu_adaptive_avg_pool, batch_norm_cpu).
//
//===----------------------------------------------------------------------===//

#include "Convolution.h"

#include <cmath>

namespace merak::runtime::cuda::conv {

namespace {

constexpr int kReduceThreads = 256;

#define MERAK_GRID_LOOP(i, n)                                                  \
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < (n);    \
       i += int64_t(gridDim.x) * blockDim.x)

template <typename A> MERAK_DEVICE bool isNan(A v) { return v != v; }

//===----------------------------------------------------------------------===//
// Per-channel reductions
//===----------------------------------------------------------------------===//

template <typename T>
__global__ void fillChannelsKernel(T *y, const T *bias, int64_t channels,
                                   int64_t inner, int64_t n) {
  MERAK_GRID_LOOP(i, n) { y[i] = bias[(i / inner) % channels]; }
}

template <typename T, ChannelSum What>
__global__ void __launch_bounds__(kReduceThreads)
    channelPartialsKernel(const T *x, const T *g, const Acc<T> *mean,
                          int64_t meanStride, Acc<T> meanDivisor,
                          int64_t channels, int64_t inner, int64_t perChannel,
                          int64_t chunks, Acc<T> *partials) {
  using A = Acc<T>;
  int64_t block = blockIdx.x;
  int64_t c = block / chunks, chunk = block % chunks;
  int64_t per = ceilDiv(perChannel, chunks);
  int64_t begin = chunk * per;
  int64_t end = begin + per < perChannel ? begin + per : perChannel;
  A m = 0;
  if constexpr (What != ChannelSum::Value)
    m = mean[c * meanStride] / meanDivisor;
  A s0 = 0, s1 = 0, s2 = 0;
  for (int64_t j = begin + threadIdx.x; j < end; j += blockDim.x) {
    int64_t n = j / inner;
    int64_t off = (n * channels + c) * inner + (j - n * inner);
    A xv = toAcc(x[off]);
    if constexpr (What == ChannelSum::Value) {
      s0 += xv;
    } else {
      A d = xv - m;
      if constexpr (What != ChannelSum::GradientStats)
        s0 += d * d;
      if constexpr (What == ChannelSum::BackwardStats ||
                    What == ChannelSum::GradientStats) {
        A gv = toAcc(g[off]);
        s1 += gv;
        s2 += gv * d;
      }
    }
  }
  __shared__ A shared[3][kReduceThreads];
  int t = threadIdx.x;
  shared[0][t] = s0;
  shared[1][t] = s1;
  shared[2][t] = s2;
  __syncthreads();
  for (int half = kReduceThreads / 2; half > 0; half /= 2) {
    if (t < half)
      for (int k = 0; k < 3; ++k)
        shared[k][t] += shared[k][t + half];
    __syncthreads();
  }
  if (t < 3)
    partials[block * 3 + t] = shared[t][0];
}

template <typename A>
__global__ void sumChunksKernel(const A *partials, int64_t chunks, A *sums,
                                int64_t n) {
  MERAK_GRID_LOOP(i, n) {
    int64_t c = i / 3, k = i % 3;
    A s = 0;
    for (int64_t chunk = 0; chunk < chunks; ++chunk)
      s += partials[(c * chunks + chunk) * 3 + k];
    sums[i] = s;
  }
}

//===----------------------------------------------------------------------===//
// Batch norm
//===----------------------------------------------------------------------===//

template <typename A>
__global__ void
batchNormForwardFactorsKernel(bool training, int64_t channels, A count,
                              double momentum, A eps, const A *sums,
                              const A *devSums, const A *weight, const A *bias,
                              const A *runMean, const A *runVar, A *alpha,
                              A *beta, A *newMean, A *newVar) {
  MERAK_GRID_LOOP(c, channels) {
    A mean, invstd;
    if (training) {
      mean = sums[c * 3] / count;
      A var = devSums[c * 3] / count;
      invstd = A(1) / sqrt(var + eps);
      // PyTorch's running update: the unbiased variance, momentum in
      // double.
      A unbiased = devSums[c * 3] / (count - A(1));
      newMean[c] =
          A(momentum * double(mean) + (1 - momentum) * double(runMean[c]));
      newVar[c] =
          A(momentum * double(unbiased) + (1 - momentum) * double(runVar[c]));
    } else {
      mean = runMean[c];
      invstd = A(1) / sqrt(runVar[c] + eps);
    }
    A a = invstd * weight[c];
    alpha[c] = a;
    beta[c] = bias[c] - mean * a;
  }
}

template <typename T>
__global__ void channelAffineKernel(const T *x, T *y, const Acc<T> *alpha,
                                    const Acc<T> *beta, int64_t channels,
                                    int64_t inner, int64_t n) {
  MERAK_GRID_LOOP(i, n) {
    int64_t c = (i / inner) % channels;
    y[i] = convertTo<T>(toAcc(x[i]) * alpha[c] + beta[c]);
  }
}

template <typename A>
__global__ void
batchNormBackwardFactorsKernel(bool training, int64_t channels, A count, A eps,
                               const A *sums, const A *stats, const A *weight,
                               const A *runMean, const A *runVar, A *gradWeight,
                               A *gradBias, A *factors) {
  MERAK_GRID_LOOP(c, channels) {
    A mean, invstd;
    if (training) {
      mean = sums[c * 3] / count;
      invstd = A(1) / sqrt(stats[c * 3] / count + eps);
    } else {
      mean = runMean[c];
      invstd = A(1) / sqrt(runVar[c] + eps);
    }
    A sumG = stats[c * 3 + 1], dotp = stats[c * 3 + 2];
    gradWeight[c] = dotp * invstd;
    gradBias[c] = sumG;
    factors[c * 4] = mean;
    factors[c * 4 + 1] = dotp * invstd * invstd / count;
    factors[c * 4 + 2] = sumG / count;
    factors[c * 4 + 3] = invstd * weight[c];
  }
}

template <typename T, bool Training>
__global__ void
batchNormGradInputKernel(const T *g, const T *x, T *gx, const Acc<T> *factors,
                         int64_t channels, int64_t inner, int64_t n) {
  using A = Acc<T>;
  MERAK_GRID_LOOP(i, n) {
    const A *f = factors + ((i / inner) % channels) * 4;
    A gv = toAcc(g[i]);
    if constexpr (Training) {
      A dx = (toAcc(x[i]) - f[0]) * f[1];
      gx[i] = convertTo<T>((gv - f[2] - dx) * f[3]);
    } else {
      gx[i] = convertTo<T>(gv * f[3]);
    }
  }
}

//===----------------------------------------------------------------------===//
// Pooling
//===----------------------------------------------------------------------===//

template <typename T>
__global__ void maxPoolKernel(const T *x, T *y, int64_t *indices, Pool2d p,
                              int64_t n) {
  using A = Acc<T>;
  MERAK_GRID_LOOP(i, n) {
    int64_t ow = i % p.w.out, rest = i / p.w.out;
    int64_t oh = rest % p.h.out, plane = rest / p.h.out;
    int64_t h0, h1, w0, w1;
    maxWindow(oh, p.h, h0, h1);
    maxWindow(ow, p.w, w0, w1);
    const T *in = x + plane * p.h.in * p.w.in;
    // cpu_max_pool: the first maximum in window order, a NaN replacing
    // whatever came before it.
    A best = A(-INFINITY);
    int64_t at = h0 < h1 && w0 < w1 ? h0 * p.w.in + w0 : -1;
    for (int64_t ih = h0; ih < h1; ih += p.h.dilation)
      for (int64_t iw = w0; iw < w1; iw += p.w.dilation) {
        A v = toAcc(in[ih * p.w.in + iw]);
        if (v > best || isNan(v)) {
          best = v;
          at = ih * p.w.in + iw;
        }
      }
    if (y)
      y[i] = convertTo<T>(best);
    if (indices)
      indices[i] = at;
  }
}

template <typename T>
__global__ void maxPoolBackwardKernel(const T *grad, const int64_t *indices,
                                      T *gx, Pool2d p, int64_t n) {
  using A = Acc<T>;
  MERAK_GRID_LOOP(i, n) {
    int64_t iw = i % p.w.in, rest = i / p.w.in;
    int64_t ih = rest % p.h.in, plane = rest / p.h.in;
    int64_t hLo, hHi, wLo, wHi;
    windowsSpanning(ih, p.h, hLo, hHi);
    windowsSpanning(iw, p.w, wLo, wHi);
    int64_t self = ih * p.w.in + iw;
    int64_t base = plane * p.h.out * p.w.out;
    A sum = 0;
    for (int64_t oh = hLo; oh <= hHi; ++oh)
      for (int64_t ow = wLo; ow <= wHi; ++ow) {
        int64_t o = base + oh * p.w.out + ow;
        if (indices[o] == self)
          sum += toAcc(grad[o]);
      }
    gx[i] = convertTo<T>(sum);
  }
}

template <typename T>
__global__ void avgPoolKernel(const T *x, T *y, Pool2d p, int64_t n) {
  using A = Acc<T>;
  MERAK_GRID_LOOP(i, n) {
    int64_t ow = i % p.w.out, rest = i / p.w.out;
    int64_t oh = rest % p.h.out, plane = rest / p.h.out;
    int64_t h0, h1, hp, w0, w1, wp;
    avgWindow(oh, p.h, h0, h1, hp);
    avgWindow(ow, p.w, w0, w1, wp);
    if (h0 >= h1 || w0 >= w1) {
      y[i] = convertTo<T>(A(0));
      continue;
    }
    const T *in = x + plane * p.h.in * p.w.in;
    A sum = 0;
    for (int64_t ih = h0; ih < h1; ++ih)
      for (int64_t iw = w0; iw < w1; ++iw)
        sum += toAcc(in[ih * p.w.in + iw]);
    int64_t divisor = p.countIncludePad ? hp * wp : (h1 - h0) * (w1 - w0);
    y[i] = convertTo<T>(sum / A(divisor));
  }
}

template <typename T>
__global__ void avgPoolBackwardKernel(const T *grad, T *gx, Pool2d p,
                                      int64_t n) {
  using A = Acc<T>;
  MERAK_GRID_LOOP(i, n) {
    int64_t iw = i % p.w.in, rest = i / p.w.in;
    int64_t ih = rest % p.h.in, plane = rest / p.h.in;
    int64_t hLo, hHi, wLo, wHi;
    windowsSpanning(ih, p.h, hLo, hHi);
    windowsSpanning(iw, p.w, wLo, wHi);
    const T *g = grad + plane * p.h.out * p.w.out;
    A sum = 0;
    for (int64_t oh = hLo; oh <= hHi; ++oh)
      for (int64_t ow = wLo; ow <= wHi; ++ow)
        sum += toAcc(g[oh * p.w.out + ow]) / A(avgDivisor(oh, ow, p));
    gx[i] = convertTo<T>(sum);
  }
}

template <typename T>
__global__ void adaptiveAvgPoolKernel(const T *x, T *y, Pool2d p, int64_t n) {
  using A = Acc<T>;
  MERAK_GRID_LOOP(i, n) {
    int64_t ow = i % p.w.out, rest = i / p.w.out;
    int64_t oh = rest % p.h.out, plane = rest / p.h.out;
    int64_t h0 = adaptiveStart(oh, p.h.out, p.h.in);
    int64_t h1 = adaptiveEnd(oh, p.h.out, p.h.in);
    int64_t w0 = adaptiveStart(ow, p.w.out, p.w.in);
    int64_t w1 = adaptiveEnd(ow, p.w.out, p.w.in);
    const T *in = x + plane * p.h.in * p.w.in;
    A sum = 0;
    for (int64_t ih = h0; ih < h1; ++ih)
      for (int64_t iw = w0; iw < w1; ++iw)
        sum += toAcc(in[ih * p.w.in + iw]);
    y[i] = convertTo<T>(sum / A(h1 - h0) / A(w1 - w0));
  }
}

template <typename T>
__global__ void adaptiveAvgPoolBackwardKernel(const T *grad, T *gx, Pool2d p,
                                              int64_t n) {
  using A = Acc<T>;
  MERAK_GRID_LOOP(i, n) {
    int64_t iw = i % p.w.in, rest = i / p.w.in;
    int64_t ih = rest % p.h.in, plane = rest / p.h.in;
    int64_t hLo = adaptiveStart(ih, p.h.in, p.h.out);
    int64_t hHi = adaptiveEnd(ih, p.h.in, p.h.out);
    int64_t wLo = adaptiveStart(iw, p.w.in, p.w.out);
    int64_t wHi = adaptiveEnd(iw, p.w.in, p.w.out);
    const T *g = grad + plane * p.h.out * p.w.out;
    A sum = 0;
    for (int64_t oh = hLo; oh < hHi; ++oh) {
      A kh = A(adaptiveEnd(oh, p.h.out, p.h.in) -
               adaptiveStart(oh, p.h.out, p.h.in));
      for (int64_t ow = wLo; ow < wHi; ++ow) {
        A kw = A(adaptiveEnd(ow, p.w.out, p.w.in) -
                 adaptiveStart(ow, p.w.out, p.w.in));
        sum += toAcc(g[oh * p.w.out + ow]) / kh / kw;
      }
    }
    gx[i] = convertTo<T>(sum);
  }
}

void requireDense(const View &v, const char *what) {
  if (!v.isContiguous())
    throw CudaError(std::string(what) + ": expects a dense operand");
}

template <typename T>
void launchChannelPartials(ChannelSum what, const View &x, const View *g,
                           const void *mean, int64_t meanStride,
                           double meanDivisor, int64_t channels, int64_t inner,
                           int64_t perChannel, int64_t chunks, void *partials,
                           void *sums, cudaStream_t stream) {
  using A = Acc<T>;
  unsigned grid = unsigned(channels * chunks);
  const T *xp = x.ptr<T>();
  const T *gp = g ? g->ptr<T>() : nullptr;
  const A *mp = static_cast<const A *>(mean);
  A *pp = static_cast<A *>(partials);
  switch (what) {
  case ChannelSum::Value:
    channelPartialsKernel<T, ChannelSum::Value>
        <<<grid, kReduceThreads, 0, stream>>>(xp, gp, mp, meanStride,
                                              A(meanDivisor), channels, inner,
                                              perChannel, chunks, pp);
    break;
  case ChannelSum::SquaredDev:
    channelPartialsKernel<T, ChannelSum::SquaredDev>
        <<<grid, kReduceThreads, 0, stream>>>(xp, gp, mp, meanStride,
                                              A(meanDivisor), channels, inner,
                                              perChannel, chunks, pp);
    break;
  case ChannelSum::BackwardStats:
    channelPartialsKernel<T, ChannelSum::BackwardStats>
        <<<grid, kReduceThreads, 0, stream>>>(xp, gp, mp, meanStride,
                                              A(meanDivisor), channels, inner,
                                              perChannel, chunks, pp);
    break;
  case ChannelSum::GradientStats:
    channelPartialsKernel<T, ChannelSum::GradientStats>
        <<<grid, kReduceThreads, 0, stream>>>(xp, gp, mp, meanStride,
                                              A(meanDivisor), channels, inner,
                                              perChannel, chunks, pp);
    break;
  }
  checkLaunch("channel sums");
  Launch l = linearLaunch(channels * 3);
  sumChunksKernel<A><<<l.grid, l.block, 0, stream>>>(
      pp, chunks, static_cast<A *>(sums), channels * 3);
  checkLaunch("channel sums");
}

} // namespace

void fillChannels(const View &y, const View &bias, int64_t channels,
                  int64_t inner, cudaStream_t stream) {
  int64_t n = y.numel();
  if (n == 0)
    return;
  requireDense(y, "conv2d bias");
  requireDense(bias, "conv2d bias");
  Launch l = linearLaunch(n);
  MERAK_CUDA_DISPATCH_FLOAT(y.type, "conv2d bias", T,
                            fillChannelsKernel<T>
                            <<<l.grid, l.block, 0, stream>>>(
                                y.ptr<T>(), bias.ptr<T>(), channels, inner, n));
  checkLaunch("conv2d bias");
}

void reduceChannels(ChannelSum what, const View &x, const View *g,
                    const void *mean, int64_t meanStride, double meanDivisor,
                    int64_t channels, int64_t inner, void *partials,
                    int64_t chunks, void *sums, cudaStream_t stream) {
  if (channels == 0)
    return;
  requireDense(x, "channel sums");
  if (g)
    requireDense(*g, "channel sums");
  if (channels * chunks > int64_t(0x7fffffff))
    throw CudaError("channel sums: too many channels");
  int64_t perChannel = x.numel() / channels;
  MERAK_CUDA_DISPATCH_FLOAT(
      x.type, "channel sums", T,
      launchChannelPartials<T>(what, x, g, mean, meanStride, meanDivisor,
                               channels, inner, perChannel, chunks, partials,
                               sums, stream));
}

void batchNormForwardFactors(ElemType type, bool training, int64_t channels,
                             double count, double momentum, double eps,
                             const void *sums, const void *devSums,
                             const void *weight, const void *bias,
                             const void *runMean, const void *runVar,
                             void *alpha, void *beta, void *newMean,
                             void *newVar, cudaStream_t stream) {
  if (channels == 0)
    return;
  Launch l = linearLaunch(channels);
  auto run = [&](auto zero) {
    using A = decltype(zero);
    batchNormForwardFactorsKernel<A><<<l.grid, l.block, 0, stream>>>(
        training, channels, A(count), momentum, A(eps),
        static_cast<const A *>(sums), static_cast<const A *>(devSums),
        static_cast<const A *>(weight), static_cast<const A *>(bias),
        static_cast<const A *>(runMean), static_cast<const A *>(runVar),
        static_cast<A *>(alpha), static_cast<A *>(beta),
        static_cast<A *>(newMean), static_cast<A *>(newVar));
  };
  if (type == ElemType::F64)
    run(0.0);
  else
    run(0.0f);
  checkLaunch("batch_norm");
}

void channelAffine(const View &x, const View &y, const void *alpha,
                   const void *beta, int64_t channels, int64_t inner,
                   cudaStream_t stream) {
  int64_t n = y.numel();
  if (n == 0)
    return;
  requireDense(x, "batch_norm");
  requireDense(y, "batch_norm");
  Launch l = linearLaunch(n);
  MERAK_CUDA_DISPATCH_FLOAT(
      y.type, "batch_norm", T,
      channelAffineKernel<T><<<l.grid, l.block, 0, stream>>>(
          x.ptr<T>(), y.ptr<T>(), static_cast<const Acc<T> *>(alpha),
          static_cast<const Acc<T> *>(beta), channels, inner, n));
  checkLaunch("batch_norm");
}

void batchNormBackwardFactors(ElemType type, bool training, int64_t channels,
                              double count, double eps, const void *sums,
                              const void *stats, const void *weight,
                              const void *runMean, const void *runVar,
                              void *gradWeight, void *gradBias, void *factors,
                              cudaStream_t stream) {
  if (channels == 0)
    return;
  Launch l = linearLaunch(channels);
  auto run = [&](auto zero) {
    using A = decltype(zero);
    batchNormBackwardFactorsKernel<A><<<l.grid, l.block, 0, stream>>>(
        training, channels, A(count), A(eps), static_cast<const A *>(sums),
        static_cast<const A *>(stats), static_cast<const A *>(weight),
        static_cast<const A *>(runMean), static_cast<const A *>(runVar),
        static_cast<A *>(gradWeight), static_cast<A *>(gradBias),
        static_cast<A *>(factors));
  };
  if (type == ElemType::F64)
    run(0.0);
  else
    run(0.0f);
  checkLaunch("batch_norm_backward");
}

void batchNormGradInput(bool training, const View &g, const View &x,
                        const View &gx, const void *factors, int64_t channels,
                        int64_t inner, cudaStream_t stream) {
  int64_t n = gx.numel();
  if (n == 0)
    return;
  requireDense(g, "batch_norm_backward");
  requireDense(x, "batch_norm_backward");
  requireDense(gx, "batch_norm_backward");
  Launch l = linearLaunch(n);
  MERAK_CUDA_DISPATCH_FLOAT(gx.type, "batch_norm_backward", T, {
    auto *f = static_cast<const Acc<T> *>(factors);
    if (training)
      batchNormGradInputKernel<T, true><<<l.grid, l.block, 0, stream>>>(
          g.ptr<T>(), x.ptr<T>(), gx.ptr<T>(), f, channels, inner, n);
    else
      batchNormGradInputKernel<T, false><<<l.grid, l.block, 0, stream>>>(
          g.ptr<T>(), x.ptr<T>(), gx.ptr<T>(), f, channels, inner, n);
  });
  checkLaunch("batch_norm_backward");
}

void maxPool2d(const View &x, const View *y, int64_t *indices, int64_t planes,
               const Pool2d &p, cudaStream_t stream) {
  int64_t n = planes * p.h.out * p.w.out;
  if (n == 0)
    return;
  requireDense(x, "max_pool2d");
  if (y)
    requireDense(*y, "max_pool2d");
  Launch l = linearLaunch(n);
  MERAK_CUDA_DISPATCH_FLOAT(
      x.type, "max_pool2d", T,
      maxPoolKernel<T><<<l.grid, l.block, 0, stream>>>(
          x.ptr<T>(), y ? y->ptr<T>() : nullptr, indices, p, n));
  checkLaunch("max_pool2d");
}

void maxPool2dBackward(const View &grad, const int64_t *indices, const View &gx,
                       int64_t planes, const Pool2d &p, cudaStream_t stream) {
  int64_t n = planes * p.h.in * p.w.in;
  if (n == 0)
    return;
  requireDense(grad, "max_pool2d_backward");
  requireDense(gx, "max_pool2d_backward");
  Launch l = linearLaunch(n);
  MERAK_CUDA_DISPATCH_FLOAT(gx.type, "max_pool2d_backward", T,
                            maxPoolBackwardKernel<T>
                            <<<l.grid, l.block, 0, stream>>>(
                                grad.ptr<T>(), indices, gx.ptr<T>(), p, n));
  checkLaunch("max_pool2d_backward");
}

void avgPool2d(const View &x, const View &y, int64_t planes, const Pool2d &p,
               cudaStream_t stream) {
  int64_t n = planes * p.h.out * p.w.out;
  if (n == 0)
    return;
  requireDense(x, "avg_pool2d");
  requireDense(y, "avg_pool2d");
  Launch l = linearLaunch(n);
  MERAK_CUDA_DISPATCH_FLOAT(x.type, "avg_pool2d", T,
                            avgPoolKernel<T><<<l.grid, l.block, 0, stream>>>(
                                x.ptr<T>(), y.ptr<T>(), p, n));
  checkLaunch("avg_pool2d");
}

void avgPool2dBackward(const View &grad, const View &gx, int64_t planes,
                       const Pool2d &p, cudaStream_t stream) {
  int64_t n = planes * p.h.in * p.w.in;
  if (n == 0)
    return;
  requireDense(grad, "avg_pool2d_backward");
  requireDense(gx, "avg_pool2d_backward");
  Launch l = linearLaunch(n);
  MERAK_CUDA_DISPATCH_FLOAT(
      gx.type, "avg_pool2d_backward", T,
      avgPoolBackwardKernel<T>
      <<<l.grid, l.block, 0, stream>>>(grad.ptr<T>(), gx.ptr<T>(), p, n));
  checkLaunch("avg_pool2d_backward");
}

void adaptiveAvgPool2d(const View &x, const View &y, int64_t planes,
                       const Pool2d &p, cudaStream_t stream) {
  int64_t n = planes * p.h.out * p.w.out;
  if (n == 0)
    return;
  requireDense(x, "adaptive_avg_pool2d");
  requireDense(y, "adaptive_avg_pool2d");
  Launch l = linearLaunch(n);
  MERAK_CUDA_DISPATCH_FLOAT(
      x.type, "adaptive_avg_pool2d", T,
      adaptiveAvgPoolKernel<T>
      <<<l.grid, l.block, 0, stream>>>(x.ptr<T>(), y.ptr<T>(), p, n));
  checkLaunch("adaptive_avg_pool2d");
}

void adaptiveAvgPool2dBackward(const View &grad, const View &gx, int64_t planes,
                               const Pool2d &p, cudaStream_t stream) {
  int64_t n = planes * p.h.in * p.w.in;
  if (n == 0)
    return;
  requireDense(grad, "adaptive_avg_pool2d_backward");
  requireDense(gx, "adaptive_avg_pool2d_backward");
  Launch l = linearLaunch(n);
  MERAK_CUDA_DISPATCH_FLOAT(
      gx.type, "adaptive_avg_pool2d_backward", T,
      adaptiveAvgPoolBackwardKernel<T>
      <<<l.grid, l.block, 0, stream>>>(grad.ptr<T>(), gx.ptr<T>(), p, n));
  checkLaunch("adaptive_avg_pool2d_backward");
}

} // namespace merak::runtime::cuda::conv
