//===- Importer.cpp - TorchScript to merak dialect ------------------------===//
//
// Walks the inlined graph of a TorchScript module's `forward` and emits
// `func.func @forward` in the merak dialect. Every jit value maps to a
// `Slot`: a tensor in the IR, a compile-time constant, a list or tuple of
// slots, or a module object. Nodes whose inputs are all constants are
// evaluated by LibTorch itself (so masks, position ids, shape arithmetic and
// in-place writes into constant tensors fold exactly as PyTorch computes
// them); the others convert to merak ops whose result types are inferred.
//
//===----------------------------------------------------------------------===//

#include "merak/Frontend/TorchScript/Importer.h"
#include "merak/Dialect/Merak/IR/MerakOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/Verifier.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"
#include "mlir/Transforms/RegionUtils.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/StringExtras.h"

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>
#include <torch/csrc/jit/passes/inliner.h>
#include <torch/csrc/jit/runtime/operator.h>
#include <torch/script.h>

#include <functional>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <unordered_map>

using namespace mlir;
namespace jit = torch::jit;

namespace merak {
namespace {

/// What a jit value is known to be during import.
struct Slot {
  enum class Kind { Undef, Tensor, Const, List, Module, Poison };
  Kind kind = Kind::Undef;
  Value value;             // Tensor
  c10::IValue iv;          // Const, Module
  std::vector<Slot> elems; // List (lists and tuples)
  std::string path;        // Module: qualified name prefix
  int argIndex = -1;       // Tensor that is still a function argument
  bool isView = false;     // Tensor that views another non-constant tensor

  static Slot tensor(Value v, bool view = false) {
    Slot s;
    s.kind = Kind::Tensor;
    s.value = v;
    s.isView = view;
    return s;
  }
  static Slot constant(c10::IValue v) {
    Slot s;
    s.kind = Kind::Const;
    s.iv = std::move(v);
    return s;
  }
  static Slot list(std::vector<Slot> elems) {
    Slot s;
    s.kind = Kind::List;
    s.elems = std::move(elems);
    return s;
  }
  static Slot poison() {
    Slot s;
    s.kind = Kind::Poison;
    return s;
  }
  bool isTensor() const { return kind == Kind::Tensor; }
  bool isConst() const { return kind == Kind::Const; }
};

std::string firstLine(const std::string &s) {
  std::string line = s.substr(0, s.find('\n'));
  // c10 errors may end the first line with a source location in brackets.
  return line;
}

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

class Importer {
public:
  Importer(MLIRContext *ctx, const TorchScriptImportOptions &options)
      : ctx(ctx), b(ctx), options(options) {}

  OwningOpRef<ModuleOp> run(StringRef bytes);

private:
  using Converter = std::function<LogicalResult(Importer &, jit::Node *)>;
  static const std::unordered_map<std::string, Converter> &converters();

  // Module loading and the function signature.
  LogicalResult load(StringRef bytes);
  LogicalResult collectParameters();
  LogicalResult resolveInputTypes(SmallVectorImpl<Type> &types,
                                  SmallVectorImpl<std::string> &names);

  // The walk.
  LogicalResult importBlock(jit::Block *block);
  LogicalResult importNode(jit::Node *n);
  LogicalResult evaluate(jit::Node *n);
  LogicalResult getAttr(jit::Node *n);

  // Locations.
  Location locOf(jit::Node *n);

  // Access to inputs.
  Slot &slot(jit::Value *v) { return slots[v]; }
  Slot &in(jit::Node *n, size_t i) { return slots[n->input(i)]; }
  bool isNone(jit::Node *n, size_t i) {
    Slot &s = in(n, i);
    return s.isConst() && s.iv.isNone();
  }
  FailureOr<c10::IValue> constArg(jit::Node *n, size_t i, StringRef what);
  FailureOr<int64_t> intArg(jit::Node *n, size_t i, StringRef what);
  FailureOr<double> floatArg(jit::Node *n, size_t i, StringRef what);
  FailureOr<bool> boolArg(jit::Node *n, size_t i, StringRef what);
  FailureOr<std::vector<int64_t>> intsArg(jit::Node *n, size_t i,
                                          StringRef what);
  /// The tensor value of input `i`; constants (tensors or numbers) are
  /// materialized, numbers with element type `scalarType` when given.
  Value tensorArg(jit::Node *n, size_t i, Type scalarType = {});
  FailureOr<std::vector<Value>> tensorListArg(jit::Node *n, size_t i);
  Value materialize(const c10::IValue &iv, Location loc, Type scalarType);
  Value constantTensor(const at::Tensor &t, Location loc);

  // Result binding.
  void setOut(jit::Node *n, size_t i, Value v, bool view = false) {
    slots[n->output(i)] = Slot::tensor(v, view);
  }
  /// Binds output 0 of `n` to `v`; a null `v` (a failed build, already
  /// reported) is a failure.
  LogicalResult bind(jit::Node *n, Value v, bool view = false) {
    if (!v)
      return failure();
    setOut(n, 0, v, view);
    return success();
  }
  void setConst(jit::Node *n, size_t i, c10::IValue v) {
    slots[n->output(i)] = Slot::constant(std::move(v));
  }

