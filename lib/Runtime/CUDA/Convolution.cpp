//===- Convolution.cpp - CUDA host kernels: convolution, pooling, norm ----===//
//
// conv2d and its backward run in cuDNN (the legacy NCHW API) with
// deterministic algorithms only, and without TF32 for f32 unless the run
// asks for it (--tf32); the bias, its gradient, pooling and batch norm run
// in this family's own kernels (Convolution.cu). Each op computes what the
// CPU backend's kernel computes (lib/Runtime/CPU/Convolution.cpp, and
// batch_norm in lib/Runtime/CPU/Normalization.cpp).
//
//===----------------------------------------------------------------------===//

#include "Convolution.h"
#include "Copy.h"
#include "CudaKernels.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

#include <cudnn.h>

#include <array>
#include <climits>
#include <vector>

namespace merak::runtime::cuda {
namespace {

//===----------------------------------------------------------------------===//
// cuDNN
//===----------------------------------------------------------------------===//

void checkCudnn(cudnnStatus_t status, const char *what) {
  if (status != CUDNN_STATUS_SUCCESS)
    throw CudaError(absl::StrCat(what, ": ", cudnnGetErrorString(status)));
}

/// The backend's cuDNN handle, created on the stream by the first call
/// that needs it (the backend destroys it).
cudnnHandle_t cudnnFor(Ctx &c) {
  if (!c.dev.cudnn) {
    cudnnHandle_t handle = nullptr;
    checkCudnn(cudnnCreate(&handle), "starting cuDNN");
    c.dev.cudnn = handle;
    checkCudnn(cudnnSetStream(handle, c.stream()), "starting cuDNN");
  }
  return static_cast<cudnnHandle_t>(c.dev.cudnn);
}

template <typename D, cudnnStatus_t (*Create)(D *), cudnnStatus_t (*Destroy)(D)>
class Descriptor {
public:
  Descriptor() { checkCudnn(Create(&d), "creating a cuDNN descriptor"); }
  ~Descriptor() { Destroy(d); }
  Descriptor(const Descriptor &) = delete;
  Descriptor &operator=(const Descriptor &) = delete;
  operator D() const { return d; }

private:
  D d = nullptr;
};
using TensorDesc =
    Descriptor<cudnnTensorDescriptor_t, cudnnCreateTensorDescriptor,
               cudnnDestroyTensorDescriptor>;
using FilterDesc =
    Descriptor<cudnnFilterDescriptor_t, cudnnCreateFilterDescriptor,
               cudnnDestroyFilterDescriptor>;
using ConvDesc =
    Descriptor<cudnnConvolutionDescriptor_t, cudnnCreateConvolutionDescriptor,
               cudnnDestroyConvolutionDescriptor>;

/// Workspaces above this are not considered (a slower algorithm is).
constexpr size_t kMaxWorkspace = size_t(1) << 30;

/// `values` as two (one value repeated, or `fallback` for none), as ATen
/// expands a convolution's or a pooling's parameters.
std::array<int64_t, 2> pair(const std::vector<int64_t> &values,
                            std::array<int64_t, 2> fallback, const char *what) {
  if (values.empty())
    return fallback;
  if (values.size() == 1)
    return {values[0], values[0]};
  if (values.size() == 2)
    return {values[0], values[1]};
  throw CudaError(
      absl::StrCat(what, " has ", values.size(), " values, expected 1 or 2"));
}

int toInt(int64_t v, const char *what) {
  if (v < 0 || v > INT_MAX)
    throw CudaError(
        absl::StrCat(what, " ", v, " is out of cuDNN's range (0 to 2^31-1)"));
  return int(v);
}

cudnnDataType_t cudnnType(DType dtype) {
  switch (dtype) {
  case DType::F16:
    return CUDNN_DATA_HALF;
  case DType::BF16:
    return CUDNN_DATA_BFLOAT16;
  case DType::F32:
    return CUDNN_DATA_FLOAT;
  case DType::F64:
    return CUDNN_DATA_DOUBLE;
  default:
    throw CudaError(absl::StrCat("conv2d: no kernel for ", dtypeName(dtype)));
  }
}

void setTensor(cudnnTensorDescriptor_t desc, cudnnDataType_t type,
               const std::vector<int64_t> &shape) {
  checkCudnn(cudnnSetTensor4dDescriptor(
                 desc, CUDNN_TENSOR_NCHW, type, toInt(shape[0], "a size"),
                 toInt(shape[1], "a size"), toInt(shape[2], "a size"),
                 toInt(shape[3], "a size")),
             "describing a conv2d tensor");
}

/// The descriptors of one convolution: input `x`, weight `w` (OIHW),
/// output `y`, and the convolution with its math mode.
struct ConvSetup {
  TensorDesc x, y;
  FilterDesc w;
  ConvDesc conv;
  bool isDouble = false;
  /// Some tensor has no elements: nothing is described.
  bool empty = false;
  /// f32 without --tf32: FMA kernels only (no tensor cores).
  bool fmaOnly = false;
  cudnnMathType_t preferred = CUDNN_DEFAULT_MATH;

