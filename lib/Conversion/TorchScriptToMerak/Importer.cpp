//===- Importer.cpp - TorchScript to merak dialect ------------------------===//
//
// Walks the inlined graph of a TorchScript module's `forward` and emits
// `func.func @forward` in the merak dialect. Every jit value maps to a
// `Slot`: a tensor in the IR, a compile-time constant, a list or tuple of
// slots, or a module object. Nodes whose inputs are all constants are
// evaluated by LibTorch itself (so masks, position ids, shape arithmetic and
// in-place writes into constant tensors fold exactly as PyTorch computes
// them); the others convert to merak ops through the converter table, which
// each op family's file (Elementwise.cpp, Shape.cpp, ...) fills.
//
//===----------------------------------------------------------------------===//

#include "ImporterImpl.h"
#include "merak/Conversion/TorchScriptToMerak/ArchiveCheck.h"

#include "mlir/IR/Verifier.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"
#include "mlir/Transforms/RegionUtils.h"
#include "llvm/ADT/DenseMap.h"

#include <nlohmann/json.hpp>
#include <torch/csrc/jit/passes/inliner.h>
#include <torch/csrc/jit/runtime/operator.h>

#include <new>
#include <regex>
#include <sstream>

namespace merak::torchscript {
namespace {

std::string firstLine(const std::string &s) {
  std::string line = s.substr(0, s.find('\n'));
  // c10 errors may end the first line with a source location in brackets.
  return line;
}

} // namespace

FailureOr<Type> elementTypeOf(MLIRContext *ctx, at::ScalarType st) {
  Builder b(ctx);
  switch (st) {
  case at::kFloat:
    return b.getF32Type();
  case at::kDouble:
    return b.getF64Type();
  case at::kHalf:
    return b.getF16Type();
  case at::kBFloat16:
    return b.getBF16Type();
  case at::kLong:
    return b.getI64Type();
  case at::kInt:
    return b.getI32Type();
  case at::kBool:
    return b.getI1Type();
  default:
    return failure();
  }
}

std::optional<at::ScalarType> scalarTypeOf(Type t) {
  if (t.isF32())
    return at::kFloat;
  if (t.isF64())
    return at::kDouble;
  if (t.isF16())
    return at::kHalf;
  if (t.isBF16())
    return at::kBFloat16;
  if (t.isInteger(64))
    return at::kLong;
  if (t.isInteger(32))
    return at::kInt;
  if (t.isInteger(1))
    return at::kBool;
  return std::nullopt;
}

namespace {

/// Parses `2x16xi64` into a tensor type.
FailureOr<RankedTensorType> parseTensorSpec(MLIRContext *ctx, StringRef spec) {
  SmallVector<StringRef> parts;
  spec.split(parts, 'x');
  if (parts.empty())
    return failure();
  SmallVector<int64_t> shape;
  for (StringRef p : ArrayRef<StringRef>(parts).drop_back()) {
    int64_t d;
    if (p.getAsInteger(10, d) || d < 0)
      return failure();
    shape.push_back(d);
  }
  Builder b(ctx);
  StringRef e = parts.back();
  Type elem = llvm::StringSwitch<Type>(e)
                  .Case("f32", b.getF32Type())
                  .Case("f64", b.getF64Type())
                  .Case("f16", b.getF16Type())
                  .Case("bf16", b.getBF16Type())
                  .Case("i64", b.getI64Type())
                  .Case("i32", b.getI32Type())
                  .Case("i1", b.getI1Type())
                  .Default(Type());
  if (!elem)
    return failure();
  return RankedTensorType::get(shape, elem);
}

/// Whether a tensor of `type` has a byte size an int64 holds (the runtime
/// counts bytes in int64).
bool byteSizeFits(RankedTensorType type) {
  int64_t bytes = std::max<int64_t>(1, type.getElementTypeBitWidth() / 8);
  for (int64_t d : type.getShape())
    if (__builtin_mul_overflow(bytes, d, &bytes))
      return false;
  return true;
}

std::string baseName(const std::string &debugName) {
  // TorchScript names inputs `idx.1`; the user wrote `idx`.
  static const std::regex suffix("\\.[0-9]+$");
  return std::regex_replace(debugName, suffix, "");
}

bool isInPlaceKind(const std::string &kind) {
  return kind.size() > 1 && kind.back() == '_' &&
         kind.find("::__") == std::string::npos;
}

/// Ops that draw random numbers never fold at import.
bool isRandom(const std::string &kind) {
  static const std::set<std::string> random = {
      "aten::rand",      "aten::randn",       "aten::randint",
      "aten::rand_like", "aten::randn_like",  "aten::randint_like",
      "aten::bernoulli", "aten::bernoulli_",  "aten::normal",
      "aten::normal_",   "aten::uniform_",    "aten::multinomial",
      "aten::randperm",  "aten::exponential_"};
  return random.count(kind) != 0;
}

} // namespace

//===----------------------------------------------------------------------===//
// Loading and signature
//===----------------------------------------------------------------------===//

LogicalResult Importer::load(StringRef bytes) {
  Location fileLoc = FileLineColLoc::get(ctx, options.archiveName, 0, 0);
  // LibTorch's reader trusts the zip: a damaged entry reaches its
  // unpickler and parser (see ArchiveCheck.h).
  std::vector<ArchiveEntry> entries;
  if (std::string error = checkZipArchive(
          std::string_view(bytes.data(), bytes.size()), &entries);
      !error.empty()) {
    emitError(fileLoc) << "not a readable TorchScript archive: " << error;
    return failure();
  }
  // A debug-information pickle whose lengths overrun it is never handed
  // to LibTorch: locations name the archive.
  for (const ArchiveEntry &e : entries)
    if (!e.damage.empty() && !debugInfoUnreadable) {
      debugInfoUnreadable = true;
      emitWarning(fileLoc) << "the archive's debug information is unreadable "
                              "(entry '"
                           << e.name << "': " << e.damage
                           << "); locations name the archive instead of "
                              "Python lines";
    }
  try {
    std::istringstream stream(std::string(bytes.data(), bytes.size()));
    jit::ExtraFilesMap extra{{"merak/inputs.json", ""}};
    module = jit::load(stream, c10::Device(c10::kCPU), extra);
    inputsJson = extra["merak/inputs.json"];
  } catch (const c10::Error &e) {
    emitError(fileLoc) << "not a readable TorchScript archive: "
                       << firstLine(e.what_without_backtrace());
    return failure();
  } catch (const std::bad_alloc &) {
    emitError(fileLoc) << "not a readable TorchScript archive: LibTorch's "
                          "reader asked for more memory than there is (a "
                          "damaged length in one of its pickles?)";
    return failure();
  } catch (const std::exception &e) {
    emitError(fileLoc) << "not a readable TorchScript archive: "
                       << firstLine(e.what());
    return failure();
  }
  auto method = module.find_method("forward");
  if (!method) {
    emitError(fileLoc) << "the TorchScript module has no `forward` method";
    return failure();
  }
  graph = method->graph()->copy();
  jit::Inline(*graph);
  return success();
}

LogicalResult Importer::collectParameters() {
  auto add = [&](const std::string &name, const at::Tensor &t,
                 bool isBuffer) -> LogicalResult {
    if (!t.defined())
      return success();
    const c10::TensorImpl *impl = t.unsafeGetTensorImpl();
    if (paramArgs.count(impl))
      return success(); // tied: one argument under its first name
    if (failed(elementTypeOf(ctx, t.scalar_type()))) {
      emitError(FileLineColLoc::get(ctx, options.archiveName, 0, 0))
          << (isBuffer ? "buffer '" : "parameter '") << name
          << "' has unsupported dtype " << c10::toString(t.scalar_type());
      return failure();
    }
    paramArgs[impl] = paramNames.size();
    paramNames.push_back({name, isBuffer});
    paramTensors.push_back(t);
    return success();
  };
  for (const auto &p : module.named_parameters(/*recurse=*/true))
    if (failed(add(p.name, p.value, false)))
      return failure();
  for (const auto &p : module.named_buffers(/*recurse=*/true))
    if (failed(add(p.name, p.value, true)))
      return failure();
  return success();
}

LogicalResult Importer::resolveInputTypes(SmallVectorImpl<Type> &types,
                                          SmallVectorImpl<std::string> &names) {
  Location fileLoc = FileLineColLoc::get(ctx, options.archiveName, 0, 0);
  std::map<std::string, RankedTensorType> known;
  if (!inputsJson.empty()) {
    try {
      auto j = nlohmann::json::parse(inputsJson);
      for (const auto &e : j.at("inputs")) {
        std::string spec;
        for (int64_t d : e.at("shape").get<std::vector<int64_t>>())
          spec += std::to_string(d) + "x";
        spec += e.at("dtype").get<std::string>();
        auto t = parseTensorSpec(ctx, spec);
        if (failed(t) || !byteSizeFits(*t)) {
          emitError(fileLoc)
              << "merak/inputs.json: bad input spec '" << spec << "'";
          return failure();
        }
        known[e.at("name").get<std::string>()] = *t;
      }
    } catch (const std::exception &e) {
      emitError(fileLoc) << "merak/inputs.json is malformed: "
                         << firstLine(e.what());
      return failure();
    }
  }
  std::vector<std::string> given;
  for (const std::string &spec : options.inputShapes) {
    auto [name, shape] = StringRef(spec).split('=');
    auto t = parseTensorSpec(ctx, shape.trim());
    if (shape.empty() || failed(t)) {
      emitError(fileLoc) << "bad --merak-input-shapes entry '" << spec
                         << "': expected NAME=DIMxDIMx...xTYPE, e.g. "
                            "idx=2x16xi64";
      return failure();
    }
    if (!byteSizeFits(*t)) {
      emitError(fileLoc) << "--merak-input-shapes entry '" << spec
                         << "': a tensor of that shape has more bytes than "
                            "a 64-bit size holds";
      return failure();
    }
    known[name.trim().str()] = *t;
    given.push_back(name.trim().str());
  }
  std::vector<std::string> missing;
  for (size_t i = 1; i < graph->inputs().size(); ++i) {
    jit::Value *v = graph->inputs()[i];
    std::string name = baseName(v->debugName());
    if (!v->type()->cast<c10::TensorType>()) {
      emitError(fileLoc) << "model input '" << name << "' has type "
                         << v->type()->str()
                         << "; only tensor inputs are supported";
      return failure();
    }
    names.push_back(name);
    auto it = known.find(name);
    if (it == known.end()) {
      missing.push_back(name);
      continue;
    }
    types.push_back(it->second);
  }
  for (const std::string &name : given)
    if (!llvm::is_contained(names, name)) {
      emitError(fileLoc) << "--merak-input-shapes names '" << name
                         << "', which is not an input of the model (its "
                            "inputs: "
                         << llvm::join(names, ", ") << ")";
      return failure();
    }
  if (!missing.empty()) {
    emitError(fileLoc) << "no shape for model input(s) "
                       << llvm::join(missing, ", ")
                       << ": save the model with merak_trace.save() or pass "
                          "--merak-input-shapes="
                       << missing.front() << "=2x16xi64,...";
    return failure();
  }
  return success();
}

//===----------------------------------------------------------------------===//
// Locations
//===----------------------------------------------------------------------===//

Location Importer::locOf(jit::Node *n) {
  // LibTorch reads a node's source range from the archive's debug
  // information (code/**/*.debug_pkl) when first asked; a damaged entry
  // throws there. The archive then names the location, with one warning.
  if (debugInfoUnreadable)
    return FileLineColLoc::get(ctx, options.archiveName, 0, 0);
  try {
    return sourceLocOf(n);
  } catch (const std::exception &e) {
    if (!debugInfoUnreadable) {
      debugInfoUnreadable = true;
      emitWarning(FileLineColLoc::get(ctx, options.archiveName, 0, 0))
          << "the archive's debug information is unreadable ("
          << firstLine(e.what())
          << "); locations name the archive instead of Python lines";
    }
    return FileLineColLoc::get(ctx, options.archiveName, 0, 0);
  }
}

Location Importer::sourceLocOf(jit::Node *n) {
  jit::SourceRange range = n->sourceRange();
  if (range.source())
    if (auto original = range.findSourceRangeThatGenerated())
      range = *original;
  if (!range.source())
    return FileLineColLoc::get(ctx, options.archiveName, 0, 0);
  std::pair<const void *, size_t> key{range.source().get(), range.start()};
  auto it = locCache.find(key);
  if (it != locCache.end())
    return it->second;
  // A traced node's source is its Python call stack, innermost frame first,
  // one `file(line): function` per line. The user's frame is the first one
  // outside PyTorch's own package.
  std::string text = range.source()->text_str().str();
  static const std::regex frame("^(.*)\\(([0-9]{1,9})\\): [^ ]+$");
  std::optional<Location> first, user;
  std::istringstream lines(text);
  std::string line;
  while (std::getline(lines, line)) {
    std::smatch m;
    if (!std::regex_match(line, m, frame))
      continue;
    Location l =
        FileLineColLoc::get(ctx, m[1].str(), std::stoul(m[2].str()), 0);
    if (!first)
      first = l;
    std::string file = m[1].str();
    if (file.find("/torch/") == std::string::npos &&
        file.find("<") == std::string::npos) {
      user = l;
      break;
    }
  }
  Location result =
      user    ? *user
      : first ? *first
              : Location(FileLineColLoc::get(ctx, options.archiveName, 0, 0));
  if (!user && !first) {
    if (auto flc = range.file_line_col())
      result = FileLineColLoc::get(ctx, std::get<0>(*flc), std::get<1>(*flc),
                                   std::get<2>(*flc));
  }
  locCache.emplace(key, result);
  return result;
}

//===----------------------------------------------------------------------===//
// Argument access
//===----------------------------------------------------------------------===//

FailureOr<c10::IValue> Importer::constArg(jit::Node *n, size_t i,
                                          StringRef what) {
  Slot &s = in(n, i);
  if (s.isConst())
    return s.iv;
  if (s.kind == Slot::Kind::List) {
    // A list of constants (e.g. sizes) assembled from folded values.
    c10::impl::GenericList list(c10::AnyType::get());
    for (Slot &e : s.elems) {
      if (!e.isConst())
        goto notConst;
      list.push_back(e.iv);
    }
    return c10::IValue(list);
  }
notConst:
  error(n) << what << " must be known at compile time; it depends on "
           << "tensor data";
  return failure();
}

FailureOr<int64_t> Importer::intArg(jit::Node *n, size_t i, StringRef what) {
  auto v = constArg(n, i, what);
  if (failed(v))
    return failure();
  if (v->isInt())
    return v->toInt();
  if (v->isBool())
    return (int64_t)v->toBool();
  if (v->isTensor() && v->toTensor().numel() == 1 &&
      !v->toTensor().is_floating_point())
    return v->toTensor().item<int64_t>();
  error(n) << what << " must be an integer";
  return failure();
}

FailureOr<double> Importer::floatArg(jit::Node *n, size_t i, StringRef what) {
  auto v = constArg(n, i, what);
  if (failed(v))
    return failure();
  if (v->isDouble())
    return v->toDouble();
  if (v->isInt())
    return (double)v->toInt();
  if (v->isBool())
    return (double)v->toBool();
  if (v->isTensor() && v->toTensor().numel() == 1)
    return v->toTensor().item<double>();
  error(n) << what << " must be a number";
  return failure();
}

FailureOr<bool> Importer::boolArg(jit::Node *n, size_t i, StringRef what) {
  auto v = intArg(n, i, what);
  if (failed(v))
    return failure();
  return *v != 0;
}

FailureOr<std::vector<int64_t>> Importer::intsArg(jit::Node *n, size_t i,
                                                  StringRef what) {
  auto v = constArg(n, i, what);
  if (failed(v))
    return failure();
  std::vector<int64_t> out;
  if (v->isInt()) {
    out.push_back(v->toInt());
    return out;
  }
  if (v->isList()) {
    for (const c10::IValue &e : v->toListRef()) {
      if (e.isInt())
        out.push_back(e.toInt());
      else if (e.isTensor() && e.toTensor().numel() == 1)
        out.push_back(e.toTensor().item<int64_t>());
      else {
        error(n) << what << " must be a list of integers";
        return failure();
      }
    }
    return out;
  }
  error(n) << what << " must be a list of integers";
  return failure();
}

FailureOr<int64_t> Importer::dimArg(jit::Node *n, size_t i, int64_t rank) {
  auto d = intArg(n, i, "dim");
  if (failed(d))
    return failure();
  int64_t r = std::max<int64_t>(rank, 1);
  int64_t v = *d < 0 ? *d + r : *d;
  if (v < 0 || v >= r) {
    error(n) << "dim " << *d << " is out of range for rank " << rank;
    return failure();
  }
  return v;
}

/// Whether `t`'s storage holds every element it addresses: a tensor saved
/// from the meta device loads with no data, and a damaged archive can give
/// a storage shorter than its tensor.
static bool hasValues(const at::Tensor &t) {
  if (t.is_meta())
    return false;
  if (t.numel() == 0)
    return true;
  if (!t.has_storage() || !t.storage().data_ptr().get())
    return false;
  int64_t last = t.storage_offset();
  if (last < 0)
    return false;
  for (int64_t d = 0; d < t.dim(); ++d) {
    int64_t extent;
    if (t.stride(d) < 0 ||
        __builtin_mul_overflow(t.size(d) - 1, t.stride(d), &extent) ||
        __builtin_add_overflow(last, extent, &last))
      return false;
  }
  int64_t bytes;
  return !__builtin_mul_overflow(last + 1, int64_t(t.element_size()), &bytes) &&
         bytes <= int64_t(t.storage().nbytes());
}

Value Importer::constantTensor(const at::Tensor &t0, Location loc) {
  if (!hasValues(t0)) {
    // A tensor captured by the trace on the meta device has a shape and
    // no values.
    emitError(loc) << "a constant tensor of shape " << c10::str(t0.sizes())
                   << " has no values in the archive (traced on the meta "
                      "device?); compute it in forward() from shapes, or "
                      "trace on the CPU";
    return {};
  }
  at::Tensor t;
  try {
    t = t0.detach().contiguous().cpu();
  } catch (const std::exception &e) {
    emitError(loc) << "reading a constant tensor failed: "
                   << firstLine(e.what());
    return {};
  }
  auto elem = elementTypeOf(ctx, t.scalar_type());
  if (failed(elem)) {
    emitError(loc) << "constant tensor of unsupported dtype "
                   << c10::toString(t.scalar_type());
    return {};
  }
  SmallVector<int64_t> shape(t.sizes().begin(), t.sizes().end());
  auto type = RankedTensorType::get(shape, *elem);
  size_t n = t.numel();
  DenseElementsAttr attr;
  switch (t.scalar_type()) {
  case at::kFloat:
    attr =
        DenseElementsAttr::get(type, ArrayRef<float>(t.data_ptr<float>(), n));
    break;
  case at::kDouble:
    attr =
        DenseElementsAttr::get(type, ArrayRef<double>(t.data_ptr<double>(), n));
    break;
  case at::kLong:
    attr = DenseElementsAttr::get(type,
                                  ArrayRef<int64_t>(t.data_ptr<int64_t>(), n));
    break;
  case at::kInt:
    attr = DenseElementsAttr::get(type,
                                  ArrayRef<int32_t>(t.data_ptr<int32_t>(), n));
    break;
  case at::kBool: {
    std::vector<char> bits(t.data_ptr<bool>(), t.data_ptr<bool>() + n);
    SmallVector<bool> values(bits.begin(), bits.end());
    attr = DenseElementsAttr::get(type, values);
    break;
  }
  default: { // f16, bf16: 2-byte raw storage
    ArrayRef<char> raw(static_cast<const char *>(t.data_ptr()),
                       n * t.element_size());
    attr = DenseElementsAttr::getFromRawBuffer(type, raw);
    break;
  }
  }
  return b.create<ConstantOp>(loc, type, attr);
}

Value Importer::materialize(const c10::IValue &iv, Location loc,
                            Type scalarType) {
  if (iv.isTensor())
    return constantTensor(iv.toTensor(), loc);
  if (iv.isInt() || iv.isDouble() || iv.isBool()) {
    at::ScalarType st = iv.isDouble() ? at::kFloat
                        : iv.isBool() ? at::kBool
                                      : at::kLong;
    if (scalarType)
      if (auto s = scalarTypeOf(scalarType))
        st = *s;
    return constantTensor(at::scalar_tensor(iv.toScalar(), st), loc);
  }
  return {};
}

Value Importer::tensorArg(jit::Node *n, size_t i, Type scalarType) {
  Slot &s = in(n, i);
  if (s.isTensor())
    return s.value;
  if (s.isConst()) {
    // A rank-0 constant taking part in promotion is converted to the common
    // type up front, as PyTorch's TensorIterator does.
    if (s.iv.isTensor() && scalarType && s.iv.toTensor().dim() == 0)
      if (auto st = scalarTypeOf(scalarType))
        return constantTensor(s.iv.toTensor().to(*st), curLoc);
    if (s.iv.isTensor()) {
      // Constant tensors may be written in place later: the cache holds the
      // value as of its version.
      int64_t version = s.iv.toTensor()._version();
      auto it = constCache.find(n->input(i));
      if (it != constCache.end() && it->second.second == version)
        return it->second.first;
      OpBuilder::InsertionGuard g(b);
      b.setInsertionPointToStart(&func.getBody().front());
      Value v = constantTensor(s.iv.toTensor(), curLoc);
      constCache[n->input(i)] = {v, version};
      return v;
    }
    if (Value v = materialize(s.iv, curLoc, scalarType))
      return v;
  }
  error(n) << "operand " << i << " is not a tensor";
  return {};
}

FailureOr<std::vector<Value>> Importer::tensorListArg(jit::Node *n, size_t i) {
  Slot &s = in(n, i);
  std::vector<Value> out;
  if (s.kind == Slot::Kind::List) {
    for (Slot &e : s.elems) {
      if (e.isTensor())
        out.push_back(e.value);
      else if (e.isConst() && e.iv.isTensor())
        out.push_back(constantTensor(e.iv.toTensor(), curLoc));
      else {
        error(n) << "operand " << i << " must be a list of tensors";
        return failure();
      }
    }
    return out;
  }
  if (s.isConst() && s.iv.isTensorList()) {
    for (const at::Tensor &t : s.iv.toTensorVector())
      out.push_back(constantTensor(t, curLoc));
    return out;
  }
  error(n) << "operand " << i << " must be a list of tensors";
  return failure();
}

//===----------------------------------------------------------------------===//
// Shared conversions
//===----------------------------------------------------------------------===//

FailureOr<Type> Importer::promotedType(jit::Node *n, ArrayRef<size_t> idx) {
  // PyTorch's own promotion: tensors of rank 0 and Python numbers take part
  // with lower priority, exactly as at::result_type decides.
  std::optional<at::ScalarType> result;
  auto combine = [&](std::function<at::ScalarType(at::ScalarType)> f) {};
  (void)combine;
  std::vector<at::Tensor> dummies;
  std::vector<c10::Scalar> scalars;
  for (size_t i : idx) {
    Slot &s = in(n, i);
    if (s.isTensor()) {
      auto st = scalarTypeOf(typeOf(s.value).getElementType());
      dummies.push_back(typeOf(s.value).getRank() == 0
                            ? at::empty({}, at::TensorOptions().dtype(*st))
                            : at::empty({0}, at::TensorOptions().dtype(*st)));
    } else if (s.isConst() && s.iv.isTensor()) {
      const at::Tensor &t = s.iv.toTensor();
      at::Tensor d = t.dim() == 0
                         ? at::empty({}, at::TensorOptions().dtype(t.dtype()))
                         : at::empty({0}, at::TensorOptions().dtype(t.dtype()));
      if (t.unsafeGetTensorImpl()->is_wrapped_number())
        d.unsafeGetTensorImpl()->set_wrapped_number(true);
      dummies.push_back(d);
    } else if (s.isConst() &&
               (s.iv.isInt() || s.iv.isDouble() || s.iv.isBool())) {
      scalars.push_back(s.iv.toScalar());
    } else {
      error(n) << "operand " << i << " is not a tensor or number";
      return failure();
    }
  }
  at::ScalarType st;
  try {
    if (dummies.empty()) {
      st = at::result_type(at::scalar_tensor(scalars[0]), scalars[1]);
    } else {
      at::Tensor acc = dummies[0];
      for (size_t k = 1; k < dummies.size(); ++k)
        acc = at::empty(
            acc.dim() == 0 && dummies[k].dim() == 0 ? at::IntArrayRef{}
                                                    : at::IntArrayRef{0},
            at::TensorOptions().dtype(at::result_type(acc, dummies[k])));
      st = acc.scalar_type();
      for (const c10::Scalar &s : scalars)
        st = at::result_type(at::empty({0}, at::TensorOptions().dtype(st)), s);
      // A rank-0 result only when every tensor was rank 0.
    }
  } catch (const c10::Error &e) {
    error(n) << "type promotion failed: "
             << firstLine(e.what_without_backtrace());
    return failure();
  }
  auto t = elementTypeOf(ctx, st);
  if (failed(t)) {
    error(n) << "unsupported dtype " << c10::toString(st);
    return failure();
  }
  return *t;
}

LogicalResult Importer::binary(jit::Node *n,
                               const std::function<Value(Value, Value)> &build,
                               bool floatResult, bool swap) {
  auto t = promotedType(n, {0, 1});
  if (failed(t))
    return failure();
  Type elem = *t;
  if (floatResult && !isa<FloatType>(elem))
    elem = b.getF32Type();
  Value l = tensorArg(n, 0, elem), r = tensorArg(n, 1, elem);
  if (!l || !r)
    return failure();
  l = cast(l, elem);
  r = cast(r, elem);
  if (swap)
    std::swap(l, r);
  Value v = build(l, r);
  if (!v)
    return failure();
  setOut(n, 0, v);
  return success();
}

LogicalResult Importer::compare(jit::Node *n, ComparePredicate pred) {
  auto t = promotedType(n, {0, 1});
  if (failed(t))
    return failure();
  Value l = tensorArg(n, 0, *t), r = tensorArg(n, 1, *t);
  if (!l || !r)
    return failure();
  Value v = make1<CompareOp>(ComparePredicateAttr::get(ctx, pred), cast(l, *t),
                             cast(r, *t));
  if (!v)
    return failure();
  setOut(n, 0, v);
  return success();
}

LogicalResult Importer::reshapeLike(jit::Node *n, std::vector<int64_t> shape) {
  Value x = tensorArg(n, 0);
  if (!x)
    return failure();
  int64_t numel = typeOf(x).getNumElements(), known = 1, infer = -1;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == -1) {
      if (infer >= 0) {
        error(n) << "more than one -1 in shape";
        return failure();
      }
      infer = i;
    } else {
      known *= shape[i];
    }
  }
  if (infer >= 0) {
    if (known == 0 || numel % known) {
      error(n) << "cannot infer the -1 dimension: " << numel
               << " elements do not divide by " << known;
      return failure();
    }
    shape[infer] = numel / known;
  }
  Value v = reshape(x, shape);
  if (!v)
    return failure();
  setOut(n, 0, v, /*view=*/true);
  return success();
}

