//===- CpuKernels.cpp - the CPU backend: every merak op on ATen -----------===//
//
// Each kernel calls the ATen function PyTorch's eager mode calls for the
// same computation (and, for backward ops, the function autograd calls), so
// losses and updates match PyTorch bit for bit on the same inputs. The
// exceptions are the tanh-approximated GELU, which runs VectorMath.h's more
// accurate and faster form, and float32 matrix products, which by default
// run on oneDNN's sgemm (twice OpenBLAS's rate where the CPU has AVX-512)
// and agree with PyTorch's to rounding; `GemmLibrary::Blas` restores the
// BLAS. This is the only translation unit of the runtime's kernels that
// includes ATen.
//
//===----------------------------------------------------------------------===//

#include "../AtenDTypes.h"
#include "CpuTensor.h"
#include "GemmLayout.h"
#include "VectorMath.h"
#include "merak/Runtime/CPU/CpuBackend.h"
#include "merak/Runtime/Random.h"

#include "absl/strings/str_cat.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Parallel.h>
#include <ATen/ScalarOps.h>
#include <c10/core/Allocator.h>
#include <c10/core/InferenceMode.h>
#include <c10/core/impl/alloc_cpu.h>

#include <dlfcn.h>
#include <oneapi/dnnl/dnnl.h>
#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <optional>
#include <stdexcept>

namespace merak::runtime {
namespace {

//===----------------------------------------------------------------------===//
// Allocation accounting
//===----------------------------------------------------------------------===//

/// Wraps c10's CPU allocation with a byte count, so the executor can report
/// the peak of everything ATen holds. Each block carries its size in a
/// 64-byte header (which keeps c10's 64-byte alignment); data and context
/// pointers coincide, as `raw_allocate` (used by oneDNN) requires.
/// A slot of a program's arena that the running kernel's result of
/// `bytes` bytes goes to: the first allocation of exactly that size on the
/// executor's thread while the kernel runs takes it. A kernel that
/// allocates its result differently (a temporary of the same size first, a
/// result of another size) leaves it unused and its result on the heap,
/// which is correct either way: the slot is reserved for the result's
/// lifetime, and nothing else lives there meanwhile.
struct ArenaSlot {
  void *data;
  size_t bytes;
  bool taken;
};
thread_local std::vector<ArenaSlot> arenaSlots;

/// Sets the slots of one kernel call and clears them after it.
class ArenaScope {
public:
  ArenaScope(const KernelCall &call, const Instruction &inst) {
    // oneDNN's convolutions take over the blocks they allocate (and free
    // them with free()), so theirs stay with the allocator.
    if (!call.arena || inst.kind == OpKind::Conv2d ||
        inst.kind == OpKind::Conv2dBackward)
      return;
    auto *base = static_cast<uint8_t *>(unwrap(*call.arena).data_ptr());
    for (size_t r = 0; r < inst.storage.size(); ++r)
      if (inst.storage[r].arenaOffset >= 0)
        arenaSlots.push_back(
            {base + inst.storage[r].arenaOffset,
             size_t(call.program->values[inst.results[r]].type.byteSize()),
             false});
  }
  ~ArenaScope() { arenaSlots.clear(); }
};

class CountingAllocator final : public c10::Allocator {
public:
  static constexpr size_t kHeader = 64;

  c10::DataPtr allocate(size_t n) const override {
    for (ArenaSlot &slot : arenaSlots)
      if (!slot.taken && slot.bytes == n) {
        // Counted with the arena; freed with it.
        slot.taken = true;
        const_cast<CountingAllocator *>(this)->arenaResults.fetch_add(1);
        return {slot.data, slot.data, &keep, c10::Device(c10::DeviceType::CPU)};
      }
    auto *base = static_cast<uint8_t *>(c10::alloc_cpu(n + kHeader));
    std::memcpy(base, &n, sizeof(n));
    void *data = base + kHeader;
    add(int64_t(n));
    return {data, data, &release, c10::Device(c10::DeviceType::CPU)};
  }
  c10::DeleterFnPtr raw_deleter() const override { return &release; }

  static CountingAllocator &get() {
    static CountingAllocator *instance = new CountingAllocator();
    return *instance;
  }

  std::atomic<int64_t> live{0}, peak{0}, arenaResults{0};

private:
  static void keep(void *) {}
  static void release(void *data) {
    if (!data)
      return;
    auto *base = static_cast<uint8_t *>(data) - kHeader;
    size_t n;
    std::memcpy(&n, base, sizeof(n));
    get().live.fetch_sub(int64_t(n));
    c10::free_cpu(base);
  }
  void add(int64_t n) const {
    auto &self = const_cast<CountingAllocator &>(*this);
    int64_t now = self.live.fetch_add(n) + n;
    int64_t old = self.peak.load();
    while (now > old && !self.peak.compare_exchange_weak(old, now)) {
    }
  }
};

//===----------------------------------------------------------------------===//
// Tensors
//===----------------------------------------------------------------------===//

at::TensorOptions optionsFor(DType dtype) {
  return at::TensorOptions().dtype(toAten(dtype)).device(at::kCPU);
}

/// The first line of an ATen error, without its C++ backtrace.
std::string firstLine(const std::string &text) {
  return text.substr(0, text.find('\n'));
}

//===----------------------------------------------------------------------===//
// Kernel context
//===----------------------------------------------------------------------===//

struct Ctx {
  KernelCall &call;
  const Instruction &inst;
  const OpAttrs &a;
  const Program &program;
  at::Generator &generator;
  std::vector<at::Tensor> out;

