//===- CudaConvolutionTest.cpp - pooling windows and channel splits -------===//
//
// The index arithmetic of the CUDA convolution family (Convolution.h) on
// the host: pooling output sizes with and without ceil mode, the windows
// of max, average and adaptive pooling and their inverses (which outputs
// read an input, for the gathering backwards), checked against direct
// enumeration; and the split of per-channel reductions.
//
//===----------------------------------------------------------------------===//

#include "../../lib/Runtime/CUDA/Convolution.h"

#include <gtest/gtest.h>

#include <set>

using namespace merak::runtime::cuda;
using namespace merak::runtime::cuda::conv;

namespace {

TEST(CudaConvolution, SignedDivision) {
  EXPECT_EQ(floorDiv(7, 2), 3);
  EXPECT_EQ(floorDiv(-7, 2), -4);
  EXPECT_EQ(floorDiv(-8, 2), -4);
  EXPECT_EQ(floorDiv(0, 3), 0);
  EXPECT_EQ(ceilDivSigned(7, 2), 4);
  EXPECT_EQ(ceilDivSigned(-7, 2), -3);
  EXPECT_EQ(ceilDivSigned(-8, 2), -4);
  EXPECT_EQ(ceilDivSigned(8, 2), 4);
}

TEST(CudaConvolution, PoolOutputSizeMatchesPyTorch) {
  // nn.MaxPool2d(2, 2) on 5: 2, with ceil_mode 3.
  EXPECT_EQ(poolOutputSize(5, 2, 2, 0, 1, false), 2);
  EXPECT_EQ(poolOutputSize(5, 2, 2, 0, 1, true), 3);
  // ResNet's stem pool, 3/2/1, on 112 and on odd 7.
  EXPECT_EQ(poolOutputSize(112, 3, 2, 1, 1, false), 56);
  EXPECT_EQ(poolOutputSize(7, 3, 2, 1, 1, false), 4);
  EXPECT_EQ(poolOutputSize(7, 3, 2, 1, 1, true), 4);
  EXPECT_EQ(poolOutputSize(6, 3, 2, 1, 1, true), 4);
  // Ceil mode would start a last window in the right padding: dropped.
  EXPECT_EQ(poolOutputSize(5, 2, 2, 1, 1, true), 3);
  // Dilation widens the window.
  EXPECT_EQ(poolOutputSize(10, 3, 1, 0, 2, false), 6);
  EXPECT_EQ(poolOutputSize(1, 1, 1, 0, 1, false), 1);
}

TEST(CudaConvolution, PoolOutputSizeByEnumeration) {
  for (int64_t in = 1; in <= 12; ++in)
    for (int64_t k = 1; k <= 5; ++k)
      for (int64_t s = 1; s <= 3; ++s)
        for (int64_t p = 0; p <= k / 2; ++p)
          for (int64_t d = 1; d <= 2; ++d) {
            int64_t span = d * (k - 1) + 1;
            if (in + 2 * p < span)
              continue;
            // Floor mode: the windows that fit in the padded input.
            int64_t fit = 0;
            while (fit * s - p + span <= in + p)
              ++fit;
            EXPECT_EQ(poolOutputSize(in, k, s, p, d, false), fit);
            // Ceil mode adds a partial window where the fitting ones leave
            // something over, if that window starts inside the input.
            bool partial = (in + 2 * p - span) % s != 0 && fit * s - p < in;
            EXPECT_EQ(poolOutputSize(in, k, s, p, d, true), fit + partial)
                << in << " " << k << " " << s << " " << p << " " << d;
          }
}

/// The positions output `o`'s max-pool window reads, by definition.
std::set<int64_t> maxPositions(int64_t o, const PoolDim &d) {
  std::set<int64_t> set;
  for (int64_t t = 0; t < d.kernel; ++t) {
    int64_t i = o * d.stride - d.pad + t * d.dilation;
    if (i >= 0 && i < d.in)
      set.insert(i);
  }
  return set;
}

std::vector<PoolDim> poolDims() {
  std::vector<PoolDim> dims;
  for (int64_t in = 1; in <= 11; ++in)
    for (int64_t k = 1; k <= 4; ++k)
      for (int64_t s = 1; s <= 3; ++s)
        for (int64_t p = 0; p <= k / 2; ++p)
          for (int64_t dil = 1; dil <= 3; ++dil)
            for (bool ceil : {false, true}) {
              if (in + 2 * p < dil * (k - 1) + 1)
                continue;
              PoolDim d;
              d.in = in;
              d.kernel = k;
              d.stride = s;
              d.pad = p;
              d.dilation = dil;
              d.out = poolOutputSize(in, k, s, p, dil, ceil);
              dims.push_back(d);
            }
  return dims;
}

TEST(CudaConvolution, MaxWindowWalksTheWindow) {
  for (const PoolDim &d : poolDims())
    for (int64_t o = 0; o < d.out; ++o) {
      int64_t begin, end;
      maxWindow(o, d, begin, end);
      std::set<int64_t> walked;
      for (int64_t i = begin; i < end; i += d.dilation)
        walked.insert(i);
      EXPECT_EQ(walked, maxPositions(o, d));
      // The walk starts at the window's first position inside.
      if (!walked.empty()) {
        EXPECT_EQ(begin, *walked.begin());
      }
    }
}

TEST(CudaConvolution, WindowsSpanningCoverEveryReader) {
  for (const PoolDim &d : poolDims())
    for (int64_t i = 0; i < d.in; ++i) {
      int64_t lo, hi;
      windowsSpanning(i, d, lo, hi);
      for (int64_t o = 0; o < d.out; ++o) {
        bool reads = maxPositions(o, d).count(i) > 0;
        bool inRange = o >= lo && o <= hi;
        if (reads) {
          EXPECT_TRUE(inRange) << "input " << i << " output " << o;
        }
        // Without dilation the range is exact.
        if (d.dilation == 1) {
          EXPECT_EQ(reads, inRange) << "input " << i << " output " << o;
        }
      }
    }
}

TEST(CudaConvolution, AvgWindowAndDivisor) {
  // 3/2/1 on 5 with ceil mode: 3 outputs; the corners hold 2 of 3 rows.
  Pool2d p;
  p.h = p.w = PoolDim{5, 3, 3, 2, 1, 1};
  int64_t b, e, padded;
  avgWindow(0, p.h, b, e, padded);
  EXPECT_EQ(b, 0);
  EXPECT_EQ(e, 2);
  EXPECT_EQ(padded, 3);
  avgWindow(2, p.h, b, e, padded);
  EXPECT_EQ(b, 3);
  EXPECT_EQ(e, 5);
  EXPECT_EQ(padded, 3);
  p.countIncludePad = true;
  EXPECT_EQ(avgDivisor(0, 0, p), 9);
  EXPECT_EQ(avgDivisor(1, 1, p), 9);
  p.countIncludePad = false;
  EXPECT_EQ(avgDivisor(0, 0, p), 4);
  EXPECT_EQ(avgDivisor(0, 1, p), 6);
  EXPECT_EQ(avgDivisor(1, 1, p), 9);
  // Ceil mode's last window past the right padding: PyTorch divides by
  // the part up to the padding's end, even counting padding.
  PoolDim d{4, 2, 3, 2, 0, 1};
  ASSERT_EQ(poolOutputSize(4, 3, 2, 0, 1, true), 2);
  avgWindow(1, d, b, e, padded);
  EXPECT_EQ(b, 2);
  EXPECT_EQ(e, 4);
  EXPECT_EQ(padded, 2);
}

TEST(CudaConvolution, AvgWindowsSpanningAreExact) {
  for (PoolDim d : poolDims()) {
    if (d.dilation != 1)
      continue;
    for (int64_t i = 0; i < d.in; ++i) {
      int64_t lo, hi;
      windowsSpanning(i, d, lo, hi);
      for (int64_t o = 0; o < d.out; ++o) {
        int64_t b, e, padded;
        avgWindow(o, d, b, e, padded);
        EXPECT_EQ(i >= b && i < e, o >= lo && o <= hi);
      }
    }
  }
}

TEST(CudaConvolution, AdaptiveWindows) {
  // 7 to 3: [0, 3), [2, 5), [4, 7).
  EXPECT_EQ(adaptiveStart(0, 3, 7), 0);
  EXPECT_EQ(adaptiveEnd(0, 3, 7), 3);
  EXPECT_EQ(adaptiveStart(1, 3, 7), 2);
  EXPECT_EQ(adaptiveEnd(1, 3, 7), 5);
  EXPECT_EQ(adaptiveStart(2, 3, 7), 4);
  EXPECT_EQ(adaptiveEnd(2, 3, 7), 7);
  for (int64_t in = 1; in <= 17; ++in)
    for (int64_t out = 1; out <= 17; ++out) {
      for (int64_t o = 0; o < out; ++o) {
        // floor(o * in / out) and ceil((o + 1) * in / out).
        EXPECT_EQ(adaptiveStart(o, out, in), (o * in) / out);
        EXPECT_EQ(adaptiveEnd(o, out, in), ((o + 1) * in + out - 1) / out);
        EXPECT_LT(adaptiveStart(o, out, in), adaptiveEnd(o, out, in));
      }
      // Swapped, the outputs whose windows hold input i.
      for (int64_t i = 0; i < in; ++i)
        for (int64_t o = 0; o < out; ++o) {
          bool holds =
              adaptiveStart(o, out, in) <= i && i < adaptiveEnd(o, out, in);
          bool inRange =
              adaptiveStart(i, in, out) <= o && o < adaptiveEnd(i, in, out);
          EXPECT_EQ(holds, inRange)
              << in << " to " << out << ": input " << i << " output " << o;
        }
    }
}

TEST(CudaConvolution, ChannelChunks) {
  EXPECT_EQ(channelChunks(64, 100), 1);
  EXPECT_EQ(channelChunks(0, 0), 1);
  EXPECT_EQ(channelChunks(3, 1 << 24), 64);
  EXPECT_EQ(channelChunks(64, 32 * 112 * 112), 16);
  for (int64_t c : {1, 7, 64, 512, 4096})
    for (int64_t per : {0, 1, 4095, 4096, 100000, 1 << 22}) {
      int64_t chunks = channelChunks(c, per);
      EXPECT_GE(chunks, 1);
      EXPECT_LE(chunks, 64);
      // Every chunk has work unless the channel is small.
      if (per >= 4096) {
        EXPECT_LE(chunks, per / 4096);
      }
    }
}

} // namespace
