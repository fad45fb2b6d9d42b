//===- LinearAlgebra.cpp - CPU kernels: linear, matmul and the GEMMs ------===//
//
// `linear` and `matmul`, and the GEMM machinery the attention kernels share
// (`bmmInto`): float32 products on oneDNN's sgemm, or on the BLAS split over
// ATen's threads, or through ATen's own calls; and what the backend reports
// of them (the libraries, the counts).
//
//===----------------------------------------------------------------------===//

#include "CpuKernels.h"
#include "GemmLayout.h"

#include "absl/strings/str_cat.h"

#include <dlfcn.h>
#include <oneapi/dnnl/dnnl.h>

#include <atomic>
#include <optional>
#include <stdexcept>

namespace merak::runtime::cpu {
namespace {

/// Set by the backend once the BLAS runs serially: GEMMs then split their
/// rows (or their batch) over ATen's intra-op threads themselves, as a
/// multithreaded BLAS splits them over its own. Results agree with a single
/// BLAS call to rounding: which rows the BLAS kernels take together decides
/// the order of some additions, as it does with the BLAS's own threads.
std::atomic<bool> gemmsOnAtenThreads{false};

/// GEMMs so far that ran as more than one block on ATen's threads.
std::atomic<int64_t> gemmsSplit{0};

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

} // namespace

/// `out = a @ b` for stacks `[n, m, k] @ [n, k, p]` of any strides (views
/// from narrow and transpose are read in place where oneDNN runs them), or
/// `out += a @ b` with `accumulate`.
void bmmInto(at::Tensor &out, const at::Tensor &a, const at::Tensor &b,
             bool accumulate) {
  if (oneDnnGemm(out, a, b, accumulate ? 1.0f : 0.0f))
    return;
  if (accumulate)
    out.baddbmm_(a, b);
  else
    at::bmm_out(out, a, b);
}

namespace {

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

} // namespace

void configureGemms(GemmLibrary gemm, bool oneThreadPool) {
  if (oneThreadPool && makeBlasSerial())
    gemmsOnAtenThreads = true;
  gemmsOnOneDnn = gemm == GemmLibrary::OneDnn;
}

void registerLinearAlgebraKernels(KernelTable &table) {
  table.add(OpKind::Linear, [](Ctx &c) {
    c.set(0, linearOnThreads(c.in(0), c.in(1), c.opt(2)));
  });
  table.add(OpKind::Matmul,
            [](Ctx &c) { c.set(0, matmulOnThreads(c.in(0), c.in(1))); });
  // grad[..., N]^T input[..., K] summed over the leading dimensions: one
  // product of the flattened operands, the transpose read in place.
  table.add(OpKind::LinearWeightBackward, [](Ctx &c) {
    const at::Tensor &g = c.in(0), &x = c.in(1);
    at::Tensor g2 = g.reshape({-1, g.size(-1)}).t();
    at::Tensor x2 = x.reshape({-1, x.size(-1)});
    if (!gemmsOwned())
      return c.set(0, at::mm(g2, x2));
    at::Tensor out = at::empty({g2.size(0), x2.size(1)}, g.options());
    matmul2dInto(out, g2, x2, c10::nullopt);
    c.set(0, out);
  });
}

} // namespace merak::runtime::cpu

namespace merak::runtime {

int64_t gemmsSplitOverThreads() { return cpu::gemmsSplit.load(); }

int64_t oneDnnGemmCalls() { return cpu::oneDnnGemms.load(); }

std::string blasDescription() {
  using namespace cpu;
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

} // namespace merak::runtime
