//===- Libraries.cpp - cuBLASLt and cuDNN as the CUDA emulator runs them --===//
//
// The library calls the CUDA backend makes, done on the host by their
// documented definitions, so that the backend's side of each call (the
// layouts, transposes, batch strides and epilogues it asks cuBLASLt for;
// the descriptors and passes it asks cuDNN for) is checked against the CPU
// backend on a machine without a GPU:
//
// - cuBLASLt: `D = alpha op(A) op(B) + beta C (+ bias)` on column-major
//   layouts with strided batches, summed in float (double for f64) in
//   order; the table `CublasLt::get()` returns (CublasLt.h) is this file's
//   functions. TF32 is not modelled: `CUBLAS_COMPUTE_32F_FAST_TF32` sums
//   in full float.
// - cuDNN: 2-D cross-correlation on NCHW tensors with padding, stride,
//   dilation and groups: forward, data gradient and filter gradient, each
//   `alpha result + beta destination`.
//
// Anything else the calls ask for is refused with NOT_SUPPORTED, naming it.
//
//===----------------------------------------------------------------------===//

#include "CublasLt.h"

#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cudnn.h>

#include <cstdio>
#include <cstring>
#include <vector>

struct cublasLtContext {};
struct cudnnContext {};

struct cudnnTensorStruct {
  cudnnDataType_t type = CUDNN_DATA_FLOAT;
  int n = 0, c = 0, h = 0, w = 0;
};
struct cudnnFilterStruct {
  cudnnDataType_t type = CUDNN_DATA_FLOAT;
  int k = 0, c = 0, h = 0, w = 0;
};
struct cudnnConvolutionStruct {
  int padH = 0, padW = 0, strideH = 1, strideW = 1, dilationH = 1,
      dilationW = 1, groups = 1;
  cudnnConvolutionMode_t mode = CUDNN_CROSS_CORRELATION;
};

