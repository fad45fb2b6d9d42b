//===- Shape.cpp - views, slices, concatenation ---------------------------===//
//
// Shape manipulation: views, permutations, slices, concatenation,
// splits, expansion, padding, rolls, and selection by mask.
//
//===----------------------------------------------------------------------===//

#include "ImporterImpl.h"

namespace merak::torchscript {

void Importer::populateShapeConverters(ConverterTable &table) {
  // Shape manipulation.
  auto view = [](Importer &im, jit::Node *n) -> LogicalResult {
    auto s = im.intsArg(n, 1, "shape");
    TRY(s);
    return im.reshapeLike(n, *s);
  };
  table["aten::view"] = table["aten::reshape"] = table["aten::_reshape_alias"] =
      view;
  auto viewAs = [](Importer &im, jit::Node *n) -> LogicalResult {
    Value o = im.tensorArg(n, 1);
    if (!o)
      return failure();
    auto s = typeOf(o).getShape();
    return im.reshapeLike(n, std::vector<int64_t>(s.begin(), s.end()));
  };
  table["aten::view_as"] = table["aten::reshape_as"] = viewAs;
  CONVERT("aten::flatten") {
    Value x = im.tensorArg(n, 0);
    if (!x)
      return failure();
    auto shape = typeOf(x).getShape();
    int64_t rank = shape.size();
    if (rank == 0)
      return im.reshapeLike(n, {1});
    auto s = im.dimArg(n, 1, rank);
    TRY(s);
    auto e = im.dimArg(n, 2, rank);
    TRY(e);
    std::vector<int64_t> out(shape.begin(), shape.begin() + *s);
    int64_t prod = 1;
    for (int64_t i = *s; i <= *e; ++i)
      prod *= shape[i];
    out.push_back(prod);
    out.insert(out.end(), shape.begin() + *e + 1, shape.end());
    return im.reshapeLike(n, out);
  };
  CONVERT("aten::unflatten") {
    Value x = im.tensorArg(n, 0);
    if (!x)
      return failure();
    auto shape = typeOf(x).getShape();
    auto d = im.dimArg(n, 1, shape.size());
    TRY(d);
    auto sizes = im.intsArg(n, 2, "sizes");
    TRY(sizes);
    std::vector<int64_t> out(shape.begin(), shape.begin() + *d);
    out.insert(out.end(), sizes->begin(), sizes->end());
    out.insert(out.end(), shape.begin() + *d + 1, shape.end());
    return im.reshapeLike(n, out);
  };
  CONVERT("aten::squeeze") {
    Value x = im.tensorArg(n, 0);
    if (!x)
      return failure();
    auto shape = typeOf(x).getShape();
    std::vector<int64_t> out;
    if (n->inputs().size() == 1) {
      for (int64_t s : shape)
        if (s != 1)
          out.push_back(s);
    } else {
      if (shape.empty())
        return im.reshapeLike(n, {});
      auto d = im.dimArg(n, 1, shape.size());
      TRY(d);
      for (int64_t i = 0; i < (int64_t)shape.size(); ++i)
        if (i != *d || shape[i] != 1)
          out.push_back(shape[i]);
    }
    return im.reshapeLike(n, out);
  };
  CONVERT("aten::unsqueeze") {
    Value x = im.tensorArg(n, 0);
    if (!x)
      return failure();
    auto shape = typeOf(x).getShape();
    auto d = im.dimArg(n, 1, shape.size() + 1);
    TRY(d);
    std::vector<int64_t> out(shape.begin(), shape.end());
    out.insert(out.begin() + *d, 1);
    return im.reshapeLike(n, out);
  };
  auto permuteTo = [](Importer &im, jit::Node *n, Value x,
                      const SmallVector<int64_t> &perm) -> LogicalResult {
    Value v = im.make1<PermuteOp>(x, im.b.getDenseI64ArrayAttr(perm));
    return im.bind(n, v, /*view=*/true);
  };
  table["aten::transpose"] = [permuteTo](Importer &im,
                                         jit::Node *n) -> LogicalResult {
    Value x = im.tensorArg(n, 0);
    if (!x)
      return failure();
    int64_t rank = typeOf(x).getRank();
    if (rank == 0) {
      im.setOut(n, 0, x);
      return success();
    }
    auto d0 = im.dimArg(n, 1, rank);
    TRY(d0);
    auto d1 = im.dimArg(n, 2, rank);
    TRY(d1);
    SmallVector<int64_t> perm = llvm::to_vector(llvm::seq<int64_t>(0, rank));
    std::swap(perm[*d0], perm[*d1]);
    return permuteTo(im, n, x, perm);
  };
  auto transpose2d = [permuteTo](Importer &im, jit::Node *n) -> LogicalResult {
    Value x = im.tensorArg(n, 0);
    if (!x)
      return failure();
    int64_t rank = typeOf(x).getRank();
    if (rank < 2) {
      im.setOut(n, 0, x);
      return success();
    }
    SmallVector<int64_t> perm = llvm::to_vector(llvm::seq<int64_t>(0, rank));
    std::reverse(perm.begin(), perm.end());
    if (rank == 2 || std::string(n->kind().toQualString()) == "aten::numpy_T")
      return permuteTo(im, n, x, perm);
    return im.unsupported(n, "rank > 2");
  };
  table["aten::t"] = table["aten::numpy_T"] = transpose2d;
  table["aten::permute"] = [permuteTo](Importer &im,
                                       jit::Node *n) -> LogicalResult {
    Value x = im.tensorArg(n, 0);
    if (!x)
      return failure();
    auto dims = im.intsArg(n, 1, "dims");
    TRY(dims);
    SmallVector<int64_t> perm;
    for (int64_t d : *dims)
      perm.push_back(d < 0 ? d + typeOf(x).getRank() : d);
    return permuteTo(im, n, x, perm);
  };
  CONVERT("aten::slice") {
    Value x = im.tensorArg(n, 0);
    if (!x)
      return failure();
    auto shape = typeOf(x).getShape();
    auto d = im.dimArg(n, 1, shape.size());
    TRY(d);
    int64_t size = shape[*d];
    int64_t start = 0, end = size, step = 1;
    if (!im.isNone(n, 2)) {
      auto s = im.intArg(n, 2, "start");
      TRY(s);
      start = *s;
    }
    if (!im.isNone(n, 3)) {
      auto e = im.intArg(n, 3, "end");
      TRY(e);
      end = *e;
    }
    auto st = im.intArg(n, 4, "step");
    TRY(st);
    step = *st;
    if (start < 0)
      start += size;
    if (end < 0)
      end += size;
    start = std::clamp<int64_t>(start, 0, size);
    end = std::clamp<int64_t>(end, start, size);
    if (start == 0 && end == size && step == 1) {
      im.setOut(n, 0, x, true);
      return success();
    }
    Value v = im.make1<SliceOp>(x, *d, start, end, step);
    return im.bind(n, v, /*view=*/true);
  };
  CONVERT("aten::narrow") {
    Value x = im.tensorArg(n, 0);
    if (!x)
      return failure();
    auto d = im.dimArg(n, 1, typeOf(x).getRank());
    TRY(d);
    auto s = im.intArg(n, 2, "start");
    TRY(s);
    auto l = im.intArg(n, 3, "length");
    TRY(l);
    int64_t start = *s < 0 ? *s + typeOf(x).getDimSize(*d) : *s;
    Value v = im.make1<SliceOp>(x, *d, start, start + *l, 1);
    return im.bind(n, v, /*view=*/true);
  };
  CONVERT("aten::select") {
    Value x = im.tensorArg(n, 0);
    if (!x)
      return failure();
    auto shape = typeOf(x).getShape();
    auto d = im.dimArg(n, 1, shape.size());
    TRY(d);
    auto i = im.intArg(n, 2, "index");
    TRY(i);
    int64_t index = *i < 0 ? *i + shape[*d] : *i;
    Value v = im.make1<SelectOp>(x, *d, index);
    return im.bind(n, v, /*view=*/true);
  };
  auto cat = [](bool stack) {
    return [stack](Importer &im, jit::Node *n) -> LogicalResult {
      auto xs = im.tensorListArg(n, 0);
      TRY(xs);
      if (xs->empty()) {
        im.error(n) << "needs at least one tensor";
        return failure();
      }
      int64_t rank = typeOf(xs->front()).getRank() + (stack ? 1 : 0);
      auto d = im.dimArg(n, 1, rank);
      TRY(d);
      // Promotion across the list, as torch.cat does.
      Type elem = typeOf(xs->front()).getElementType();
      for (Value v : *xs) {
        Type e = typeOf(v).getElementType();
        if (e != elem) {
          auto a = scalarTypeOf(elem), c = scalarTypeOf(e);
          elem = *elementTypeOf(im.ctx, c10::promoteTypes(*a, *c));
        }
      }
      SmallVector<Value> inputs;
      for (Value v : *xs) {
        v = im.cast(v, elem);
        if (stack) {
          SmallVector<int64_t> s(typeOf(v).getShape());
          s.insert(s.begin() + *d, 1);
          v = im.reshape(v, s);
        }
        inputs.push_back(v);
      }
      Value v = inputs.size() == 1 ? inputs[0] : im.make1<ConcatOp>(inputs, *d);
      return im.bind(n, v);
    };
  };
  table["aten::cat"] = table["aten::concat"] = table["aten::concatenate"] =
      cat(false);
  table["aten::stack"] = cat(true);
  // split, chunk, unbind: a list of slices.
  auto splitInto = [](Importer &im, jit::Node *n, Value x, int64_t d,
                      const std::vector<int64_t> &sizes) -> LogicalResult {
    std::vector<Slot> parts;
    int64_t start = 0;
    for (int64_t s : sizes) {
      Value v = im.make1<SliceOp>(x, d, start, start + s, 1);
      if (!v)
        return failure();
      parts.push_back(Slot::tensor(v, true));
      start += s;
    }
    if (start != typeOf(x).getDimSize(d)) {
      im.error(n) << "split sizes add up to " << start << ", dimension " << d
                  << " has " << typeOf(x).getDimSize(d);
      return failure();
    }
    if (n->outputs().size() == 1 &&
        n->output(0)->type()->kind() == c10::TypeKind::ListType) {
      im.slot(n->output(0)) = Slot::list(parts);
    } else if (n->outputs().size() == parts.size()) {
      for (size_t i = 0; i < parts.size(); ++i)
        im.slot(n->output(i)) = parts[i];
    } else {
      im.error(n) << "unexpected number of results";
      return failure();
    }
    return success();
  };
  table["aten::split"] = table["aten::split_with_sizes"] =
      table["aten::unsafe_split"] =
          [splitInto](Importer &im, jit::Node *n) -> LogicalResult {
    Value x = im.tensorArg(n, 0);
    if (!x)
      return failure();
    auto d = im.dimArg(n, 2, typeOf(x).getRank());
    TRY(d);
    int64_t size = typeOf(x).getDimSize(*d);
    auto spec = im.constArg(n, 1, "split_size");
    TRY(spec);
    std::vector<int64_t> sizes;
    if (spec->isInt()) {
      int64_t s = spec->toInt();
      if (s <= 0) {
        im.error(n) << "split size must be positive";
        return failure();
      }
      for (int64_t at = 0; at < size; at += s)
        sizes.push_back(std::min(s, size - at));
    } else {
      auto v = im.intsArg(n, 1, "split_sizes");
      TRY(v);
      sizes = *v;
    }
    return splitInto(im, n, x, *d, sizes);
  };
  table["aten::chunk"] = table["aten::unsafe_chunk"] =
      [splitInto](Importer &im, jit::Node *n) -> LogicalResult {
    Value x = im.tensorArg(n, 0);
    if (!x)
      return failure();
    auto c = im.intArg(n, 1, "chunks");
    TRY(c);
    auto d = im.dimArg(n, 2, typeOf(x).getRank());
    TRY(d);
    int64_t size = typeOf(x).getDimSize(*d);
    int64_t each = (size + *c - 1) / *c;
    std::vector<int64_t> sizes;
    for (int64_t at = 0; at < size; at += each)
      sizes.push_back(std::min(each, size - at));
    return splitInto(im, n, x, *d, sizes);
  };
  CONVERT("aten::unbind") {
    Value x = im.tensorArg(n, 0);
    if (!x)
      return failure();
    auto d = im.dimArg(n, 1, typeOf(x).getRank());
    TRY(d);
    std::vector<Slot> parts;
    for (int64_t i = 0; i < typeOf(x).getDimSize(*d); ++i) {
      Value v = im.make1<SelectOp>(x, *d, i);
      if (!v)
        return failure();
      parts.push_back(Slot::tensor(v, true));
    }
    im.slot(n->output(0)) = Slot::list(parts);
    return success();
  };
  auto expand = [](Importer &im, jit::Node *n) -> LogicalResult {
    Value x = im.tensorArg(n, 0);
    if (!x)
      return failure();
    std::vector<int64_t> target;
    std::string k = n->kind().toQualString();
    if (k == "aten::expand_as") {
      Value o = im.tensorArg(n, 1);
      if (!o)
        return failure();
      auto s = typeOf(o).getShape();
      target.assign(s.begin(), s.end());
    } else {
      auto s = im.intsArg(n, 1, "size");
      TRY(s);
      target = *s;
    }
    auto shape = typeOf(x).getShape();
    int64_t offset = (int64_t)target.size() - (int64_t)shape.size();
    for (int64_t i = 0; i < (int64_t)target.size(); ++i)
      if (target[i] == -1) {
        if (i < offset) {
          im.error(n) << "-1 is not allowed for a new leading dimension";
          return failure();
        }
        target[i] = shape[i - offset];
      }
    Value v = im.expandTo(x, target);
    return im.bind(n, v, /*view=*/true);
  };
  table["aten::expand"] = table["aten::expand_as"] =
      table["aten::broadcast_to"] = expand;
  // Every tensor expanded to the shapes' broadcast (F.mse_loss and
  // F.l1_loss call it on their operands).
  CONVERT("aten::broadcast_tensors") {
    auto xs = im.tensorListArg(n, 0);
    TRY(xs);
    std::vector<int64_t> target;
    for (Value x : *xs) {
      auto shape = typeOf(x).getShape();
      if (shape.size() > target.size())
        target.insert(target.begin(), shape.size() - target.size(), 1);
      int64_t offset = (int64_t)target.size() - (int64_t)shape.size();
      for (int64_t i = 0; i < (int64_t)shape.size(); ++i) {
        int64_t &t = target[offset + i];
        if (t == 1)
          t = shape[i];
        else if (shape[i] != 1 && shape[i] != t) {
          im.error(n) << "shapes cannot be broadcast together";
          return failure();
        }
      }
    }
    std::vector<Slot> parts;
    for (Value x : *xs) {
      Value v = im.expandTo(x, target);
      if (!v)
        return failure();
      parts.push_back(Slot::tensor(v, /*view=*/true));
    }
    im.slot(n->output(0)) = Slot::list(parts);
    return success();
  };
  CONVERT("aten::repeat") {
    Value x = im.tensorArg(n, 0);
    if (!x)
      return failure();
    auto reps = im.intsArg(n, 1, "repeats");
    TRY(reps);
    auto shape = typeOf(x).getShape();
    if (reps->size() < shape.size()) {
      im.error(n) << "fewer repeats than dimensions";
      return failure();
    }
    std::vector<int64_t> padded(reps->size() - shape.size(), 1);
    padded.insert(padded.end(), shape.begin(), shape.end());
    // tile = interleave unit dims, expand them, merge.
    SmallVector<int64_t> inter, expanded, out;
    for (size_t i = 0; i < padded.size(); ++i) {
      inter.append({1, padded[i]});
      expanded.append({(*reps)[i], padded[i]});
      out.push_back((*reps)[i] * padded[i]);
    }
    Value v = im.reshape(x, inter);
    v = v ? im.expandTo(v, expanded) : v;
    v = v ? im.reshape(v, out) : v;
    return im.bind(n, v);
  };
  CONVERT("aten::repeat_interleave") {
    Value x = im.tensorArg(n, 0);
    if (!x)
      return failure();
    if (!im.in(n, 1).isConst() || !im.in(n, 1).iv.isInt())
      return im.unsupported(n, "tensor repeats");
    int64_t r = im.in(n, 1).iv.toInt();
    if (n->inputs().size() < 3 || im.isNone(n, 2))
      return im.unsupported(n, "without dim");
    auto shape = typeOf(x).getShape();
    auto d = im.dimArg(n, 2, shape.size());
    TRY(d);
    SmallVector<int64_t> inter(shape.begin(), shape.end()), expanded, out;
    inter.insert(inter.begin() + *d + 1, 1);
    expanded = inter;
    expanded[*d + 1] = r;
    out.assign(shape.begin(), shape.end());
    out[*d] *= r;
    Value v = im.reshape(x, inter);
    v = v ? im.expandTo(v, expanded) : v;
    v = v ? im.reshape(v, out) : v;
    return im.bind(n, v);
  };
  auto pad = [](Importer &im, jit::Node *n) -> LogicalResult {
    Value x = im.tensorArg(n, 0);
    if (!x)
      return failure();
    auto p = im.intsArg(n, 1, "pad");
    TRY(p);
    double value = 0.0;
    std::string k = n->kind().toQualString();
    size_t valueIdx = 2;
    if (k == "aten::pad") {
      auto mode = im.constArg(n, 2, "mode");
      TRY(mode);
      if (mode->toStringRef() != "constant")
        return im.unsupported(n, "mode=" + mode->toStringRef());
      valueIdx = 3;
    }
    if (n->inputs().size() > valueIdx && !im.isNone(n, valueIdx)) {
      auto v = im.floatArg(n, valueIdx, "value");
      TRY(v);
      value = *v;
    }
    int64_t rank = typeOf(x).getRank();
    if (p->size() % 2 || (int64_t)p->size() / 2 > rank) {
      im.error(n) << "pad needs pairs for at most " << rank << " dims";
      return failure();
    }
    SmallVector<int64_t> lo(rank, 0), hi(rank, 0);
    for (size_t i = 0; i < p->size() / 2; ++i) {
      lo[rank - 1 - i] = (*p)[2 * i];
      hi[rank - 1 - i] = (*p)[2 * i + 1];
      if (lo[rank - 1 - i] < 0 || hi[rank - 1 - i] < 0)
        return im.unsupported(n, "negative padding");
    }
    Value v = im.make1<PadOp>(x, im.b.getDenseI64ArrayAttr(lo),
                              im.b.getDenseI64ArrayAttr(hi),
                              im.b.getF64FloatAttr(value));
    return im.bind(n, v);
  };
  table["aten::pad"] = table["aten::constant_pad_nd"] = pad;
  CONVERT("aten::roll") {
    Value x = im.tensorArg(n, 0);
    if (!x)
      return failure();
    auto shifts = im.intsArg(n, 1, "shifts");
    TRY(shifts);
    auto dims = im.intsArg(n, 2, "dims");
    TRY(dims);
    auto shape = typeOf(x).getShape();
    if (dims->empty()) {
      Value flat = im.reshape(x, {typeOf(x).getNumElements()});
      Value r = im.make1<RollOp>(flat, im.b.getDenseI64ArrayAttr(*shifts),
                                 im.b.getDenseI64ArrayAttr({0}));
      Value v = r ? im.reshape(r, shape) : r;
      return im.bind(n, v);
    }
    SmallVector<int64_t> ds;
    for (int64_t d : *dims)
      ds.push_back(d < 0 ? d + (int64_t)shape.size() : d);
    Value v = im.make1<RollOp>(x, im.b.getDenseI64ArrayAttr(*shifts),
                               im.b.getDenseI64ArrayAttr(ds));
    return im.bind(n, v);
  };
  auto where = [](Importer &im, Value cond, jit::Node *n, size_t ti,
                  size_t fi) -> LogicalResult {
    auto t = im.promotedType(n, {ti, fi});
    TRY(t);
    Value a = im.tensorArg(n, ti, *t), c = im.tensorArg(n, fi, *t);
    if (!a || !c)
      return failure();
    if (!typeOf(cond).getElementType().isInteger(1))
      cond = im.cast(cond, im.b.getI1Type());
    Value v = im.make1<WhereOp>(cond, im.cast(a, *t), im.cast(c, *t));
    return im.bind(n, v);
  };
  table["aten::where"] = [where](Importer &im, jit::Node *n) -> LogicalResult {
    if (n->inputs().size() != 3)
      return im.unsupported(n, "single-argument form");
    Value c = im.tensorArg(n, 0);
    if (!c)
      return failure();
    return where(im, c, n, 1, 2);
  };
  table["aten::masked_fill"] = table["aten::masked_fill_"] =
      [](Importer &im, jit::Node *n) -> LogicalResult {
    Value x = im.tensorArg(n, 0), mask = im.tensorArg(n, 1);
    if (!x || !mask)
      return failure();
    Type elem = typeOf(x).getElementType();
    Value fill = im.tensorArg(n, 2, elem);
    if (!fill)
      return failure();
    if (!typeOf(mask).getElementType().isInteger(1))
      mask = im.cast(mask, im.b.getI1Type());
    Value v = im.make1<WhereOp>(mask, im.cast(fill, elem), x);
    return im.bind(n, v);
  };
  CONVERT("aten::copy_") {
    // dst.copy_(src): the new value of dst is src, broadcast and cast.
    Value dst = im.tensorArg(n, 0), src = im.tensorArg(n, 1);
    if (!dst || !src)
      return failure();
    Value v = im.expandTo(im.cast(src, typeOf(dst).getElementType()),
                          typeOf(dst).getShape());
    return im.bind(n, v);
  };

  table["aten::outer"] =
      table["aten::ger"] = [](Importer &im, jit::Node *n) -> LogicalResult {
    return im.binary(n, [&](Value l, Value r) -> Value {
      if (typeOf(l).getRank() != 1 || typeOf(r).getRank() != 1)
        return {};
      Value a = im.reshape(l, {typeOf(l).getDimSize(0), 1});
      Value c = im.reshape(r, {1, typeOf(r).getDimSize(0)});
      return a && c ? im.make1<MulOp>(a, c) : Value();
    });
  };
}

} // namespace merak::torchscript
