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

//===----------------------------------------------------------------------===//
// The tensor-core form (bf16 and f16)
//===----------------------------------------------------------------------===//
//
// The same three kernels with their products on tensor cores (WMMA 16 x
// 16 x 16 tiles, float accumulation): 64 query rows by 64 keys a tile, four
// warps of a block each owning 16 rows (or keys). Scores, score gradients
// and the output accumulators stay in float; the probabilities and score
// gradients round to the element type before their products, as
// FlashAttention's kernels do. Head dimensions must be multiples of 16 up
// to 128 and the operands 16-byte aligned; other shapes run the kernels
// above.

/// Query rows and keys of a tile, threads of a block, rows a warp owns.
constexpr int kMmaRows = 64;
constexpr int kMmaKeys = 64;
constexpr int kMmaThreads = 128;
constexpr int kMmaWarpRows = 16;

/// Shared-memory pitches (elements): 16-bit rows padded by 8 elements, float
/// rows by 4, so that a fragment's rows start on different banks while
/// every 16-row block stays 32-byte aligned, as WMMA's loads require.
MERAK_HD int64_t mmaPitch16(int64_t cols) { return cols + 8; }
MERAK_HD int64_t mmaPitch32(int64_t cols) { return cols + 4; }
/// Where a warp's second float tile starts in its scratch rows: 32-byte
/// aligned, as a fragment's first element must be.
constexpr int kMmaSecond = kMmaKeys + 8;

/// Why the tensor-core kernels cannot take head dimensions `d` (query,
/// key) and `e` (value), or null.
MERAK_HD const char *flashMmaUnsupported(int64_t d, int64_t e) {
  if (d < 16 || e < 16 || d > 128 || e > 128 || d % 16 != 0 || e % 16 != 0)
    return "head dimensions must be multiples of 16 up to 128";
  return nullptr;
}

/// 16-column blocks the accumulators of the larger head dimension take:
/// the kernels are instantiated for 4 (dimensions up to 64) and 8.
MERAK_HD int flashMmaDimBlocks(int64_t d, int64_t e) {
  return (d > e ? d : e) <= 64 ? 4 : 8;
}

/// Offsets into a block's shared memory, each 128-byte aligned.
struct SharedOffsets {
  int64_t at = 0;
  /// The next array of `bytes` bytes.
  MERAK_HD int64_t take(int64_t bytes) {
    int64_t here = at;
    at += (bytes + 127) / 128 * 128;
    return here;
  }
};

/// The 16-bit operand tiles both tensor-core forms start with: `q`, `k`,
/// `v` and, in the backward kernels, `g` (the output gradient), at pitches
/// mmaPitch16.
MERAK_HD void takeOperandTiles(SharedOffsets &at, FlashKernel kernel, int64_t d,
                               int64_t e, int64_t &q, int64_t &k, int64_t &v,
                               int64_t &g) {
  q = at.take(kMmaRows * mmaPitch16(d) * 2);
  k = at.take(kMmaKeys * mmaPitch16(d) * 2);
  v = at.take(kMmaKeys * mmaPitch16(e) * 2);
  if (kernel != FlashKernel::Forward)
    g = at.take(kMmaRows * mmaPitch16(e) * 2);
}

/// The per-row arrays both tensor-core forms end with: the key and value
/// gradients' `lse` and `sums` (float), and every kernel's `maskRow`
/// (64-bit).
MERAK_HD void takeRowArrays(SharedOffsets &at, FlashKernel kernel, int64_t &lse,
                            int64_t &sums, int64_t &maskRow) {
  if (kernel == FlashKernel::KeyValueGrad) {
    lse = at.take(kMmaRows * 4);
    sums = at.take(kMmaRows * 4);
  }
  maskRow = at.take(kMmaRows * 8);
}

/// Where each shared array of a tensor-core kernel starts (bytes, every one
/// 128-byte aligned) and the total. Tiles of 16-bit elements: `q`, `k`,
/// `v`, `g` (the output gradient), `p` (probabilities), `ds` (score
/// gradients); float: `scratch` (each warp's 16 rows, `scratchPitch`
/// apart, of scores and of output-gradient products, or of its
/// accumulators on the way out), `out` (the forward's accumulators), `lse` and
/// `sums` (per query row); `maskRow` (64-bit, per query row). Unused arrays
/// take no space.
struct FlashMmaLayout {
  int64_t q = 0, k = 0, v = 0, g = 0, p = 0, ds = 0;
  int64_t scratch = 0, out = 0, lse = 0, sums = 0, maskRow = 0;
  int64_t scratchPitch = 0;
  int64_t bytes = 0;
};