LogicalResult Importer::reduce(jit::Node *n, StringRef which) {
  Value x = tensorArg(n, 0);
  if (!x)
    return failure();
  int64_t rank = typeOf(x).getRank();
  std::vector<int64_t> dims;
  bool keepdim = false;
  std::optional<at::ScalarType> dtype;
  // Overloads: (self, dtype?) | (self, dim[], keepdim, dtype?) |
  // (self, dim, keepdim) for max.dim.
  size_t ni = n->inputs().size();
  if (ni >= 3) {
    if (!isNone(n, 1)) {
      auto d = intsArg(n, 1, "dim");
      if (failed(d))
        return failure();
      dims = *d;
    }
    auto k = boolArg(n, 2, "keepdim");
    if (failed(k))
      return failure();
    keepdim = *k;
    if (ni >= 4 && !isNone(n, 3)) {
      auto d = intArg(n, 3, "dtype");
      if (failed(d))
        return failure();
      dtype = (at::ScalarType)*d;
    }
  } else if (ni == 2 && !isNone(n, 1)) {
    auto d = intArg(n, 1, "dtype");
    if (failed(d))
      return failure();
    dtype = (at::ScalarType)*d;
  }
  for (int64_t &d : dims) {
    if (d < 0)
      d += std::max<int64_t>(rank, 1);
  }
  Type elem = typeOf(x).getElementType();
  if (dtype) {
    auto t = elementTypeOf(ctx, *dtype);
    if (failed(t)) {
      error(n) << "unsupported dtype " << c10::toString(*dtype);
      return failure();
    }
    x = cast(x, *t);
  } else if (which != "max" && !isa<FloatType>(elem)) {
    if (which == "mean") {
      error(n) << "mean of an integer tensor needs a floating dtype";
      return failure();
    }
    x = cast(x, b.getI64Type()); // sum of ints and bools is int64
  }
  if (rank == 0) {
    setOut(n, 0, x);
    return success();
  }
  auto dimsAttr = b.getDenseI64ArrayAttr(dims);
  Value v = which == "sum"    ? make1<ReduceSumOp>(x, dimsAttr, keepdim)
            : which == "mean" ? make1<ReduceMeanOp>(x, dimsAttr, keepdim)
                              : make1<ReduceMaxOp>(x, dimsAttr, keepdim);
  if (!v)
    return failure();
  setOut(n, 0, v);
  return success();
}