  ConvSetup(Ctx &c, const TensorType &xt, const TensorType &wt,
            const TensorType &yt) {
    const OpAttrs &a = c.a;
    if (xt.shape.size() != 4 || wt.shape.size() != 4 || yt.shape.size() != 4)
      throw CudaError(absl::StrCat("conv2d takes a 4-d input and weight, got ",
                                   xt.str(), " and ", wt.str()));
    if (xt.dtype != wt.dtype || xt.dtype != yt.dtype)
      throw CudaError(absl::StrCat("conv2d: the input (", xt.str(),
                                   ") and weight (", wt.str(),
                                   ") must have one element type"));
    auto stride = pair(a.stride, {1, 1}, "stride");
    auto padding = pair(a.padding, {0, 0}, "padding");
    auto dilation = pair(a.dilation, {1, 1}, "dilation");
    int64_t groups = a.groups;
    if (groups < 1 || xt.shape[1] != wt.shape[1] * groups ||
        wt.shape[0] % groups != 0)
      throw CudaError(absl::StrCat("conv2d: input ", xt.str(), ", weight ",
                                   wt.str(), " and ", groups,
                                   " groups do not fit"));
    for (int d = 0; d < 2; ++d) {
      int64_t k = wt.shape[2 + d];
      bool valid = stride[d] >= 1 && dilation[d] >= 1 && padding[d] >= 0;
      int64_t out = valid ? conv::floorDiv(xt.shape[2 + d] + 2 * padding[d] -
                                               dilation[d] * (k - 1) - 1,
                                           stride[d]) +
                                1
                          : -1;
      if (!valid || out < 0 || yt.shape[2 + d] != out ||
          yt.shape[0] != xt.shape[0] || yt.shape[1] != wt.shape[0])
        throw CudaError(absl::StrCat(
            "conv2d: input ", xt.str(), ", weight ", wt.str(), ", stride ",
            absl::StrJoin(stride, "x"), ", padding ",
            absl::StrJoin(padding, "x"), ", dilation ",
            absl::StrJoin(dilation, "x"), " do not give ", yt.str()));
    }
    cudnnDataType_t type = cudnnType(xt.dtype);
    isDouble = xt.dtype == DType::F64;
    // cuDNN refuses empty tensors; the callers do not call it for them.
    empty =
        xt.numElements() == 0 || wt.numElements() == 0 || yt.numElements() == 0;
    if (empty)
      return;
    setTensor(x, type, xt.shape);
    setTensor(y, type, yt.shape);
    checkCudnn(cudnnSetFilter4dDescriptor(
                   w, type, CUDNN_TENSOR_NCHW, toInt(wt.shape[0], "a size"),
                   toInt(wt.shape[1], "a size"), toInt(wt.shape[2], "a size"),
                   toInt(wt.shape[3], "a size")),
               "describing a conv2d weight");
    checkCudnn(cudnnSetConvolution2dDescriptor(
                   conv, toInt(padding[0], "padding"),
                   toInt(padding[1], "padding"), toInt(stride[0], "stride"),
                   toInt(stride[1], "stride"), toInt(dilation[0], "dilation"),
                   toInt(dilation[1], "dilation"), CUDNN_CROSS_CORRELATION,
                   isDouble ? CUDNN_DATA_DOUBLE : CUDNN_DATA_FLOAT),
               "describing a conv2d");
    checkCudnn(cudnnSetConvolutionGroupCount(conv, toInt(groups, "groups")),
               "describing a conv2d");
    fmaOnly = xt.dtype == DType::F32 && !c.dev.tf32;
    preferred = fmaOnly ? CUDNN_FMA_MATH
                : xt.dtype == DType::F32 || xt.dtype == DType::F64
                    ? CUDNN_DEFAULT_MATH
                    : CUDNN_TENSOR_OP_MATH;
    checkCudnn(cudnnSetConvolutionMathType(conv, preferred),
               "describing a conv2d");
  }
};

enum class Pass { Forward, BackwardData, BackwardFilter };

struct Candidate {
  int algo;
  cudnnMathType_t math;
};

bool usesTensorCores(cudnnMathType_t math) {
  return math == CUDNN_TENSOR_OP_MATH ||
         math == CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION;
}

/// Whether `algo` of `pass` transforms its operands (FFT, Winograd), which
/// costs float32 results digits: a 1e-6 relative error per convolution
/// grows, through batch norm and ReLU, to a different ResNet-18 loss.
bool transforms(Pass pass, int algo) {
  switch (pass) {
  case Pass::Forward:
    return algo == CUDNN_CONVOLUTION_FWD_ALGO_FFT ||
           algo == CUDNN_CONVOLUTION_FWD_ALGO_FFT_TILING ||
           algo == CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD ||
           algo == CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD_NONFUSED;
  case Pass::BackwardData:
    return algo == CUDNN_CONVOLUTION_BWD_DATA_ALGO_FFT ||
           algo == CUDNN_CONVOLUTION_BWD_DATA_ALGO_FFT_TILING ||
           algo == CUDNN_CONVOLUTION_BWD_DATA_ALGO_WINOGRAD ||
           algo == CUDNN_CONVOLUTION_BWD_DATA_ALGO_WINOGRAD_NONFUSED;
  case Pass::BackwardFilter:
    return algo == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_FFT ||
           algo == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_FFT_TILING ||
           algo == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_WINOGRAD_NONFUSED;
  }
  return false;
}

/// cuDNN's heuristic choices for `pass`, deterministic ones only (and for
/// full float32, no transforming ones), in its order, then the
/// deterministic fallback of the pass.
std::vector<Candidate> candidates(cudnnHandle_t handle, ConvSetup &s,
                                  Pass pass) {
  std::vector<Candidate> list;
  auto take = [&](const auto *perfs, int count) {
    for (int i = 0; i < count; ++i) {
      const auto &p = perfs[i];
      if (p.status != CUDNN_STATUS_SUCCESS ||
          p.determinism != CUDNN_DETERMINISTIC || p.memory > kMaxWorkspace ||
          (s.fmaOnly && usesTensorCores(p.mathType)) ||
          (s.fmaOnly && transforms(pass, int(p.algo))))
        continue;
      list.push_back({int(p.algo), s.fmaOnly ? CUDNN_FMA_MATH : p.mathType});
    }
  };
  int count = 0;
  int fallback = 0;
  switch (pass) {
  case Pass::Forward: {
    cudnnConvolutionFwdAlgoPerf_t perfs[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
    if (cudnnGetConvolutionForwardAlgorithm_v7(
            handle, s.x, s.w, s.conv, s.y, CUDNN_CONVOLUTION_FWD_ALGO_COUNT,
            &count, perfs) == CUDNN_STATUS_SUCCESS)
      take(perfs, count);
    fallback = CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM;
    break;
  }
  case Pass::BackwardData: {
    cudnnConvolutionBwdDataAlgoPerf_t
        perfs[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
    if (cudnnGetConvolutionBackwardDataAlgorithm_v7(
            handle, s.w, s.y, s.conv, s.x,
            CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &count,
            perfs) == CUDNN_STATUS_SUCCESS)
      take(perfs, count);
    fallback = CUDNN_CONVOLUTION_BWD_DATA_ALGO_1;
    break;
  }
  case Pass::BackwardFilter: {
    cudnnConvolutionBwdFilterAlgoPerf_t
        perfs[CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT];
    if (cudnnGetConvolutionBackwardFilterAlgorithm_v7(
            handle, s.x, s.y, s.conv, s.w,
            CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, &count,
            perfs) == CUDNN_STATUS_SUCCESS)
      take(perfs, count);
    fallback = CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1;
    break;
  }
  }
  list.push_back({fallback, s.preferred});
  return list;
}

size_t workspaceFor(cudnnHandle_t handle, ConvSetup &s, Pass pass, int algo,
                    cudnnStatus_t &status) {
  size_t bytes = 0;
  switch (pass) {
  case Pass::Forward:
    status = cudnnGetConvolutionForwardWorkspaceSize(
        handle, s.x, s.w, s.conv, s.y, cudnnConvolutionFwdAlgo_t(algo), &bytes);
    break;
  case Pass::BackwardData:
    status = cudnnGetConvolutionBackwardDataWorkspaceSize(
        handle, s.w, s.y, s.conv, s.x, cudnnConvolutionBwdDataAlgo_t(algo),
        &bytes);
    break;
  case Pass::BackwardFilter:
    status = cudnnGetConvolutionBackwardFilterWorkspaceSize(
        handle, s.x, s.y, s.conv, s.w, cudnnConvolutionBwdFilterAlgo_t(algo),
        &bytes);
    break;
  }
  return bytes;
}

/// Runs `pass` with the first candidate algorithm cuDNN accepts; `beta`
/// scales what the output held (1 adds to it).
void runConvolution(Ctx &c, ConvSetup &s, Pass pass, const void *x,
                    const void *w, const void *y, void *out, bool accumulate) {
  cudnnHandle_t handle = cudnnFor(c);
  float oneF = 1, zeroF = 0;
  double oneD = 1, zeroD = 0;
  const void *alpha = s.isDouble ? static_cast<const void *>(&oneD) : &oneF;
  const void *beta = accumulate   ? alpha
                     : s.isDouble ? static_cast<const void *>(&zeroD)
                                  : &zeroF;
  const char *what = pass == Pass::Forward        ? "conv2d (cuDNN forward)"
                     : pass == Pass::BackwardData ? "conv2d_backward (cuDNN "
                                                    "backward data)"
                                                  : "conv2d_backward (cuDNN "
                                                    "backward filter)";
  cudnnStatus_t last = CUDNN_STATUS_NOT_SUPPORTED;
  for (const Candidate &cand : candidates(handle, s, pass)) {
    checkCudnn(cudnnSetConvolutionMathType(s.conv, cand.math), what);
    cudnnStatus_t status;
    size_t bytes = workspaceFor(handle, s, pass, cand.algo, status);
    if (status != CUDNN_STATUS_SUCCESS || bytes > kMaxWorkspace)
      continue;
    void *workspace = nullptr;
    if (bytes > 0) {
      try {
        workspace = c.scratch(TensorType{DType::Bool, {int64_t(bytes)}}).data();
      } catch (const CudaError &) {
        continue; // a smaller workspace may fit
      }
    }
    switch (pass) {
    case Pass::Forward:
      last = cudnnConvolutionForward(handle, alpha, s.x, x, s.w, w, s.conv,
                                     cudnnConvolutionFwdAlgo_t(cand.algo),
                                     workspace, bytes, beta, s.y, out);
      break;
    case Pass::BackwardData:
      last =
          cudnnConvolutionBackwardData(handle, alpha, s.w, w, s.y, y, s.conv,
                                       cudnnConvolutionBwdDataAlgo_t(cand.algo),
                                       workspace, bytes, beta, s.x, out);
      break;
    case Pass::BackwardFilter:
      last = cudnnConvolutionBackwardFilter(
          handle, alpha, s.x, x, s.y, y, s.conv,
          cudnnConvolutionBwdFilterAlgo_t(cand.algo), workspace, bytes, beta,
          s.w, out);
      break;
    }
    // Not supported (of any kind): the next candidate; else done.
    if (CUDNN_STATUS_CATEGORY(last) != CUDNN_STATUS_NOT_SUPPORTED)
      break;
  }
  checkCudnn(last, what);
}

//===----------------------------------------------------------------------===//
// Shared helpers
//===----------------------------------------------------------------------===//

/// Operand `k` as a dense tensor of `dtype` (itself, or a converted copy).
View denseAs(Ctx &c, size_t k, DType dtype) {
  const CudaTensor &t = c.in(k);
  if (t.type.dtype == dtype)
    return c.contiguous(k);
  View dst = c.scratch(TensorType{dtype, t.type.shape}).view();
  copyStrided(t.view(), dst, c.stream());
  return dst;
}

DType accType(DType dtype) {
  return dtype == DType::F64 ? DType::F64 : DType::F32;
}

/// Copies the `channels` Acc values at `data` (every `stride`-th) into
/// result `r`, converting to its type.
void setFromAcc(Ctx &c, size_t r, void *data, DType acc, int64_t channels,
                int64_t stride = 1) {
  CudaTensor &out = c.result(r);
  if (out.type.numElements() != channels)
    throw CudaError(absl::StrCat("result #", r, " is ", out.type.str(),
                                 ", expected ", channels, " elements"));
  View src;
  src.data = data;
  src.type = elemTypeOf(acc);
  src.rank = 1;
  src.sizes[0] = channels;
  src.strides[0] = stride;
  View dst = out.view();
  dst.rank = 1;
  dst.sizes[0] = channels;
  dst.strides[0] = 1;
  copyStrided(src, dst, c.stream());
}

void zeroResult(Ctx &c, size_t r) {
  fill(c.result(r, false).view(), 0, c.stream());
}

//===----------------------------------------------------------------------===//
// Convolution
//===----------------------------------------------------------------------===//

void conv2d(Ctx &c) {
  const TensorType &xt = c.in(0).type, &wt = c.in(1).type;
  CudaTensor &y = c.result(0, false);
  ConvSetup s(c, xt, wt, y.type);
  View yv = y.view();
  if (yv.numel() == 0)
    return;
  int64_t outChannels = wt.shape[0];
  bool bias = c.has(2);
  if (bias) {
    if (c.in(2).type.numElements() != outChannels)
      throw CudaError(absl::StrCat("conv2d: a bias of ", c.in(2).type.str(),
                                   " for ", outChannels, " output channels"));
    // The convolution adds to the bias (beta = 1): one rounding.
    conv::fillChannels(yv, denseAs(c, 2, y.type.dtype), outChannels,
                       y.type.shape[2] * y.type.shape[3], c.stream());
  }
  if (xt.numElements() == 0 || wt.numElements() == 0) {
    if (!bias)
      fill(yv, 0, c.stream());
    return;
  }
  View x = c.contiguous(0), w = c.contiguous(1);
  runConvolution(c, s, Pass::Forward, x.data, w.data, nullptr, yv.data, bias);
}

void conv2dBackward(Ctx &c) {
  const TensorType &gt = c.in(0).type, &xt = c.in(1).type, &wt = c.in(2).type;
  ConvSetup s(c, xt, wt, gt);
  bool empty = s.empty;
  View g, x, w;
  if (!empty) {
    g = c.contiguous(0);
    x = c.contiguous(1);
    w = c.contiguous(2);
  }
  // What nothing reads is zeros, as on the CPU.
  if (c.needed(0) && !empty)
    runConvolution(c, s, Pass::BackwardData, nullptr, w.data, g.data,
                   c.result(0, false).data(), false);
  else
    zeroResult(c, 0);
  if (c.needed(1) && !empty)
    runConvolution(c, s, Pass::BackwardFilter, x.data, nullptr, g.data,
                   c.result(1, false).data(), false);
  else
    zeroResult(c, 1);
  if (c.needed(2) && !empty) {
    int64_t channels = gt.shape[1], inner = gt.shape[2] * gt.shape[3];
    DType acc = accType(gt.dtype);
    int64_t chunks = conv::channelChunks(channels, gt.numElements() / channels);
    void *partials = c.scratch(TensorType{acc, {channels * chunks * 3}}).data();
    void *sums = c.scratch(TensorType{acc, {channels * 3}}).data();
    conv::reduceChannels(conv::ChannelSum::Value, g, nullptr, nullptr, 0, 1,
                         channels, inner, partials, chunks, sums, c.stream());
    setFromAcc(c, 2, sums, acc, channels, 3);
  } else {
    zeroResult(c, 2);
  }
}

//===----------------------------------------------------------------------===//
// Pooling
//===----------------------------------------------------------------------===//

/// `[N, C, H, W]` or `[C, H, W]`: the planes and the plane's sizes.
int64_t planesOf(const TensorType &t, const char *op) {
  if (t.shape.size() != 3 && t.shape.size() != 4)
    throw CudaError(
        absl::StrCat(op, " takes a 3-d or 4-d input, got ", t.str()));
  int64_t planes = 1;
  for (size_t d = 0; d + 2 < t.shape.size(); ++d)
    planes *= t.shape[d];
  return planes;
}

bool sameLeading(const TensorType &a, const TensorType &b) {
  if (a.shape.size() != b.shape.size())
    return false;
  for (size_t d = 0; d + 2 < a.shape.size(); ++d)
    if (a.shape[d] != b.shape[d])
      return false;
  return true;
}

/// The geometry of a max (`dilated`) or average pooling of `input` into
/// `output`, checked as ATen checks it.
conv::Pool2d poolGeometry(const OpAttrs &a, const TensorType &input,
                          const TensorType &output, bool dilated,
                          const char *op) {
  planesOf(input, op);
  auto kernel = pair(a.kernel, {0, 0}, "kernel");
  auto stride = pair(a.stride, kernel, "stride");
  auto padding = pair(a.padding, {0, 0}, "padding");
  auto dilation = dilated ? pair(a.dilation, {1, 1}, "dilation")
                          : std::array<int64_t, 2>{1, 1};
  conv::Pool2d p;
  p.countIncludePad = a.countIncludePad;
  size_t r = input.shape.size();
  for (int d = 0; d < 2; ++d) {
    conv::PoolDim &dim = d == 0 ? p.h : p.w;
    dim.in = input.shape[r - 2 + d];
    dim.kernel = kernel[d];
    dim.stride = stride[d];
    dim.pad = padding[d];
    dim.dilation = dilation[d];
    if (dim.kernel < 1 || dim.stride < 1 || dim.dilation < 1 || dim.pad < 0 ||
        dim.pad > dim.kernel / 2)
      throw CudaError(absl::StrCat(
          op, ": kernel ", absl::StrJoin(kernel, "x"), ", stride ",
          absl::StrJoin(stride, "x"), ", padding ", absl::StrJoin(padding, "x"),
          ", dilation ", absl::StrJoin(dilation, "x"),
          " (positive, padding at most half the kernel)"));
    dim.out = conv::poolOutputSize(dim.in, dim.kernel, dim.stride, dim.pad,
                                   dim.dilation, a.ceilMode);
  }
  if (!sameLeading(input, output) || output.shape[r - 2] != p.h.out ||
      output.shape[r - 1] != p.w.out || p.h.out < 1 || p.w.out < 1)
    throw CudaError(absl::StrCat(op, ": pooling ", input.str(), " gives ",
                                 p.h.out, "x", p.w.out, ", not ",
                                 output.str()));
  return p;
}

conv::Pool2d adaptiveGeometry(const TensorType &input, const TensorType &output,
                              const char *op) {
  planesOf(input, op);
  size_t r = input.shape.size();
  if (!sameLeading(input, output))
    throw CudaError(absl::StrCat(op, ": ", input.str(), " does not pool to ",
                                 output.str()));
  conv::Pool2d p;
  p.h.in = input.shape[r - 2];
  p.w.in = input.shape[r - 1];
  p.h.out = output.shape[r - 2];
  p.w.out = output.shape[r - 1];
  if ((p.h.in == 0 || p.w.in == 0) && output.numElements() > 0)
    throw CudaError(absl::StrCat(op, ": empty planes in ", input.str()));
  return p;
}

void maxPool2d(Ctx &c) {
  CudaTensor &y = c.result(0, false);
  conv::Pool2d p = poolGeometry(c.a, c.in(0).type, y.type, true, "max_pool2d");
  View yv = y.view();
  conv::maxPool2d(c.contiguous(0), &yv, nullptr, planesOf(y.type, ""), p,
                  c.stream());
}

void maxPool2dBackward(Ctx &c) {
  const TensorType &gt = c.in(0).type, &xt = c.in(1).type;
  CudaTensor &gx = c.result(0, false);
  conv::Pool2d p = poolGeometry(c.a, xt, gt, true, "max_pool2d_backward");
  int64_t planes = planesOf(xt, "");
  if (gx.type.numElements() == 0)
    return;
  // The forward's choice of maximum, recomputed, then gathered.
  auto *indices = static_cast<int64_t *>(
      c.scratch(TensorType{DType::I64, {planes * p.h.out * p.w.out}}).data());
  conv::maxPool2d(c.contiguous(1), nullptr, indices, planes, p, c.stream());
  conv::maxPool2dBackward(c.contiguous(0), indices, gx.view(), planes, p,
                          c.stream());
}

void avgPool2d(Ctx &c) {
  CudaTensor &y = c.result(0, false);
  conv::Pool2d p = poolGeometry(c.a, c.in(0).type, y.type, false, "avg_pool2d");
  conv::avgPool2d(c.contiguous(0), y.view(), planesOf(y.type, ""), p,
                  c.stream());
}

void avgPool2dBackward(Ctx &c) {
  const TensorType &gt = c.in(0).type, &xt = c.in(1).type;
  CudaTensor &gx = c.result(0, false);
  conv::Pool2d p = poolGeometry(c.a, xt, gt, false, "avg_pool2d_backward");
  conv::avgPool2dBackward(c.contiguous(0), gx.view(), planesOf(xt, ""), p,
                          c.stream());
}

void adaptiveAvgPool2d(Ctx &c) {
  CudaTensor &y = c.result(0, false);
  conv::Pool2d p =
      adaptiveGeometry(c.in(0).type, y.type, "adaptive_avg_pool2d");
  conv::adaptiveAvgPool2d(c.contiguous(0), y.view(), planesOf(y.type, ""), p,
                          c.stream());
}

void adaptiveAvgPool2dBackward(Ctx &c) {
  const TensorType &gt = c.in(0).type, &xt = c.in(1).type;
  CudaTensor &gx = c.result(0, false);
  conv::Pool2d p = adaptiveGeometry(xt, gt, "adaptive_avg_pool2d_backward");
  conv::adaptiveAvgPool2dBackward(c.contiguous(0), gx.view(), planesOf(xt, ""),
                                  p, c.stream());
}

//===----------------------------------------------------------------------===//
// Batch norm
//===----------------------------------------------------------------------===//

/// An input `[N, C, ...]` as batch norm reduces it: C channels of
/// `count` elements, `inner` contiguous ones per batch row.
struct Channels {
  int64_t channels = 0, inner = 1, count = 0;
};

Channels channelsOf(const TensorType &t, const char *op) {
  if (t.shape.size() < 2)
    throw CudaError(
        absl::StrCat(op, " takes an input of rank 2 or more, got ", t.str()));
  Channels ch;
  ch.channels = t.shape[1];
  for (size_t d = 2; d < t.shape.size(); ++d)
    ch.inner *= t.shape[d];
  ch.count = t.shape[0] * ch.inner;
  return ch;
}

/// Operand `k`, a per-channel vector, as dense Acc values.
void *channelVector(Ctx &c, size_t k, DType acc, int64_t channels,
                    const char *op) {
  if (c.in(k).type.numElements() != channels)
    throw CudaError(absl::StrCat(op, ": operand #", k, " is ",
                                 c.in(k).type.str(), ", expected ", channels,
                                 " elements"));
  return denseAs(c, k, acc).data;
}

/// Sums of `what` per channel (`channels * 3` Acc values).
void *channelSums(Ctx &c, conv::ChannelSum what, const Channels &ch, DType acc,
                  const View &x, const View *g, const void *mean,
                  int64_t meanStride, double meanDivisor) {
  int64_t chunks = conv::channelChunks(ch.channels, ch.count);
  void *partials =
      c.scratch(TensorType{acc, {ch.channels * chunks * 3}}).data();
  void *sums = c.scratch(TensorType{acc, {ch.channels * 3}}).data();
  conv::reduceChannels(what, x, g, mean, meanStride, meanDivisor, ch.channels,
                       ch.inner, partials, chunks, sums, c.stream());
  return sums;
}

void batchNorm(Ctx &c) {
  const OpAttrs &a = c.a;
  const TensorType &xt = c.in(0).type;
  Channels ch = channelsOf(xt, "batch_norm");
  DType acc = accType(xt.dtype);
  ElemType accElem = elemTypeOf(acc);
  bool training = a.training && !c.evaluating();
  View x = c.contiguous(0);
  void *weight = channelVector(c, 1, acc, ch.channels, "batch_norm");
  void *bias = channelVector(c, 2, acc, ch.channels, "batch_norm");
  void *runMean = channelVector(c, 3, acc, ch.channels, "batch_norm");
  void *runVar = channelVector(c, 4, acc, ch.channels, "batch_norm");
  TensorType vec{acc, {ch.channels}};
  void *alpha = c.scratch(vec).data(), *beta = c.scratch(vec).data();
  void *sums = nullptr, *devSums = nullptr, *newMean = nullptr,
       *newVar = nullptr;
  if (training) {
    sums = channelSums(c, conv::ChannelSum::Value, ch, acc, x, nullptr, nullptr,
                       0, 1);
    devSums = channelSums(c, conv::ChannelSum::SquaredDev, ch, acc, x, nullptr,
                          sums, 3, double(ch.count));
    newMean = c.scratch(vec).data();
    newVar = c.scratch(vec).data();
  }
  conv::batchNormForwardFactors(accElem, training, ch.channels,
                                double(ch.count), a.momentum, a.eps, sums,
                                devSums, weight, bias, runMean, runVar, alpha,
                                beta, newMean, newVar, c.stream());
  // Elementwise once the statistics are known: the input's memory may
  // take the output.
  conv::channelAffine(x, c.result(0).view(), alpha, beta, ch.channels, ch.inner,
                      c.stream());
  if (training) {
    setFromAcc(c, 1, newMean, acc, ch.channels);
    setFromAcc(c, 2, newVar, acc, ch.channels);
  } else {
    // An evaluation returns the running statistics unchanged.
    copyStrided(c.view(3), c.result(1).view(), c.stream());
    copyStrided(c.view(4), c.result(2).view(), c.stream());
  }
}

void batchNormBackward(Ctx &c) {
  const OpAttrs &a = c.a;
  const TensorType &xt = c.in(1).type;
  if (c.in(0).type != xt)
    throw CudaError(absl::StrCat("batch_norm_backward: a gradient of ",
                                 c.in(0).type.str(), " for an input of ",
                                 xt.str()));
  Channels ch = channelsOf(xt, "batch_norm_backward");
  DType acc = accType(xt.dtype);
  View g = c.contiguous(0), x = c.contiguous(1);
  void *weight = channelVector(c, 2, acc, ch.channels, "batch_norm_backward");
  void *runMean = channelVector(c, 3, acc, ch.channels, "batch_norm_backward");
  void *runVar = channelVector(c, 4, acc, ch.channels, "batch_norm_backward");
  // Training: the batch statistics, recomputed from the input as the CPU
  // does; else the running ones.
  void *sums = nullptr, *stats;
  if (a.training) {
    sums = channelSums(c, conv::ChannelSum::Value, ch, acc, x, nullptr, nullptr,
                       0, 1);
    stats = channelSums(c, conv::ChannelSum::BackwardStats, ch, acc, x, &g,
                        sums, 3, double(ch.count));
  } else {
    stats = channelSums(c, conv::ChannelSum::GradientStats, ch, acc, x, &g,
                        runMean, 1, 1);
  }
  TensorType vec{acc, {ch.channels}};
  void *gradWeight = c.scratch(vec).data(), *gradBias = c.scratch(vec).data();
  void *factors = c.scratch(TensorType{acc, {ch.channels * 4}}).data();
  conv::batchNormBackwardFactors(elemTypeOf(acc), a.training, ch.channels,
                                 double(ch.count), a.eps, sums, stats, weight,
                                 runMean, runVar, gradWeight, gradBias, factors,
                                 c.stream());
  conv::batchNormGradInput(a.training, g, x, c.result(0).view(), factors,
                           ch.channels, ch.inner, c.stream());
  setFromAcc(c, 1, gradWeight, acc, ch.channels);
  setFromAcc(c, 2, gradBias, acc, ch.channels);
}

} // namespace

void registerConvolutionKernels(KernelTable &table) {
  table.add(OpKind::Conv2d, conv2d);
  table.add(OpKind::Conv2dBackward, conv2dBackward);
  table.add(OpKind::MaxPool2d, maxPool2d);
  table.add(OpKind::MaxPool2dBackward, maxPool2dBackward);
  table.add(OpKind::AvgPool2d, avgPool2d);
  table.add(OpKind::AvgPool2dBackward, avgPool2dBackward);
  table.add(OpKind::AdaptiveAvgPool2d, adaptiveAvgPool2d);
  table.add(OpKind::AdaptiveAvgPool2dBackward, adaptiveAvgPool2dBackward);
  table.add(OpKind::BatchNorm, batchNorm);
  table.add(OpKind::BatchNormBackward, batchNormBackward);
}

} // namespace merak::runtime::cuda
