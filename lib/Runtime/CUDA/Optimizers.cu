//===- Optimizers.cu - optimizer update kernels ---------------------------===//
//
// One thread per element, each element read and written once. The
// arithmetic is the CPU backend's: for float32 AdamW its fused pass (the
// same correctly rounded operations, so the same results bit for bit), for
// the other types and SGD torch.optim's ATen calls, each rounded to the
// element type where ATen's result is a tensor of it.
//
//===----------------------------------------------------------------------===//

#include "Optimizers.h"

#include <cmath>

namespace merak::runtime::cuda {
namespace {

/// `v` rounded to `T` and back, as an ATen call that returns a `T` tensor.
template <typename T> MERAK_DEVICE Acc<T> rnd(Acc<T> v) {
  return toAcc(convertTo<T>(v));
}

MERAK_DEVICE float fusedMultiplyAdd(float a, float b, float c) {
  return fmaf(a, b, c);
}
MERAK_DEVICE double fusedMultiplyAdd(double a, double b, double c) {
  return fma(a, b, c);
}
MERAK_DEVICE float squareRoot(float x) { return sqrtf(x); }
MERAK_DEVICE double squareRoot(double x) { return sqrt(x); }

/// torch.optim.SGD's `_single_tensor_sgd` for one element: its ATen calls,
/// each rounded to `T` (nothing rounds for f32 and f64).
template <typename T> struct SgdElement {
  using A = Acc<T>;
  A decay, momentum, keep, negLr;
  bool decays, hasMomentum, nesterov, firstStep;
  MERAK_DEVICE explicit SgdElement(const SgdScalars &s)
      : decay(A(s.weightDecay)), momentum(A(s.momentum)),
        keep(A(1 - s.dampening)), negLr(A(-s.lr)), decays(s.weightDecay != 0),
        hasMomentum(s.momentum != 0), nesterov(s.nesterov),
        firstStep(s.firstStep) {}

  /// Element `i`; `buffer` is read only after the first step,
  /// `newBuffer` written only with momentum.
  MERAK_DEVICE void update(const T *param, const T *grad, const T *buffer,
                           T *newParam, T *newBuffer, int64_t i) const {
    A p = toAcc(param[i]);
    // ATen's `a.add(b, alpha)` is one fused multiply-add.
    A d = toAcc(grad[i]);
    if (decays)
      d = rnd<T>(fusedMultiplyAdd(decay, p, d));
    if (hasMomentum) {
      A buf = firstStep ? d
                        : rnd<T>(fusedMultiplyAdd(
                              keep, d, rnd<T>(toAcc(buffer[i]) * momentum)));
      newBuffer[i] = convertTo<T>(buf);
      d = nesterov ? rnd<T>(fusedMultiplyAdd(momentum, buf, d)) : buf;
    }
    newParam[i] = convertTo<T>(fusedMultiplyAdd(negLr, d, p));
  }
};

template <typename T>
__global__ void sgdKernel(const T *param, const T *grad, const T *buffer,
                          T *newParam, T *newBuffer, int64_t n, SgdScalars s) {
  SgdElement<T> f(s);
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    f.update(param, grad, buffer, newParam, newBuffer, i);
}

/// Float32 SGD over one tensor of a multi-tensor list.
struct SgdFloat {
  SgdElement<float> element;
  MERAK_DEVICE explicit SgdFloat(const SgdScalars &s) : element(s) {}
  MERAK_DEVICE void update(const SgdTensor &t, int64_t i) const {
    element.update(t.param, t.grad, t.buffer, t.newParam, t.newBuffer, i);
  }
};

/// Float32: the CPU backend's fused pass (`adamwRange`), each operation
/// correctly rounded and no product contracted with a sum but the two
/// fused multiply-adds it has.
struct AdamwFloat {
  bool decays;
  float decay, beta1, oneMinusBeta1, beta2, oneMinusBeta2, biasCorrection2Sqrt,
      eps, negStepSize;
  MERAK_DEVICE explicit AdamwFloat(const AdamwScalars &s)
      : decays(s.decays), decay(float(s.decay)), beta1(float(s.beta1)),
        oneMinusBeta1(float(s.oneMinusBeta1)), beta2(float(s.beta2)),
        oneMinusBeta2(float(s.oneMinusBeta2)),
        biasCorrection2Sqrt(float(s.biasCorrection2Sqrt)), eps(float(s.eps)),
        negStepSize(float(s.negStepSize)) {}