  bool has(size_t k) const {
    return k < call.operands.size() && call.operands[k];
  }
  const at::Tensor &in(size_t k) const {
    static const at::Tensor undefined;
    return has(k) ? unwrap(*call.operands[k]) : undefined;
  }
  c10::optional<at::Tensor> opt(size_t k) const {
    return has(k) ? c10::optional<at::Tensor>(in(k)) : c10::nullopt;
  }
  /// The operand result `r` is written into, or an undefined tensor.
  at::Tensor inPlace(size_t r) const {
    return r < call.inPlace.size() && call.inPlace[r] ? unwrap(*call.inPlace[r])
                                                      : at::Tensor();
  }
  const TensorType &resultType(size_t r) const {
    return program.values[inst.results[r]].type;
  }
  const TensorType &operandType(size_t k) const {
    return program.values[inst.operands[k]].type;
  }
  /// Whether anything reads result `r`.
  bool needed(size_t r) const {
    return program.values[inst.results[r]].lastUse >= 0;
  }
  /// A scalar operand: the executor's exact value where it has one.
  double scalar(size_t k) const {
    if (k < call.hostScalars.size() && call.hostScalars[k])
      return *call.hostScalars[k];
    return in(k).item<double>();
  }
  at::Tensor zerosFor(size_t r) const {
    return at::zeros(resultType(r).shape, optionsFor(resultType(r).dtype));
  }
  void set(size_t r, at::Tensor t) { out[r] = std::move(t); }
};

/// An elementwise op: into the dying operand when planned, else fresh.
template <typename Fn, typename OutFn>
void elementwise(Ctx &c, Fn fn, OutFn outFn) {
  at::Tensor target = c.inPlace(0);
  if (target.defined()) {
    outFn(target);
    c.set(0, target);
  } else {
    c.set(0, fn());
  }
}

/// A scalar bound or fill value in the tensor's category, as PyTorch passes
/// a Python int to an integer tensor.
at::Scalar scalarFor(DType dtype, double v) {
  if (isFloat(dtype))
    return at::Scalar(v);
  if (dtype == DType::Bool)
    return at::Scalar(v != 0);
  return at::Scalar(int64_t(v));
}

/// Dropout's keep mask, as `at::dropout` draws it on CPU:
/// `empty_like(x).bernoulli_(1 - p)`, then divided by `1 - p`.
at::Tensor dropoutMask(Ctx &c, const TensorType &type, double p) {
  at::TensorOptions opts = optionsFor(type.dtype);
  if (p == 0)
    return at::ones(type.shape, opts);
  if (p == 1)
    return at::zeros(type.shape, opts);
  at::Tensor mask = at::empty(type.shape, opts);
  mask.bernoulli_(1 - p, c.generator);
  mask.div_(1 - p);
  return mask;
}

//===----------------------------------------------------------------------===//
// GEMMs on ATen's threads
//===----------------------------------------------------------------------===//

/// Set by the backend once the BLAS runs serially: GEMMs then split their
/// rows (or their batch) over ATen's intra-op threads themselves, as a
/// multithreaded BLAS splits them over its own. Results agree with a single
/// BLAS call to rounding: which rows the BLAS kernels take together decides
/// the order of some additions, as it does with the BLAS's own threads.
std::atomic<bool> gemmsOnAtenThreads{false};

/// GEMMs so far that ran as more than one block on ATen's threads.
std::atomic<int64_t> gemmsSplit{0};
std::atomic<int64_t> causalAttention{0};

/// An OpenBLAS entry point, or null where the BLAS is another.
template <typename Fn> Fn *blasFunction(const char *name) {
  return reinterpret_cast<Fn *>(dlsym(RTLD_DEFAULT, name));
}

/// Makes the BLAS single-threaded where it says how (OpenBLAS); false where
/// it does not, and GEMMs then call it as ATen does.
bool makeBlasSerial() {
  auto *set = blasFunction<void(int)>("openblas_set_num_threads");
  if (!set)
    return false;
  set(1);
  return true;
}

/// Calls `fn(begin, end)` for blocks of `[0, count)` on ATen's threads: at
/// most one block per thread, each of at least `minPerBlock` items and a
/// multiple of `tile` (for a GEMM the BLAS kernel's row tile, so no block
/// ends in a partial tile that another block could have filled). Inside a
/// parallel region, or where one block is all there is, it runs inline.
/// Returns the number of blocks.
template <typename Fn>
int64_t forBlocks(int64_t count, int64_t minPerBlock, int64_t tile, Fn fn) {
  int64_t threads = at::get_num_threads();
  int64_t blocks = std::min(threads, count / std::max<int64_t>(minPerBlock, 1));
  if (blocks <= 1 || at::in_parallel_region()) {
    fn(int64_t(0), count);
    return 1;
  }
  int64_t per = (count + blocks - 1) / blocks;
  per = (per + tile - 1) / tile * tile;
  at::parallel_for(0, blocks, 1, [&](int64_t first, int64_t last) {
    // Inference mode is thread-local; the pool's threads start without it.
    c10::InferenceMode guard;
    for (int64_t b = first; b < last; ++b) {
      int64_t begin = b * per, end = std::min(count, begin + per);
      if (begin < end)
        fn(begin, end);
    }
  });
  return blocks;
}

/// Whether `t` is float32 laid out densely in row-major order, as the
/// vecmath kernels read it.
bool denseFloat(const at::Tensor &t) {
  return t.scalar_type() == at::kFloat && t.is_contiguous();
}

/// The result of an elementwise kernel on operands shaped like `like`: the
/// buffer of operand 0 where the in-place plan hands it over, else a new
/// tensor (which lands in the kernel's arena slot).
at::Tensor resultLike(Ctx &c, const at::Tensor &like) {
  at::Tensor target = c.inPlace(0);
  return target.defined() ? target : at::empty_like(like);
}

/// Calls `fn(begin, end)` over `[0, count)` elements in blocks on ATen's
/// threads, each block worth the cost of waking a thread.
template <typename Fn> void forElements(int64_t count, Fn fn) {
  forBlocks(count, int64_t(1) << 14, 16, fn);
}

/// The fewest multiply-adds worth a block of its own.
constexpr int64_t kMinBlockMacs = int64_t(1) << 19;

/// How oneDNN's sgemm reads the last two dimensions of `m` in place.
std::optional<GemmLayout> gemmLayoutOf(const at::Tensor &m) {
  return gemmLayout(m.size(-2), m.size(-1), m.stride(-2), m.stride(-1));
}

/// Set by the backend when float32 GEMMs go to oneDNN's sgemm (its JIT
/// kernels for the widest vector ISA the CPU has) instead of the BLAS.
std::atomic<bool> gemmsOnOneDnn{false};

/// Calls of oneDNN's sgemm path so far (a stack of matrices counts once).
std::atomic<int64_t> oneDnnGemms{0};

/// `out[i] = a[i] @ b[i] + beta * out[i]` for stacks `[n, m, k]`,
/// `[n, k, p]` and `[n, m, p]` (rank 2 reads as one matrix) with oneDNN's
/// sgemm, each operand read in place. False, with nothing written, where
/// oneDNN is off, an operand is not float32, or a layout is one sgemm cannot
/// read. Several matrices run one per thread on ATen's threads; one matrix
/// runs on oneDNN's own (the same OpenMP pool).
bool oneDnnGemm(at::Tensor &out, const at::Tensor &a, const at::Tensor &b,
                float beta) {
  if (!gemmsOnOneDnn || a.scalar_type() != at::kFloat ||
      b.scalar_type() != at::kFloat || out.scalar_type() != at::kFloat)
    return false;
  int64_t rank = a.dim();
  if (rank < 2 || rank > 3 || b.dim() != rank || out.dim() != rank)
    return false;
  int64_t m = a.size(-2), k = a.size(-1), n = b.size(-1);
  // Shapes that do not fit go to ATen, which reports them.
  if (b.size(-2) != k || out.size(-2) != m || out.size(-1) != n ||
      (rank == 3 && (b.size(0) != a.size(0) || out.size(0) != a.size(0))))
    return false;
  if (m == 0 || n == 0 || k == 0)
    return false;
  std::optional<GemmLayout> la = gemmLayoutOf(a), lb = gemmLayoutOf(b),
                            lc = gemmLayoutOf(out);
  if (!la || !lb || !lc || lc->trans != 'N')
    return false;
  int64_t count = rank == 3 ? a.size(0) : 1;
  int64_t sa = rank == 3 ? a.stride(0) : 0, sb = rank == 3 ? b.stride(0) : 0,
          sc = rank == 3 ? out.stride(0) : 0;
  const float *pa = a.data_ptr<float>(), *pb = b.data_ptr<float>();
  float *pc = out.data_ptr<float>();
  auto one = [&](int64_t i) {
    dnnl_status_t status =
        dnnl_sgemm(la->trans, lb->trans, m, n, k, 1.0f, pa + i * sa, la->ld,
                   pb + i * sb, lb->ld, beta, pc + i * sc, lc->ld);
    if (status != dnnl_success)
      throw std::runtime_error(absl::StrCat("oneDNN sgemm failed (status ",
                                            int(status), ") on a ", m, "x", k,
                                            " by ", k, "x", n, " product"));
  };
  oneDnnGemms.fetch_add(1);
  if (count == 1)
    one(0);
  else
    at::parallel_for(0, count, 1, [&](int64_t first, int64_t last) {
      for (int64_t i = first; i < last; ++i)
        one(i);
    });
  return true;
}

/// `out = a @ b` for stacks `[n, m, k] @ [n, k, p]` of any strides (views
/// from narrow and transpose are read in place where oneDNN runs them), or
/// `out += a @ b` with `accumulate`.
void bmmInto(at::Tensor &out, const at::Tensor &a, const at::Tensor &b,
             bool accumulate = false) {
  if (oneDnnGemm(out, a, b, accumulate ? 1.0f : 0.0f))
    return;
  if (accumulate)
    out.baddbmm_(a, b);
  else
    at::bmm_out(out, a, b);
}

/// `a @ b` for matrices, rows split over the threads. `a` may be any
/// strided view (a transpose costs nothing); `out` is contiguous.
void matmul2dInto(at::Tensor &out, const at::Tensor &a, const at::Tensor &b,
                  const c10::optional<at::Tensor> &bias) {
  if (gemmsOnOneDnn) {
    // As addmm: the bias fills the result, which the product is added to.
    if (bias)
      out.copy_(bias->expand_as(out));
    if (oneDnnGemm(out, a, b, bias ? 1.0f : 0.0f))
      return;
  }
  int64_t rows = a.size(0), macsPerRow = a.size(1) * b.size(1);
  int64_t blocks =
      forBlocks(rows, kMinBlockMacs / std::max<int64_t>(macsPerRow, 1) + 1, 16,
                [&](int64_t begin, int64_t end) {
                  at::Tensor o = out.narrow(0, begin, end - begin);
                  at::Tensor x = a.narrow(0, begin, end - begin);
                  if (bias)
                    at::addmm_out(o, *bias, x, b);
                  else
                    at::mm_out(o, x, b);
                });
  if (blocks > 1)
    gemmsSplit.fetch_add(1);
}

/// Whether GEMMs take this file's paths (oneDNN, or the BLAS on ATen's
/// threads) rather than ATen's own.
bool gemmsOwned() { return gemmsOnOneDnn || gemmsOnAtenThreads; }

/// `at::linear`: `x @ w^T + bias` over the last dimension of `x`.
at::Tensor linearOnThreads(const at::Tensor &x, const at::Tensor &w,
                           const c10::optional<at::Tensor> &bias) {
  if (!gemmsOwned() || x.dim() < 2 || (bias && bias->dim() != 1))
    return at::linear(x, w, bias);
  int64_t k = x.size(-1), n = w.size(0);
  at::Tensor x2 = x.reshape({-1, k});
  at::Tensor out = at::empty({x2.size(0), n}, x.options());
  matmul2dInto(out, x2, w.t(), bias);
  std::vector<int64_t> shape(x.sizes().begin(), x.sizes().end() - 1);
  shape.push_back(n);
  return out.view(shape);
}

/// `at::matmul`: matrices, a stack of matrices times a matrix, and stacks
/// with equal batch dimensions split over the threads; anything else (vectors,
/// broadcast batches) goes to `at::matmul`.
at::Tensor matmulOnThreads(const at::Tensor &a, const at::Tensor &b) {
  if (!gemmsOwned() || a.dim() < 2 || b.dim() < 2)
    return at::matmul(a, b);
  int64_t m = a.size(-2), k = a.size(-1), n = b.size(-1);
  std::vector<int64_t> shape(a.sizes().begin(), a.sizes().end() - 1);
  shape.push_back(n);
  if (b.dim() == 2) {
    // A stack times a matrix is one matrix product over all rows.
    at::Tensor a2 = a.dim() == 2 ? a : a.reshape({-1, k});
    at::Tensor out = at::empty({a2.size(0), n}, a.options());
    matmul2dInto(out, a2, b, c10::nullopt);
    return out.view(shape);
  }
  if (a.dim() != b.dim() ||
      !std::equal(a.sizes().begin(), a.sizes().end() - 2, b.sizes().begin()))
    return at::matmul(a, b);
  int64_t batch = 1;
  for (int64_t d = 0; d + 2 < a.dim(); ++d)
    batch *= a.size(d);
  at::Tensor a3 = a.reshape({batch, m, k}), b3 = b.reshape({batch, k, n});
  at::Tensor out = at::empty({batch, m, n}, a.options());
  if (oneDnnGemm(out, a3, b3, 0.0f))
    return out.view(shape);
  int64_t blocks = forBlocks(batch, 1, 1, [&](int64_t begin, int64_t end) {
    if (end - begin == batch)
      return void(at::bmm_out(out, a3, b3));
    for (int64_t i = begin; i < end; ++i) {
      at::Tensor o = out.select(0, i);
      at::mm_out(o, a3.select(0, i), b3.select(0, i));
    }
  });
  if (blocks > 1)
    gemmsSplit.fetch_add(1);
  return out.view(shape);
}

//===----------------------------------------------------------------------===//
// Masked attention
//===----------------------------------------------------------------------===//

/// Whether `mask`, broadcast against `[..., t, t]` scores, is the causal
/// mask: the same for every leading index, and for key <= query true (a
/// boolean mask) or zero (an additive one), else false or -inf.
bool isCausalMask(const at::Tensor &mask, int64_t t) {
  if (mask.numel() != t * t)
    return false;
  at::Tensor m = mask.contiguous();
  if (m.scalar_type() == at::kBool) {
    const bool *p = m.data_ptr<bool>();
    for (int64_t i = 0; i < t; ++i)
      for (int64_t j = 0; j < t; ++j)
        if (p[i * t + j] != (j <= i))
          return false;
    return true;
  }
  if (m.scalar_type() != at::kFloat)
    return false;
  const float *p = m.data_ptr<float>();
  for (int64_t i = 0; i < t; ++i)
    for (int64_t j = 0; j < t; ++j) {
      float x = p[i * t + j];
      if (j <= i ? x != 0.0f : !(std::isinf(x) && x < 0))
        return false;
    }
  return true;
}

/// The scores' scaling of masked_attention: by `scale`, or divided by it.
struct AttentionScale {
  at::Scalar scale;
  bool divide;
  void apply(at::Tensor &scores) const {
    if (divide)
      scores.div_(scale);
    else
      scores.mul_(scale);
  }
};

/// A mask (boolean, or additive float) applied to the scores.
void applyMask(at::Tensor &scores, const at::Tensor &mask) {
  if (mask.scalar_type() == at::kBool)
    scores.masked_fill_(mask.logical_not(), -INFINITY);
  else
    scores.add_(mask);
}

/// Rows per block of a causal attention: row block [i, i + rows) reads
/// keys [0, i + rows) only. Blocks of 64 rows keep the products large
/// enough for the BLAS; long sequences use at most 8 blocks... more would
/// skip little more of the square and call the BLAS more often.
int64_t attentionRows(int64_t t) {
  int64_t rows = std::max<int64_t>(64, (t + 7) / 8);
  return (rows + 7) / 8 * 8;
}

/// `[..., t, f]` as `[n, t, f]`.
at::Tensor asStack(const at::Tensor &x) {
  return x.reshape({-1, x.size(-2), x.size(-1)});
}

/// The mask broadcast against the scores, as `[n, t, t]`.
at::Tensor maskStack(const at::Tensor &mask, const at::Tensor &query) {
  std::vector<int64_t> shape(query.sizes().begin(), query.sizes().end() - 1);
  shape.push_back(query.size(-2));
  return asStack(mask.expand(shape));
}

/// Contiguous `[n, r, c]` tensors carved from one flat buffer, reused block
/// after block: a causal kernel's per-block temporaries would otherwise be
/// fresh pages each time (large allocations are mapped and unmapped).
class Scratch {
public:
  Scratch(int64_t elements, const at::TensorOptions &options)
      : buffer(at::empty({elements}, options)) {}
  at::Tensor get(int64_t n, int64_t r, int64_t c) {
    return buffer.narrow(0, 0, n * r * c).view({n, r, c});
  }

private:
  at::Tensor buffer;
};

/// masked_attention on stacks `[n, t, d]`: the scaled and masked scores,
/// their softmax into `probs` and `probs @ v` into `out`, as the unfused
/// ops compute them (matmul, mul or div, where or add, softmax, matmul).
/// With a causal mask, row block [i0, i1) reads keys [0, i1) only; the
/// probs it skips are zero, as softmax leaves them.
void attentionForward(const at::Tensor &q, const at::Tensor &k,
                      const at::Tensor &v, const at::Tensor &mask, bool causal,
                      const AttentionScale &s, at::Tensor &out,
                      at::Tensor &probs) {
  int64_t n = q.size(0), t = q.size(1);
  if (!causal) {
    at::Tensor scores = at::empty({n, t, k.size(1)}, q.options());
    bmmInto(scores, q, k.transpose(1, 2));
    s.apply(scores);
    applyMask(scores, mask);
    at::_softmax_out(probs, scores, -1, false);
    bmmInto(out, probs, v);
    return;
  }
  int64_t rows = std::min(t, attentionRows(t));
  Scratch scoresBuf(n * rows * t, q.options()),
      probsBuf(n * rows * t, q.options());
  at::Tensor above =
      at::ones({rows, rows}, mask.options().dtype(at::kBool)).triu_(1);
  for (int64_t i0 = 0; i0 < t; i0 += rows) {
    int64_t i1 = std::min(t, i0 + rows), r = i1 - i0;
    at::Tensor scores = scoresBuf.get(n, r, i1);
    bmmInto(scores, q.narrow(1, i0, r), k.narrow(1, 0, i1).transpose(1, 2));
    s.apply(scores);
    // Within the diagonal block, keys after the query are masked (adding
    // zero where they are not leaves the scores as they are).
    scores.narrow(2, i0, r).masked_fill_(above.narrow(0, 0, r).narrow(1, 0, r),
                                         -INFINITY);
    at::Tensor p = probsBuf.get(n, r, i1);
    at::_softmax_out(p, scores, -1, false);
    probs.narrow(1, i0, r).narrow(2, 0, i1).copy_(p);
    if (i1 < t)
      probs.narrow(1, i0, r).narrow(2, i1, t - i1).zero_();
    at::Tensor o = out.narrow(1, i0, r);
    bmmInto(o, p, v.narrow(1, 0, i1));
  }
}

/// masked_attention_backward on stacks: `grad_value = probs^T grad`,
/// `ds = softmax_backward(grad v^T, probs)`, scaled as the scores were,
/// `grad_query = ds k`,
/// `grad_key = ds^T q`. With a causal mask, row block [i0, i1) reads keys
/// [0, i1): its query gradient rows, and its terms of the key and value
/// gradients of keys [0, i1), summed block after block. The terms skipped
/// are products with probabilities that are zero.
void attentionBackward(const at::Tensor &g, const at::Tensor &q,
                       const at::Tensor &k, const at::Tensor &v,
                       const at::Tensor &probs, bool causal,
                       const AttentionScale &s, at::Tensor &gq, at::Tensor &gk,
                       at::Tensor &gv) {
  int64_t n = q.size(0), t = q.size(1);
  if (!causal) {
    bmmInto(gv, probs.transpose(1, 2), g);
    at::Tensor dp = at::empty_like(probs);
    bmmInto(dp, g, v.transpose(1, 2));
    at::Tensor ds =
        at::_softmax_backward_data(dp, probs, -1, probs.scalar_type());
    s.apply(ds);
    bmmInto(gq, ds, k);
    bmmInto(gk, ds.transpose(1, 2), q);
    return;
  }
  int64_t rows = std::min(t, attentionRows(t));
  Scratch probsBuf(n * rows * t, q.options()), dpBuf(n * rows * t, q.options()),
      dsBuf(n * rows * t, q.options());
  gk.zero_();
  gv.zero_();
  for (int64_t i0 = 0; i0 < t; i0 += rows) {
    int64_t i1 = std::min(t, i0 + rows), r = i1 - i0;
    // _softmax_backward_data reads its operands densely.
    at::Tensor p = probsBuf.get(n, r, i1);
    p.copy_(probs.narrow(1, i0, r).narrow(2, 0, i1));
    at::Tensor gBlock = g.narrow(1, i0, r);
    at::Tensor dp = dpBuf.get(n, r, i1);
    bmmInto(dp, gBlock, v.narrow(1, 0, i1).transpose(1, 2));
    at::Tensor d = dsBuf.get(n, r, i1);
    at::_softmax_backward_data_out(d, dp, p, -1, p.scalar_type());
    s.apply(d);
    at::Tensor o = gq.narrow(1, i0, r);
    bmmInto(o, d, k.narrow(1, 0, i1));
    at::Tensor gkBlock = gk.narrow(1, 0, i1), gvBlock = gv.narrow(1, 0, i1);
    bmmInto(gkBlock, d.transpose(1, 2), q.narrow(1, i0, r),
            /*accumulate=*/true);
    bmmInto(gvBlock, p.transpose(1, 2), gBlock, /*accumulate=*/true);
  }
}

//===----------------------------------------------------------------------===//
// Cross-entropy by blocks of rows
//===----------------------------------------------------------------------===//

/// `grad * s` as autograd's MulBackward1 computes it for `tensor * number`:
/// the number becomes a double 0-dim tensor, so a rank-0 gradient is scaled
/// in double precision, then rounded back to its own type.
at::Tensor scaleLikeAutograd(const at::Tensor &grad, double s) {
  return at::mul(grad, at::scalar_to_tensor(s)).to(grad.scalar_type());
}

/// Rows of logits one thread takes at a time: about 128 KiB, so that the
/// block and its scratch stay in cache between the passes over it.
int64_t crossEntropyBlockRows(const at::Tensor &logits) {
  int64_t rowBytes =
      std::max<int64_t>(logits.size(1), 1) * int64_t(logits.element_size());
  return std::max<int64_t>(1, (int64_t(128) << 10) / rowBytes);
}

/// Calls `fn(begin, end, scratch)` for blocks of at most `block` rows over
/// the threads; `scratch` holds `count` blocks of `[block, columns]` of the
/// thread's own.
template <typename Fn>
void forRowBlocks(const at::Tensor &like, int64_t block, int64_t count, Fn fn) {
  int64_t rows = like.size(0), columns = like.size(1);
  forBlocks(rows, 2 * block, 1, [&](int64_t begin, int64_t end) {
    std::vector<at::Tensor> scratch;
    for (int64_t i = 0; i < count; ++i)
      scratch.push_back(at::empty({block, columns}, like.options()));
    for (int64_t r = begin; r < end; r += block) {
      int64_t k = std::min(end, r + block) - r;
      std::vector<at::Tensor> views;
      for (const at::Tensor &t : scratch)
        views.push_back(t.narrow(0, 0, k));
      fn(r, k, views);
    }
  });
}

/// What the cross-entropy and its gradient need of the targets: which rows
/// are ignored (`ignore_index`) and the class to read in each (0 where
/// ignored). Throws, as `nll_loss` does, for a target outside the classes.
struct CrossEntropyTargets {
  at::Tensor ignored, classes;
};
CrossEntropyTargets crossEntropyTargets(const at::Tensor &target,
                                        int64_t numClasses,
                                        int64_t ignoreIndex) {
  at::Tensor ignored = target.eq(ignoreIndex);
  at::Tensor classes = target.masked_fill(ignored, 0);
  at::Tensor outside = classes.lt(0).logical_or(classes.ge(numClasses));
  if (outside.any().item<bool>())
    throw std::invalid_argument(absl::StrCat(
        "Target ", target.masked_select(outside)[0].item<int64_t>(),
        " is out of bounds."));
  return {ignored, classes};
}

/// `at::cross_entropy_loss` of logits `[N, C]` (no class weights), the
/// logits read once: each thread takes blocks of rows through `log_softmax`
/// into a scratch block in cache, and keeps of it only the target's
/// log-probability (and, with label smoothing, the row's sum). `nll_loss`
/// over that one column then reduces exactly as over the whole matrix, so
/// the loss is PyTorch's bit for bit without the `[N, C]` log-probabilities
/// ever being written out.
at::Tensor crossEntropy(const at::Tensor &logits, const at::Tensor &target,
                        const OpAttrs &a) {
  int64_t n = logits.size(0), numClasses = logits.size(1);
  CrossEntropyTargets t =
      crossEntropyTargets(target, numClasses, a.ignoreIndex);
  double ls = a.labelSmoothing;
  at::Tensor picked = at::empty({n}, logits.options());
  at::Tensor rowSums = ls > 0 ? at::empty({n}, logits.options()) : at::Tensor();
  forRowBlocks(logits, crossEntropyBlockRows(logits), 1,
               [&](int64_t r, int64_t k, std::vector<at::Tensor> &scratch) {
                 at::Tensor &logp = scratch[0];
                 at::_log_softmax_out(logp, logits.narrow(0, r, k), 1, false);
                 at::Tensor picks = picked.narrow(0, r, k).unsqueeze(1);
                 at::gather_out(picks, logp, 1,
                                t.classes.narrow(0, r, k).unsqueeze(1));
                 if (ls > 0) {
                   at::Tensor sums = rowSums.narrow(0, r, k);
                   at::sum_out(sums, logp, {1});
                 }
               });
  int64_t reduction = a.reduction == LossReduction::Mean  ? at::Reduction::Mean
                      : a.reduction == LossReduction::Sum ? at::Reduction::Sum
                                                          : at::Reduction::None;
  // nll_loss over the picked column: every row's target is that column, or
  // `ignore_index` where ignored (with `ignore_index` 0 the column is the
  // second of two, so the two stay apart).
  int64_t column = a.ignoreIndex == 0 ? 1 : 0;
  at::Tensor columns = column == 0
                           ? picked.unsqueeze(1)
                           : at::stack({at::zeros_like(picked), picked}, 1);
  at::Tensor nll = at::nll_loss(
      columns,
      at::full_like(target, column).masked_fill_(t.ignored, a.ignoreIndex), {},
      reduction, a.ignoreIndex);
  if (ls == 0)
    return nll;
  // PyTorch's label smoothing: -sum(logp) per row, 0 where ignored, reduced
  // (the mean of the rows that count), mixed with the nll term.
  at::Tensor smooth = rowSums.neg().masked_fill_(t.ignored, 0);
  at::Tensor ret;
  switch (a.reduction) {
  case LossReduction::Mean:
    ret = smooth.masked_select(t.ignored.logical_not()).mean();
    break;
  case LossReduction::Sum:
    ret = smooth.sum();
    break;
  case LossReduction::None:
    ret = smooth;
    break;
  }
  return (1 - ls) * nll + ret * (ls / double(numClasses));
}

/// The gradient of `crossEntropy` with respect to the logits, computed as
/// autograd computes it (the gradient of `nll_loss` and of the smoothing
/// term into `_log_softmax_backward_data`), block by block: the logits are
/// read once, the result written once, and `log_softmax` and the gradient
/// of the log-probabilities live only in each thread's scratch blocks.
at::Tensor crossEntropyBackward(const at::Tensor &grad,
                                const at::Tensor &logits,
                                const at::Tensor &target, const OpAttrs &a) {
  int64_t n = logits.size(0), numClasses = logits.size(1);
  at::Tensor result = at::empty_like(logits);
  CrossEntropyTargets t =
      crossEntropyTargets(target, numClasses, a.ignoreIndex);
  double ls = a.labelSmoothing;
  bool mean = a.reduction == LossReduction::Mean;
  at::Tensor counted = t.ignored.logical_not();
  // nll_loss_backward puts -(g / total weight) (mean) or -g at the target.
  at::Tensor gradNll = ls > 0 ? scaleLikeAutograd(grad, 1 - ls) : grad;
  at::Tensor atTarget =
      mean ? (gradNll / counted.sum().to(gradNll.scalar_type())).neg()
           : gradNll.neg();
  atTarget = atTarget.expand({n}).masked_fill(t.ignored, 0);
  // Label smoothing adds -(g ls / C) (over the count under mean) everywhere
  // in a counted row.
  at::Tensor everywhere;
  if (ls > 0) {
    at::Tensor gradRet = scaleLikeAutograd(grad, ls / double(numClasses));
    at::Tensor gradSmooth = mean ? gradRet.div(counted.sum()) : gradRet;
    everywhere =
        gradSmooth.expand({n}).masked_fill(t.ignored, 0).neg().contiguous();
  }
  forRowBlocks(
      logits, crossEntropyBlockRows(logits), 2,
      [&](int64_t r, int64_t k, std::vector<at::Tensor> &scratch) {
        at::Tensor &logp = scratch[0], &gradLogp = scratch[1];
        at::_log_softmax_out(logp, logits.narrow(0, r, k), 1, false);
        if (ls > 0)
          gradLogp.copy_(
              everywhere.narrow(0, r, k).unsqueeze(1).expand({k, numClasses}));
        else
          gradLogp.zero_();
        gradLogp.scatter_add_(1, t.classes.narrow(0, r, k).unsqueeze(1),
                              atTarget.narrow(0, r, k).unsqueeze(1));
        at::Tensor out = result.narrow(0, r, k);
        at::_log_softmax_backward_data_out(out, gradLogp, logp, 1,
                                           logits.scalar_type());
      });
  return result;
}

/// torch.optim.SGD's `_single_tensor_sgd` for one parameter.
void sgdUpdate(Ctx &c) {
  const OpAttrs &a = c.a;
  const at::Tensor &param = c.in(0), &grad = c.in(1), &buffer = c.in(2);
  double lr = c.scalar(3);
  int64_t step = int64_t(c.scalar(4));
  at::Tensor d = grad;
  if (a.weightDecay != 0)
    d = d.add(param, a.weightDecay);
  at::Tensor newParam = c.inPlace(0);
  if (!newParam.defined())
    newParam = param.clone();
  if (a.momentum != 0) {
    at::Tensor buf = c.inPlace(1);
    if (step == 1) {
      // PyTorch starts the buffer as a copy of the first direction.
      buf = buf.defined() ? buf.copy_(d) : d.clone();
    } else {
      if (!buf.defined())
        buf = buffer.clone();
      buf.mul_(a.momentum).add_(d, 1 - a.dampening);
    }
    d = a.nesterov ? d.add(buf, a.momentum) : buf;
    c.set(1, buf);
  } else {
    c.set(1, buffer); // a view result: the buffer passes through
  }
  newParam.add_(d, -lr);
  c.set(0, newParam);
}

/// The scalars of one AdamW step, rounded to float as ATen's float kernels
/// take them.
struct AdamwScalars {
  bool decays;
  float decay, beta1, oneMinusBeta1, beta2, oneMinusBeta2, biasCorrection2Sqrt,
      eps, negStepSize;
};

/// Elements [begin, end) of one fused AdamW step: the arithmetic of
/// `_single_tensor_adamw`'s ATen calls with each result rounded where ATen
/// rounds it. `m * b1` is rounded, then `(1 - b1) g` added in one fused
/// multiply-add (ATen's vectorized `add_` with alpha); `v * b2` is rounded,
/// then `((1 - b2) g) g` added in one fused multiply-add (its `addcmul_`);
/// `sqrt(v) / sqrt(bc2) + eps` and `p + (-step m) / denom` round at every
/// operation. The translation unit is compiled without floating-point
/// contraction, so no other product fuses with a sum.
void adamwRange(float *p, float *m, float *v, const float *g, int64_t begin,
                int64_t end, const AdamwScalars &s) {
  for (int64_t i = begin; i < end; ++i) {
    float pi = s.decays ? p[i] * s.decay : p[i];
    float mi = std::fma(s.oneMinusBeta1, g[i], m[i] * s.beta1);
    float vi = std::fma(s.oneMinusBeta2 * g[i], g[i], v[i] * s.beta2);
    float denom = std::sqrt(vi) / s.biasCorrection2Sqrt + s.eps;
    p[i] = pi + s.negStepSize * mi / denom;
    m[i] = mi;
    v[i] = vi;
  }
}

#if defined(__x86_64__)
/// `adamwRange` eight elements at a time; the same operations, each one
/// correctly rounded, so the same results.
__attribute__((target("avx2,fma"))) void
adamwRangeAvx2(float *p, float *m, float *v, const float *g, int64_t begin,
               int64_t end, const AdamwScalars &s) {
  const __m256 decay = _mm256_set1_ps(s.decay), b1 = _mm256_set1_ps(s.beta1),
               a1 = _mm256_set1_ps(s.oneMinusBeta1),
               b2 = _mm256_set1_ps(s.beta2),
               a2 = _mm256_set1_ps(s.oneMinusBeta2),
               bc2 = _mm256_set1_ps(s.biasCorrection2Sqrt),
               eps = _mm256_set1_ps(s.eps),
               step = _mm256_set1_ps(s.negStepSize);
  int64_t i = begin;
  for (; i + 8 <= end; i += 8) {
    __m256 pi = _mm256_loadu_ps(p + i);
    if (s.decays)
      pi = _mm256_mul_ps(pi, decay);
    __m256 gi = _mm256_loadu_ps(g + i);
    __m256 mi =
        _mm256_fmadd_ps(a1, gi, _mm256_mul_ps(_mm256_loadu_ps(m + i), b1));
    __m256 vi = _mm256_fmadd_ps(_mm256_mul_ps(a2, gi), gi,
                                _mm256_mul_ps(_mm256_loadu_ps(v + i), b2));
    __m256 denom = _mm256_add_ps(_mm256_div_ps(_mm256_sqrt_ps(vi), bc2), eps);
    pi = _mm256_add_ps(pi, _mm256_div_ps(_mm256_mul_ps(step, mi), denom));
    _mm256_storeu_ps(p + i, pi);
    _mm256_storeu_ps(m + i, mi);
    _mm256_storeu_ps(v + i, vi);
  }
  adamwRange(p, m, v, g, i, end, s);
}
#endif

/// torch.optim.AdamW's `_single_tensor_adamw` (PyTorch 1.13, amsgrad off,
/// not capturable) for one parameter. Contiguous float32 tensors take one
/// fused pass over the threads (the parameter, the gradient and the two
/// moments read once and written once, instead of nine passes of ATen
/// calls), with ATen's results bit for bit; other dtypes take the calls.
void adamwUpdate(Ctx &c) {
  const OpAttrs &a = c.a;
  const at::Tensor &grad = c.in(1);
  double lr = c.scalar(4);
  double step = c.scalar(5);
  at::Tensor param = c.inPlace(0), expAvg = c.inPlace(1),
             expAvgSq = c.inPlace(2);
  if (!param.defined())
    param = c.in(0).clone();
  if (!expAvg.defined())
    expAvg = c.in(2).clone();
  if (!expAvgSq.defined())
    expAvgSq = c.in(3).clone();
  double biasCorrection1 = 1 - std::pow(a.beta1, step);
  double biasCorrection2 = 1 - std::pow(a.beta2, step);
  double stepSize = lr / biasCorrection1;
  double biasCorrection2Sqrt = std::sqrt(biasCorrection2);
  bool fused = denseFloat(param) && denseFloat(grad) && denseFloat(expAvg) &&
               denseFloat(expAvgSq);
  if (fused) {
    AdamwScalars s{a.weightDecay != 0,
                   float(1 - lr * a.weightDecay),
                   float(a.beta1),
                   float(1 - a.beta1),
                   float(a.beta2),
                   float(1 - a.beta2),
                   float(biasCorrection2Sqrt),
                   float(a.eps),
                   float(-stepSize)};
    float *p = param.data_ptr<float>(), *m = expAvg.data_ptr<float>(),
          *v = expAvgSq.data_ptr<float>();
    const float *g = grad.data_ptr<float>();
#if defined(__x86_64__)
    static const bool avx2 =
        __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#else
    static const bool avx2 = false;
#endif
    forBlocks(param.numel(), int64_t(1) << 15, 64,
              [&](int64_t begin, int64_t end) {
#if defined(__x86_64__)
                if (avx2)
                  return adamwRangeAvx2(p, m, v, g, begin, end, s);
#endif
                adamwRange(p, m, v, g, begin, end, s);
              });
  } else {
    // Multiplying by exactly 1 changes nothing, so it is skipped.
    if (a.weightDecay != 0)
      param.mul_(1 - lr * a.weightDecay);
    expAvg.mul_(a.beta1).add_(grad, 1 - a.beta1);
    expAvgSq.mul_(a.beta2).addcmul_(grad, grad, 1 - a.beta2);
    at::Tensor denom = (expAvgSq.sqrt() / biasCorrection2Sqrt).add_(a.eps);
    param.addcdiv_(expAvg, denom, -stepSize);
  }
  c.set(0, param);
  c.set(1, expAvg);
  c.set(2, expAvgSq);
}

#define MERAK_UNARY(Kind, Fn)                                                  \
  case OpKind::Kind:                                                           \
    return elementwise(                                                        \
        c, [&] { return at::Fn(c.in(0)); },                                    \
        [&](at::Tensor &o) { at::Fn##_out(o, c.in(0)); });
#define MERAK_BINARY(Kind, Fn)                                                 \
  case OpKind::Kind:                                                           \
    return elementwise(                                                        \
        c, [&] { return at::Fn(c.in(0), c.in(1)); },                           \
        [&](at::Tensor &o) { at::Fn##_out(o, c.in(0), c.in(1)); });

void runKernel(Ctx &c) {
  const OpAttrs &a = c.a;
  switch (c.inst.kind) {
    MERAK_UNARY(Neg, neg)
    MERAK_UNARY(Abs, abs)
    MERAK_UNARY(Exp, exp)
    MERAK_UNARY(Log, log)
    MERAK_UNARY(Sin, sin)
    MERAK_UNARY(Cos, cos)
    MERAK_UNARY(Sqrt, sqrt)
    MERAK_UNARY(Rsqrt, rsqrt)
    MERAK_UNARY(Reciprocal, reciprocal)
    MERAK_UNARY(Erf, erf)
    MERAK_UNARY(Tanh, tanh)
    MERAK_UNARY(Sigmoid, sigmoid)
    MERAK_UNARY(Silu, silu)
    MERAK_UNARY(Not, logical_not)
    MERAK_BINARY(Add, add)
    MERAK_BINARY(Sub, sub)
    MERAK_BINARY(Mul, mul)
    MERAK_BINARY(Div, div)
    MERAK_BINARY(Remainder, remainder)
    MERAK_BINARY(Minimum, minimum)
    MERAK_BINARY(Maximum, maximum)
    MERAK_BINARY(And, logical_and)
    MERAK_BINARY(Or, logical_or)

  case OpKind::Relu:
    // No out= form; the in-place plan only ever names operand 0.
    if (at::Tensor t = c.inPlace(0); t.defined())
      return c.set(0, at::relu_(t));
    return c.set(0, at::relu(c.in(0)));
  case OpKind::Gelu: {
    if (a.tanhApproximation && denseFloat(c.in(0))) {
      const at::Tensor &x = c.in(0);
      at::Tensor y = resultLike(c, x);
      const float *px = x.data_ptr<float>();
      float *py = y.data_ptr<float>();
      forElements(x.numel(), [&](int64_t begin, int64_t end) {
        vecmath::geluTanh(px + begin, py + begin, end - begin);
      });
      return c.set(0, y);
    }
    const char *approx = a.tanhApproximation ? "tanh" : "none";
    return elementwise(
        c, [&] { return at::gelu(c.in(0), approx); },
        [&](at::Tensor &o) { at::gelu_out(o, c.in(0), approx); });
  }
  case OpKind::Clamp: {
    DType dtype = c.operandType(0).dtype;
    c10::optional<at::Scalar> lo, hi;
    if (a.min)
      lo = scalarFor(dtype, *a.min);
    if (a.max)
      hi = scalarFor(dtype, *a.max);
    if (!lo && !hi)
      return c.set(0, c.in(0)); // a view result: nothing to clamp
    return elementwise(
        c, [&] { return at::clamp(c.in(0), lo, hi); },
        [&](at::Tensor &o) { at::clamp_out(o, c.in(0), lo, hi); });
  }
  case OpKind::Cast:
    return c.set(0, c.in(0).to(toAten(c.resultType(0).dtype)));
  case OpKind::Dropout: {
    if (!a.training || a.p == 0)
      return c.set(0, c.in(0));
    at::Tensor mask = dropoutMask(c, c.resultType(0), a.p);
    return elementwise(
        c, [&] { return at::mul(c.in(0), mask); },
        [&](at::Tensor &o) { at::mul_out(o, c.in(0), mask); });
  }
  case OpKind::Tril:
    return c.set(0, at::tril(c.in(0), a.diagonal));
  case OpKind::Triu:
    return c.set(0, at::triu(c.in(0), a.diagonal));

  case OpKind::Pow: {
    // A rank-0 exponent came from a Python number: PyTorch then calls
    // pow(Tensor, Scalar), whose fast paths (x*x, sqrt, ...) round
    // differently from pow(Tensor, Tensor).
    const at::Tensor &exponent = c.in(1);
    if (exponent.dim() == 0 && c.operandType(0).shape.size() > 0) {
      at::Scalar e = exponent.item();
      return elementwise(
          c, [&] { return at::pow(c.in(0), e); },
          [&](at::Tensor &o) { at::pow_out(o, c.in(0), e); });
    }
    return elementwise(
        c, [&] { return at::pow(c.in(0), exponent); },
        [&](at::Tensor &o) { at::pow_out(o, c.in(0), exponent); });
  }
  case OpKind::FloorDivide:
    return elementwise(
        c, [&] { return at::div(c.in(0), c.in(1), "floor"); },
        [&](at::Tensor &o) { at::div_out(o, c.in(0), c.in(1), "floor"); });
  case OpKind::Compare: {
    const at::Tensor &l = c.in(0), &r = c.in(1);
    switch (a.predicate) {
    case ComparePredicate::Eq:
      return c.set(0, at::eq(l, r));
    case ComparePredicate::Ne:
      return c.set(0, at::ne(l, r));
    case ComparePredicate::Lt:
      return c.set(0, at::lt(l, r));
    case ComparePredicate::Le:
      return c.set(0, at::le(l, r));
    case ComparePredicate::Gt:
      return c.set(0, at::gt(l, r));
    case ComparePredicate::Ge:
      return c.set(0, at::ge(l, r));
    }
    return;
  }
  case OpKind::Where:
    return elementwise(
        c, [&] { return at::where(c.in(0), c.in(1), c.in(2)); },
        [&](at::Tensor &o) { at::where_out(o, c.in(0), c.in(1), c.in(2)); });

  case OpKind::Linear:
    return c.set(0, linearOnThreads(c.in(0), c.in(1), c.opt(2)));
  case OpKind::Matmul:
    return c.set(0, matmulOnThreads(c.in(0), c.in(1)));

  case OpKind::Softmax:
    return c.set(0, at::softmax(c.in(0), a.dim));
  case OpKind::LogSoftmax:
    return c.set(0, at::log_softmax(c.in(0), a.dim));
  case OpKind::SoftmaxBackward:
    return c.set(0, at::_softmax_backward_data(c.in(0), c.in(1), a.dim,
                                               c.in(0).scalar_type()));
  case OpKind::MaskedAttention: {
    const at::Tensor &query = c.in(0);
    at::Tensor q = asStack(query), k = asStack(c.in(1)), v = asStack(c.in(2));
    at::Tensor mask = maskStack(c.in(3), query);
    bool causal = isCausalMask(c.in(3), q.size(1));
    if (causal)
      causalAttention.fetch_add(1);
    AttentionScale scale{at::Scalar(float(a.scale)), a.scaleDivides};
    at::Tensor out = at::empty({q.size(0), q.size(1), v.size(2)}, q.options());
    at::Tensor probs =
        at::empty({q.size(0), q.size(1), q.size(1)}, q.options());
    forBlocks(q.size(0), 1, 1, [&](int64_t begin, int64_t end) {
      int64_t n = end - begin;
      at::Tensor o = out.narrow(0, begin, n), p = probs.narrow(0, begin, n);
      attentionForward(q.narrow(0, begin, n), k.narrow(0, begin, n),
                       v.narrow(0, begin, n), mask.narrow(0, begin, n), causal,
                       scale, o, p);
    });
    std::vector<int64_t> shape(query.sizes().begin(), query.sizes().end());
    shape.back() = v.size(2);
    c.set(0, out.view(shape));
    shape.back() = q.size(1);
    c.set(1, probs.view(shape));
    return;
  }
  case OpKind::MaskedAttentionBackward: {
    const at::Tensor &query = c.in(1);
    at::Tensor g = asStack(c.in(0)), q = asStack(query), k = asStack(c.in(2)),
               v = asStack(c.in(3)), probs = asStack(c.in(5));
    bool causal = isCausalMask(c.in(4), q.size(1));
    if (causal)
      causalAttention.fetch_add(1);
    AttentionScale scale{at::Scalar(float(a.scale)), a.scaleDivides};
    at::Tensor gq = at::empty_like(q), gk = at::empty_like(k),
               gv = at::empty_like(v);
    forBlocks(q.size(0), 1, 1, [&](int64_t begin, int64_t end) {
      int64_t n = end - begin;
      at::Tensor oq = gq.narrow(0, begin, n), ok = gk.narrow(0, begin, n),
                 ov = gv.narrow(0, begin, n);
      attentionBackward(g.narrow(0, begin, n), q.narrow(0, begin, n),
                        k.narrow(0, begin, n), v.narrow(0, begin, n),
                        probs.narrow(0, begin, n), causal, scale, oq, ok, ov);
    });
    c.set(0, gq.view(query.sizes()));
    c.set(1, gk.view(query.sizes()));
    c.set(2, gv.view(c.in(3).sizes()));
    return;
  }
  case OpKind::LayerNorm: {
    const auto &shape = c.operandType(0).shape;
    std::vector<int64_t> normalized(shape.end() - a.normalizedRank,
                                    shape.end());
    return c.set(0, std::get<0>(at::native_layer_norm(
                        c.in(0), normalized, c.opt(1), c.opt(2), a.eps)));
  }
  case OpKind::RmsNorm: {
    // PyTorch's composite rms_norm: upcast half types, x * rsqrt(mean(x^2)
    // + eps) over the normalized dims, back to the input type, times weight.
    const at::Tensor &x = c.in(0);
    int64_t rank = x.dim();
    std::vector<int64_t> dims;
    for (int64_t i = 0; i < a.normalizedRank; ++i)
      dims.push_back(rank - i - 1);
    at::ScalarType opmath =
        x.scalar_type() == at::kHalf || x.scalar_type() == at::kBFloat16
            ? at::kFloat
            : x.scalar_type();
    at::Tensor up = x.to(opmath);
    at::Tensor scale =
        at::rsqrt(at::pow(up, 2).mean(dims, /*keepdim=*/true).add_(a.eps));
    at::Tensor y = up.mul(scale).type_as(x);
    if (c.has(1))
      y = y.mul(c.in(1));
    return c.set(0, y);
  }
  case OpKind::BatchNorm: {
    // native_batch_norm updates the running statistics in place; the op
    // returns them, so it works on copies.
    at::Tensor mean = c.in(3).clone(), var = c.in(4).clone();
    at::Tensor y = std::get<0>(at::native_batch_norm(
        c.in(0), c.in(1), c.in(2), mean, var, a.training, a.momentum, a.eps));
    c.set(0, y);
    c.set(1, mean);
    c.set(2, var);
    return;
  }

  case OpKind::Embedding:
    return c.set(0, at::embedding(c.in(0), c.in(1), a.paddingIdx.value_or(-1)));
  case OpKind::Index:
    return c.set(0, at::index_select(c.in(0), a.dim, c.in(1).reshape({-1}))
                        .reshape(c.resultType(0).shape));

  case OpKind::Reshape:
    return c.set(0, c.in(0).reshape(c.resultType(0).shape));
  case OpKind::Permute:
    return c.set(0, c.in(0).permute(a.permutation));
  case OpKind::Slice:
    return c.set(0, c.in(0).slice(a.dim, a.start, a.end, a.step));
  case OpKind::Select:
    return c.set(0, c.in(0).select(a.dim, a.index));
  case OpKind::Concat: {
    std::vector<at::Tensor> parts;
    for (size_t k = 0; k < c.inst.operands.size(); ++k)
      parts.push_back(c.in(k));
    return c.set(0, at::cat(parts, a.dim));
  }
  case OpKind::Expand:
    return c.set(0, c.in(0).expand(c.resultType(0).shape));
  case OpKind::Pad: {
    // constant_pad_nd takes (low, high) pairs from the last dimension back.
    std::vector<int64_t> pad;
    for (size_t d = a.low.size(); d-- > 0;) {
      pad.push_back(a.low[d]);
      pad.push_back(a.high[d]);
    }
    return c.set(
        0, at::constant_pad_nd(c.in(0), pad,
                               scalarFor(c.operandType(0).dtype, a.value)));
  }
  case OpKind::Roll:
    return c.set(0, at::roll(c.in(0), a.shifts, a.dims));

  case OpKind::ReduceSum:
  case OpKind::ReduceMean:
  case OpKind::ReduceMax: {
    const at::Tensor &x = c.in(0);
    std::vector<int64_t> dims = a.dims;
    if (dims.empty())
      for (int64_t d = 0; d < x.dim(); ++d)
        dims.push_back(d);
    if (x.dim() == 0)
      return c.set(0, x.clone());
    if (c.inst.kind == OpKind::ReduceSum)
      return c.set(0, at::sum(x, dims, a.keepdim));
    if (c.inst.kind == OpKind::ReduceMean)
      return c.set(0, at::mean(x, dims, a.keepdim));
    return c.set(0, at::amax(x, dims, a.keepdim));
  }

  case OpKind::Conv2d:
    return c.set(0, at::convolution(c.in(0), c.in(1), c.opt(2), a.stride,
                                    a.padding, a.dilation, false, {0, 0},
                                    a.groups));
  case OpKind::MaxPool2d:
    return c.set(0, std::get<0>(at::max_pool2d_with_indices(
                        c.in(0), a.kernel, a.stride, a.padding, a.dilation,
                        a.ceilMode)));
  case OpKind::AvgPool2d:
    return c.set(0,
                 at::avg_pool2d(c.in(0), a.kernel, a.stride, a.padding,
                                a.ceilMode, a.countIncludePad, c10::nullopt));
  case OpKind::AdaptiveAvgPool2d:
    return c.set(0, at::adaptive_avg_pool2d(c.in(0), a.outputSize));

  case OpKind::CrossEntropy:
    // The dialect allows i32 targets; the kernels index with int64.
    return c.set(0, crossEntropy(c.in(0), c.in(1).to(at::kLong), a));

  case OpKind::GeluBackward: {
    if (a.tanhApproximation && denseFloat(c.in(0)) && denseFloat(c.in(1))) {
      const at::Tensor &dy = c.in(0), &x = c.in(1);
      at::Tensor dx = resultLike(c, dy);
      const float *pdy = dy.data_ptr<float>(), *px = x.data_ptr<float>();
      float *pdx = dx.data_ptr<float>();
      forElements(x.numel(), [&](int64_t begin, int64_t end) {
        vecmath::geluTanhBackward(pdy + begin, px + begin, pdx + begin,
                                  end - begin);
      });
      return c.set(0, dx);
    }
    const char *approx = a.tanhApproximation ? "tanh" : "none";
    return elementwise(
        c, [&] { return at::gelu_backward(c.in(0), c.in(1), approx); },
        [&](at::Tensor &o) {
          at::gelu_backward_out(o, c.in(0), c.in(1), approx);
        });
  }
  case OpKind::LayerNormBackward: {
    const at::Tensor &grad = c.in(0), &x = c.in(1);
    const auto &shape = c.operandType(1).shape;
    std::vector<int64_t> normalized(shape.end() - a.normalizedRank,
                                    shape.end());
    // Autograd saved mean and rstd from the forward; recomputing them from
    // the same input gives the same values.
    auto [y, mean, rstd] =
        at::native_layer_norm(x, normalized, c.opt(2), c.opt(3), a.eps);
    auto [gx, gw, gb] = at::native_layer_norm_backward(
        grad, x, normalized, mean, rstd, c.opt(2), c.opt(3),
        {true, c.has(2), c.has(3)});
    c.set(0, gx);
    c.set(1, gw.defined() ? gw : c.zerosFor(1));
    c.set(2, gb.defined() ? gb : c.zerosFor(2));
    return;
  }
  case OpKind::BatchNormBackward: {
    const at::Tensor &grad = c.in(0), &x = c.in(1), &w = c.in(2);
    at::Tensor saveMean, saveInvstd;
    if (a.training) {
      auto stats = at::native_batch_norm(x, w, {}, {}, {}, true, 0.0, a.eps);
      saveMean = std::get<1>(stats);
      saveInvstd = std::get<2>(stats);
    }
    auto [gx, gw, gb] = at::native_batch_norm_backward(
        grad, x, w, c.in(3), c.in(4), saveMean, saveInvstd, a.training, a.eps,
        {true, true, true});
    c.set(0, gx);
    c.set(1, gw);
    c.set(2, gb);
    return;
  }
  case OpKind::IndexBackward: {
    // index_add_ accumulates in index order, as embedding_dense_backward
    // and index_select's backward do.
    const at::Tensor &grad = c.in(0), &indices = c.in(1);
    const TensorType &type = c.resultType(0);
    int64_t rank = int64_t(type.shape.size());
    int64_t dim = a.dim < 0 ? a.dim + rank : a.dim;
    std::vector<int64_t> gradShape(type.shape.begin(),
                                   type.shape.begin() + dim);
    gradShape.push_back(indices.numel());
    gradShape.insert(gradShape.end(), type.shape.begin() + dim + 1,
                     type.shape.end());
    at::Tensor result = at::zeros(type.shape, optionsFor(type.dtype));
    result.index_add_(dim, indices.reshape({-1}), grad.reshape(gradShape));
    if (a.paddingIdx)
      result.select(dim, *a.paddingIdx).zero_();
    return c.set(0, result);
  }
  case OpKind::SliceBackward:
    return c.set(0, at::slice_backward(c.in(0), c.resultType(0).shape, a.dim,
                                       a.start, a.end, a.step));
  case OpKind::Conv2dBackward: {
    const TensorType &w = c.operandType(2);
    std::vector<int64_t> biasSizes{w.shape[0]};
    auto [gx, gw, gb] = at::convolution_backward(
        c.in(0), c.in(1), c.in(2), at::OptionalIntArrayRef(biasSizes), a.stride,
        a.padding, a.dilation, false, {0, 0}, a.groups,
        {c.needed(0), c.needed(1), c.needed(2)});
    c.set(0, gx.defined() ? gx : c.zerosFor(0));
    c.set(1, gw.defined() ? gw : c.zerosFor(1));
    c.set(2, gb.defined() ? gb : c.zerosFor(2));
    return;
  }
  case OpKind::MaxPool2dBackward: {
    const at::Tensor &x = c.in(1);
    at::Tensor indices = std::get<1>(at::max_pool2d_with_indices(
        x, a.kernel, a.stride, a.padding, a.dilation, a.ceilMode));
    return c.set(0, at::max_pool2d_with_indices_backward(
                        c.in(0), x, a.kernel, a.stride, a.padding, a.dilation,
                        a.ceilMode, indices));
  }
  case OpKind::AvgPool2dBackward:
    return c.set(0, at::avg_pool2d_backward(c.in(0), c.in(1), a.kernel,
                                            a.stride, a.padding, a.ceilMode,
                                            a.countIncludePad, c10::nullopt));
  case OpKind::AdaptiveAvgPool2dBackward: {
    const at::Tensor &grad = c.in(0), &x = c.in(1);
    // adaptive_avg_pool2d to 1x1 is a mean over H and W in PyTorch, so its
    // gradient is mean's: the gradient expanded, divided by H * W.
    if (grad.size(-1) == 1 && grad.size(-2) == 1)
      return c.set(0, grad.expand(x.sizes()) / (x.size(-1) * x.size(-2)));
    return c.set(0, at::_adaptive_avg_pool2d_backward(grad, x));
  }
  case OpKind::CrossEntropyBackward:
    return c.set(
        0, crossEntropyBackward(c.in(0), c.in(1), c.in(2).to(at::kLong), a));

  case OpKind::DropoutMask:
    return c.set(0, dropoutMask(c, c.resultType(0), a.p));
  case OpKind::SgdUpdate:
    return sgdUpdate(c);
  case OpKind::AdamwUpdate:
    return adamwUpdate(c);

  case OpKind::AllReduce:
  case OpKind::AllGather:
  case OpKind::ReduceScatter:
  case OpKind::AllToAll:
  case OpKind::AllSlice:
  case OpKind::Broadcast:
  case OpKind::Wait:
    // The executor runs these through a communicator.
    throw std::invalid_argument(
        "a collective reached the CPU kernels; it needs a communicator");
  }
}

#undef MERAK_UNARY
#undef MERAK_BINARY

//===----------------------------------------------------------------------===//
// The backend
//===----------------------------------------------------------------------===//

class CpuBackend final : public Backend {
public:
  explicit CpuBackend(const CpuBackendOptions &options) : arena(options.arena) {
    if (options.threads > 0)
      at::set_num_threads(options.threads);
    if (options.oneThreadPool && makeBlasSerial())
      gemmsOnAtenThreads = true;
    gemmsOnOneDnn = options.gemm == GemmLibrary::OneDnn;
    generator = at::make_generator<at::CPUGeneratorImpl>(0);
  }

  std::string name() const override { return "cpu"; }
  // `runKernel` has a case for every op; collectives and waits go to the
  // communicator.
  bool supports(OpKind kind) const override {
    return !isCollective(kind) && kind != OpKind::Wait;
  }

  absl::StatusOr<TensorHandle> upload(const HostTensor &host) override {
    c10::InferenceMode guard;
    at::Tensor t = at::empty(host.type.shape, optionsFor(host.type.dtype));
    if (host.byteSize() > 0)
      std::memcpy(t.data_ptr(), host.data, host.byteSize());
    return TensorHandle(std::make_shared<CpuTensor>(std::move(t)));
  }

  absl::StatusOr<HostTensor> download(const DeviceTensor &tensor,
                                      const TensorType &type) override {
    c10::InferenceMode guard;
    at::Tensor t = unwrap(tensor).contiguous();
    HostTensor host = HostTensor::allocate(type);
    if (size_t(t.nbytes()) != host.byteSize())
      return absl::InternalError(absl::StrCat("download: tensor has ",
                                              t.nbytes(), " bytes, expected ",
                                              type.str()));
    if (host.byteSize() > 0)
      std::memcpy(host.mutableBytes(), t.data_ptr(), host.byteSize());
    return host;
  }

  absl::StatusOr<TensorHandle> zeros(const TensorType &type) override {
    c10::InferenceMode guard;
    return TensorHandle(std::make_shared<CpuTensor>(
        at::zeros(type.shape, optionsFor(type.dtype))));
  }

  absl::StatusOr<TensorHandle> convert(const DeviceTensor &tensor,
                                       DType to) override {
    c10::InferenceMode guard;
    return TensorHandle(
        std::make_shared<CpuTensor>(unwrap(tensor).to(toAten(to))));
  }

  absl::StatusOr<TensorHandle> allocateArena(int64_t bytes) override {
    if (!arena)
      return TensorHandle();
    c10::InferenceMode guard;
    return TensorHandle(
        std::make_shared<CpuTensor>(at::empty({bytes}, at::kByte)));
  }

  absl::Status accumulate(DeviceTensor &into,
                          const DeviceTensor &addend) override {
    c10::InferenceMode guard;
    try {
      const_cast<at::Tensor &>(unwrap(into)).add_(unwrap(addend));
    } catch (const std::exception &e) {
      return absl::InternalError(std::string("accumulate: ") + e.what());
    }
    return absl::OkStatus();
  }

  absl::Status scale(DeviceTensor &tensor, double factor) override {
    c10::InferenceMode guard;
    try {
      const_cast<at::Tensor &>(unwrap(tensor)).mul_(factor);
    } catch (const std::exception &e) {
      return absl::InternalError(std::string("scale: ") + e.what());
    }
    return absl::OkStatus();
  }

  absl::Status beginStep(const StepContext &step) override {
    generator = at::make_generator<at::CPUGeneratorImpl>(
        stepSeed(step.seed, step.globalStep, RandomStream::Dropout));
    return absl::OkStatus();
  }

  absl::Status execute(KernelCall &call) override {
    c10::InferenceMode guard;
    const Instruction &inst = *call.instruction;
    Ctx c{call, inst, inst.attrs, *call.program, generator, {}};
    c.out.resize(inst.results.size());
    try {
      {
        ArenaScope slots(call, inst);
        runKernel(c);
      }
    } catch (const c10::Error &e) {
      return absl::InvalidArgumentError(firstLine(e.what_without_backtrace()));
    } catch (const std::exception &e) {
      return absl::InvalidArgumentError(firstLine(e.what()));
    }
    call.results.resize(inst.results.size());
    for (size_t r = 0; r < inst.results.size(); ++r) {
      at::Tensor &t = c.out[r];
      const TensorType &type = c.resultType(r);
      if (!t.defined())
        return absl::InternalError(
            absl::StrCat("the CPU kernel produced no result #", r));
      std::optional<DType> dtype = fromAten(t.scalar_type());
      if (!dtype || *dtype != type.dtype ||
          !std::equal(t.sizes().begin(), t.sizes().end(), type.shape.begin(),
                      type.shape.end()))
        return absl::InternalError(absl::StrCat("the CPU kernel produced ",
                                                toString(t), " for result #", r,
                                                ", expected ", type.str()));
      // The plan assumes a fresh result owns its storage; an ATen shortcut
      // that returns an operand (or a view of one) would break in-place reuse.
      if (inst.storage[r].kind == ResultStorage::Kind::Fresh)
        for (DeviceTensor *operand : call.operands)
          if (operand && t.is_alias_of(unwrap(*operand))) {
            t = t.clone();
            break;
          }
      call.results[r] = std::make_shared<CpuTensor>(std::move(t));
    }
    return absl::OkStatus();
  }

  MemoryStats memoryStats() const override {
    CountingAllocator &alloc = CountingAllocator::get();
    return {alloc.live.load(), alloc.peak.load(), alloc.arenaResults.load()};
  }

  void resetPeak() override {
    CountingAllocator &alloc = CountingAllocator::get();
    alloc.peak.store(alloc.live.load());
  }

private:
  static std::string toString(const at::Tensor &t) {
    std::string s;
    for (int64_t d : t.sizes())
      s += std::to_string(d) + "x";
    std::optional<DType> dtype = fromAten(t.scalar_type());
    return s + (dtype ? dtypeName(*dtype) : c10::toString(t.scalar_type()));
  }

  at::Generator generator;
  bool arena;
};

} // namespace

int64_t gemmsSplitOverThreads() { return gemmsSplit.load(); }

int64_t causalAttentionCalls() { return causalAttention.load(); }

int64_t oneDnnGemmCalls() { return oneDnnGemms.load(); }

/// oneDNN's name for the instruction set its JIT kernels use here.
const char *oneDnnIsaName() {
  switch (dnnl_get_effective_cpu_isa()) {
  case dnnl_cpu_isa_sse41:
    return "SSE4.1";
  case dnnl_cpu_isa_avx:
    return "AVX";
  case dnnl_cpu_isa_avx2:
    return "AVX2";
  case dnnl_cpu_isa_avx2_vnni:
    return "AVX2-VNNI";
  case dnnl_cpu_isa_avx512_core:
  case dnnl_cpu_isa_avx512_core_vnni:
  case dnnl_cpu_isa_avx512_core_bf16:
  case dnnl_cpu_isa_avx512_core_amx:
    return "AVX-512";
  default:
    return "its own";
  }
}

std::string blasDescription() {
  auto *config = blasFunction<char *()>("openblas_get_config");
  auto *coreName = blasFunction<char *()>("openblas_get_corename");
  std::string blas = config ? config() : "a BLAS other than OpenBLAS";
  if (coreName)
    absl::StrAppend(&blas, " (", coreName(), " kernels)");
  if (gemmsOnOneDnn) {
    const dnnl_version_t *v = dnnl_version();
    return absl::StrCat("oneDNN ", v->major, ".", v->minor, ".", v->patch,
                        " sgemm for float32 (", oneDnnIsaName(),
                        " kernels), the BLAS for the rest: ", blas);
  }
  return absl::StrCat(blas, "; ",
                      gemmsOnAtenThreads
                          ? "GEMMs split over the kernels' threads"
                          : "GEMMs on the BLAS's own threads");
}

std::unique_ptr<Backend> createCpuBackend(const CpuBackendOptions &options) {
  // Installed once, before the first tensor of the run, so every ATen CPU
  // allocation after this point is counted.
  static bool installed = [] {
    c10::SetAllocator(c10::DeviceType::CPU, &CountingAllocator::get());
    return true;
  }();
  (void)installed;
  return std::make_unique<CpuBackend>(options);
}

} // namespace merak::runtime
