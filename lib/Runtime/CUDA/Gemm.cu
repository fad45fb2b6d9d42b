//===- Gemm.cu - matrix products on cuBLASLt ------------------------------===//
//
// Row-major products as cuBLASLt's column-major ones: `C = A B` is
// `C^T = B^T A^T`, and a row-major matrix read column-major is its
// transpose, so the operands swap and keep their own layouts. The
// algorithm cuBLASLt's heuristic picks is kept per shape and layout.
//
//===----------------------------------------------------------------------===//

#include "Copy.h"
#include "CublasLt.h"
#include "Gemm.h"

#include <array>
#include <map>
#include <mutex>
#include <string>

namespace merak::runtime::cuda {
namespace {

void checkLt(cublasStatus_t status, const char *what) {
  if (status != CUBLAS_STATUS_SUCCESS)
    throw CudaError(std::string("cuBLASLt: ") + what + " failed (status " +
                    std::to_string(int(status)) + ")");
}

cudaDataType_t dataType(ElemType t) {
  switch (t) {
  case ElemType::F16:
    return CUDA_R_16F;
  case ElemType::BF16:
    return CUDA_R_16BF;
  case ElemType::F32:
    return CUDA_R_32F;
  case ElemType::F64:
    return CUDA_R_64F;
  default:
    throw CudaError(std::string("gemm: no kernel for ") + elemTypeName(t));
  }
}

/// Descriptors that free themselves.
struct Desc {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulPreference_t pref = nullptr;
  ~Desc() {
    if (pref)
      CublasLt::get().preferenceDestroy(pref);
    if (c)
      CublasLt::get().matrixLayoutDestroy(c);
    if (b)
      CublasLt::get().matrixLayoutDestroy(b);
    if (a)
      CublasLt::get().matrixLayoutDestroy(a);
    if (op)
      CublasLt::get().matmulDescDestroy(op);
  }
};

template <typename T>
void setOp(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t attr,
           const T &value) {
  checkLt(CublasLt::get().matmulDescSetAttribute(d, attr, &value, sizeof(T)),
          "setting a matmul attribute");
}

/// A column-major `rows x cols` layout with leading dimension `ld`, a
/// batch of `batch` matrices `stride` elements apart.
cublasLtMatrixLayout_t layout(cudaDataType_t type, int64_t rows, int64_t cols,
                              int64_t ld, int64_t batch, int64_t stride) {
  cublasLtMatrixLayout_t l;
  checkLt(CublasLt::get().matrixLayoutCreate(&l, type, uint64_t(rows),
                                             uint64_t(cols), ld),
          "creating a matrix layout");
  if (batch > 1) {
    int32_t count = int32_t(batch);
    checkLt(CublasLt::get().matrixLayoutSetAttribute(
                l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof(count)),
            "setting a batch count");
    checkLt(CublasLt::get().matrixLayoutSetAttribute(
                l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride,
                sizeof(stride)),
            "setting a batch stride");
  }
  return l;
}

/// One cuBLASLt call, in row-major terms: `c[m, n] = alpha a[m, k] b[k, n] +
/// beta c (+ bias)` for `batch` matrices; `c` of `outType` (`type`, or f32
/// for products of f16 or bf16).
struct Call {
  ElemType type, outType;
  int64_t m, n, k, batch;
  const void *a, *b;
  void *c;
  MatrixLayout la, lb;
  int64_t ldc, strideA, strideB, strideC;
  double alpha, beta;
  const void *bias;
};

using AlgoKey = std::array<int64_t, 22>;

/// The algorithms chosen so far, by handle, shape, layout and alignment.
std::mutex algoMutex;
std::map<AlgoKey, cublasLtMatmulAlgo_t> algoCache;

/// Runs `call`; false (nothing issued) when cuBLASLt has no algorithm for
/// it.
bool tryMatmul(const GemmDevice &dev, const Call &call) {
  auto lt = static_cast<cublasLtHandle_t>(dev.cublasLt);
  cudaDataType_t type = dataType(call.type);
  bool f64 = call.type == ElemType::F64;
  cublasComputeType_t compute = f64 ? CUBLAS_COMPUTE_64F
                                    : (call.type == ElemType::F32 && dev.tf32
                                           ? CUBLAS_COMPUTE_32F_FAST_TF32
                                           : CUBLAS_COMPUTE_32F);
  cudaDataType_t scaleType = f64 ? CUDA_R_64F : CUDA_R_32F;

  // Column-major: D^T[n, m] = op(B) op(A), B first.
  Desc d;
  checkLt(CublasLt::get().matmulDescCreate(&d.op, compute, scaleType),
          "creating a matmul descriptor");
  cublasOperation_t opA = call.lb.trans ? CUBLAS_OP_T : CUBLAS_OP_N;
  cublasOperation_t opB = call.la.trans ? CUBLAS_OP_T : CUBLAS_OP_N;
  setOp(d.op, CUBLASLT_MATMUL_DESC_TRANSA, opA);
  setOp(d.op, CUBLASLT_MATMUL_DESC_TRANSB, opB);
  if (call.bias) {
    setOp(d.op, CUBLASLT_MATMUL_DESC_EPILOGUE, CUBLASLT_EPILOGUE_BIAS);
    setOp(d.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, call.bias);
  }
  d.a =
      call.lb.trans
          ? layout(type, call.k, call.n, call.lb.ld, call.batch, call.strideB)
          : layout(type, call.n, call.k, call.lb.ld, call.batch, call.strideB);
  d.b =
      call.la.trans
          ? layout(type, call.m, call.k, call.la.ld, call.batch, call.strideA)
          : layout(type, call.k, call.m, call.la.ld, call.batch, call.strideA);
  d.c = layout(dataType(call.outType), call.n, call.m, call.ldc, call.batch,
               call.strideC);

  // Lt's A is our b: the alignments follow the swap.
  unsigned alignA = alignmentOf(reinterpret_cast<uintptr_t>(call.b)),
           alignB = alignmentOf(reinterpret_cast<uintptr_t>(call.a)),
           alignC = alignmentOf(reinterpret_cast<uintptr_t>(call.c)),
           alignBias = call.bias
                           ? alignmentOf(reinterpret_cast<uintptr_t>(call.bias))
                           : 0;
  AlgoKey key = {int64_t(dev.cublasLt),
                 int64_t(call.type),
                 int64_t(compute),
                 call.m,
                 call.n,
                 call.k,
                 call.batch,
                 call.la.trans,
                 call.la.ld,
                 call.lb.trans,
                 call.lb.ld,
                 call.ldc,
                 call.strideA,
                 call.strideB,
                 call.strideC,
                 alignA,
                 alignB,
                 alignC,
                 alignBias,
                 call.bias != nullptr,
                 int64_t(dev.workspaceBytes),
                 int64_t(call.outType)};
  cublasLtMatmulAlgo_t algo;
  bool cached = false;
  {
    std::lock_guard<std::mutex> lock(algoMutex);
    auto it = algoCache.find(key);
    if (it != algoCache.end()) {
      algo = it->second;
      cached = true;
    }
  }
  if (!cached) {
    checkLt(CublasLt::get().preferenceCreate(&d.pref), "creating a preference");
    uint64_t workspace = dev.workspaceBytes;
    checkLt(CublasLt::get().preferenceSetAttribute(
                d.pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace,
                sizeof(workspace)),
            "setting the workspace size");
    std::pair<cublasLtMatmulPreferenceAttributes_t, uint32_t> aligns[] = {
        {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, alignA},
        {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, alignB},
        {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, alignC},
        {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, alignC}};
    for (auto &[attr, value] : aligns)
      checkLt(CublasLt::get().preferenceSetAttribute(d.pref, attr, &value,
                                                     sizeof(value)),
              "setting an alignment");
    cublasLtMatmulHeuristicResult_t result = {};
    int found = 0;
    cublasStatus_t s = CublasLt::get().algoGetHeuristic(
        lt, d.op, d.a, d.b, d.c, d.c, d.pref, 1, &result, &found);
    if (s == CUBLAS_STATUS_NOT_SUPPORTED ||
        (s == CUBLAS_STATUS_SUCCESS && found == 0))
      return false;
    checkLt(s, "choosing an algorithm");
    algo = result.algo;
    std::lock_guard<std::mutex> lock(algoMutex);
    algoCache.emplace(key, algo);
  }

  float alpha32 = float(call.alpha), beta32 = float(call.beta);
  const void *alpha = f64 ? static_cast<const void *>(&call.alpha) : &alpha32;
  const void *beta = f64 ? static_cast<const void *>(&call.beta) : &beta32;
  checkLt(CublasLt::get().matmul(lt, d.op, alpha, call.b, d.a, call.a, d.b,
                                 beta, call.c, d.c, call.c, d.c, &algo,
                                 dev.workspace, dev.workspaceBytes, dev.stream),
          "matmul");
  if (dev.calls)
    ++*dev.calls;
  return true;
}

/// The row-major `rows x cols` matrix at `data`, `ld` elements apart.
View matrixView(ElemType type, void *data, int64_t rows, int64_t cols,
                int64_t ld) {
  View v;
  v.data = data;
  v.type = type;
  v.rank = 2;
  v.sizes[0] = rows;
  v.sizes[1] = cols;
  v.strides[0] = ld;
  v.strides[1] = 1;
  return v;
}

/// The `[m, n]` matrix at `c` (leading dimension `ldc`) set to `bias`
/// repeated on every row.
void fillRows(ElemType type, void *c, int64_t m, int64_t n, int64_t ldc,
              const void *bias, cudaStream_t stream) {
  View dst = matrixView(type, c, m, n, ldc);
  View src = dst;
  src.data = const_cast<void *>(bias);
  src.strides[0] = 0;
  copyStrided(src, dst, stream);
}

void runStaged(const GemmDevice &dev, Call call);

void run(const GemmDevice &dev, Call call) {
  if (call.m == 0 || call.n == 0 || call.batch == 0)
    return;
  if (call.k == 0) {
    // No products: beta * c (+ bias), one matrix after the other.
    for (int64_t i = 0; i < call.batch; ++i) {
      void *c = static_cast<char *>(call.c) +
                i * call.strideC * int64_t(elemSize(call.outType));
      View cv = matrixView(call.outType, c, call.m, call.n, call.ldc);
      if (call.beta == 0)
        fill(cv, 0.0, dev.stream);
      else if (call.beta != 1)
        scaleInPlace(cv, call.beta, dev.stream);
      if (call.bias) {
        View b = cv;
        b.data = const_cast<void *>(call.bias);
        b.strides[0] = 0;
        addInto(cv, b, dev.stream);
      }
    }
    return;
  }
  if (call.batch > INT32_MAX)
    throw CudaError("gemm: a batch of " + std::to_string(call.batch) +
                    " matrices (cuBLASLt takes at most 2^31 - 1)");
  // A single product's matrices whose rows are not 16 bytes apart are
  // staged through copies whose rows are (`stagedLeading`).
  View finalC;
  if (dev.scratch && call.batch == 1) {
    int64_t size = int64_t(elemSize(call.type));
    auto stage = [&](const void *&data, MatrixLayout &l, int64_t rows,
                     int64_t cols) {
      // The stored matrix: the transpose's rows and columns swap.
      int64_t r = l.trans ? cols : rows, c = l.trans ? rows : cols;
      int64_t ld = stagedLeading(r, c, l.ld, size);
      if (ld == 0)
        return;
      View src = matrixView(call.type, const_cast<void *>(data), r, c, l.ld);
      View dst = matrixView(call.type, dev.scratch(r * ld * size), r, c, ld);
      copyStrided(src, dst, dev.stream);
      data = dst.data;
      l.ld = ld;
    };
    stage(call.a, call.la, call.m, call.k);
    stage(call.b, call.lb, call.k, call.n);
    int64_t outSize = int64_t(elemSize(call.outType));
    if (int64_t ldc = stagedLeading(call.m, call.n, call.ldc, outSize);
        ldc != 0 && call.beta == 0) {
      finalC = matrixView(call.outType, call.c, call.m, call.n, call.ldc);
      call.c = dev.scratch(call.m * ldc * outSize);
      call.ldc = ldc;
    }
  }
  runStaged(dev, call);
  if (finalC.data) {
    View staged = matrixView(call.outType, call.c, call.m, call.n, call.ldc);
    copyStrided(staged, finalC, dev.stream);
  }
}

/// `run` past its checks and staging.
void runStaged(const GemmDevice &dev, Call call) {
  if (call.bias && call.type != ElemType::F64 && tryMatmul(dev, call))
    return;
  if (call.bias) {
    // Without the bias epilogue: the bias fills c, the product adds to it.
    if (call.beta != 0)
      throw CudaError("gemm: a bias with beta != 0 needs cuBLASLt's epilogue");
    fillRows(call.type, call.c, call.m, call.n, call.ldc, call.bias,
             dev.stream);
    call.bias = nullptr;
    call.beta = 1;
  }
  if (!tryMatmul(dev, call))
    throw CudaError(
        "cuBLASLt has no algorithm for a " + std::to_string(call.m) + "x" +
        std::to_string(call.k) + " by " + std::to_string(call.k) + "x" +
        std::to_string(call.n) + " product of " + elemTypeName(call.type) +
        " (batch " + std::to_string(call.batch) + ")");
}

} // namespace

void gemm(const GemmDevice &dev, const View &a, const View &b, const View &c,
          double alpha, double beta, const void *bias) {
  int rank = c.rank;
  if (rank < 2 || a.rank != rank || b.rank != rank)
    throw CudaError("gemm: operands of ranks " + std::to_string(a.rank) + ", " +
                    std::to_string(b.rank) + " and " + std::to_string(rank));
  bool widened = c.type == ElemType::F32 &&
                 (a.type == ElemType::BF16 || a.type == ElemType::F16);
  if (a.type != b.type || (a.type != c.type && !widened))
    throw CudaError(std::string("gemm: operands of types ") +
                    elemTypeName(a.type) + ", " + elemTypeName(b.type) +
                    " and " + elemTypeName(c.type));
  int64_t m = c.sizes[rank - 2], n = c.sizes[rank - 1], k = a.sizes[rank - 1];
  if (a.sizes[rank - 2] != m || b.sizes[rank - 2] != k ||
      b.sizes[rank - 1] != n)
    throw CudaError("gemm: the operands' shapes do not match");
  for (int d = 0; d + 2 < rank; ++d)
    if (a.sizes[d] != c.sizes[d] || b.sizes[d] != c.sizes[d])
      throw CudaError("gemm: the operands' batch sizes differ");
  if (bias && rank != 2)
    throw CudaError("gemm: a bias on a stack of products");
  if (bias && widened)
    throw CudaError("gemm: a bias on a widened product");
  if (c.numel() == 0)
    return;
  MatrixLayout la, lb, lc;
  if (!matrixLayout(m, k, a.strides[rank - 2], a.strides[rank - 1], la) ||
      !matrixLayout(k, n, b.strides[rank - 2], b.strides[rank - 1], lb) ||
      !matrixLayout(m, n, c.strides[rank - 2], c.strides[rank - 1], lc) ||
      lc.trans)
    throw CudaError("gemm: an operand that cuBLASLt cannot read in place");
  BatchPlan plan = planBatch(a, b, c);
  Call call{
      a.type,        c.type, m,    n,   k,     plan.batch(),  a.data,
      b.data,        c.data, la,   lb,  lc.ld, plan.innerA(), plan.innerB(),
      plan.innerC(), alpha,  beta, bias};
  if (plan.calls() == 1 && foldsIntoRows(call.batch, m, la, call.strideA,
                                         call.strideB, lc.ld, call.strideC)) {
    // One matrix times a stack: one product of all the stack's rows.
    call.m *= call.batch;
    call.batch = 1;
  }
  int64_t size = int64_t(elemSize(a.type)), outSize = int64_t(elemSize(c.type));
  for (int64_t i = 0, calls = plan.calls(); i < calls; ++i) {
    int64_t oa, ob, oc;
    plan.offsets(i, oa, ob, oc);
    Call one = call;
    one.a = static_cast<const char *>(a.data) + oa * size;
    one.b = static_cast<const char *>(b.data) + ob * size;
    one.c = static_cast<char *>(c.data) + oc * outSize;
    run(dev, one);
  }
}

} // namespace merak::runtime::cuda