void Importer::recordBufferUpdate(jit::Value *target, Value newValue) {
  Slot &s = slot(target);
  if (s.argIndex >= 0)
    bufferUpdates[s.argIndex] = newValue;
}

//===----------------------------------------------------------------------===//
// The walk
//===----------------------------------------------------------------------===//

LogicalResult Importer::getAttr(jit::Node *n) {
  Slot &obj = in(n, 0);
  if (obj.kind != Slot::Kind::Module) {
    error(n) << "attribute of a non-module value";
    return failure();
  }
  std::string name = n->s(jit::attr::name);
  std::string path = obj.path.empty() ? name : obj.path + "." + name;
  c10::IValue attr = obj.iv.toObject()->getAttr(name);
  if (attr.isObject() && attr.toObject()->type()->is_module()) {
    Slot s;
    s.kind = Slot::Kind::Module;
    s.iv = attr;
    s.path = path;
    slot(n->output(0)) = s;
    return success();
  }
  if (attr.isTensor()) {
    auto it = paramArgs.find(attr.toTensor().unsafeGetTensorImpl());
    if (it != paramArgs.end()) {
      Slot s = Slot::tensor(func.getArgument(it->second));
      // A buffer written in place stays the argument only until then.
      s.argIndex = it->second;
      slot(n->output(0)) = s;
      return success();
    }
  }
  slot(n->output(0)) = Slot::constant(attr);
  return success();
}