MERAK_HD FlashMmaLayout flashMmaLayout(FlashKernel kernel, int64_t d,
                                       int64_t e) {
  FlashMmaLayout l;
  SharedOffsets at;
  const int64_t pk = mmaPitch16(kMmaKeys);
  // Two 64-wide float tiles (the second at kMmaSecond), or one row of
  // accumulators of either dimension, per warp row.
  int64_t widest = kMmaSecond + mmaPitch32(kMmaKeys);
  if (mmaPitch32(d) > widest)
    widest = mmaPitch32(d);
  if (mmaPitch32(e) > widest)
    widest = mmaPitch32(e);
  l.scratchPitch = widest;
  const int64_t warps = kMmaThreads / 32;
  takeOperandTiles(at, kernel, d, e, l.q, l.k, l.v, l.g);
  l.scratch = at.take(warps * kMmaWarpRows * widest * 4);
  if (kernel != FlashKernel::QueryGrad)
    l.p = at.take(kMmaRows * pk * 2);
  if (kernel != FlashKernel::Forward)
    l.ds = at.take(kMmaRows * pk * 2);
  if (kernel == FlashKernel::Forward)
    l.out = at.take(kMmaRows * mmaPitch32(e) * 4);
  takeRowArrays(at, kernel, l.lse, l.sums, l.maskRow);
  l.bytes = at.at;
  return l;
}

/// The grid of a tensor-core kernel: a block per 64 query rows (or keys)
/// and stack.
MERAK_HD FlashLaunch flashMmaLaunch(FlashKernel kernel, int64_t n, int64_t t,
                                    int64_t d, int64_t e) {
  FlashLaunch l;
  l.tiles = unsigned(ceilDiv(t, kMmaRows));
  int64_t y = n < 65535 ? n : 65535;
  l.stacks = unsigned(y < 1 ? 1 : y);
  l.stacksZ = unsigned(ceilDiv(n < 1 ? 1 : n, l.stacks));
  l.sharedBytes = flashMmaLayout(kernel, d, e).bytes;
  return l;
}

//===----------------------------------------------------------------------===//
// The register-tile form (bf16 and f16, FlashAttention-2's layout)
//===----------------------------------------------------------------------===//
//
// The same three kernels on `mma.sync.m16n8k16` (PTX) with every product's
// result kept in registers: 64 query rows by 64 keys a tile, four warps of
// a block each owning 16 rows (or keys). A warp's query (or key) fragments
// are loaded once; a tile's scores come back in the accumulator layout,
// which is, two 8-column tiles side by side, the layout of the next
// product's left operand, so the probabilities (rounded to the element
// type) feed the value product without a trip through shared memory, and
// the output accumulators stay in registers for the whole sequence. Row
// maxima and sums combine the four lanes that hold a row (an xor
// butterfly: the same value in each). The mask tile is staged once per
// tile in shared memory as float biases (`-inf` masks). Shapes are those
// of the WMMA kernels above, whose form `--flash-kernels=wmma` keeps; the
// backward takes head dimensions up to 64 (its accumulators and operands
// fill the registers), the WMMA kernels the larger ones.
//
// The fragment layouts are PTX's for m16n8k16 with 16-bit operands: a
// lane's group is `lane / 4`, its pair `lane % 4`; the functions below
// give the (row, column) each register holds and are unit-tested.

/// A lane's group (its rows: the group and the group + 8) and pair.
MERAK_HD int fragGroup(int lane) { return lane >> 2; }
MERAK_HD int fragPair(int lane) { return lane & 3; }
/// A (16 x 16, row-major): 32-bit register `r` (0..3) of `lane` holds the
/// elements (row, col) and (row, col + 1).
MERAK_HD int fragARow(int lane, int r) { return fragGroup(lane) + (r & 1) * 8; }
MERAK_HD int fragACol(int lane, int r) {
  return fragPair(lane) * 2 + (r >> 1) * 8;
}
/// B (16 x 8, k by n): register `r` (0..1) holds (k, n) and (k + 1, n).
MERAK_HD int fragBRow(int lane, int r) { return fragPair(lane) * 2 + r * 8; }
MERAK_HD int fragBCol(int lane) { return fragGroup(lane); }
/// The accumulator (16 x 8 floats): element `i` (0..3).
MERAK_HD int fragCRow(int lane, int i) {
  return fragGroup(lane) + (i >> 1) * 8;
}
MERAK_HD int fragCCol(int lane, int i) { return fragPair(lane) * 2 + (i & 1); }
/// The left operand's register `r` built from two accumulator tiles (the
/// 16 x 16 block's columns 0-7 and 8-15): tile `r / 2`, its elements
/// `fragFromC(r)` and the next.
MERAK_HD int fragFromTile(int r) { return r >> 1; }
MERAK_HD int fragFromC(int r) { return (r & 1) * 2; }

/// A score from its product `dot`: scaled, and masked by its staged bias
/// (`-inf` masks, anything else adds).
MERAK_HD float flashBiasedScore(float dot, float bias, float scale,
                                bool divide) {
  float s = divide ? dot / scale : dot * scale;
  return bias == -INFINITY ? -INFINITY : s + bias;
}