namespace merak::runtime::cuda::emulation {
namespace {

//===----------------------------------------------------------------------===//
// Elements of any of the library types, read and written as double
//===----------------------------------------------------------------------===//

enum class Elem { F32, F64, F16, BF16, Unknown };

double load(Elem t, const void *p, size_t i) {
  switch (t) {
  case Elem::F32:
    return static_cast<const float *>(p)[i];
  case Elem::F64:
    return static_cast<const double *>(p)[i];
  case Elem::F16:
    return __half2float(static_cast<const __half *>(p)[i]);
  case Elem::BF16:
    return __bfloat162float(static_cast<const __nv_bfloat16 *>(p)[i]);
  case Elem::Unknown:
    break;
  }
  return 0;
}

void store(Elem t, void *p, size_t i, double v) {
  switch (t) {
  case Elem::F32:
    static_cast<float *>(p)[i] = float(v);
    return;
  case Elem::F64:
    static_cast<double *>(p)[i] = v;
    return;
  case Elem::F16:
    static_cast<__half *>(p)[i] = __float2half_rn(float(v));
    return;
  case Elem::BF16:
    static_cast<__nv_bfloat16 *>(p)[i] = __float2bfloat16_rn(float(v));
    return;
  case Elem::Unknown:
    return;
  }
}

Elem elemOf(cudaDataType_t t) {
  switch (t) {
  case CUDA_R_32F:
    return Elem::F32;
  case CUDA_R_64F:
    return Elem::F64;
  case CUDA_R_16F:
    return Elem::F16;
  case CUDA_R_16BF:
    return Elem::BF16;
  default:
    return Elem::Unknown;
  }
}

Elem elemOf(cudnnDataType_t t) {
  switch (t) {
  case CUDNN_DATA_FLOAT:
    return Elem::F32;
  case CUDNN_DATA_DOUBLE:
    return Elem::F64;
  case CUDNN_DATA_HALF:
    return Elem::F16;
  case CUDNN_DATA_BFLOAT16:
    return Elem::BF16;
  default:
    return Elem::Unknown;
  }
}

/// A sum in the accumulation type: float, or double for f64.
struct Sum {
  bool wide;
  float f = 0;
  double d = 0;
  explicit Sum(bool wide) : wide(wide) {}
  void add(double a, double b) {
    if (wide)
      d += a * b;
    else
      f += float(a) * float(b);
  }
  double value() const { return wide ? d : double(f); }
};

cublasStatus_t refuse(const char *what) {
  std::fprintf(stderr, "CUDA emulator: cuBLASLt: %s is not emulated\n", what);
  return CUBLAS_STATUS_NOT_SUPPORTED;
}

//===----------------------------------------------------------------------===//
// cuBLASLt
//===----------------------------------------------------------------------===//

struct Layout {
  cudaDataType_t type;
  uint64_t rows, cols;
  int64_t ld;
  int32_t batch = 1;
  int64_t stride = 0;
};

struct MatmulDesc {
  cublasComputeType_t compute;
  cudaDataType_t scale;
  cublasOperation_t transA = CUBLAS_OP_N, transB = CUBLAS_OP_N;
  cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  const void *bias = nullptr;
  int32_t biasType = -1;
};

Layout &layoutOf(cublasLtMatrixLayout_t l) {
  return *reinterpret_cast<Layout *>(l);
}
MatmulDesc &descOf(cublasLtMatmulDesc_t d) {
  return *reinterpret_cast<MatmulDesc *>(d);
}

template <typename T> bool read(const void *buf, size_t size, T &out) {
  if (size != sizeof(T))
    return false;
  std::memcpy(&out, buf, sizeof(T));
  return true;
}

size_t ltGetVersion() { return CUBLAS_VERSION; }

cublasStatus_t ltCreate(cublasLtHandle_t *h) {
  *h = new cublasLtContext();
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t ltDestroy(cublasLtHandle_t h) {
  delete h;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t ltDescCreate(cublasLtMatmulDesc_t *d,
                            cublasComputeType_t compute, cudaDataType_t scale) {
  if (compute != CUBLAS_COMPUTE_32F &&
      compute != CUBLAS_COMPUTE_32F_FAST_TF32 && compute != CUBLAS_COMPUTE_64F)
    return refuse("this compute type");
  *d = reinterpret_cast<cublasLtMatmulDesc_t>(new MatmulDesc{compute, scale});
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t ltDescDestroy(cublasLtMatmulDesc_t d) {
  delete &descOf(d);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t ltDescSet(cublasLtMatmulDesc_t d,
                         cublasLtMatmulDescAttributes_t attr, const void *buf,
                         size_t size) {
  MatmulDesc &m = descOf(d);
  bool ok = false;
  switch (attr) {
  case CUBLASLT_MATMUL_DESC_TRANSA:
    ok = read(buf, size, m.transA);
    break;
  case CUBLASLT_MATMUL_DESC_TRANSB:
    ok = read(buf, size, m.transB);
    break;
  case CUBLASLT_MATMUL_DESC_EPILOGUE:
    ok = read(buf, size, m.epilogue) &&
         (m.epilogue == CUBLASLT_EPILOGUE_DEFAULT ||
          m.epilogue == CUBLASLT_EPILOGUE_BIAS);
    if (!ok)
      return refuse("this epilogue");
    break;
  case CUBLASLT_MATMUL_DESC_BIAS_POINTER:
    ok = read(buf, size, m.bias);
    break;
  case CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE:
    ok = read(buf, size, m.biasType);
    break;
  default:
    return refuse("this matmul attribute");
  }
  return ok ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_INVALID_VALUE;
}

cublasStatus_t ltLayoutCreate(cublasLtMatrixLayout_t *l, cudaDataType type,
                              uint64_t rows, uint64_t cols, int64_t ld) {
  if (elemOf(type) == Elem::Unknown)
    return refuse("this data type");
  if (ld < int64_t(rows > 0 ? rows : 1))
    return CUBLAS_STATUS_INVALID_VALUE;
  *l = reinterpret_cast<cublasLtMatrixLayout_t>(
      new Layout{type, rows, cols, ld});
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t ltLayoutDestroy(cublasLtMatrixLayout_t l) {
  delete &layoutOf(l);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t ltLayoutSet(cublasLtMatrixLayout_t l,
                           cublasLtMatrixLayoutAttribute_t attr,
                           const void *buf, size_t size) {
  Layout &x = layoutOf(l);
  switch (attr) {
  case CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT:
    return read(buf, size, x.batch) && x.batch >= 1
               ? CUBLAS_STATUS_SUCCESS
               : CUBLAS_STATUS_INVALID_VALUE;
  case CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET:
    return read(buf, size, x.stride) ? CUBLAS_STATUS_SUCCESS
                                     : CUBLAS_STATUS_INVALID_VALUE;
  default:
    return refuse("this layout attribute");
  }
}

cublasStatus_t ltPrefCreate(cublasLtMatmulPreference_t *p) {
  *p = reinterpret_cast<cublasLtMatmulPreference_t>(new char[1]);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t ltPrefDestroy(cublasLtMatmulPreference_t p) {
  delete[] reinterpret_cast<char *>(p);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t ltPrefSet(cublasLtMatmulPreference_t,
                         cublasLtMatmulPreferenceAttributes_t, const void *,
                         size_t) {
  return CUBLAS_STATUS_SUCCESS;
}

/// Checks the shapes of `D = op(A) op(B) + C`; the product's m, n, k.
bool shapes(const MatmulDesc &d, const Layout &a, const Layout &b,
            const Layout &c, const Layout &dl, uint64_t &m, uint64_t &n,
            uint64_t &k) {
  m = d.transA == CUBLAS_OP_N ? a.rows : a.cols;
  k = d.transA == CUBLAS_OP_N ? a.cols : a.rows;
  uint64_t kb = d.transB == CUBLAS_OP_N ? b.rows : b.cols;
  n = d.transB == CUBLAS_OP_N ? b.cols : b.rows;
  if (kb != k || c.rows != m || c.cols != n || dl.rows != m || dl.cols != n)
    return false;
  int32_t batch = dl.batch;
  for (const Layout *x : {&a, &b, &c})
    if (x->batch != batch && x->batch != 1)
      return false;
  return true;
}

cublasStatus_t ltHeuristic(cublasLtHandle_t, cublasLtMatmulDesc_t desc,
                           cublasLtMatrixLayout_t a, cublasLtMatrixLayout_t b,
                           cublasLtMatrixLayout_t c, cublasLtMatrixLayout_t d,
                           cublasLtMatmulPreference_t, int requested,
                           cublasLtMatmulHeuristicResult_t *results,
                           int *found) {
  uint64_t m, n, k;
  *found = 0;
  if (requested < 1)
    return CUBLAS_STATUS_INVALID_VALUE;
  if (!shapes(descOf(desc), layoutOf(a), layoutOf(b), layoutOf(c), layoutOf(d),
              m, n, k))
    return CUBLAS_STATUS_INVALID_VALUE;
  results[0] = cublasLtMatmulHeuristicResult_t();
  results[0].state = CUBLAS_STATUS_SUCCESS;
  results[0].workspaceSize = 0;
  results[0].wavesCount = 1;
  *found = 1;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t ltMatmul(cublasLtHandle_t, cublasLtMatmulDesc_t desc,
                        const void *alpha, const void *A,
                        cublasLtMatrixLayout_t al, const void *B,
                        cublasLtMatrixLayout_t bl, const void *beta,
                        const void *C, cublasLtMatrixLayout_t cl, void *D,
                        cublasLtMatrixLayout_t dl, const cublasLtMatmulAlgo_t *,
                        void *, size_t, cudaStream_t) {
  const MatmulDesc &d = descOf(desc);
  const Layout &a = layoutOf(al), &b = layoutOf(bl), &c = layoutOf(cl),
               &o = layoutOf(dl);
  uint64_t m, n, k;
  if (!shapes(d, a, b, c, o, m, n, k))
    return CUBLAS_STATUS_INVALID_VALUE;
  const bool wide = d.compute == CUBLAS_COMPUTE_64F;
  double alphaV = d.scale == CUDA_R_64F ? *static_cast<const double *>(alpha)
                                        : *static_cast<const float *>(alpha);
  double betaV = d.scale == CUDA_R_64F ? *static_cast<const double *>(beta)
                                       : *static_cast<const float *>(beta);
  Elem ta = elemOf(a.type), tb = elemOf(b.type), tc = elemOf(c.type),
       td = elemOf(o.type);
  Elem tBias = d.biasType >= 0 ? elemOf(cudaDataType_t(d.biasType)) : td;
  if (d.epilogue == CUBLASLT_EPILOGUE_BIAS && !d.bias)
    return CUBLAS_STATUS_INVALID_VALUE;
  for (int32_t bi = 0; bi < o.batch; ++bi) {
    auto base = [&](const Layout &l) {
      return l.batch == 1 ? int64_t(0) : int64_t(bi) * l.stride;
    };
    const int64_t oa = base(a), ob = base(b), oc = base(c), od = base(o);
    std::vector<double> out(m * n);
    for (uint64_t j = 0; j < n; ++j)
      for (uint64_t i = 0; i < m; ++i) {
        Sum s(wide);
        for (uint64_t p = 0; p < k; ++p) {
          // op(A)[i][p] and op(B)[p][j], column-major.
          int64_t ia = d.transA == CUBLAS_OP_N ? int64_t(i + p * a.ld)
                                               : int64_t(p + i * a.ld);
          int64_t ib = d.transB == CUBLAS_OP_N ? int64_t(p + j * b.ld)
                                               : int64_t(j + p * b.ld);
          s.add(load(ta, A, size_t(oa + ia)), load(tb, B, size_t(ob + ib)));
        }
        double v = alphaV * s.value();
        if (betaV != 0)
          v += betaV * load(tc, C, size_t(oc + int64_t(i + j * c.ld)));
        if (d.epilogue == CUBLASLT_EPILOGUE_BIAS)
          v += load(tBias, d.bias, i);
        out[i + j * m] = v;
      }
    // Written after every read: D may be C.
    for (uint64_t j = 0; j < n; ++j)
      for (uint64_t i = 0; i < m; ++i)
        store(td, D, size_t(od + int64_t(i + j * o.ld)), out[i + j * m]);
  }
  return CUBLAS_STATUS_SUCCESS;
}

} // namespace
} // namespace merak::runtime::cuda::emulation

namespace merak::runtime::cuda {

const CublasLt &CublasLt::get() {
  static const CublasLt lt = [] {
    namespace e = emulation;
    CublasLt t;
    t.getVersion = e::ltGetVersion;
    t.create = e::ltCreate;
    t.destroy = e::ltDestroy;
    t.matmulDescCreate = e::ltDescCreate;
    t.matmulDescDestroy = e::ltDescDestroy;
    t.matmulDescSetAttribute = e::ltDescSet;
    t.matrixLayoutCreate = e::ltLayoutCreate;
    t.matrixLayoutDestroy = e::ltLayoutDestroy;
    t.matrixLayoutSetAttribute = e::ltLayoutSet;
    t.preferenceCreate = e::ltPrefCreate;
    t.preferenceDestroy = e::ltPrefDestroy;
    t.preferenceSetAttribute = e::ltPrefSet;
    t.algoGetHeuristic = e::ltHeuristic;
    t.matmul = e::ltMatmul;
    return t;
  }();
  return lt;
}

} // namespace merak::runtime::cuda

//===----------------------------------------------------------------------===//
// cuDNN
//===----------------------------------------------------------------------===//

namespace {

using merak::runtime::cuda::emulation::Elem;
using merak::runtime::cuda::emulation::elemOf;
using merak::runtime::cuda::emulation::load;
using merak::runtime::cuda::emulation::store;
using merak::runtime::cuda::emulation::Sum;

cudnnStatus_t refuseDnn(const char *what) {
  std::fprintf(stderr, "CUDA emulator: cuDNN: %s is not emulated\n", what);
  return CUDNN_STATUS_NOT_SUPPORTED;
}

/// The convolution of `x`, `w` and `y` (checked against each other):
/// calls `visit(xi, wi, yi)` with the flat indices of every product.
template <typename F>
cudnnStatus_t eachProduct(const cudnnTensorStruct &x,
                          const cudnnFilterStruct &w,
                          const cudnnConvolutionStruct &c,
                          const cudnnTensorStruct &y, F visit) {
  if (c.mode != CUDNN_CROSS_CORRELATION)
    return refuseDnn("a flipped convolution (CUDNN_CONVOLUTION)");
  const int g = c.groups, cg = x.c / g, kg = w.k / g;
  auto outSize = [](int in, int pad, int dil, int kernel, int stride) {
    return (in + 2 * pad - dil * (kernel - 1) - 1) / stride + 1;
  };
  if (x.c % g || w.k % g || w.c != cg || y.n != x.n || y.c != w.k ||
      y.h != outSize(x.h, c.padH, c.dilationH, w.h, c.strideH) ||
      y.w != outSize(x.w, c.padW, c.dilationW, w.w, c.strideW))
    return CUDNN_STATUS_BAD_PARAM;
  for (int n = 0; n < y.n; ++n)
    for (int k = 0; k < y.c; ++k)
      for (int oh = 0; oh < y.h; ++oh)
        for (int ow = 0; ow < y.w; ++ow) {
          size_t yi = ((size_t(n) * y.c + k) * y.h + oh) * y.w + ow;
          int group = k / kg;
          for (int ci = 0; ci < cg; ++ci)
            for (int r = 0; r < w.h; ++r) {
              int ih = oh * c.strideH - c.padH + r * c.dilationH;
              if (ih < 0 || ih >= x.h)
                continue;
              for (int s = 0; s < w.w; ++s) {
                int iw = ow * c.strideW - c.padW + s * c.dilationW;
                if (iw < 0 || iw >= x.w)
                  continue;
                size_t xi =
                    ((size_t(n) * x.c + group * cg + ci) * x.h + ih) * x.w + iw;
                size_t wi = ((size_t(k) * w.c + ci) * w.h + r) * w.w + s;
                visit(xi, wi, yi);
              }
            }
        }
  return CUDNN_STATUS_SUCCESS;
}

double scalar(Elem t, const void *p) {
  return t == Elem::F64 ? *static_cast<const double *>(p)
                        : *static_cast<const float *>(p);
}

/// `dst = alpha sums + beta dst`, `sums` accumulated per element.
cudnnStatus_t blend(Elem t, void *dst, size_t count, const void *alpha,
                    const void *beta, const std::vector<Sum> &sums) {
  double a = scalar(t, alpha), b = scalar(t, beta);
  for (size_t i = 0; i < count; ++i) {
    double v = a * sums[i].value();
    if (b != 0)
      v += b * load(t, dst, i);
    store(t, dst, i, v);
  }
  return CUDNN_STATUS_SUCCESS;
}

size_t count(const cudnnTensorStruct &t) {
  return size_t(t.n) * t.c * t.h * t.w;
}
size_t count(const cudnnFilterStruct &f) {
  return size_t(f.k) * f.c * f.h * f.w;
}

/// A pass's one algorithm (the direct sum above): deterministic, no
/// workspace, fused multiply-adds.
template <typename Perf, typename Algo>
cudnnStatus_t oneAlgorithm(int requested, int *returned, Perf *perf,
                           Algo algo) {
  *returned = 0;
  if (requested < 1)
    return CUDNN_STATUS_BAD_PARAM;
  perf[0] = Perf();
  perf[0].algo = algo;
  perf[0].status = CUDNN_STATUS_SUCCESS;
  perf[0].determinism = CUDNN_DETERMINISTIC;
  perf[0].mathType = CUDNN_FMA_MATH;
  *returned = 1;
  return CUDNN_STATUS_SUCCESS;
}

} // namespace

extern "C" {

size_t cudnnGetVersion(void) { return CUDNN_VERSION; }

const char *cudnnGetErrorString(cudnnStatus_t status) {
  switch (status) {
  case CUDNN_STATUS_SUCCESS:
    return "CUDNN_STATUS_SUCCESS";
  case CUDNN_STATUS_BAD_PARAM:
    return "CUDNN_STATUS_BAD_PARAM (CUDA emulator)";
  default:
    return "CUDNN_STATUS_NOT_SUPPORTED (CUDA emulator)";
  }
}

cudnnStatus_t cudnnCreate(cudnnHandle_t *h) {
  *h = new cudnnContext();
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnDestroy(cudnnHandle_t h) {
  delete h;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnSetStream(cudnnHandle_t, cudaStream_t) {
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnCreateTensorDescriptor(cudnnTensorDescriptor_t *d) {
  *d = new cudnnTensorStruct();
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnDestroyTensorDescriptor(cudnnTensorDescriptor_t d) {
  delete d;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnSetTensor4dDescriptor(cudnnTensorDescriptor_t d,
                                         cudnnTensorFormat_t format,
                                         cudnnDataType_t type, int n, int c,
                                         int h, int w) {
  if (format != CUDNN_TENSOR_NCHW)
    return refuseDnn("a tensor format other than NCHW");
  if (elemOf(type) == Elem::Unknown)
    return refuseDnn("this data type");
  *d = {type, n, c, h, w};
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnCreateFilterDescriptor(cudnnFilterDescriptor_t *d) {
  *d = new cudnnFilterStruct();
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnDestroyFilterDescriptor(cudnnFilterDescriptor_t d) {
  delete d;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnSetFilter4dDescriptor(cudnnFilterDescriptor_t d,
                                         cudnnDataType_t type,
                                         cudnnTensorFormat_t format, int k,
                                         int c, int h, int w) {
  if (format != CUDNN_TENSOR_NCHW)
    return refuseDnn("a filter format other than NCHW");
  *d = {type, k, c, h, w};
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t
cudnnCreateConvolutionDescriptor(cudnnConvolutionDescriptor_t *d) {
  *d = new cudnnConvolutionStruct();
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t
cudnnDestroyConvolutionDescriptor(cudnnConvolutionDescriptor_t d) {
  delete d;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnSetConvolution2dDescriptor(cudnnConvolutionDescriptor_t d,
                                              int padH, int padW, int u, int v,
                                              int dilationH, int dilationW,
                                              cudnnConvolutionMode_t mode,
                                              cudnnDataType_t) {
  if (padH < 0 || padW < 0 || u < 1 || v < 1 || dilationH < 1 || dilationW < 1)
    return CUDNN_STATUS_BAD_PARAM;
  d->padH = padH;
  d->padW = padW;
  d->strideH = u;
  d->strideW = v;
  d->dilationH = dilationH;
  d->dilationW = dilationW;
  d->mode = mode;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnSetConvolutionGroupCount(cudnnConvolutionDescriptor_t d,
                                            int groups) {
  if (groups < 1)
    return CUDNN_STATUS_BAD_PARAM;
  d->groups = groups;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnSetConvolutionMathType(cudnnConvolutionDescriptor_t,
                                          cudnnMathType_t) {
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnGetConvolutionForwardAlgorithm_v7(
    cudnnHandle_t, const cudnnTensorDescriptor_t, const cudnnFilterDescriptor_t,
    const cudnnConvolutionDescriptor_t, const cudnnTensorDescriptor_t,
    const int requested, int *returned, cudnnConvolutionFwdAlgoPerf_t *perf) {
  return oneAlgorithm(requested, returned, perf,
                      CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM);
}

cudnnStatus_t cudnnGetConvolutionBackwardDataAlgorithm_v7(
    cudnnHandle_t, const cudnnFilterDescriptor_t, const cudnnTensorDescriptor_t,
    const cudnnConvolutionDescriptor_t, const cudnnTensorDescriptor_t,
    const int requested, int *returned,
    cudnnConvolutionBwdDataAlgoPerf_t *perf) {
  return oneAlgorithm(requested, returned, perf,
                      CUDNN_CONVOLUTION_BWD_DATA_ALGO_1);
}

cudnnStatus_t cudnnGetConvolutionBackwardFilterAlgorithm_v7(
    cudnnHandle_t, const cudnnTensorDescriptor_t, const cudnnTensorDescriptor_t,
    const cudnnConvolutionDescriptor_t, const cudnnFilterDescriptor_t,
    const int requested, int *returned,
    cudnnConvolutionBwdFilterAlgoPerf_t *perf) {
  return oneAlgorithm(requested, returned, perf,
                      CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1);
}

cudnnStatus_t cudnnGetConvolutionForwardWorkspaceSize(
    cudnnHandle_t, const cudnnTensorDescriptor_t, const cudnnFilterDescriptor_t,
    const cudnnConvolutionDescriptor_t, const cudnnTensorDescriptor_t,
    cudnnConvolutionFwdAlgo_t, size_t *bytes) {
  *bytes = 0;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnGetConvolutionBackwardDataWorkspaceSize(
    cudnnHandle_t, const cudnnFilterDescriptor_t, const cudnnTensorDescriptor_t,
    const cudnnConvolutionDescriptor_t, const cudnnTensorDescriptor_t,
    cudnnConvolutionBwdDataAlgo_t, size_t *bytes) {
  *bytes = 0;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnGetConvolutionBackwardFilterWorkspaceSize(
    cudnnHandle_t, const cudnnTensorDescriptor_t, const cudnnTensorDescriptor_t,
    const cudnnConvolutionDescriptor_t, const cudnnFilterDescriptor_t,
    cudnnConvolutionBwdFilterAlgo_t, size_t *bytes) {
  *bytes = 0;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnConvolutionForward(
    cudnnHandle_t, const void *alpha, const cudnnTensorDescriptor_t xd,
    const void *x, const cudnnFilterDescriptor_t wd, const void *w,
    const cudnnConvolutionDescriptor_t cd, cudnnConvolutionFwdAlgo_t, void *,
    size_t, const void *beta, const cudnnTensorDescriptor_t yd, void *y) {
  Elem t = elemOf(yd->type);
  std::vector<Sum> sums(count(*yd), Sum(t == Elem::F64));
  cudnnStatus_t s =
      eachProduct(*xd, *wd, *cd, *yd, [&](size_t xi, size_t wi, size_t yi) {
        sums[yi].add(load(t, x, xi), load(t, w, wi));
      });
  return s != CUDNN_STATUS_SUCCESS
             ? s
             : blend(t, y, sums.size(), alpha, beta, sums);
}

cudnnStatus_t cudnnConvolutionBackwardData(
    cudnnHandle_t, const void *alpha, const cudnnFilterDescriptor_t wd,
    const void *w, const cudnnTensorDescriptor_t dyd, const void *dy,
    const cudnnConvolutionDescriptor_t cd, cudnnConvolutionBwdDataAlgo_t,
    void *, size_t, const void *beta, const cudnnTensorDescriptor_t dxd,
    void *dx) {
  Elem t = elemOf(dxd->type);
  std::vector<Sum> sums(count(*dxd), Sum(t == Elem::F64));
  cudnnStatus_t s =
      eachProduct(*dxd, *wd, *cd, *dyd, [&](size_t xi, size_t wi, size_t yi) {
        sums[xi].add(load(t, dy, yi), load(t, w, wi));
      });
  return s != CUDNN_STATUS_SUCCESS
             ? s
             : blend(t, dx, sums.size(), alpha, beta, sums);
}

cudnnStatus_t cudnnConvolutionBackwardFilter(
    cudnnHandle_t, const void *alpha, const cudnnTensorDescriptor_t xd,
    const void *x, const cudnnTensorDescriptor_t dyd, const void *dy,
    const cudnnConvolutionDescriptor_t cd, cudnnConvolutionBwdFilterAlgo_t,
    void *, size_t, const void *beta, const cudnnFilterDescriptor_t dwd,
    void *dw) {
  Elem t = elemOf(dwd->type);
  std::vector<Sum> sums(count(*dwd), Sum(t == Elem::F64));
  cudnnStatus_t s =
      eachProduct(*xd, *dwd, *cd, *dyd, [&](size_t xi, size_t wi, size_t yi) {
        sums[wi].add(load(t, dy, yi), load(t, x, xi));
      });
  return s != CUDNN_STATUS_SUCCESS
             ? s
             : blend(t, dw, sums.size(), alpha, beta, sums);
}

} // extern "C"