LogicalResult Importer::evaluate(jit::Node *n) {
  try {
    jit::Operation op = n->getOperation();
    jit::Stack stack;
    // A model traced on the meta device (shapes only) names that device
    // in its factory calls; constants fold on the CPU, where they have
    // values.
    for (jit::Value *v : n->inputs()) {
      const c10::IValue &iv = slot(v).iv;
      if (iv.isDevice() && iv.toDevice().is_meta())
        stack.push_back(c10::IValue(c10::Device(c10::kCPU)));
      else
        stack.push_back(iv);
    }
    op(stack);
    if (stack.size() != n->outputs().size()) {
      error(n) << "constant evaluation returned " << stack.size()
               << " values for " << n->outputs().size() << " outputs";
      return failure();
    }
    for (size_t i = 0; i < n->outputs().size(); ++i)
      setConst(n, i, stack[i]);
  } catch (const c10::Error &e) {
    error(n) << "evaluating this constant expression failed: "
             << firstLine(e.what_without_backtrace());
    return failure();
  } catch (const std::exception &e) {
    error(n) << "evaluating this constant expression failed: "
             << firstLine(e.what());
    return failure();
  }
  return success();
}

LogicalResult Importer::importBlock(jit::Block *block) {
  bool ok = true;
  for (jit::Node *n : block->nodes())
    if (failed(importNode(n)))
      ok = false;
  return success(ok);
}

