//===- FlashAttention.h - attention in the FlashAttention form -*- C++ -*-===//
//
// masked_attention whose kept result is each query row's log-sum-exp
// (`--merak-fuse-attention="flash=true"`) runs as tiled kernels that never
// write the scores to memory: the forward walks the keys tile by tile with
// an online softmax (running maximum and sum per row, the output rescaled
// as the maximum grows); the backward recomputes each tile's
// probabilities from the log-sum-exp, in two kernels, one over key tiles
// (key and value gradients) and one over query tiles (query gradients), so
// that every gradient element is summed by one thread in a fixed order:
// no atomics, the same result run after run.
//
// Tiles: 32 query rows by 32 keys, four warps of a block each owning 8
// rows (or keys), a lane one key of the tile (scores) or the head
// dimensions `lane + 32 j` (outputs); head dimensions up to 128. Operands
// are dense `[n, t, d]` stacks; the mask is read at the rows and strides of
// `MaskRows` (Attention.h). The arithmetic here is host-callable and
// unit-tested without a GPU.
//
//===----------------------------------------------------------------------===//
#ifndef MERAK_LIB_RUNTIME_CUDA_FLASHATTENTION_H
#define MERAK_LIB_RUNTIME_CUDA_FLASHATTENTION_H

#include "Attention.h"

