//===- Interpolation.cpp - image resizing ---------------------------------===//
//
// `F.interpolate` over NCHW images (nearest, nearest-exact, bilinear),
// lowered to existing ops rather than a resize op of its own. Nearest
// upsampling by whole factors repeats each pixel: [N, C, H, 1, W, 1]
// expanded to [N, C, H, sh, W, sw], then [N, C, sh * H, sw * W]. Any other
// resize is separable and linear in the pixels: y = A_h x A_w^T with
// constant [out, in] interpolation matrices built here from PyTorch's index
// formulas, applied as a linear over the width and a matmul over the
// height, so the gradient, sharding and kernels are theirs.
//
//===----------------------------------------------------------------------===//

#include "ImporterImpl.h"

#include <cmath>
#include <optional>

namespace merak::torchscript {

namespace {

enum class ResizeMode { Nearest, NearestExact, Bilinear };

/// The step in input pixels between neighbouring output pixels along one
/// dimension: a given scale factor's reciprocal, else in / out; with
/// align_corners the corners' centres map onto each other.
double resizeSourceStep(ResizeMode mode, int64_t in, int64_t out,
                        std::optional<double> scaleFactor, bool alignCorners) {
  if (mode == ResizeMode::Bilinear && alignCorners)
    return out > 1 ? double(in - 1) / double(out - 1) : 0.0;
  if (scaleFactor && *scaleFactor > 0)
    return 1.0 / *scaleFactor;
  return double(in) / double(out);
}

/// The row-major [out, in] matrix whose row `o` weighs the input pixels
/// that output pixel `o` reads along one dimension.
std::vector<double> interpolationMatrix(ResizeMode mode, int64_t in,
                                        int64_t out,
                                        std::optional<double> scaleFactor,
                                        bool alignCorners) {
  double step = resizeSourceStep(mode, in, out, scaleFactor, alignCorners);
  std::vector<double> m(out * in, 0.0);
  for (int64_t o = 0; o < out; ++o) {
    double *row = &m[o * in];
    if (mode != ResizeMode::Bilinear) {
      double src = mode == ResizeMode::Nearest ? o * step : (o + 0.5) * step;
      row[std::min(static_cast<int64_t>(std::floor(src)), in - 1)] = 1.0;
      continue;
    }
    // Two taps, clamped at both ends.
    double src =
        alignCorners ? o * step : std::max((o + 0.5) * step - 0.5, 0.0);
    int64_t i0 = std::min(static_cast<int64_t>(src), in - 1);
    int64_t i1 = i0 < in - 1 ? i0 + 1 : i0;
    double frac = std::clamp(src - double(i0), 0.0, 1.0);
    row[i0] += 1.0 - frac;
    row[i1] += frac;
  }
  return m;
}

bool isIdentityMatrix(const std::vector<double> &m, int64_t in, int64_t out) {
  if (in != out)
    return false;
  for (int64_t o = 0; o < out; ++o)
    for (int64_t i = 0; i < in; ++i)
      if (m[o * in + i] != (o == i ? 1.0 : 0.0))
        return false;
  return true;
}

} // namespace

void Importer::populateInterpolationConverters(ConverterTable &table) {
  // The scale factors from operand `first` on: one optional list (the
  // `.vec` overloads) or one optional float per dimension.
  auto scaleFactors =
      [](Importer &im, jit::Node *n,
         size_t first) -> FailureOr<std::vector<std::optional<double>>> {
    std::vector<std::optional<double>> out;
    for (size_t i = first; i < n->inputs().size(); ++i) {
      auto v = im.constArg(n, i, "scale_factors");
      TRY(v);
      if (v->isNone()) {
        if (n->inputs().size() - first == 2)
          out.push_back(std::nullopt);
        continue;
      }
      std::vector<c10::IValue> elems =
          v->isList() ? v->toListRef().vec() : std::vector<c10::IValue>{*v};
      for (const c10::IValue &e : elems) {
        if (!e.isDouble() && !e.isInt()) {
          im.error(n) << "scale factors must be numbers";
          return failure();
        }
        out.push_back(e.toScalar().toDouble());
      }
    }
    if (!out.empty() && out.size() != 2) {
      im.error(n) << "expected 2 scale factors, got " << out.size();
      return failure();
    }
    return out;
  };
  // Operand 0 the image, 1 the output size (optional with the `.vec`
  // overloads), then align_corners for bilinear, then the scale factors.
  auto resize = [scaleFactors](ResizeMode mode) {
    return [scaleFactors, mode](Importer &im, jit::Node *n) -> LogicalResult {
      Value x = im.tensorArg(n, 0);
      if (!x)
        return failure();
      RankedTensorType type = typeOf(x);
      if (type.getRank() != 4) {
        im.error(n) << "expected an NCHW image, got rank " << type.getRank();
        return failure();
      }
      if (!isa<FloatType>(type.getElementType()))
        return im.unsupported(n, "integer image");
      size_t next = 2;
      bool alignCorners = false;
      if (mode == ResizeMode::Bilinear) {
        auto a = im.boolArg(n, next++, "align_corners");
        TRY(a);
        alignCorners = *a;
      }
      auto scales = scaleFactors(im, n, next);
      TRY(scales);
      auto scaleOf = [&](int d) -> std::optional<double> {
        return scales->empty() ? std::nullopt : (*scales)[d];
      };
      ArrayRef<int64_t> shape = type.getShape();
      std::vector<int64_t> size;
      if (!im.isNone(n, 1)) {
        auto s = im.intsArg(n, 1, "output_size");
        TRY(s);
        size = *s;
      } else if (scaleOf(0) && scaleOf(1)) {
        // PyTorch's output size: the input size times the factor,
        // truncated.
        for (int d = 0; d < 2; ++d)
          size.push_back(
              static_cast<int64_t>(double(shape[2 + d]) * *scaleOf(d)));
      }
      if (size.size() != 2 || size[0] <= 0 || size[1] <= 0) {
        im.error(n) << "expected a positive output size [H, W] or two "
                       "scale factors";
        return failure();
      }
      int64_t inH = shape[2], inW = shape[3], outH = size[0], outW = size[1];

      // Nearest by whole factors (the factors given, if any, agreeing):
      // repeat each pixel.
      auto wholeFactor = [&](int d, int64_t in, int64_t out) {
        return out % in == 0 &&
               (!scaleOf(d) || *scaleOf(d) == double(out / in));
      };
      if (mode == ResizeMode::Nearest && wholeFactor(0, inH, outH) &&
          wholeFactor(1, inW, outW)) {
        int64_t sh = outH / inH, sw = outW / inW;
        Value v = im.reshape(x, {shape[0], shape[1], inH, 1, inW, 1});
        if (v)
          v = im.expandTo(v, {shape[0], shape[1], inH, sh, inW, sw});
        if (v)
          v = im.reshape(v, {shape[0], shape[1], outH, outW});
        return im.bind(n, v);
      }

      // A constant matrix of the image's element type (built in f32 for
      // the types a constant cannot hold).
      auto matrix = [&](const std::vector<double> &m, int64_t rows,
                        int64_t cols) -> Value {
        at::Tensor t = at::tensor(at::ArrayRef<double>(m), at::kDouble)
                           .reshape({rows, cols});
        std::optional<at::ScalarType> st = scalarTypeOf(type.getElementType());
        bool direct = st && (*st == at::kFloat || *st == at::kDouble);
        Value c = im.constantTensor(t.to(direct ? *st : at::kFloat), im.curLoc);
        return c ? im.cast(c, type.getElementType()) : c;
      };
      std::vector<double> aw =
          interpolationMatrix(mode, inW, outW, scaleOf(1), alignCorners);
      std::vector<double> ah =
          interpolationMatrix(mode, inH, outH, scaleOf(0), alignCorners);
      Value v = x;
      if (!isIdentityMatrix(aw, inW, outW)) {
        // [N, C, H, W] x A_w^T -> [N, C, H, OW].
        Value w = matrix(aw, outW, inW);
        if (!w)
          return failure();
        v = im.make1<LinearOp>(v, w, Value());
      }
      if (v && !isIdentityMatrix(ah, inH, outH)) {
        // A_h [OH, H] x [N, C, H, OW] -> [N, C, OH, OW], broadcast over
        // N and C.
        Value h = matrix(ah, outH, inH);
        if (!h)
          return failure();
        v = im.make1<MatmulOp>(h, v);
      }
      return im.bind(n, v);
    };
  };
  table["aten::upsample_nearest2d"] = resize(ResizeMode::Nearest);
  table["aten::_upsample_nearest_exact2d"] = resize(ResizeMode::NearestExact);
  table["aten::upsample_bilinear2d"] = resize(ResizeMode::Bilinear);
}

} // namespace merak::torchscript