  // Diagnostics.
  InFlightDiagnostic error(jit::Node *n) {
    return emitError(locOf(n)) << n->kind().toQualString() << ": ";
  }
  LogicalResult unsupported(jit::Node *n, StringRef variant = "") {
    std::string kind = n->kind().toQualString();
    if (!variant.empty())
      kind += " (" + variant.str() + ")";
    unsupportedOps[kind].insert(locString(locOf(n)));
    return failure();
  }
  static std::string locString(Location loc) {
    if (auto f = dyn_cast<FileLineColLoc>(loc))
      return (f.getFilename().str() + ":" + std::to_string(f.getLine()));
    return "unknown location";
  }

public:
  // Op construction with inferred result types; a failed shape rule is
  // reported at the node's Python line and yields a null value.
  template <typename OpTy, typename... Args> Operation *make(Args &&...args) {
    constexpr unsigned numResults = std::is_same_v<OpTy, BatchNormOp> ? 3 : 1;
    SmallVector<Type> placeholders(numResults, b.getNoneType());
    auto op = b.create<OpTy>(curLoc, TypeRange(placeholders),
                             std::forward<Args>(args)...);
    SmallVector<Type> types;
    std::string captured;
    LogicalResult inferred = failure();
    {
      // The shape rule's message is re-emitted with the aten op's name.
      ScopedDiagnosticHandler handler(ctx, [&](Diagnostic &d) {
        captured = d.str();
        return success();
      });
      inferred = OpTy::inferReturnTypes(
          ctx, curLoc, op->getOperands(), op->getAttrDictionary(),
          op->getPropertiesStorage(), op->getRegions(), types);
    }
    if (failed(inferred)) {
      op->erase();
      emitError(curLoc) << curKind << ": " << captured;
      return nullptr;
    }
    for (auto [r, t] : llvm::zip(op->getResults(), types))
      r.setType(t);
    return op;
  }
  template <typename OpTy, typename... Args> Value make1(Args &&...args) {
    Operation *op = make<OpTy>(std::forward<Args>(args)...);
    return op ? op->getResult(0) : Value();
  }

  // Helpers shared by converters.
  Value reshape(Value v, ArrayRef<int64_t> shape) {
    if (llvm::cast<RankedTensorType>(v.getType()).getShape() == shape)
      return v;
    return make1<ReshapeOp>(v, b.getDenseI64ArrayAttr(shape));
  }
  Value cast(Value v, Type elem) {
    auto t = llvm::cast<RankedTensorType>(v.getType());
    if (t.getElementType() == elem)
      return v;
    return b.create<CastOp>(curLoc, RankedTensorType::get(t.getShape(), elem),
                            v);
  }
  Value expandTo(Value v, ArrayRef<int64_t> shape) {
    if (llvm::cast<RankedTensorType>(v.getType()).getShape() == shape)
      return v;
    return make1<ExpandOp>(v, b.getDenseI64ArrayAttr(shape));
  }
  static RankedTensorType typeOf(Value v) {
    return llvm::cast<RankedTensorType>(v.getType());
  }
  FailureOr<Type> promotedType(jit::Node *n, ArrayRef<size_t> idx);
  LogicalResult binary(jit::Node *n,
                       const std::function<Value(Value, Value)> &build,
                       bool floatResult = false, bool swap = false);
  LogicalResult compare(jit::Node *n, ComparePredicate pred);
  template <typename OpTy> LogicalResult unary(jit::Node *n) {
    Value x = tensorArg(n, 0);
    if (!x)
      return failure();
    Value r = make1<OpTy>(x);
    if (!r)
      return failure();
    setOut(n, 0, r);
    return success();
  }
  template <typename OpTy> LogicalResult floatUnary(jit::Node *n) {
    Value x = tensorArg(n, 0);
    if (!x)
      return failure();
    if (!isa<FloatType>(typeOf(x).getElementType()))
      x = cast(x, b.getF32Type());
    Value r = make1<OpTy>(x);
    if (!r)
      return failure();
    setOut(n, 0, r);
    return success();
  }
  LogicalResult reduce(jit::Node *n, StringRef which);
  LogicalResult reshapeLike(jit::Node *n, std::vector<int64_t> shape);
  FailureOr<int64_t> dimArg(jit::Node *n, size_t i, int64_t rank);
  void recordBufferUpdate(jit::Value *target, Value newValue);

  MLIRContext *ctx;
  OpBuilder b;
  const TorchScriptImportOptions &options;
  Location curLoc = UnknownLoc::get(ctx);
  std::string curKind;

  torch::jit::Module module;
  std::string inputsJson;
  std::shared_ptr<jit::Graph> graph;
  func::FuncOp func;