  /// Element `i` of one tensor.
  MERAK_DEVICE void update(const AdamwTensor &t, int64_t i) const {
    float g = t.grad[i];
    float p = decays ? __fmul_rn(t.param[i], decay) : t.param[i];
    float m = fmaf(oneMinusBeta1, g, __fmul_rn(t.expAvg[i], beta1));
    float v =
        fmaf(__fmul_rn(oneMinusBeta2, g), g, __fmul_rn(t.expAvgSq[i], beta2));
    float denom = __fadd_rn(__fdiv_rn(__fsqrt_rn(v), biasCorrection2Sqrt), eps);
    t.newParam[i] = __fadd_rn(p, __fdiv_rn(__fmul_rn(negStepSize, m), denom));
    t.newExpAvg[i] = m;
    t.newExpAvgSq[i] = v;
  }
};

__global__ void adamwFloatKernel(AdamwTensor t, AdamwScalars s) {
  AdamwFloat f(s);
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < t.n;
       i += int64_t(gridDim.x) * blockDim.x)
    f.update(t, i);
}

/// Many tensors in one launch: block `b` finds its tensor in the list's
/// block offsets and strides over it with that tensor's other blocks.
/// `Update` (AdamwFloat, SgdFloat) is made from `Scalars` and updates
/// element `i` of a `Tensor`.
template <typename Update, typename Tensor, typename Scalars>
__global__ void multiTensorKernel(TensorList<Tensor> list, Scalars s) {
  Update f(s);
  int b = int(blockIdx.x), t = 0;
  while (t + 1 < list.count && list.blockStart[t + 1] <= b)
    ++t;
  const Tensor &x = list.tensors[t];
  int64_t blocks = list.blockStart[t + 1] - list.blockStart[t];
  for (int64_t i = int64_t(b - list.blockStart[t]) * blockDim.x + threadIdx.x;
       i < x.n; i += blocks * blockDim.x)
    f.update(x, i);
}

/// `count` tensors in the launches `planMultiTensor` gives.
template <typename Update, typename Tensor, typename Scalars>
void launchMultiTensor(const Tensor *tensors, int count, const Scalars &s,
                       cudaStream_t stream, const char *what) {
  std::vector<int64_t> sizes(count);
  for (int t = 0; t < count; ++t)
    sizes[t] = tensors[t].n;
  for (const MultiTensorLaunch &l : planMultiTensor(sizes.data(), count)) {
    TensorList<Tensor> list;
    list.count = l.count;
    for (int t = 0; t < l.count; ++t)
      list.tensors[t] = tensors[l.first + t];
    for (int t = 0; t <= l.count; ++t)
      list.blockStart[t] = l.blockStart[t];
    multiTensorKernel<Update, Tensor, Scalars>
        <<<unsigned(l.blockStart[l.count]), 256, 0, stream>>>(list, s);
    checkLaunch(what);
  }
}

/// Other types: `_single_tensor_adamw`'s ATen calls, each result rounded
/// to `T` (nothing rounds for f64).
template <typename T>
__global__ void adamwKernel(const T *param, const T *grad, const T *expAvg,
                            const T *expAvgSq, T *newParam, T *newExpAvg,
                            T *newExpAvgSq, int64_t n, AdamwScalars s) {
  using A = Acc<T>;
  A decay = A(s.decay), beta1 = A(s.beta1), oneMinusBeta1 = A(s.oneMinusBeta1),
    beta2 = A(s.beta2), oneMinusBeta2 = A(s.oneMinusBeta2),
    biasCorrection2Sqrt = A(s.biasCorrection2Sqrt), eps = A(s.eps),
    negStepSize = A(s.negStepSize);
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    A g = toAcc(grad[i]);
    A p = toAcc(param[i]);
    if (s.decays)
      p = rnd<T>(p * decay);
    A m = rnd<T>(
        fusedMultiplyAdd(oneMinusBeta1, g, rnd<T>(toAcc(expAvg[i]) * beta1)));
    A v = rnd<T>(fusedMultiplyAdd(oneMinusBeta2 * g, g,
                                  rnd<T>(toAcc(expAvgSq[i]) * beta2)));
    A denom = rnd<T>(rnd<T>(rnd<T>(squareRoot(v)) / biasCorrection2Sqrt) + eps);
    newParam[i] = convertTo<T>(p + negStepSize * m / denom);
    newExpAvg[i] = convertTo<T>(m);
    newExpAvgSq[i] = convertTo<T>(v);
  }
}

} // namespace

void sgdUpdate(const void *param, const void *grad, const void *buffer,
               void *newParam, void *newBuffer, ElemType type, int64_t n,
               const SgdScalars &s, cudaStream_t stream) {
  if (n == 0)
    return;
  Launch l = linearLaunch(n);
  MERAK_CUDA_DISPATCH_FLOAT(type, "sgd_update", T, {
    sgdKernel<T><<<l.grid, l.block, 0, stream>>>(
        static_cast<const T *>(param), static_cast<const T *>(grad),
        static_cast<const T *>(buffer), static_cast<T *>(newParam),
        static_cast<T *>(newBuffer), n, s);
  });
  checkLaunch("sgd_update");
}

void adamwUpdate(const void *param, const void *grad, const void *expAvg,
                 const void *expAvgSq, void *newParam, void *newExpAvg,
                 void *newExpAvgSq, ElemType type, int64_t n,
                 const AdamwScalars &s, cudaStream_t stream) {
  if (n == 0)
    return;
  Launch l = linearLaunch(n);
  if (type == ElemType::F32) {
    AdamwTensor t{static_cast<const float *>(param),
                  static_cast<const float *>(grad),
                  static_cast<const float *>(expAvg),
                  static_cast<const float *>(expAvgSq),
                  static_cast<float *>(newParam),
                  static_cast<float *>(newExpAvg),
                  static_cast<float *>(newExpAvgSq),
                  n};
    adamwFloatKernel<<<l.grid, l.block, 0, stream>>>(t, s);
  } else {
    MERAK_CUDA_DISPATCH_FLOAT(type, "adamw_update", T, {
      adamwKernel<T><<<l.grid, l.block, 0, stream>>>(
          static_cast<const T *>(param), static_cast<const T *>(grad),
          static_cast<const T *>(expAvg), static_cast<const T *>(expAvgSq),
          static_cast<T *>(newParam), static_cast<T *>(newExpAvg),
          static_cast<T *>(newExpAvgSq), n, s);
    });
  }
  checkLaunch("adamw_update");
}

void adamwMultiTensor(const AdamwTensor *tensors, int count,
                      const AdamwScalars &s, cudaStream_t stream) {
  launchMultiTensor<AdamwFloat>(tensors, count, s, stream,
                                "adamw_update (multi-tensor)");
}

void sgdMultiTensor(const SgdTensor *tensors, int count, const SgdScalars &s,
                    cudaStream_t stream) {
  launchMultiTensor<SgdFloat>(tensors, count, s, stream,
                              "sgd_update (multi-tensor)");
}

} // namespace merak::runtime::cuda
