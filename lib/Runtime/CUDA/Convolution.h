//===- Convolution.h - pooling, batch norm, conv bias kernels ---*- C++ -*-===//
//
//
// The device kernels of the convolution family (Convolution.cu) and the
// index arithmetic they share with the host and the unit tests: pooling
// output sizes and windows as PyTorch computes them (ATen's
// pooling_output_shape, cpu_max_pool, cpu_avg_pool, adaptive start/end),
// and the split of a per-channel reduction into blocks. Convolutions
// themselves run in cuDNN (Convolution.cpp); the kernels here add the
// bias, reduce its gradient, pool, and batch-normalize.
//
// Every reduction runs in a fixed order (no atomics), so results are the
// same run after run; backwards of pooling gather (each input element sums
// the gradients of the windows that chose it) instead of scattering.
//
//===----------------------------------------------------------------------===//
#ifndef MERAK_LIB_RUNTIME_CUDA_CONVOLUTION_H
#define MERAK_LIB_RUNTIME_CUDA_CONVOLUTION_H

#include "CudaCommon.h"

namespace merak::runtime::cuda {
namespace conv {

//===----------------------------------------------------------------------===//
// Index arithmetic (host and device)
//===----------------------------------------------------------------------===//

/// `a / b` rounded towards negative infinity (`b > 0`).
MERAK_HD int64_t floorDiv(int64_t a, int64_t b) {
  int64_t q = a / b;
  return (a % b != 0 && a < 0) ? q - 1 : q;
}
/// `a / b` rounded towards positive infinity (`b > 0`).
MERAK_HD int64_t ceilDivSigned(int64_t a, int64_t b) {
  return -floorDiv(-a, b);
}

/// One spatial dimension of a pooling: the input and output sizes and the
/// window's size, step, left (= right) padding and dilation.
struct PoolDim {
  int64_t in = 1, out = 1, kernel = 1, stride = 1, pad = 0, dilation = 1;
};

/// Both dimensions; `countIncludePad` is average pooling's divisor rule.
struct Pool2d {
  PoolDim h, w;
  bool countIncludePad = true;
};

/// PyTorch's pooling_output_shape: windows that fit, or with `ceilMode`
/// also a last partial window, provided it starts inside the input or its
/// left padding.
MERAK_HD int64_t poolOutputSize(int64_t in, int64_t kernel, int64_t stride,
                                int64_t pad, int64_t dilation, bool ceilMode) {
  int64_t out = floorDiv(in + 2 * pad - dilation * (kernel - 1) - 1 +
                             (ceilMode ? stride - 1 : 0),
                         stride) +
                1;
  if (ceilMode && (out - 1) * stride >= in + pad)
    --out;
  return out;
}

/// The outputs `[lo, hi]` (clamped to the output) whose windows span input
/// position `i`: `o * stride - pad <= i <= o * stride - pad + (kernel - 1) *
/// dilation`. With a dilation above 1 not every one of them reads `i`.
MERAK_HD void windowsSpanning(int64_t i, const PoolDim &d, int64_t &lo,
                              int64_t &hi) {
  lo = ceilDivSigned(i + d.pad - (d.kernel - 1) * d.dilation, d.stride);
  if (lo < 0)
    lo = 0;
  hi = floorDiv(i + d.pad, d.stride);
  if (hi > d.out - 1)
    hi = d.out - 1;
}

/// Max pooling's window of output `o` as ATen's cpu_max_pool walks it:
/// positions `begin, begin + dilation, ...` below `end`, the first of them
/// the first inside the input.
MERAK_HD void maxWindow(int64_t o, const PoolDim &d, int64_t &begin,
                        int64_t &end) {
  begin = o * d.stride - d.pad;
  end = begin + (d.kernel - 1) * d.dilation + 1;
  if (end > d.in)
    end = d.in;
  while (begin < 0)
    begin += d.dilation;
}

/// Average pooling's window of output `o` (ATen's cpu_avg_pool): the
/// positions `[begin, end)` inside the input, and `padded`, the window's
/// length counting padding (but not past the right padding).
MERAK_HD void avgWindow(int64_t o, const PoolDim &d, int64_t &begin,
                        int64_t &end, int64_t &padded) {
  int64_t start = o * d.stride - d.pad;
  int64_t stop = start + d.kernel;
  if (stop > d.in + d.pad)
    stop = d.in + d.pad;
  padded = stop - start;
  begin = start < 0 ? 0 : start;
  end = stop > d.in ? d.in : stop;
}

/// What average pooling divides output `(oh, ow)`'s sum by.
MERAK_HD int64_t avgDivisor(int64_t oh, int64_t ow, const Pool2d &p) {
  int64_t h0, h1, hp, w0, w1, wp;
  avgWindow(oh, p.h, h0, h1, hp);
  avgWindow(ow, p.w, w0, w1, wp);
  if (p.countIncludePad)
    return hp * wp;
  return (h1 - h0) * (w1 - w0);
}

/// Adaptive pooling's window of output `o` of `out` over an input of `in`:
/// `[floor(o * in / out), ceil((o + 1) * in / out))`. Swapping `in` and
/// `out` gives the outputs whose windows hold input `o`.
MERAK_HD int64_t adaptiveStart(int64_t o, int64_t out, int64_t in) {
  return (o / out) * in + ((o % out) * in) / out;
}
MERAK_HD int64_t adaptiveEnd(int64_t o, int64_t out, int64_t in) {
  return 1 + ((o + 1) * in - 1) / out;
}

/// How many blocks share the reduction of one channel's `perChannel`
/// elements: enough blocks in all to fill a GPU, each with a few thousand
/// elements, at most 64 per channel. It depends on the sizes only, so the
/// order of the sums does too.
MERAK_HD int64_t channelChunks(int64_t channels, int64_t perChannel) {
  int64_t byWork = perChannel / 4096;
  int64_t byGrid = ceilDiv(1024, channels > 0 ? channels : 1);
  int64_t chunks = byWork < byGrid ? byWork : byGrid;
  if (chunks > 64)
    chunks = 64;
  return chunks < 1 ? 1 : chunks;
}

//===----------------------------------------------------------------------===//
// Launchers (Convolution.cu). Tensors are dense row-major; "Acc" arrays
// are of `Acc<T>` (float for f16, bf16 and f32, double for f64) for the
// element type `T` of the main operand.
//===----------------------------------------------------------------------===//

/// `y[n, c, s] = bias[c]` for `y` `[n, channels, inner]`; `bias` of `y`'s
/// type.
void fillChannels(const View &y, const View &bias, int64_t channels,
                  int64_t inner, cudaStream_t stream);

/// What `reduceChannels` sums per channel `c`, over `x` (and `g`) of shape
/// `[n, channels, inner]`, into three sums.
enum class ChannelSum {
  Value,         // x
  SquaredDev,    // (x - mean)^2
  BackwardStats, // (x - mean)^2, g, g * (x - mean)
  GradientStats, // 0, g, g * (x - mean)
};

/// `sums[c * 3 + k]` (Acc) for each channel: partial sums of `chunks`
/// blocks per channel (`channelChunks`) into `partials` (Acc, `channels *
/// chunks * 3`), then summed in order. `mean[c * meanStride] / meanDivisor`
/// is the channel's mean where the sum needs one.
void reduceChannels(ChannelSum what, const View &x, const View *g,
                    const void *mean, int64_t meanStride, double meanDivisor,
                    int64_t channels, int64_t inner, void *partials,
                    int64_t chunks, void *sums, cudaStream_t stream);

/// The per-channel factors of a batch norm forward (Acc arrays of
/// `channels`): `alpha`, `beta` with `y = x * alpha + beta`; in training,
/// from `sums` (sum of x, `count` per channel) and `devSums` (sum of
/// squared deviations) with the new running statistics, else from the
/// running statistics. `weight`, `bias`, `runMean`, `runVar` are Acc.
void batchNormForwardFactors(ElemType type, bool training, int64_t channels,
                             double count, double momentum, double eps,
                             const void *sums, const void *devSums,
                             const void *weight, const void *bias,
                             const void *runMean, const void *runVar,
                             void *alpha, void *beta, void *newMean,
                             void *newVar, cudaStream_t stream);

/// `y = x * alpha[c] + beta[c]` over `[n, channels, inner]`.
void channelAffine(const View &x, const View &y, const void *alpha,
                   const void *beta, int64_t channels, int64_t inner,
                   cudaStream_t stream);

/// Batch norm backward: from `sums` (training: sum of x), `stats` (the
/// `BackwardStats` or `GradientStats` sums) and the running statistics,
/// the weight and bias gradients (Acc) and `factors` (Acc, `channels * 4`)
/// for `batchNormGradInput`.
void batchNormBackwardFactors(ElemType type, bool training, int64_t channels,
                              double count, double eps, const void *sums,
                              const void *stats, const void *weight,
                              const void *runMean, const void *runVar,
                              void *gradWeight, void *gradBias, void *factors,
                              cudaStream_t stream);

/// `gx` from `g`, `x` and the factors of `batchNormBackwardFactors`.
void batchNormGradInput(bool training, const View &g, const View &x,
                        const View &gx, const void *factors, int64_t channels,
                        int64_t inner, cudaStream_t stream);

/// Max pooling of `planes` planes of `p.h.in x p.w.in` into `y` (when not
/// null) and the plane offset of each window's maximum into `indices`
/// (when not null; -1 for a window with no element).
void maxPool2d(const View &x, const View *y, int64_t *indices, int64_t planes,
               const Pool2d &p, cudaStream_t stream);
/// Each input element the sum of the gradients of the windows whose
/// maximum it is (`indices` from `maxPool2d`).
void maxPool2dBackward(const View &grad, const int64_t *indices, const View &gx,
                       int64_t planes, const Pool2d &p, cudaStream_t stream);

void avgPool2d(const View &x, const View &y, int64_t planes, const Pool2d &p,
               cudaStream_t stream);
void avgPool2dBackward(const View &grad, const View &gx, int64_t planes,
                       const Pool2d &p, cudaStream_t stream);

/// Adaptive average pooling: `p.h` and `p.w` give only `in` and `out`.
void adaptiveAvgPool2d(const View &x, const View &y, int64_t planes,
                       const Pool2d &p, cudaStream_t stream);
void adaptiveAvgPool2dBackward(const View &grad, const View &gx, int64_t planes,
                               const Pool2d &p, cudaStream_t stream);

} // namespace conv
} // namespace merak::runtime::cuda

#endif // MERAK_LIB_RUNTIME_CUDA_CONVOLUTION_H