  std::unordered_map<jit::Value *, Slot> slots;
  std::unordered_map<jit::Value *, std::pair<Value, int64_t>> constCache;
  // Parameters and buffers: tensor identity -> argument index.
  std::unordered_map<const c10::TensorImpl *, int> paramArgs;
  std::vector<std::pair<std::string, bool>> paramNames; // name, isBuffer
  std::vector<at::Tensor> paramTensors;
  std::map<int, Value> bufferUpdates;
  std::map<std::string, std::set<std::string>> unsupportedOps;
  std::map<std::pair<const void *, size_t>, Location> locCache;
};

//===----------------------------------------------------------------------===//
// Loading and signature
//===----------------------------------------------------------------------===//

LogicalResult Importer::load(StringRef bytes) {
  Location fileLoc = FileLineColLoc::get(ctx, options.archiveName, 0, 0);
  try {
    std::istringstream stream(std::string(bytes.data(), bytes.size()));
    jit::ExtraFilesMap extra{{"merak/inputs.json", ""}};
    module = jit::load(stream, c10::Device(c10::kCPU), extra);
    inputsJson = extra["merak/inputs.json"];
  } catch (const c10::Error &e) {
    emitError(fileLoc) << "not a readable TorchScript archive: "
                       << firstLine(e.what_without_backtrace());
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
        if (failed(t)) {
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
  for (const std::string &spec : options.inputShapes) {
    auto [name, shape] = StringRef(spec).split('=');
    auto t = parseTensorSpec(ctx, shape.trim());
    if (shape.empty() || failed(t)) {
      emitError(fileLoc) << "bad --merak-input-shapes entry '" << spec
                         << "': expected NAME=DIMxDIMx...xTYPE, e.g. "
                            "idx=2x16xi64";
      return failure();
    }
    known[name.trim().str()] = *t;
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
  static const std::regex frame("^(.*)\\(([0-9]+)\\): [^ ]+$");
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

Value Importer::constantTensor(const at::Tensor &t0, Location loc) {
  at::Tensor t = t0.detach().contiguous().cpu();
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
    for (jit::Value *v : n->inputs())
      stack.push_back(slot(v).iv);
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
    setConst(n, 0, *jit::toIValue(n->output(0)));
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

} // namespace

//===----------------------------------------------------------------------===//
// Converters, one per aten op kind
//===----------------------------------------------------------------------===//

#define CONVERT(KIND)                                                          \
  table[KIND] = [](Importer & im, jit::Node * n) -> LogicalResult
#define TRY(X)                                                                 \
  if (failed(X))                                                               \
    return failure();

namespace {

const std::unordered_map<std::string, Importer::Converter> &
Importer::converters() {
  static const auto *tablePtr = [] {
    auto *t = new std::unordered_map<std::string, Converter>();
    auto &table = *t;

    // Elementwise binary with broadcasting and type promotion.
    auto addSub = [](bool sub, bool reverse) {
      return [sub, reverse](Importer &im, jit::Node *n) -> LogicalResult {
        double alpha = 1.0;
        if (n->inputs().size() >= 3) {
          auto a = im.floatArg(n, 2, "alpha");
          TRY(a);
          alpha = *a;
        }
        return im.binary(n, [&](Value l, Value r) -> Value {
          if (alpha != 1.0) {
            Value s = im.materialize(c10::IValue(alpha), im.curLoc,
                                     typeOf(reverse ? l : r).getElementType());
            // alpha scales `other` (the second aten operand).
            if (reverse)
              l = im.make1<MulOp>(l, s);
            else
              r = im.make1<MulOp>(r, s);
            if (!l || !r)
              return {};
          }
          if (!sub)
            return im.make1<AddOp>(l, r);
          return reverse ? im.make1<SubOp>(r, l) : im.make1<SubOp>(l, r);
        });
      };
    };
    table["aten::add"] = table["aten::add_"] = addSub(false, false);
    table["aten::sub"] = table["aten::sub_"] = addSub(true, false);
    table["aten::rsub"] = addSub(true, true);
#define BINARY(KIND, OP, FLOAT)                                                \
  CONVERT(KIND) {                                                              \
    return im.binary(                                                          \
        n, [&](Value l, Value r) { return im.make1<OP>(l, r); }, FLOAT);       \
  };
    BINARY("aten::mul", MulOp, false)
    BINARY("aten::mul_", MulOp, false)
    BINARY("aten::pow", PowOp, false)
    BINARY("aten::remainder", RemainderOp, false)
    BINARY("aten::floor_divide", FloorDivideOp, false)
    BINARY("aten::minimum", MinimumOp, false)
    BINARY("aten::maximum", MaximumOp, false)
    BINARY("aten::logical_and", AndOp, false)
    BINARY("aten::logical_or", OrOp, false)
    BINARY("aten::__and__", AndOp, false)
    BINARY("aten::__or__", OrOp, false)
    BINARY("aten::bitwise_and", AndOp, false)
    BINARY("aten::bitwise_or", OrOp, false)
#undef BINARY
    auto div = [](Importer &im, jit::Node *n) -> LogicalResult {
      std::string mode;
      if (n->inputs().size() >= 3 && !im.isNone(n, 2)) {
        auto m = im.constArg(n, 2, "rounding_mode");
        TRY(m);
        mode = m->toStringRef();
      }
      if (mode == "floor")
        return im.binary(
            n, [&](Value l, Value r) { return im.make1<FloorDivideOp>(l, r); });
      if (!mode.empty())
        return im.unsupported(n, "rounding_mode=" + mode);
      return im.binary(
          n, [&](Value l, Value r) { return im.make1<DivOp>(l, r); },
          /*floatResult=*/true);
    };
    table["aten::div"] = table["aten::div_"] = div;
    table["aten::true_divide"] = div;
    auto minMax = [](bool isMax) {
      return [isMax](Importer &im, jit::Node *n) -> LogicalResult {
        if (n->inputs().size() == 2 && im.in(n, 1).kind != Slot::Kind::Const)
          return im.binary(n, [&](Value l, Value r) {
            return isMax ? im.make1<MaximumOp>(l, r)
                         : im.make1<MinimumOp>(l, r);
          });
        if (n->inputs().size() == 2 && im.in(n, 1).iv.isTensor())
          return im.binary(n, [&](Value l, Value r) {
            return isMax ? im.make1<MaximumOp>(l, r)
                         : im.make1<MinimumOp>(l, r);
          });
        if (!isMax)
          return im.unsupported(n, "reduction");
        if (n->outputs().size() == 2 && n->output(1)->hasUses())
          return im.unsupported(n, "with indices");
        return im.reduce(n, "max");
      };
    };
    table["aten::max"] = minMax(true);
    table["aten::min"] = minMax(false);
    CONVERT("aten::amax") { return im.reduce(n, "max"); };

    auto cmp = [](ComparePredicate p) {
      return [p](Importer &im, jit::Node *n) { return im.compare(n, p); };
    };
    table["aten::eq"] = cmp(ComparePredicate::eq);
    table["aten::ne"] = cmp(ComparePredicate::ne);
    table["aten::lt"] = cmp(ComparePredicate::lt);
    table["aten::le"] = cmp(ComparePredicate::le);
    table["aten::gt"] = cmp(ComparePredicate::gt);
    table["aten::ge"] = cmp(ComparePredicate::ge);

    // Elementwise unary.
    table["aten::neg"] = [](Importer &im, jit::Node *n) {
      return im.unary<NegOp>(n);
    };
    table["aten::abs"] = [](Importer &im, jit::Node *n) {
      return im.unary<AbsOp>(n);
    };
    table["aten::relu"] = table["aten::relu_"] =
        [](Importer &im, jit::Node *n) { return im.unary<ReluOp>(n); };
#define FLOAT_UNARY(KIND, OP)                                                  \
  table[KIND] = [](Importer &im, jit::Node *n) { return im.floatUnary<OP>(n); };
    FLOAT_UNARY("aten::exp", ExpOp)
    FLOAT_UNARY("aten::log", LogOp)
    FLOAT_UNARY("aten::sin", SinOp)
    FLOAT_UNARY("aten::cos", CosOp)
    FLOAT_UNARY("aten::sqrt", SqrtOp)
    FLOAT_UNARY("aten::rsqrt", RsqrtOp)
    FLOAT_UNARY("aten::reciprocal", ReciprocalOp)
    FLOAT_UNARY("aten::erf", ErfOp)
    FLOAT_UNARY("aten::tanh", TanhOp)
    FLOAT_UNARY("aten::tanh_", TanhOp)
    FLOAT_UNARY("aten::sigmoid", SigmoidOp)
    FLOAT_UNARY("aten::sigmoid_", SigmoidOp)
    FLOAT_UNARY("aten::silu", SiluOp)
    FLOAT_UNARY("aten::silu_", SiluOp)
#undef FLOAT_UNARY
    auto logicalNot = [](Importer &im, jit::Node *n) -> LogicalResult {
      Value x = im.tensorArg(n, 0);
      if (!x)
        return failure();
      if (!typeOf(x).getElementType().isInteger(1))
        return im.unsupported(n, "non-boolean operand");
      return im.unary<NotOp>(n);
    };
    table["aten::logical_not"] = table["aten::bitwise_not"] = logicalNot;
    CONVERT("aten::square") {
      Value x = im.tensorArg(n, 0);
      if (!x)
        return failure();
      Value v = im.make1<MulOp>(x, x);
      return im.bind(n, v);
    };
    CONVERT("aten::gelu") {
      Value x = im.tensorArg(n, 0);
      if (!x)
        return failure();
      auto approx = GeluApproximation::none;
      if (n->inputs().size() >= 2) {
        auto a = im.constArg(n, 1, "approximate");
        TRY(a);
        if (a->toStringRef() == "tanh")
          approx = GeluApproximation::tanh;
      }
      Value v = im.make1<GeluOp>(x, GeluApproximationAttr::get(im.ctx, approx));
      return im.bind(n, v);
    };
    auto clamp = [](int which) { // 0 clamp, 1 clamp_min, 2 clamp_max
      return [which](Importer &im, jit::Node *n) -> LogicalResult {
        Value x = im.tensorArg(n, 0);
        if (!x)
          return failure();
        FloatAttr lo, hi;
        auto bound = [&](size_t i, FloatAttr &out) -> LogicalResult {
          if (im.isNone(n, i))
            return success();
          if (!im.in(n, i).isConst() || im.in(n, i).iv.isTensor())
            return im.unsupported(n, "tensor bounds");
          auto v = im.floatArg(n, i, "bound");
          TRY(v);
          out = im.b.getF64FloatAttr(*v);
          return success();
        };
        if (which == 0) {
          TRY(bound(1, lo));
          TRY(bound(2, hi));
        } else {
          TRY(bound(1, which == 1 ? lo : hi));
        }
        Value v = im.make1<ClampOp>(x, lo, hi);
        return im.bind(n, v);
      };
    };
    table["aten::clamp"] = table["aten::clamp_"] = table["aten::clip"] =
        clamp(0);
    auto hardtanh = [](double lo, double hi, bool fromArgs) {
      return [=](Importer &im, jit::Node *n) -> LogicalResult {
        Value x = im.tensorArg(n, 0);
        if (!x)
          return failure();
        double l = lo, h = hi;
        if (fromArgs && n->inputs().size() >= 3) {
          auto a = im.floatArg(n, 1, "min_val");
          TRY(a);
          auto c = im.floatArg(n, 2, "max_val");
          TRY(c);
          l = *a;
          h = *c;
        }
        Value v = im.make1<ClampOp>(x, im.b.getF64FloatAttr(l),
                                    im.b.getF64FloatAttr(h));
        return im.bind(n, v);
      };
    };
    table["aten::hardtanh"] = table["aten::hardtanh_"] =
        hardtanh(-1.0, 1.0, true);
    table["aten::relu6"] = table["aten::relu6_"] = hardtanh(0.0, 6.0, false);
    table["aten::clamp_min"] = clamp(1);
    table["aten::clamp_max"] = clamp(2);
    auto triangle = [](bool lower) {
      return [lower](Importer &im, jit::Node *n) -> LogicalResult {
        Value x = im.tensorArg(n, 0);
        if (!x)
          return failure();
        int64_t diag = 0;
        if (n->inputs().size() >= 2) {
          auto d = im.intArg(n, 1, "diagonal");
          TRY(d);
          diag = *d;
        }
        Value v = lower ? im.make1<TrilOp>(x, diag) : im.make1<TriuOp>(x, diag);
        return im.bind(n, v);
      };
    };
    table["aten::tril"] = triangle(true);
    table["aten::triu"] = triangle(false);
    auto dropout = [](Importer &im, jit::Node *n) -> LogicalResult {
      Value x = im.tensorArg(n, 0);
      if (!x)
        return failure();
      auto p = im.floatArg(n, 1, "p");
      TRY(p);
      auto train = im.boolArg(n, 2, "train");
      TRY(train);
      Value v = im.make1<DropoutOp>(x, im.b.getF64FloatAttr(*p),
                                    im.b.getBoolAttr(*train));
      return im.bind(n, v);
    };
    table["aten::dropout"] = table["aten::dropout_"] = dropout;

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
            n, 0,
            c10::IValue(std::vector<int64_t>(shape.begin(), shape.end())));
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
    for (const char *k :
         {"aten::Bool", "aten::Int", "aten::Float", "aten::item",
          "aten::ScalarImplicit", "aten::is_nonzero"})
      table[k] = dataDependent;

    // Linear algebra.
    CONVERT("aten::linear") {
      Value x = im.tensorArg(n, 0), w = im.tensorArg(n, 1);
      if (!x || !w)
        return failure();
      Value bias;
      if (!im.isNone(n, 2) && !(bias = im.tensorArg(n, 2)))
        return failure();
      Value v = im.make1<LinearOp>(x, w, bias);
      return im.bind(n, v);
    };
    auto matmul = [](Importer &im, jit::Node *n) -> LogicalResult {
      Value l = im.tensorArg(n, 0), r = im.tensorArg(n, 1);
      if (!l || !r)
        return failure();
      int64_t lr = typeOf(l).getRank(), rr = typeOf(r).getRank();
      if (lr == 0 || rr == 0) {
        im.error(n) << "matmul of a rank-0 tensor";
        return failure();
      }
      // 1-D operands become matrices and the added dimension is dropped.
      SmallVector<int64_t> outShape;
      if (lr == 1)
        l = im.reshape(l, {1, typeOf(l).getDimSize(0)});
      if (rr == 1)
        r = im.reshape(r, {typeOf(r).getDimSize(0), 1});
      Value v = im.make1<MatmulOp>(l, r);
      if (!v)
        return failure();
      if (lr == 1 || rr == 1) {
        SmallVector<int64_t> shape(typeOf(v).getShape());
        if (rr == 1)
          shape.pop_back();
        if (lr == 1)
          shape.erase(shape.end() - (rr == 1 ? 1 : 2));
        v = im.reshape(v, shape);
      }
      im.setOut(n, 0, v);
      return success();
    };
    table["aten::matmul"] = table["aten::mm"] = table["aten::bmm"] = matmul;
    auto addmm = [](Importer &im, jit::Node *n) -> LogicalResult {
      Value c = im.tensorArg(n, 0), a = im.tensorArg(n, 1),
            bm = im.tensorArg(n, 2);
      if (!c || !a || !bm)
        return failure();
      auto beta = im.floatArg(n, 3, "beta");
      TRY(beta);
      auto alpha = im.floatArg(n, 4, "alpha");
      TRY(alpha);
      Value p = im.make1<MatmulOp>(a, bm);
      if (!p)
        return failure();
      Type elem = typeOf(p).getElementType();
      if (*alpha != 1.0)
        p = im.make1<MulOp>(
            p, im.materialize(c10::IValue(*alpha), im.curLoc, elem));
      if (*beta != 1.0)
        c = im.make1<MulOp>(
            c, im.materialize(c10::IValue(*beta), im.curLoc, elem));
      Value v = *beta == 0.0 ? p : im.make1<AddOp>(c, p);
      return im.bind(n, v);
    };
    table["aten::addmm"] = table["aten::baddbmm"] = addmm;

    // Softmax and normalization.
    auto softmax = [](bool log) {
      return [log](Importer &im, jit::Node *n) -> LogicalResult {
        Value x = im.tensorArg(n, 0);
        if (!x)
          return failure();
        auto d = im.dimArg(n, 1, typeOf(x).getRank());
        TRY(d);
        std::string k = n->kind().toQualString();
        if (k.find("aten::_") == std::string::npos && n->inputs().size() >= 3 &&
            !im.isNone(n, 2)) {
          auto dt = im.intArg(n, 2, "dtype");
          TRY(dt);
          auto e = elementTypeOf(im.ctx, (at::ScalarType)*dt);
          if (failed(e))
            return im.unsupported(n, "dtype");
          x = im.cast(x, *e);
        } else if (!isa<FloatType>(typeOf(x).getElementType())) {
          x = im.cast(x, im.b.getF32Type());
        }
        Value v =
            log ? im.make1<LogSoftmaxOp>(x, *d) : im.make1<SoftmaxOp>(x, *d);
        return im.bind(n, v);
      };
    };
    table["aten::softmax"] = table["aten::_softmax"] = softmax(false);
    table["aten::log_softmax"] = table["aten::_log_softmax"] = softmax(true);
    CONVERT("aten::layer_norm") {
      Value x = im.tensorArg(n, 0);
      if (!x)
        return failure();
      auto shape = im.intsArg(n, 1, "normalized_shape");
      TRY(shape);
      Value w, bias;
      if (!im.isNone(n, 2) && !(w = im.tensorArg(n, 2)))
        return failure();
      if (!im.isNone(n, 3) && !(bias = im.tensorArg(n, 3)))
        return failure();
      auto eps = im.floatArg(n, 4, "eps");
      TRY(eps);
      auto xs = typeOf(x).getShape();
      if (shape->size() > xs.size() ||
          !std::equal(shape->begin(), shape->end(), xs.end() - shape->size())) {
        im.error(n) << "normalized_shape does not match the input's "
                       "trailing dimensions";
        return failure();
      }
      Value v = im.make1<LayerNormOp>(x, w, bias,
                                      im.b.getI64IntegerAttr(shape->size()),
                                      im.b.getF64FloatAttr(*eps));
      return im.bind(n, v);
    };
    CONVERT("aten::rms_norm") {
      Value x = im.tensorArg(n, 0);
      if (!x)
        return failure();
      auto shape = im.intsArg(n, 1, "normalized_shape");
      TRY(shape);
      Value w;
      if (!im.isNone(n, 2) && !(w = im.tensorArg(n, 2)))
        return failure();
      // PyTorch's default eps is the machine epsilon of the input's dtype.
      Type elem = typeOf(x).getElementType();
      double eps = elem.isF64()    ? 2.220446049250313e-16
                   : elem.isF16()  ? 9.765625e-04
                   : elem.isBF16() ? 7.8125e-03
                                   : 1.1920928955078125e-07;
      if (!im.isNone(n, 3)) {
        auto e = im.floatArg(n, 3, "eps");
        TRY(e);
        eps = *e;
      }
      Value v = im.make1<RmsNormOp>(x, w, im.b.getI64IntegerAttr(shape->size()),
                                    im.b.getF64FloatAttr(eps));
      return im.bind(n, v);
    };
    CONVERT("aten::batch_norm") {
      Value x = im.tensorArg(n, 0);
      if (!x)
        return failure();
      if (typeOf(x).getRank() < 2) {
        im.error(n) << "input must have rank >= 2";
        return failure();
      }
      int64_t c = typeOf(x).getDimSize(1);
      auto st = *scalarTypeOf(typeOf(x).getElementType());
      auto param = [&](size_t i, double fill) -> Value {
        if (!im.isNone(n, i))
          return im.tensorArg(n, i);
        return im.constantTensor(
            at::full({c}, fill, at::TensorOptions().dtype(st)), im.curLoc);
      };
      Value w = param(1, 1.0), bias = param(2, 0.0), mean = param(3, 0.0),
            var = param(4, 1.0);
      if (!w || !bias || !mean || !var)
        return failure();
      auto training = im.boolArg(n, 5, "training");
      TRY(training);
      auto momentum = im.floatArg(n, 6, "momentum");
      TRY(momentum);
      auto eps = im.floatArg(n, 7, "eps");
      TRY(eps);
      if (!*training && (im.isNone(n, 3) || im.isNone(n, 4))) {
        im.error(n) << "evaluation mode needs running statistics";
        return failure();
      }
      Operation *op = im.make<BatchNormOp>(
          x, w, bias, mean, var, im.b.getBoolAttr(*training),
          im.b.getF64FloatAttr(*momentum), im.b.getF64FloatAttr(*eps));
      if (!op)
        return failure();
      im.setOut(n, 0, op->getResult(0));
      if (*training) {
        if (!im.isNone(n, 3))
          im.recordBufferUpdate(n->input(3), op->getResult(1));
        if (!im.isNone(n, 4))
          im.recordBufferUpdate(n->input(4), op->getResult(2));
      }
      return success();
    };

    // Embedding and indexing.
    CONVERT("aten::embedding") {
      Value w = im.tensorArg(n, 0), idx = im.tensorArg(n, 1);
      if (!w || !idx)
        return failure();
      IntegerAttr pad;
      if (n->inputs().size() >= 3) {
        auto p = im.intArg(n, 2, "padding_idx");
        TRY(p);
        if (*p >= 0)
          pad = im.b.getI64IntegerAttr(*p);
      }
      Value v = im.make1<EmbeddingOp>(w, idx, pad);
      return im.bind(n, v);
    };
    CONVERT("aten::index_select") {
      Value x = im.tensorArg(n, 0);
      if (!x)
        return failure();
      auto d = im.dimArg(n, 1, typeOf(x).getRank());
      TRY(d);
      Value idx = im.tensorArg(n, 2);
      if (!idx)
        return failure();
      Value v = im.make1<IndexOp>(x, idx, *d);
      return im.bind(n, v);
    };
    CONVERT("aten::index") {
      Value x = im.tensorArg(n, 0);
      if (!x)
        return failure();
      Slot &list = im.in(n, 1);
      std::vector<Slot> entries;
      if (list.kind == Slot::Kind::List)
        entries = list.elems;
      else if (list.isConst() && list.iv.isList())
        for (const c10::IValue &e : list.iv.toListRef())
          entries.push_back(Slot::constant(e));
      int64_t dim = -1;
      Value idx;
      for (size_t i = 0; i < entries.size(); ++i) {
        Slot &e = entries[i];
        if (e.isConst() && e.iv.isNone())
          continue;
        if (dim >= 0)
          return im.unsupported(n, "several index tensors");
        dim = i;
        idx = e.isTensor()      ? e.value
              : e.iv.isTensor() ? im.constantTensor(e.iv.toTensor(), im.curLoc)
                                : Value();
      }
      if (dim < 0 || !idx)
        return im.unsupported(n, "no index tensor");
      if (!isa<IntegerType>(typeOf(idx).getElementType()) ||
          typeOf(idx).getElementType().isInteger(1))
        return im.unsupported(n, "boolean mask index");
      Value v = im.make1<IndexOp>(x, idx, dim);
      return im.bind(n, v);
    };

    // Shape manipulation.
    auto view = [](Importer &im, jit::Node *n) -> LogicalResult {
      auto s = im.intsArg(n, 1, "shape");
      TRY(s);
      return im.reshapeLike(n, *s);
    };
    table["aten::view"] = table["aten::reshape"] =
        table["aten::_reshape_alias"] = view;
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
    auto transpose2d = [permuteTo](Importer &im,
                                   jit::Node *n) -> LogicalResult {
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
        Value v =
            inputs.size() == 1 ? inputs[0] : im.make1<ConcatOp>(inputs, *d);
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
    table["aten::where"] = [where](Importer &im,
                                   jit::Node *n) -> LogicalResult {
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

    // Reductions.
    table["aten::sum"] = [](Importer &im, jit::Node *n) {
      return im.reduce(n, "sum");
    };
    table["aten::mean"] = [](Importer &im, jit::Node *n) {
      return im.reduce(n, "mean");
    };

    // Convolution and pooling.
    auto pair = [](std::vector<int64_t> v) {
      if (v.size() == 1)
        v.push_back(v[0]);
      return v;
    };
    // Pooling windows: kernel_size, stride (empty means the kernel),
    // padding and, for max pooling, dilation, as operands 1 to 4.
    struct Window {
      DenseI64ArrayAttr kernel, stride, padding, dilation;
    };
    auto window = [pair](Importer &im, jit::Node *n,
                         bool withDilation) -> FailureOr<Window> {
      auto kernel = im.intsArg(n, 1, "kernel_size");
      TRY(kernel);
      auto stride = im.intsArg(n, 2, "stride");
      TRY(stride);
      auto padding = im.intsArg(n, 3, "padding");
      TRY(padding);
      if (stride->empty())
        *stride = *kernel;
      Window w{im.b.getDenseI64ArrayAttr(pair(*kernel)),
               im.b.getDenseI64ArrayAttr(pair(*stride)),
               im.b.getDenseI64ArrayAttr(pair(*padding)),
               {}};
      if (withDilation) {
        auto dilation = im.intsArg(n, 4, "dilation");
        TRY(dilation);
        w.dilation = im.b.getDenseI64ArrayAttr(pair(*dilation));
      }
      return w;
    };
    auto conv = [pair](Importer &im, jit::Node *n) -> LogicalResult {
      std::string k = n->kind().toQualString();
      Value x = im.tensorArg(n, 0), w = im.tensorArg(n, 1);
      if (!x || !w)
        return failure();
      if (typeOf(w).getRank() != 4)
        return im.unsupported(n, "not 2-D");
      Value bias;
      if (!im.isNone(n, 2) && !(bias = im.tensorArg(n, 2)))
        return failure();
      auto stride = im.intsArg(n, 3, "stride");
      TRY(stride);
      if (im.in(n, 4).isConst() && im.in(n, 4).iv.isString())
        return im.unsupported(n, "string padding");
      auto padding = im.intsArg(n, 4, "padding");
      TRY(padding);
      auto dilation = im.intsArg(n, 5, "dilation");
      TRY(dilation);
      size_t groupsIdx = 6;
      if (k == "aten::_convolution") {
        auto transposed = im.boolArg(n, 6, "transposed");
        TRY(transposed);
        if (*transposed)
          return im.unsupported(n, "transposed");
        groupsIdx = 8;
      }
      auto groups = im.intArg(n, groupsIdx, "groups");
      TRY(groups);
      Value v = im.make1<Conv2dOp>(x, w, bias,
                                   im.b.getDenseI64ArrayAttr(pair(*stride)),
                                   im.b.getDenseI64ArrayAttr(pair(*padding)),
                                   im.b.getDenseI64ArrayAttr(pair(*dilation)),
                                   im.b.getI64IntegerAttr(*groups));
      return im.bind(n, v);
    };
    table["aten::conv2d"] = table["aten::_convolution"] =
        table["aten::convolution"] = conv;
    table["aten::max_pool2d"] = [window](Importer &im,
                                         jit::Node *n) -> LogicalResult {
      Value x = im.tensorArg(n, 0);
      if (!x)
        return failure();
      auto w = window(im, n, /*withDilation=*/true);
      TRY(w);
      auto ceil = im.boolArg(n, 5, "ceil_mode");
      TRY(ceil);
      Value v = im.make1<MaxPool2dOp>(x, w->kernel, w->stride, w->padding,
                                      w->dilation, im.b.getBoolAttr(*ceil));
      return im.bind(n, v);
    };
    table["aten::avg_pool2d"] = [window](Importer &im,
                                         jit::Node *n) -> LogicalResult {
      Value x = im.tensorArg(n, 0);
      if (!x)
        return failure();
      auto w = window(im, n, /*withDilation=*/false);
      TRY(w);
      auto ceil = im.boolArg(n, 4, "ceil_mode");
      TRY(ceil);
      auto include = im.boolArg(n, 5, "count_include_pad");
      TRY(include);
      if (n->inputs().size() > 6 && !im.isNone(n, 6))
        return im.unsupported(n, "divisor_override");
      Value v = im.make1<AvgPool2dOp>(x, w->kernel, w->stride, w->padding,
                                      im.b.getBoolAttr(*ceil),
                                      im.b.getBoolAttr(*include));
      return im.bind(n, v);
    };
    table["aten::adaptive_avg_pool2d"] = [pair](Importer &im,
                                                jit::Node *n) -> LogicalResult {
      Value x = im.tensorArg(n, 0);
      if (!x)
        return failure();
      auto size = im.intsArg(n, 1, "output_size");
      TRY(size);
      Value v = im.make1<AdaptiveAvgPool2dOp>(
          x, im.b.getDenseI64ArrayAttr(pair(*size)));
      return im.bind(n, v);
    };

    // Losses.
    CONVERT("aten::cross_entropy_loss") {
      Value x = im.tensorArg(n, 0), t = im.tensorArg(n, 1);
      if (!x || !t)
        return failure();
      if (!im.isNone(n, 2))
        return im.unsupported(n, "class weights");
      auto reduction = im.intArg(n, 3, "reduction");
      TRY(reduction);
      auto ignore = im.intArg(n, 4, "ignore_index");
      TRY(ignore);
      double smoothing = 0.0;
      if (n->inputs().size() > 5) {
        auto s = im.floatArg(n, 5, "label_smoothing");
        TRY(s);
        smoothing = *s;
      }
      if (isa<FloatType>(typeOf(t).getElementType()))
        return im.unsupported(n, "probability targets");
      LossReduction red = *reduction == 0   ? LossReduction::none
                          : *reduction == 1 ? LossReduction::mean
                                            : LossReduction::sum;
      Value v = im.make1<CrossEntropyOp>(x, t, im.b.getI64IntegerAttr(*ignore),
                                         LossReductionAttr::get(im.ctx, red),
                                         im.b.getF64FloatAttr(smoothing));
      return im.bind(n, v);
    };
    return t;
  }();
  return *tablePtr;
}

} // namespace

bool isTorchScriptArchive(llvm::StringRef bytes) {
  return bytes.starts_with(llvm::StringRef("PK\x03\x04", 4));
}

OwningOpRef<ModuleOp>
importTorchScript(llvm::StringRef bytes, MLIRContext *ctx,
                  const TorchScriptImportOptions &options) {
  ctx->loadDialect<MerakDialect, func::FuncDialect>();
  Importer importer(ctx, options);
  return importer.run(bytes);
}

} // namespace merak