LogicalResult Importer::importNode(jit::Node *n) {
  std::string kind = n->kind().toQualString();
  curLoc = locOf(n);
  curKind = kind;
  auto poisonOutputs = [&] {
    for (jit::Value *o : n->outputs())
      slot(o) = Slot::poison();
  };
  for (jit::Value *v : n->inputs()) {
    Slot &s = slot(v);
    if (s.kind == Slot::Kind::Poison) {
      // Downstream of an error, still list every op kind we cannot import.
      if (n->kind().is_aten() && !converters().count(kind))
        (void)unsupported(n);
      poisonOutputs();
      return success(); // the cause was reported already
    }
  }

  if (n->kind() == c10::prim::Constant) {
    c10::IValue value = *jit::toIValue(n->output(0));
    // The tracer records a Python number an op met as a rank-0 tensor
    // constant of its type (double or long), and the archive keeps no mark
    // of it: as such it takes part in type promotion the way the number
    // did in the traced code (`loss = 0.0; loss = loss + mse` stays
    // float32), not as a float64 tensor would.
    if (value.isTensor()) {
      const at::Tensor &t = value.toTensor();
      if (t.dim() == 0 && !t.requires_grad() &&
          (t.scalar_type() == at::kDouble || t.scalar_type() == at::kLong) &&
          !t.unsafeGetTensorImpl()->is_wrapped_number()) {
        at::Tensor number = t.clone();
        number.unsafeGetTensorImpl()->set_wrapped_number(true);
        value = number;
      }
    }
    setConst(n, 0, value);
    return success();
  }
  if (n->kind() == c10::prim::GetAttr) {
    if (succeeded(getAttr(n)))
      return success();
    poisonOutputs();
    return failure();
  }
  if (n->kind() == c10::prim::If) {
    Slot &cond = in(n, 0);
    if (!cond.isConst()) {
      error(n) << "control flow that depends on tensor data is not "
                  "supported; trace the model or make the condition constant";
      poisonOutputs();
      return failure();
    }
    jit::Block *taken = n->blocks()[cond.iv.toBool() ? 0 : 1];
    LogicalResult r = importBlock(taken);
    for (size_t i = 0; i < n->outputs().size(); ++i)
      slot(n->output(i)) = slot(taken->outputs()[i]);
    return r;
  }
  if (n->kind() == c10::prim::RaiseException) {
    error(n) << "the model raises an exception on this path";
    return failure();
  }

  bool allConst = llvm::all_of(
      n->inputs(), [&](jit::Value *v) { return slot(v).isConst(); });
  // Structural nodes over non-constant values.
  if (!allConst) {
    if (n->kind() == c10::prim::ListConstruct ||
        n->kind() == c10::prim::TupleConstruct) {
      std::vector<Slot> elems;
      for (jit::Value *v : n->inputs())
        elems.push_back(slot(v));
      slot(n->output(0)) = Slot::list(std::move(elems));
      return success();
    }
    if (n->kind() == c10::prim::ListUnpack ||
        n->kind() == c10::prim::TupleUnpack) {
      Slot &l = in(n, 0);
      if (l.kind != Slot::Kind::List || l.elems.size() != n->outputs().size()) {
        error(n) << "cannot unpack this value";
        poisonOutputs();
        return failure();
      }
      for (size_t i = 0; i < n->outputs().size(); ++i)
        slot(n->output(i)) = l.elems[i];
      return success();
    }
    if ((n->kind() == c10::prim::TupleIndex ||
         n->kind() == c10::aten::__getitem__) &&
        in(n, 0).kind == Slot::Kind::List && in(n, 1).isConst()) {
      Slot &l = in(n, 0);
      int64_t i = in(n, 1).iv.toInt();
      if (i < 0)
        i += l.elems.size();
      if (i < 0 || i >= (int64_t)l.elems.size()) {
        error(n) << "index " << i << " out of range";
        poisonOutputs();
        return failure();
      }
      slot(n->output(0)) = l.elems[i];
      return success();
    }
  }

  if (allConst) {
    // Containers of constants are built here: their generic operators need
    // the node's static types, which a loaded graph does not carry.
    if (n->kind() == c10::prim::ListConstruct) {
      auto listType = n->output(0)->type()->cast<c10::ListType>();
      c10::impl::GenericList list(listType ? listType->getElementType()
                                           : c10::AnyType::get());
      for (jit::Value *v : n->inputs())
        list.push_back(slot(v).iv);
      setConst(n, 0, c10::IValue(list));
      return success();
    }
    if (n->kind() == c10::prim::TupleConstruct) {
      std::vector<c10::IValue> elems;
      for (jit::Value *v : n->inputs())
        elems.push_back(slot(v).iv);
      setConst(n, 0, c10::ivalue::Tuple::create(std::move(elems)));
      return success();
    }
    if (n->kind() == c10::prim::ListUnpack ||
        n->kind() == c10::prim::TupleUnpack) {
      const c10::IValue &v = in(n, 0).iv;
      std::vector<c10::IValue> elems =
          v.isTuple() ? v.toTupleRef().elements().vec() : v.toListRef().vec();
      if (elems.size() != n->outputs().size()) {
        error(n) << "cannot unpack " << elems.size() << " values into "
                 << n->outputs().size();
        poisonOutputs();
        return failure();
      }
      for (size_t i = 0; i < elems.size(); ++i)
        setConst(n, i, elems[i]);
      return success();
    }
    if (n->kind() == c10::prim::TupleIndex) {
      setConst(n, 0, in(n, 0).iv.toTupleRef().elements()[in(n, 1).iv.toInt()]);
      return success();
    }
    if (n->kind() == c10::prim::NumToTensor) {
      at::Tensor t = at::scalar_to_tensor(in(n, 0).iv.toScalar());
      t.unsafeGetTensorImpl()->set_wrapped_number(true);
      setConst(n, 0, t);
      return success();
    }
  }

  // Everything computable from constants folds, as PyTorch computes it.
  if (allConst && !isRandom(kind) && n->maybeOperator()) {
    if (kind != "aten::dropout" && kind != "aten::dropout_") {
      if (succeeded(evaluate(n)))
        return success();
      poisonOutputs();
      return failure();
    }
  }

  const auto &table = converters();
  auto it = table.find(kind);
  if (it == table.end()) {
    (void)unsupported(n);
    poisonOutputs();
    return failure();
  }
  // In-place ops become value ops; the written operand takes the new value.
  bool inPlace = isInPlaceKind(kind);
  if (inPlace && in(n, 0).isView) {
    error(n) << "in-place update of a view of another tensor is not "
                "supported; write it out of place";
    poisonOutputs();
    return failure();
  }
  size_t before = unsupportedOps.size();
  if (failed(it->second(*this, n))) {
    (void)before;
    poisonOutputs();
    return failure();
  }
  if (inPlace && n->outputs().size() >= 1 && slot(n->output(0)).isTensor()) {
    recordBufferUpdate(n->input(0), slot(n->output(0)).value);
    Slot updated = slot(n->output(0));
    updated.argIndex = -1;
    slot(n->input(0)) = updated;
  }
  return success();
}

