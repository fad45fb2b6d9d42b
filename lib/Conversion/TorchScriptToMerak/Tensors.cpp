//===- Tensors.cpp - tensor plumbing --------------------------------------===//
//
// Identities (layout, autograd and device plumbing), casts, tensors whose
// values follow from shapes alone, and facts of a tensor's static type.
//
//===----------------------------------------------------------------------===//

#include "ImporterImpl.h"

namespace merak::torchscript {

void Importer::populateTensorConverters(ConverterTable &table) {
  // Identities: layout, autograd and device plumbing.
  auto identity = [](Importer &im, jit::Node *n) -> LogicalResult {
    Value x = im.tensorArg(n, 0);
    if (!x)
      return failure();
    im.setOut(n, 0, x, im.in(n, 0).isView);
    return success();
  };
  for (const char *k :
       {"aten::contiguous", "aten::clone", "aten::detach", "aten::alias",
        "aten::lift_fresh", "aten::lift", "aten::copy", "aten::cpu"})
    table[k] = identity;

  // Casts.
  auto toDtype = [](Importer &im, jit::Node *n, Value x,
                    std::optional<at::ScalarType> st) -> LogicalResult {
    if (!st) {
      im.setOut(n, 0, x);
      return success();
    }
    auto elem = elementTypeOf(im.ctx, *st);
    if (failed(elem))
      return im.unsupported(n, "dtype " + std::string(c10::toString(*st)));
    im.setOut(n, 0, im.cast(x, *elem));
    return success();
  };
  table["aten::to"] = [toDtype](Importer &im, jit::Node *n) -> LogicalResult {
    Value x = im.tensorArg(n, 0);
    if (!x)
      return failure();
    // Overloads: to(dtype, ...), to(device, dtype, ...), to(other, ...).
    for (size_t i = 1; i < n->inputs().size(); ++i) {
      const auto &arg = n->schema().arguments()[i];
      if (arg.name() == "dtype") {
        if (im.isNone(n, i))
          break;
        auto d = im.intArg(n, i, "dtype");
        TRY(d);
        return toDtype(im, n, x, (at::ScalarType)*d);
      }
      if (arg.name() == "other") {
        Value o = im.tensorArg(n, i);
        if (!o)
          return failure();
        return toDtype(im, n, x, scalarTypeOf(typeOf(o).getElementType()));
      }
    }
    im.setOut(n, 0, x);
    return success();
  };
  CONVERT("aten::type_as") {
    Value x = im.tensorArg(n, 0), o = im.tensorArg(n, 1);
    if (!x || !o)
      return failure();
    im.setOut(n, 0, im.cast(x, typeOf(o).getElementType()));
    return success();
  };
  for (auto [k, st] :
       std::initializer_list<std::pair<const char *, at::ScalarType>>{
           {"aten::float", at::kFloat},
           {"aten::double", at::kDouble},
           {"aten::half", at::kHalf},
           {"aten::bfloat16", at::kBFloat16},
           {"aten::long", at::kLong},
           {"aten::int", at::kInt},
           {"aten::bool", at::kBool}}) {
    at::ScalarType s = st;
    table[k] = [s, toDtype](Importer &im, jit::Node *n) -> LogicalResult {
      Value x = im.tensorArg(n, 0);
      if (!x)
        return failure();
      return toDtype(im, n, x, s);
    };
  }

  // Tensors whose values follow from shapes alone fold to constants.
  auto likeConstant = [](int which) { // 0 zeros, 1 ones, 2 full, 3 empty
    return [which](Importer &im, jit::Node *n) -> LogicalResult {
      Value x = im.tensorArg(n, 0);
      if (!x)
        return failure();
      auto st = *scalarTypeOf(typeOf(x).getElementType());
      size_t dtypeIdx = which == 2 ? 2 : 1;
      if (n->inputs().size() > dtypeIdx && !im.isNone(n, dtypeIdx)) {
        auto d = im.intArg(n, dtypeIdx, "dtype");
        TRY(d);
        st = (at::ScalarType)*d;
      }
      auto shape = typeOf(x).getShape();
      std::vector<int64_t> sizes(shape.begin(), shape.end());
      at::Tensor t;
      if (which == 2) {
        auto v = im.constArg(n, 1, "fill_value");
        TRY(v);
        t = at::full(sizes, v->toScalar(), at::TensorOptions().dtype(st));
      } else {
        t = which == 1 ? at::ones(sizes, at::TensorOptions().dtype(st))
                       : at::zeros(sizes, at::TensorOptions().dtype(st));
      }
      im.setConst(n, 0, t);
      return success();
    };
  };
  table["aten::zeros_like"] = likeConstant(0);
  table["aten::empty_like"] = likeConstant(3);
  table["aten::ones_like"] = likeConstant(1);
  table["aten::full_like"] = likeConstant(2);
  auto newConstant = [](int which) { // 0 zeros, 1 ones, 2 full, 3 empty
    return [which](Importer &im, jit::Node *n) -> LogicalResult {
      Value x = im.tensorArg(n, 0);
      if (!x)
        return failure();
      auto sizes = im.intsArg(n, 1, "size");
      TRY(sizes);
      auto st = *scalarTypeOf(typeOf(x).getElementType());
      size_t dtypeIdx = which == 2 ? 3 : 2;
      if (n->inputs().size() > dtypeIdx && !im.isNone(n, dtypeIdx)) {
        auto d = im.intArg(n, dtypeIdx, "dtype");
        TRY(d);
        st = (at::ScalarType)*d;
      }
      at::Tensor t;
      if (which == 2) {
        auto v = im.constArg(n, 2, "fill_value");
        TRY(v);
        t = at::full(*sizes, v->toScalar(), at::TensorOptions().dtype(st));
      } else {
        t = which == 1 ? at::ones(*sizes, at::TensorOptions().dtype(st))
                       : at::zeros(*sizes, at::TensorOptions().dtype(st));
      }
      im.setConst(n, 0, t);
      return success();
    };
  };
  table["aten::new_zeros"] = newConstant(0);
  table["aten::new_empty"] = newConstant(3);
  table["aten::new_ones"] = newConstant(1);
  table["aten::new_full"] = newConstant(2);
  auto fillLike = [](bool zero) {
    return [zero](Importer &im, jit::Node *n) -> LogicalResult {
      Value x = im.tensorArg(n, 0);
      if (!x)
        return failure();
      auto st = *scalarTypeOf(typeOf(x).getElementType());
      auto shape = typeOf(x).getShape();
      std::vector<int64_t> sizes(shape.begin(), shape.end());
      if (!zero && (!im.in(n, 1).isConst() || im.in(n, 1).iv.isTensor()))
        return im.unsupported(n, "tensor fill value");
      c10::Scalar v = zero ? c10::Scalar(0) : im.in(n, 1).iv.toScalar();
      im.setConst(n, 0, at::full(sizes, v, at::TensorOptions().dtype(st)));
      return success();
    };
  };
  table["aten::fill_"] = fillLike(false);
  table["aten::zero_"] = fillLike(true);

  // Shape queries on tensors with static shapes.
  CONVERT("aten::size") {
    Value x = im.tensorArg(n, 0);
    if (!x)
      return failure();
    auto shape = typeOf(x).getShape();
    if (n->inputs().size() == 1) {
      im.setConst(
          n, 0, c10::IValue(std::vector<int64_t>(shape.begin(), shape.end())));
      return success();
    }
    auto d = im.dimArg(n, 1, shape.size());
    TRY(d);
    im.setConst(n, 0, c10::IValue(shape[*d]));
    return success();
  };
  // Facts of a tensor's static type fold to constants.
  auto fromType = [](c10::IValue (*fact)(RankedTensorType)) {
    return [fact](Importer &im, jit::Node *n) -> LogicalResult {
      Value x = im.tensorArg(n, 0);
      if (!x)
        return failure();
      im.setConst(n, 0, fact(typeOf(x)));
      return success();
    };
  };
  table["aten::dim"] =
      fromType([](RankedTensorType t) { return c10::IValue(t.getRank()); });
  table["aten::numel"] = fromType(
      [](RankedTensorType t) { return c10::IValue(t.getNumElements()); });
  table["prim::dtype"] = fromType([](RankedTensorType t) {
    return c10::IValue((int64_t)*scalarTypeOf(t.getElementType()));
  });
  CONVERT("prim::device") {
    im.setConst(n, 0, c10::IValue(c10::Device(c10::kCPU)));
    return success();
  };

  // Reading a tensor's value into a Python number is data-dependent.
  auto dataDependent = [](Importer &im, jit::Node *n) -> LogicalResult {
    im.error(n) << "reads a value computed from tensor data (control flow "
                   "or sizes that depend on data are not supported)";
    return failure();
  };
  for (const char *k : {"aten::Bool", "aten::Int", "aten::Float", "aten::item",
                        "aten::ScalarImplicit", "aten::is_nonzero"})
    table[k] = dataDependent;
}

} // namespace merak::torchscript