/// The backward's probability `p` of a score and its gradient `ds`, from
/// the score's product `dot` and bias, the product `dp` of the row's
/// output gradient and the key's value, and the row's log-sum-exp and
/// `sum(grad * output)`.
struct FlashScoreGrad {
  float p = 0, ds = 0;
};
MERAK_HD FlashScoreGrad flashScoreGrad(float dot, float bias, float dp,
                                       float lse, float rowSum, float scale,
                                       bool divide) {
  FlashScoreGrad r;
  r.p = mathExp(flashBiasedScore(dot, bias, scale, divide) - lse);
  float g = r.p * (dp - rowSum);
  r.ds = divide ? g / scale : g * scale;
  return r;
}

/// Threads of a register-tile block (four warps).
constexpr int kRegThreads = 128;
/// Float pitch of the staged mask tile.
MERAK_HD int64_t regBiasPitch() { return kMmaKeys + 4; }

/// Why the register-tile kernel `kernel` cannot take head dimensions `d`
/// and `e` (beyond flashMmaUnsupported), or null.
MERAK_HD const char *flashRegUnsupported(FlashKernel kernel, int64_t d,
                                         int64_t e) {
  if (const char *why = flashMmaUnsupported(d, e))
    return why;
  if (kernel != FlashKernel::Forward && (d > 64 || e > 64))
    return "the register-tile backward takes head dimensions up to 64";
  return nullptr;
}

/// Where each shared array of a register-tile kernel starts (bytes, each
/// 128-byte aligned): 16-bit tiles `q`, `k`, `v`, `g` (the output
/// gradient; backward only), pitches mmaPitch16; the float mask tile
/// `bias` (rows: query rows, pitch regBiasPitch); `lse` and `sums` (per
/// query row; the key and value gradients only); `maskRow` (64-bit, per
/// query row).
struct FlashRegLayout {
  int64_t q = 0, k = 0, v = 0, g = 0, bias = 0, lse = 0, sums = 0, maskRow = 0;
  int64_t bytes = 0;
};

MERAK_HD FlashRegLayout flashRegLayout(FlashKernel kernel, int64_t d,
                                       int64_t e) {
  FlashRegLayout l;
  SharedOffsets at;
  takeOperandTiles(at, kernel, d, e, l.q, l.k, l.v, l.g);
  l.bias = at.take(kMmaRows * regBiasPitch() * 4);
  takeRowArrays(at, kernel, l.lse, l.sums, l.maskRow);
  l.bytes = at.at;
  return l;
}

/// The grid of a register-tile kernel: a block per 64 query rows (or
/// keys) and stack.
MERAK_HD FlashLaunch flashRegLaunch(FlashKernel kernel, int64_t n, int64_t t,
                                    int64_t d, int64_t e) {
  FlashLaunch l = flashMmaLaunch(kernel, n, t, d, e);
  l.sharedBytes = flashRegLayout(kernel, d, e).bytes;
  return l;
}

/// The tensor-core forms of flashAttentionForward and flashAttentionBackward
/// below, for bf16 and f16 operands whose shapes flashMmaUnsupported takes
/// (the caller checks); `rowSums` as there.
void flashMmaForward(const View &q, const View &k, const View &v,
                     const View &mask, const View &out, const View &lse,
                     int64_t n, int64_t t, int64_t d, int64_t e, float scale,
                     bool divide, bool registerTiles, cudaStream_t stream);
void flashMmaBackward(const View &grad, const View &q, const View &k,
                      const View &v, const View &mask, const View &lse,
                      const float *rowSums, const View &gq, const View &gk,
                      const View &gv, int64_t n, int64_t t, int64_t d,
                      int64_t e, float scale, bool divide, bool registerTiles,
                      cudaStream_t stream);

/// masked_attention, FlashAttention form: `q`, `k` `[n, t, d]`, `v`
/// `[n, t, e]`, all dense and of one floating type; `mask` broadcast to
/// the scores `[..., t, t]` (bool, or additive of that type); `out`
/// `[n, t, e]` of that type, `lse` `[n, t]` f32. bf16 and f16 run on
/// tensor cores, in registers unless `registerTiles` is false (the WMMA
/// kernels).
void flashAttentionForward(const View &q, const View &k, const View &v,
                           const View &mask, const View &out, const View &lse,
                           float scale, bool divide, bool registerTiles,
                           cudaStream_t stream);

/// Its backward: the gradients `gq`, `gk` (`[n, t, d]`), `gv` (`[n, t,
/// e]`) of `grad` (`[n, t, e]`), from the forward's `out` and `lse`.
/// `rowSums` is f32 scratch of `n * t` elements.
void flashAttentionBackward(const View &grad, const View &q, const View &k,
                            const View &v, const View &mask, const View &out,
                            const View &lse, const View &gq, const View &gk,
                            const View &gv, float *rowSums, float scale,
                            bool divide, bool registerTiles,
                            cudaStream_t stream);

} // namespace merak::runtime::cuda

#endif // MERAK_LIB_RUNTIME_CUDA_FLASHATTENTION_H