OwningOpRef<ModuleOp> Importer::run(StringRef bytes) {
  if (failed(load(bytes)) || failed(collectParameters()))
    return nullptr;
  SmallVector<Type> inputTypes;
  SmallVector<std::string> inputNames;
  if (failed(resolveInputTypes(inputTypes, inputNames)))
    return nullptr;

  Location fileLoc = FileLineColLoc::get(ctx, options.archiveName, 0, 0);
  OwningOpRef<ModuleOp> moduleOp = ModuleOp::create(fileLoc);
  b.setInsertionPointToEnd(moduleOp->getBody());
  SmallVector<Type> argTypes;
  for (const at::Tensor &t : paramTensors) {
    SmallVector<int64_t> shape(t.sizes().begin(), t.sizes().end());
    argTypes.push_back(
        RankedTensorType::get(shape, *elementTypeOf(ctx, t.scalar_type())));
  }
  llvm::append_range(argTypes, inputTypes);
  func = b.create<func::FuncOp>(fileLoc, "forward",
                                b.getFunctionType(argTypes, {}));
  for (auto [i, p] : llvm::enumerate(paramNames))
    func.setArgAttr(i, p.second ? "merak.buffer" : "merak.param",
                    b.getStringAttr(p.first));
  for (auto [i, name] : llvm::enumerate(inputNames))
    func.setArgAttr(paramNames.size() + i, "merak.input",
                    b.getStringAttr(name));
  Block *entry = func.addEntryBlock();
  b.setInsertionPointToEnd(entry);

  // Graph input 0 is the module itself.
  Slot self;
  self.kind = Slot::Kind::Module;
  self.iv = module._ivalue();
  slot(graph->inputs()[0]) = self;
  for (size_t i = 1; i < graph->inputs().size(); ++i)
    slot(graph->inputs()[i]) =
        Slot::tensor(func.getArgument(paramNames.size() + i - 1));

  bool ok = succeeded(importBlock(graph->block()));
  if (!unsupportedOps.empty()) {
    auto diag = emitError(fileLoc);
    diag << "the model uses " << unsupportedOps.size()
         << " unsupported op kind(s):";
    for (auto &[kind, locs] : unsupportedOps)
      diag << "\n  " << kind << " at " << llvm::join(locs, ", ");
    return nullptr;
  }
  if (!ok)
    return nullptr;

  // Results: the graph's outputs with tuples flattened, then buffer updates.
  SmallVector<Value> results;
  std::function<LogicalResult(const Slot &)> flatten =
      [&](const Slot &s) -> LogicalResult {
    switch (s.kind) {
    case Slot::Kind::Tensor:
      results.push_back(s.value);
      return success();
    case Slot::Kind::List:
      for (const Slot &e : s.elems)
        if (failed(flatten(e)))
          return failure();
      return success();
    case Slot::Kind::Const:
      if (s.iv.isTuple() || s.iv.isList()) {
        for (const c10::IValue &e : s.iv.isTuple()
                                        ? s.iv.toTupleRef().elements().vec()
                                        : s.iv.toListRef().vec())
          if (failed(flatten(Slot::constant(e))))
            return failure();
        return success();
      }
      if (Value v = materialize(s.iv, fileLoc, {})) {
        results.push_back(v);
        return success();
      }
      [[fallthrough]];
    default:
      emitError(fileLoc) << "the model returns a value that is not a tensor";
      return failure();
    }
  };
  for (jit::Value *out : graph->outputs())
    if (failed(flatten(slot(out))))
      return nullptr;
  size_t numOutputs = results.size();
  for (auto &[arg, value] : bufferUpdates)
    results.push_back(value);
  b.setInsertionPointToEnd(entry);
  b.create<func::ReturnOp>(fileLoc, results);
  func.setType(b.getFunctionType(argTypes, ValueRange(results).getTypes()));
  size_t k = numOutputs;
  for (auto &[arg, value] : bufferUpdates)
    func.setResultAttr(k++, "merak.buffer_update",
                       b.getStringAttr(paramNames[arg].first));

  // Constants folded into others (or never used) leave dead ops behind.
  SmallVector<Operation *> dead;
  func.walk([&](Operation *op) {
    if (isOpTriviallyDead(op))
      dead.push_back(op);
  });
  for (Operation *op : llvm::reverse(dead))
    if (isOpTriviallyDead(op))
      op->erase();

  if (failed(verify(*moduleOp)))
    return nullptr;
  return moduleOp;
}