namespace merak::runtime::cuda {

/// Query rows of a tile, keys of a tile, and threads of a block.
constexpr int kFlashRows = 32;
constexpr int kFlashKeys = 32;
constexpr int kFlashThreads = 128;
/// Rows (or keys) each warp owns in a tile.
constexpr int kFlashRowsPerWarp = kFlashRows / (kFlashThreads / 32);
/// The largest head dimension (of query and key, or of value).
constexpr int kFlashMaxDim = 128;
/// Head dimensions a lane holds: `lane + 32 j` for j < kFlashDimsPerLane.
constexpr int kFlashDimsPerLane = kFlashMaxDim / 32;

/// Which kernel of the three.
enum class FlashKernel { Forward, KeyValueGrad, QueryGrad };

/// A shared-memory row of `cols` elements is padded by one, so that the
/// lanes reading one column of consecutive rows hit different banks.
MERAK_HD int64_t flashPitch(int64_t cols) { return cols + 1; }

/// Shared memory (bytes) of `kernel` for head dimensions `d` (query, key)
/// and `e` (value), accumulating in elements of `accBytes` bytes.
MERAK_HD int64_t flashSharedBytes(FlashKernel kernel, int64_t d, int64_t e,
                                  int64_t accBytes) {
  int64_t rows = kFlashRows, keys = kFlashKeys;
  int64_t tile = rows * flashPitch(keys);
  int64_t elements = 0;
  switch (kernel) {
  case FlashKernel::Forward:
    // Q, K, V tiles and the probabilities.
    elements = rows * flashPitch(d) + keys * flashPitch(d) +
               keys * flashPitch(e) + tile;
    break;
  case FlashKernel::KeyValueGrad:
    // The block's K and V, a query tile's Q and output gradient, the
    // probabilities and score gradients, the rows' log-sum-exp and sums.
    elements = keys * flashPitch(d) + keys * flashPitch(e) +
               rows * flashPitch(d) + rows * flashPitch(e) + 2 * tile +
               2 * rows;
    break;
  case FlashKernel::QueryGrad:
    // Q and output gradient of the block's rows, a key tile's K and V, the
    // score gradients.
    elements = rows * flashPitch(d) + rows * flashPitch(e) +
               keys * flashPitch(d) + keys * flashPitch(e) + tile;
    break;
  }
  return elements * accBytes;
}

/// The launch of one of the kernels on `n` stacks of `t` rows: a block
/// per tile (of query rows, or of keys for KeyValueGrad) and stack.
struct FlashLaunch {
  unsigned tiles = 0;  // grid x
  unsigned stacks = 0; // grid y (and z beyond 65535)
  unsigned stacksZ = 1;
  int64_t sharedBytes = 0;
};

/// Why `flashLaunch` cannot run the shape, or null.
MERAK_HD const char *flashUnsupported(int64_t t, int64_t d, int64_t e) {
  if (d < 1 || e < 1 || d > kFlashMaxDim || e > kFlashMaxDim)
    return "head dimensions must be 1 to 128";
  if (t < 1)
    return "the sequence is empty";
  return nullptr;
}

MERAK_HD FlashLaunch flashLaunch(FlashKernel kernel, int64_t n, int64_t t,
                                 int64_t d, int64_t e, int64_t accBytes) {
  FlashLaunch l;
  int64_t per = kernel == FlashKernel::KeyValueGrad ? kFlashKeys : kFlashRows;
  l.tiles = unsigned(ceilDiv(t, per));
  int64_t y = n < 65535 ? n : 65535;
  l.stacks = unsigned(y < 1 ? 1 : y);
  l.stacksZ = unsigned(ceilDiv(n < 1 ? 1 : n, l.stacks));
  l.sharedBytes = flashSharedBytes(kernel, d, e, accBytes);
  return l;
}

/// Whether a mask element removes its score: a false boolean, or an
/// additive `-inf` (any other value leaves a finite score finite). A tile
/// all of whose elements do is skipped by every kernel.
MERAK_HD bool flashMaskedOut(bool m) { return !m; }
MERAK_HD bool flashMaskedOut(float m) { return m == -INFINITY; }
MERAK_HD bool flashMaskedOut(double m) { return m == -INFINITY; }
/// bf16 and f16: exactly representable in float.
template <typename T> MERAK_HD bool flashMaskedOut(T m) {
  return float(m) == -INFINITY;
}

/// One row's online softmax: the running maximum `m` of its scores so
/// far and the sum `l` of their exponentials relative to it. `absorb`
/// takes a tile's maximum and returns the factor the row's earlier sums
/// (and its output accumulator) are multiplied by; then the tile's
/// `exp(s - m)` are added with `add`. A row every score of which is
/// `-inf` so far keeps `m = -inf`, `l = 0` and gives its tile
/// exponentials 0 (`weight`), so that no `-inf - -inf` is taken.
template <typename A> struct OnlineSoftmax {
  A m = A(-INFINITY);
  A l = A(0);

  MERAK_HD A absorb(A tileMax) {
    A next = tileMax > m ? tileMax : m;
    A factor = m == A(-INFINITY) ? A(0) : mathExp(m - next);
    m = next;
    l *= factor;
    return factor;
  }
  /// The weight of a score `s` of the tile just absorbed.
  MERAK_HD A weight(A s) const {
    return m == A(-INFINITY) ? A(0) : mathExp(s - m);
  }
  MERAK_HD void add(A tileSum) { l += tileSum; }
  /// The row's log-sum-exp: `-inf` for a fully masked row.
  MERAK_HD A logSumExp() const {
    return l == A(0) ? A(-INFINITY) : m + mathLog(l);
  }
};

/// masked_attention, FlashAttention form: `q`, `k` `[n, t, d]`, `v`
/// `[n, t, e]`, all dense and of one floating type; `mask` broadcast to
/// the scores `[..., t, t]` (bool, or additive of that type); `out`
/// `[n, t, e]` of that type, `lse` `[n, t]` f32.
void flashAttentionForward(const View &q, const View &k, const View &v,
                           const View &mask, const View &out, const View &lse,
                           float scale, bool divide, cudaStream_t stream);

/// Its backward: the gradients `gq`, `gk` (`[n, t, d]`), `gv` (`[n, t,
/// e]`) of `grad` (`[n, t, e]`), from the forward's `out` and `lse`.
/// `rowSums` is f32 scratch of `n * t` elements.
void flashAttentionBackward(const View &grad, const View &q, const View &k,
                            const View &v, const View &mask, const View &out,
                            const View &lse, const View &gq, const View &gk,
                            const View &gv, float *rowSums, float scale,
                            bool divide, cudaStream_t stream);

} // namespace merak::runtime::cuda

#endif // MERAK_LIB_RUNTIME_CUDA_FLASHATTENTION_H