const Importer::ConverterTable &Importer::converters() {
  static const ConverterTable *table = [] {
    auto *t = new ConverterTable();
    populateElementwiseConverters(*t);
    populateTensorConverters(*t);
    populateLinearAlgebraConverters(*t);
    populateNormalizationConverters(*t);
    populateIndexingConverters(*t);
    populateShapeConverters(*t);
    populateReductionConverters(*t);
    populateConvolutionConverters(*t);
    populateInterpolationConverters(*t);
    populateLossConverters(*t);
    return t;
  }();
  return *table;
}

} // namespace merak::torchscript

namespace merak {

mlir::OwningOpRef<mlir::ModuleOp>
importTorchScript(llvm::StringRef bytes, mlir::MLIRContext *ctx,
                  const TorchScriptImportOptions &options) {
  ctx->loadDialect<MerakDialect, mlir::func::FuncDialect>();
  torchscript::Importer importer(ctx, options);
  // LLVM's tools install a new-handler that aborts when an allocation
  // fails; LibTorch's unpickler allocates what a damaged length field says
  // (15.6 GB for one 534-byte pickle the fuzzer made). While the importer
  // runs, a failed allocation throws `bad_alloc` instead, which the
  // handlers below turn into an error.
  struct ThrowingNewHandler {
    std::new_handler previous = std::set_new_handler(nullptr);
    ~ThrowingNewHandler() { std::set_new_handler(previous); }
  } throwing;
  // Every LibTorch call the importer makes on its own is guarded where it
  // is made; this is the net for the rest (a damaged archive can throw from
  // deep inside LibTorch), so that no input aborts the process.
  try {
    return importer.run(bytes);
  } catch (const std::exception &e) {
    mlir::emitError(mlir::FileLineColLoc::get(ctx, options.archiveName, 0, 0))
        << "reading the TorchScript archive failed inside LibTorch: "
        << torchscript::firstLine(e.what());
  } catch (...) {
    mlir::emitError(mlir::FileLineColLoc::get(ctx, options.archiveName, 0, 0))
        << "reading the TorchScript archive failed inside LibTorch";
  }
  return nullptr;
}

} // namespace merak
