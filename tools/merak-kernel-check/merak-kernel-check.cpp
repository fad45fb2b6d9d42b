//===- merak-kernel-check.cpp - each op alone against the CPU backend -----===//
//
// Runs the kernel cases of test/cuda/cases (see its README.md): each case
// is one op on random operands, built as a one-instruction program and run
// by a backend. With --write-expected, the results of the backend (the CPU
// backend: PyTorch's ATen kernels) are written to a safetensors file; a
// case in bf16 or f16 is computed in float32 on the same values and its
// results rounded once, the answer of a kernel that accumulates in fp32
// as PyTorch's CUDA kernels do (ATen's CPU kernels round some intermediates
// to 16 bits: a 3,001-row layer-norm weight gradient summed in bf16 is off
// by half), except the optimizer updates, which torch.optim computes as a
// chain of operations each rounded to the parameter's type. With
// --expected, a backend (the CUDA backend on a GPU)
// runs the same operands and its results are compared with that file,
// element by element, within each case's tolerance. The check prints one
// line per case and `N passed, M failed`.
//
//===----------------------------------------------------------------------===//

#include "merak/Runtime/Backend.h"
#if MERAK_KERNEL_CHECK_HAVE_CUDA
#include "merak/Runtime/CUDA/FusedHost.h"
#endif
#include "merak/Runtime/FlagNames.h"
#include "merak/Runtime/Fusion.h"
#include "merak/Runtime/Program.h"
#include "merak/Runtime/RankProgramFile.h"
#include "merak/Runtime/Registry.h"
#include "merak/Runtime/Safetensors.h"
#include "merak/Runtime/Tensor.h"

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <set>
#include <sstream>
#include <stdlib.h>
#include <string>
#include <vector>

ABSL_FLAG(std::vector<std::string>, cases, {},
          "Case files (JSON lists, test/cuda/cases/*.json), comma-separated");
ABSL_FLAG(std::string, device, "cpu", "Backend that runs the cases");
ABSL_FLAG(std::string, write_expected, "",
          "Write every case's operands and results to this safetensors file");
ABSL_FLAG(std::string, expected, "",
          "Compare the results with this file's (made by --write-expected)");
ABSL_FLAG(std::string, filter, "", "Run only cases whose name contains this");
ABSL_FLAG(int64_t, max_case_bytes, 0,
          "--write-expected: leave out cases whose results take more bytes "
          "than this (0: none); a check skips the cases its file lacks");
ABSL_FLAG(bool, tf32, false, "--device=cuda: TF32 GEMMs");
ABSL_FLAG(std::string, flash_kernels, "registers",
          "--device=cuda: the FlashAttention form's bf16 and f16 kernels "
          "(registers or wmma), as merak-exec's flag");
ABSL_FLAG(int64_t, time, 0,
          "Instead of writing or checking results: run each case's op this "
          "many times more after a first run and print its median time");
ABSL_FLAG(bool, native_low_precision, false,
          "--write-expected: compute bf16 and f16 cases in their own type "
          "(ATen's CPU kernels round intermediates to it) instead of in "
          "float32 on the same values, rounded once at the end");

ABSL_FLAG(std::string, fused_chains, "",
          "Instead of cases: a rank-program file (.mrp) whose step, bound to "
          "rank 0 with its elementwise chains fused, has each distinct "
          "chain's CUDA source compiled by the host's C++ compiler and run "
          "on random operands against the chain's ops on the CPU backend "
          "(needs the CPU and CUDA backends in this build)");

using namespace merak::runtime;
using json = nlohmann::json;

namespace {

absl::StatusOr<OpKind> parseOpKind(const std::string &name) {
  for (size_t k = 0; k < kNumOpKinds; ++k)
    if (name == opKindName(OpKind(k)))
      return OpKind(k);
  return absl::InvalidArgumentError(absl::StrCat("no op '", name, "'"));
}

absl::StatusOr<TensorType> parseType(const std::string &text) {
  std::vector<std::string> parts = absl::StrSplit(text, 'x');
  static const std::map<std::string, DType> dtypes = {
      {"f16", DType::F16}, {"bf16", DType::BF16}, {"f32", DType::F32},
      {"f64", DType::F64}, {"i1", DType::Bool},   {"i32", DType::I32},
      {"i64", DType::I64}};
  auto it = dtypes.find(parts.back());
  if (it == dtypes.end())
    return absl::InvalidArgumentError(
        absl::StrCat("type '", text, "': unknown element type"));
  TensorType type;
  type.dtype = it->second;
  for (size_t i = 0; i + 1 < parts.size(); ++i) {
    int64_t d;
    if (!absl::SimpleAtoi(parts[i], &d) || d < 0)
      return absl::InvalidArgumentError(
          absl::StrCat("type '", text, "': bad dimension '", parts[i], "'"));
    type.shape.push_back(d);
  }
  return type;
}

// Attribute values by the type of the OpAttrs field.
void setAttr(int64_t &field, const json &v) { field = v.get<int64_t>(); }
void setAttr(int &field, const json &v) { field = v.get<int>(); }
void setAttr(double &field, const json &v) { field = v.get<double>(); }
void setAttr(bool &field, const json &v) { field = v.get<bool>(); }
void setAttr(std::vector<int64_t> &field, const json &v) {
  field = v.get<std::vector<int64_t>>();
}
template <typename T> void setAttr(std::optional<T> &field, const json &v) {
  if (v.is_null()) {
    field.reset();
  } else {
    T value{};
    setAttr(value, v);
    field = value;
  }
}
void setAttr(ComparePredicate &field, const json &v) {
  static const std::map<std::string, ComparePredicate> names = {
      {"eq", ComparePredicate::Eq}, {"ne", ComparePredicate::Ne},
      {"lt", ComparePredicate::Lt}, {"le", ComparePredicate::Le},
      {"gt", ComparePredicate::Gt}, {"ge", ComparePredicate::Ge}};
  field = names.at(v.get<std::string>());
}
void setAttr(LossReduction &field, const json &v) {
  static const std::map<std::string, LossReduction> names = {
      {"none", LossReduction::None},
      {"mean", LossReduction::Mean},
      {"sum", LossReduction::Sum}};
  field = names.at(v.get<std::string>());
}
void setAttr(CollectiveReduction &, const json &) {
  throw std::invalid_argument("collectives have no kernel case");
}

absl::StatusOr<OpAttrs> parseAttrs(const json &attrs) {
  OpAttrs a;
  std::set<std::string> known;
  try {
#define MERAK_SET_ATTR(Type, Name, Default)                                    \
  known.insert(#Name);                                                         \
  if (attrs.contains(#Name))                                                   \
    setAttr(a.Name, attrs.at(#Name));
    MERAK_OP_ATTRS(MERAK_SET_ATTR)
#undef MERAK_SET_ATTR
  } catch (const std::exception &e) {
    return absl::InvalidArgumentError(absl::StrCat("attrs: ", e.what()));
  }
  for (const auto &[key, value] : attrs.items())
    if (!known.count(key))
      return absl::InvalidArgumentError(
          absl::StrCat("attrs: no attribute '", key, "'"));
  return a;
}

/// Random operand values as `init` says (test/cuda/cases/README.md).
absl::StatusOr<HostTensor> makeOperand(const TensorType &type,
                                       const std::string &init,
                                       std::mt19937_64 &rng) {
  HostTensor t = HostTensor::allocate(type);
  int64_t n = type.numElements();
  std::vector<std::string> parts = absl::StrSplit(init, ':');
  const std::string &kind = parts[0];
  auto number = [&](size_t i) -> absl::StatusOr<double> {
    double v;
    if (i >= parts.size() || !absl::SimpleAtod(parts[i], &v))
      return absl::InvalidArgumentError(
          absl::StrCat("init '", init, "': expected a number"));
    return v;
  };
  std::vector<double> values(size_t(std::max<int64_t>(n, 0)));
  if (kind == "normal") {
    std::normal_distribution<double> d(0, 1);
    for (double &v : values)
      v = d(rng);
  } else if (kind == "uniform") {
    absl::StatusOr<double> a = number(1), b = number(2);
    if (!a.ok() || !b.ok())
      return a.ok() ? b.status() : a.status();
    std::uniform_real_distribution<double> d(*a, *b);
    for (double &v : values)
      v = d(rng);
  } else if (kind == "randint") {
    absl::StatusOr<double> a = number(1), b = number(2);
    if (!a.ok() || !b.ok())
      return a.ok() ? b.status() : a.status();
    std::uniform_int_distribution<int64_t> d(int64_t(*a), int64_t(*b) - 1);
    for (double &v : values)
      v = double(d(rng));
  } else if (kind == "bernoulli") {
    absl::StatusOr<double> p = number(1);
    if (!p.ok())
      return p.status();
    std::bernoulli_distribution d(*p);
    for (double &v : values)
      v = d(rng) ? 1 : 0;
  } else if (kind == "tril") {
    int64_t cols = type.shape.empty() ? 1 : type.shape.back();
    int64_t rows =
        type.shape.size() < 2 ? 1 : type.shape[type.shape.size() - 2];
    for (int64_t i = 0; i < n; ++i)
      values[i] = (i % cols) <= ((i / cols) % rows) ? 1 : 0;
  } else if (kind == "softmax") {
    // Each row of the last dimension a softmax of normal draws (over the
    // positions on and below the diagonal of the last two dimensions with
    // `softmax:causal`, zero above): the probabilities an attention's
    // backward reads.
    bool causal = parts.size() > 1 && parts[1] == "causal";
    if (parts.size() > 2 || (parts.size() == 2 && !causal))
      return absl::InvalidArgumentError(absl::StrCat(
          "init '", init, "': expected softmax or softmax:causal"));
    int64_t cols = type.shape.empty() ? 1 : type.shape.back();
    int64_t rows =
        type.shape.size() < 2 ? 1 : type.shape[type.shape.size() - 2];
    std::normal_distribution<double> d(0, 1);
    for (int64_t start = 0; start < n; start += cols) {
      int64_t keep = causal ? std::min(cols, (start / cols) % rows + 1) : cols;
      double sum = 0;
      for (int64_t j = 0; j < cols; ++j) {
        values[start + j] = j < keep ? std::exp(d(rng)) : 0;
        sum += values[start + j];
      }
      for (int64_t j = 0; j < cols; ++j)
        values[start + j] /= sum;
    }
  } else if (kind == "ones" || kind == "zeros") {
    for (double &v : values)
      v = kind == "ones" ? 1 : 0;
  } else if (kind == "scalar") {
    absl::StatusOr<double> v = number(1);
    if (!v.ok())
      return v.status();
    for (double &x : values)
      x = *v;
  } else if (kind == "arange") {
    for (int64_t i = 0; i < n; ++i)
      values[i] = double(i);
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown init '", init, "'"));
  }
  uint8_t *bytes = t.mutableBytes();
  for (int64_t i = 0; i < n; ++i) {
    double v = values[i];
    switch (type.dtype) {
    case DType::F16: {
      uint16_t b = floatToHalfBits(float(v));
      std::memcpy(bytes + 2 * i, &b, 2);
      break;
    }
    case DType::BF16: {
      uint16_t b = floatToBFloat16Bits(float(v));
      std::memcpy(bytes + 2 * i, &b, 2);
      break;
    }
    case DType::F32: {
      float f = float(v);
      std::memcpy(bytes + 4 * i, &f, 4);
      break;
    }
    case DType::F64:
      std::memcpy(bytes + 8 * i, &v, 8);
      break;
    case DType::Bool:
      bytes[i] = v != 0;
      break;
    case DType::I32: {
      int32_t x = int32_t(v);
      std::memcpy(bytes + 4 * i, &x, 4);
      break;
    }
    case DType::I64: {
      int64_t x = int64_t(v);
      std::memcpy(bytes + 8 * i, &x, 8);
      break;
    }
    }
  }
  return t;
}

struct Case {
  std::string name;
  /// The op is the last instruction; before it, a `permute` for each
  /// operand the case reads through a permuted view.
  Program program;
  std::vector<HostTensor> arguments;              // one per program argument
  std::vector<std::optional<double>> hostScalars; // one per op operand
  std::set<size_t> skip;
  double rtol = 1e-5, atol = 1e-6;
  bool evaluate = false;
};

absl::StatusOr<Case> parseCase(const json &spec) {
  Case c;
  c.name = spec.at("name").get<std::string>();
  auto fail = [&](const absl::Status &s) {
    return absl::Status(s.code(), absl::StrCat(c.name, ": ", s.message()));
  };
  absl::StatusOr<OpKind> kind = parseOpKind(spec.at("op").get<std::string>());
  if (!kind.ok())
    return fail(kind.status());
  absl::StatusOr<OpAttrs> attrs =
      parseAttrs(spec.value("attrs", json::object()));
  if (!attrs.ok())
    return fail(attrs.status());
  c.rtol = spec.value("rtol", 1e-5);
  c.atol = spec.value("atol", 1e-6);
  c.evaluate = spec.value("evaluate", false);
  for (size_t r : spec.value("skip", std::vector<size_t>{}))
    c.skip.insert(r);

  Program &p = c.program;
  p.function = "kernel_case";
  Instruction inst;
  inst.kind = *kind;
  inst.attrs = *attrs;
  inst.location = c.name;
  std::mt19937_64 rng(std::hash<std::string>{}(c.name));
  std::vector<Instruction> views;
  for (const json &operand : spec.at("operands")) {
    if (operand.is_null()) {
      inst.operands.push_back(kNoValue);
      c.hostScalars.emplace_back();
      continue;
    }
    absl::StatusOr<TensorType> type =
        parseType(operand.at("type").get<std::string>());
    if (!type.ok())
      return fail(type.status());
    // `permute`: the op reads the operand through a permuted view of a
    // dense tensor (strides not row-major), as a view op hands it over.
    std::vector<int64_t> perm =
        operand.value("permute", std::vector<int64_t>{});
    TensorType stored = *type;
    if (!perm.empty()) {
      std::vector<bool> seen(type->shape.size(), false);
      if (perm.size() != type->shape.size())
        return fail(absl::InvalidArgumentError(
            "permute: one entry per dimension of the operand"));
      for (size_t i = 0; i < perm.size(); ++i) {
        if (perm[i] < 0 || perm[i] >= int64_t(perm.size()) || seen[perm[i]])
          return fail(absl::InvalidArgumentError(
              "permute: not a permutation of the operand's dimensions"));
        seen[perm[i]] = true;
        stored.shape[perm[i]] = type->shape[i];
      }
    }
    absl::StatusOr<HostTensor> value =
        makeOperand(stored, operand.value("init", "normal"), rng);
    if (!value.ok())
      return fail(value.status());
    ValueId id = ValueId(p.values.size());
    p.values.push_back(ValueInfo{stored});
    Argument arg;
    arg.value = id;
    arg.role = ArgumentRole::Input;
    arg.name = absl::StrCat("in", inst.operands.size());
    p.arguments.push_back(arg);
    c.arguments.push_back(*value);
    if (!perm.empty()) {
      Instruction view;
      view.kind = OpKind::Permute;
      view.attrs.permutation = perm;
      view.operands = {id};
      view.location = c.name;
      id = ValueId(p.values.size());
      ValueInfo info{*type};
      info.definedBy = int(views.size());
      p.values.push_back(info);
      view.results = {id};
      views.push_back(view);
    }
    inst.operands.push_back(id);
    c.hostScalars.push_back(operand.contains("host")
                                ? std::optional<double>(operand.at("host"))
                                : std::nullopt);
  }
  for (const json &result : spec.at("results")) {
    absl::StatusOr<TensorType> type = parseType(result.get<std::string>());
    if (!type.ok())
      return fail(type.status());
    ValueId id = ValueId(p.values.size());
    ValueInfo info{*type};
    info.definedBy = int(views.size());
    p.values.push_back(info);
    inst.results.push_back(id);
    ResultInfo out;
    out.value = id;
    p.results.push_back(out);
  }
  if (std::string e = arityError(inst); !e.empty())
    return fail(absl::InvalidArgumentError(e));
  p.instructions = std::move(views);
  p.instructions.push_back(std::move(inst));
  if (absl::Status s = planProgram(p); !s.ok())
    return fail(s);
  return c;
}

bool isLowPrecision(DType t) { return t == DType::BF16 || t == DType::F16; }

/// `t` converted elementwise to `to` (exact from bf16 and f16 to f32;
/// rounding to nearest even the other way).
HostTensor convertHost(const HostTensor &t, DType to) {
  TensorType type{to, t.type.shape};
  HostTensor out = HostTensor::allocate(type);
  for (int64_t i = 0; i < type.numElements(); ++i) {
    float v = float(t.elementAsDouble(i));
    uint8_t *p = out.mutableBytes() + i * int64_t(dtypeSize(to));
    if (to == DType::F32) {
      std::memcpy(p, &v, 4);
    } else {
      uint16_t bits =
          to == DType::BF16 ? floatToBFloat16Bits(v) : floatToHalfBits(v);
      std::memcpy(p, &bits, 2);
    }
  }
  return out;
}

/// `c` with every bf16 and f16 value made float32: the same operand
/// values, computed without rounding intermediates to 16 bits. Empty when
/// `c` has no such value.
std::optional<Case> upcast(const Case &c) {
  // Optimizer updates keep their rounding: torch.optim's bf16 step is a
  // chain of bf16 tensor operations on every device.
  OpKind kind = c.program.instructions.back().kind;
  if (kind == OpKind::SgdUpdate || kind == OpKind::AdamwUpdate)
    return std::nullopt;
  bool low = false;
  for (const ValueInfo &v : c.program.values)
    low |= isLowPrecision(v.type.dtype);
  if (!low)
    return std::nullopt;
  Case wide = c;
  for (ValueInfo &v : wide.program.values)
    if (isLowPrecision(v.type.dtype))
      v.type.dtype = DType::F32;
  for (HostTensor &t : wide.arguments)
    if (isLowPrecision(t.type.dtype))
      t = convertHost(t, DType::F32);
  for (Instruction &inst : wide.program.instructions) {
    inst.storage.clear();
    inst.release.clear();
  }
  if (!planProgram(wide.program).ok())
    return std::nullopt;
  return wide;
}

/// Runs `c` on `backend`: the op's results on the host.
/// The wall time of `backend`'s queued work from here to its end.
class Stopwatch {
public:
  explicit Stopwatch(Backend &backend) : backend(backend) {}
  absl::Status start() {
    if (absl::Status s = backend.synchronize(); !s.ok())
      return s;
    begin = std::chrono::steady_clock::now();
    return absl::OkStatus();
  }
  absl::StatusOr<double> stopMs() {
    if (absl::Status s = backend.synchronize(); !s.ok())
      return s;
    return std::chrono::duration<double, std::milli>(
               std::chrono::steady_clock::now() - begin)
        .count();
  }

private:
  Backend &backend;
  std::chrono::steady_clock::time_point begin;
};

/// Runs `c`'s program; with `repeats` > 0 its op (the last instruction)
/// runs that many times more, each timed alone (synchronized before and
/// after), and `medianMs` gets the median.
absl::StatusOr<std::vector<HostTensor>> run(Backend &backend, const Case &c,
                                            int64_t repeats = 0,
                                            double *medianMs = nullptr) {
  const Program &program = c.program;
  StepContext step;
  step.evaluate = c.evaluate;
  if (absl::Status s = backend.beginStep(step); !s.ok())
    return s;
  std::vector<TensorHandle> live(program.values.size());
  for (size_t a = 0; a < program.arguments.size(); ++a) {
    absl::StatusOr<TensorHandle> t = backend.upload(c.arguments[a]);
    if (!t.ok())
      return t.status();
    live[program.arguments[a].value] = *t;
  }
  TensorHandle arena;
  if (program.arenaBytes > 0) {
    absl::StatusOr<TensorHandle> made =
        backend.allocateArena(program.arenaBytes);
    if (!made.ok())
      return made.status();
    arena = *made;
  }
  for (const Instruction &inst : program.instructions) {
    bool op = &inst == &program.instructions.back();
    KernelCall call;
    call.instruction = &inst;
    call.program = &program;
    call.step = &step;
    call.arena = arena.get();
    for (ValueId v : inst.operands)
      call.operands.push_back(v == kNoValue ? nullptr : live[v].get());
    if (op)
      call.hostScalars = c.hostScalars;
    else
      call.hostScalars.assign(inst.operands.size(), std::nullopt);
    call.inPlace.assign(inst.results.size(), nullptr);
    for (size_t r = 0; r < inst.storage.size(); ++r)
      if (inst.storage[r].kind == ResultStorage::Kind::InPlace)
        call.inPlace[r] = call.operands[inst.storage[r].operand];
    if (absl::Status s = backend.execute(call); !s.ok())
      return s;
    for (size_t r = 0; r < inst.results.size(); ++r)
      live[inst.results[r]] = call.results[r];
  }
  const Instruction &inst = program.instructions.back();
  if (repeats > 0) {
    std::vector<double> times;
    for (int64_t i = 0; i < repeats; ++i) {
      KernelCall call;
      call.instruction = &inst;
      call.program = &program;
      call.step = &step;
      call.arena = arena.get();
      for (ValueId v : inst.operands)
        call.operands.push_back(v == kNoValue ? nullptr : live[v].get());
      call.hostScalars = c.hostScalars;
      // In-place ops would compound their updates: they run on the
      // results of the run before, which is what a step does too.
      call.inPlace.assign(inst.results.size(), nullptr);
      Stopwatch watch(backend);
      if (absl::Status s = watch.start(); !s.ok())
        return s;
      if (absl::Status s = backend.execute(call); !s.ok())
        return s;
      absl::StatusOr<double> ms = watch.stopMs();
      if (!ms.ok())
        return ms.status();
      times.push_back(*ms);
    }
    std::sort(times.begin(), times.end());
    *medianMs = times[times.size() / 2];
  }
  std::vector<HostTensor> results;
  for (size_t r = 0; r < inst.results.size(); ++r) {
    absl::StatusOr<HostTensor> host = backend.download(
        *live[inst.results[r]], program.values[inst.results[r]].type);
    if (!host.ok())
      return host.status();
    results.push_back(*host);
  }
  if (absl::Status s = backend.synchronize(); !s.ok())
    return s;
  return results;
}

/// Empty when `got` matches `want` within the case's tolerance, else the
/// worst element.
std::string compare(const Case &c, size_t r, const HostTensor &got,
                    const HostTensor &want, double &worst) {
  if (got.type != want.type)
    return absl::StrCat("result #", r, " is ", got.type.str(), ", expected ",
                        want.type.str());
  bool exact = !isFloat(want.type.dtype);
  int64_t bad = -1;
  double badExcess = 0;
  int64_t mismatches = 0;
  for (int64_t i = 0; i < want.type.numElements(); ++i) {
    double g = got.elementAsDouble(i), w = want.elementAsDouble(i);
    // NaN where NaN is expected, and the same infinity, are equal.
    if ((std::isnan(w) && std::isnan(g)) || (std::isinf(w) && g == w))
      continue;
    double err = std::fabs(g - w);
    double allowed = exact ? 0 : c.atol + c.rtol * std::fabs(w);
    if (!exact && std::fabs(w) > 0)
      worst = std::max(worst, err / std::fabs(w));
    if (!(err <= allowed) || std::isnan(g) != std::isnan(w)) {
      ++mismatches;
      double excess = std::isnan(err) ? INFINITY : err - allowed;
      if (bad < 0 || excess > badExcess) {
        bad = i;
        badExcess = excess;
      }
    }
  }
  if (bad < 0)
    return "";
  return absl::StrFormat(
      "result #%d: %d of %d elements differ; worst at element %d: got %.9g, "
      "expected %.9g (rtol %g, atol %g)",
      r, mismatches, want.type.numElements(), bad, got.elementAsDouble(bad),
      want.elementAsDouble(bad), c.rtol, c.atol);
}

int fail(const std::string &message) {
  std::fprintf(stderr, "merak-kernel-check: error: %s\n", message.c_str());
  return 1;
}

} // namespace

/// --fused-chains: every distinct chain of `path`'s step on the host (see
/// FusedHost.h); a line per chain and `N passed, M failed`.
int checkFusedChains(const std::string &path) {
#if MERAK_KERNEL_CHECK_HAVE_CUDA
  absl::StatusOr<const BackendEntry *> cpu = findBackend("cpu");
  if (!cpu.ok())
    return fail(absl::StrCat("--fused-chains runs the chains' ops on the CPU "
                             "backend, which this build does not have: ",
                             cpu.status().message()));
  absl::StatusOr<std::unique_ptr<CompiledPlan>> plan =
      openRankProgramFile(path);
  if (!plan.ok())
    return fail(std::string(plan.status().message()));
  if ((*plan)->pipelined())
    return fail(absl::StrCat(path, " is a pipeline; --fused-chains checks the "
                                   "step of a plan without one"));
  Program program = (*plan)->step();
  if (absl::Status s =
          bindToRank(program, 0, BindOptions(CollectiveMode::Overlapped, true));
      !s.ok())
    return fail(absl::StrCat(path, ": ", s.message()));
  std::string tmpl =
      absl::StrCat(std::getenv("TMPDIR") ? std::getenv("TMPDIR") : "/tmp",
                   "/merak-fused-chains-XXXXXX");
  if (!mkdtemp(tmpl.data()))
    return fail(absl::StrCat("cannot make a directory like ", tmpl));
  auto checks = checkFusedChainsOnHost(
      program,
      [&] {
        DeviceOptions options;
        options.threads = 1;
        absl::StatusOr<std::unique_ptr<Backend>> b = (*cpu)->create(options);
        return b.ok() ? *std::move(b) : nullptr;
      },
      tmpl);
  std::error_code ignored;
  std::filesystem::remove_all(tmpl, ignored);
  if (!checks.ok())
    return fail(std::string(checks.status().message()));
  int failed = 0;
  for (size_t k = 0; k < checks->size(); ++k) {
    const FusedChainCheck &c = (*checks)[k];
    std::printf("chain %zu (%s): %s\n", k, c.ops.c_str(),
                c.mismatch.empty() ? "agrees with its ops"
                                   : ("DIFFERS: " + c.mismatch).c_str());
    failed += !c.mismatch.empty();
  }
  std::printf("%d passed, %d failed\n", int(checks->size()) - failed, failed);
  return failed ? 1 : 0;
#else
  (void)path;
  return fail("--fused-chains needs the CUDA backend, which this build does "
              "not have");
#endif
}

int main(int argc, char **argv) {
  absl::SetProgramUsageMessage(
      "Runs each op alone on random operands (test/cuda/cases) on a backend; "
      "writes or checks expected results.\n"
      "  merak-kernel-check --cases a.json,b.json --device cpu "
      "--write-expected expected.safetensors\n"
      "  merak-kernel-check --cases a.json,b.json --device cuda --expected "
      "expected.safetensors");
  std::vector<std::string> args = underscoreFlagNames(argc, argv);
  std::vector<char *> pointers;
  for (std::string &arg : args)
    pointers.push_back(arg.data());
  absl::ParseCommandLine(int(pointers.size()), pointers.data());
  registerBuiltinComponents();
  if (std::string chains = absl::GetFlag(FLAGS_fused_chains); !chains.empty())
    return checkFusedChains(chains);
  std::string writePath = absl::GetFlag(FLAGS_write_expected);
  std::string expectedPath = absl::GetFlag(FLAGS_expected);
  int64_t repeats = absl::GetFlag(FLAGS_time);
  if (repeats < 0)
    return fail("--time must be 0 or more, got " + std::to_string(repeats));
  if (repeats == 0 && writePath.empty() == expectedPath.empty())
    return fail("give one of --write-expected and --expected");
  if (repeats > 0 && !(writePath.empty() && expectedPath.empty()))
    return fail("--time runs cases without --write-expected or --expected");

  std::vector<Case> cases;
  for (const std::string &path : absl::GetFlag(FLAGS_cases)) {
    std::ifstream in(path);
    if (!in)
      return fail(absl::StrCat(path, ": cannot open"));
    json list;
    try {
      list = json::parse(in);
      for (const json &spec : list) {
        std::string name = spec.at("name").get<std::string>();
        if (name.find(absl::GetFlag(FLAGS_filter)) == std::string::npos)
          continue;
        absl::StatusOr<Case> c = parseCase(spec);
        if (!c.ok())
          return fail(absl::StrCat(path, ": ", c.status().message()));
        cases.push_back(*std::move(c));
      }
    } catch (const std::exception &e) {
      return fail(absl::StrCat(path, ": ", e.what()));
    }
  }
  if (cases.empty())
    return fail("no cases (--cases, --filter)");

  absl::StatusOr<const BackendEntry *> entry =
      findBackend(absl::GetFlag(FLAGS_device));
  if (!entry.ok())
    return fail(std::string(entry.status().message()));
  DeviceOptions options;
  if ((*entry)->name == "cuda") {
    options.settings["tf32"] = absl::GetFlag(FLAGS_tf32) ? "1" : "0";
    options.settings["flash-kernels"] = absl::GetFlag(FLAGS_flash_kernels);
  }
  absl::StatusOr<std::unique_ptr<Backend>> backend = (*entry)->create(options);
  if (!backend.ok())
    return fail(std::string(backend.status().message()));

  SafetensorsFile expected;
  if (!expectedPath.empty()) {
    absl::StatusOr<SafetensorsFile> read = readSafetensors(expectedPath);
    if (!read.ok())
      return fail(std::string(read.status().message()));
    expected = *std::move(read);
  }
  std::map<std::string, HostTensor> written;
  int passed = 0, failed = 0, skipped = 0;
  if (repeats > 0) {
    // Timing: the op alone, from its operands on the device to its results
    // there (no upload or download), the median of `repeats` runs.
    for (const Case &c : cases) {
      double ms = 0;
      absl::StatusOr<std::vector<HostTensor>> results =
          run(**backend, c, repeats, &ms);
      if (!results.ok()) {
        std::printf("FAIL %s: %s\n", c.name.c_str(),
                    std::string(results.status().message()).c_str());
        ++failed;
        continue;
      }
      std::printf("time %s %.4f ms\n", c.name.c_str(), ms);
      ++passed;
    }
    std::printf("%d passed, %d failed\n", passed, failed);
    return failed == 0 ? 0 : 1;
  }
  for (const Case &c : cases) {
    absl::StatusOr<std::vector<HostTensor>> results;
    std::optional<Case> wide;
    if (!writePath.empty() && !absl::GetFlag(FLAGS_native_low_precision))
      wide = upcast(c);
    if (wide) {
      // The float32 results rounded once to the case's types.
      results = run(**backend, *wide);
      if (results.ok())
        for (size_t r = 0; r < results->size(); ++r) {
          DType want =
              c.program.values[c.program.instructions.back().results[r]]
                  .type.dtype;
          if ((*results)[r].type.dtype != want)
            (*results)[r] = convertHost((*results)[r], want);
        }
    } else {
      results = run(**backend, c);
    }
    if (!results.ok()) {
      std::printf("FAIL %s: %s\n", c.name.c_str(),
                  std::string(results.status().message()).c_str());
      ++failed;
      continue;
    }
    if (!writePath.empty()) {
      // The results only: the operands are drawn again, identically, from
      // the case's name by the checking run.
      int64_t bytes = 0;
      for (const HostTensor &t : *results)
        bytes += int64_t(t.byteSize());
      int64_t cap = absl::GetFlag(FLAGS_max_case_bytes);
      if (cap > 0 && bytes > cap) {
        std::printf("left out %s (%lld bytes of results)\n", c.name.c_str(),
                    (long long)bytes);
        ++skipped;
        continue;
      }
      for (size_t r = 0; r < results->size(); ++r)
        written[absl::StrCat(c.name, "/out", r)] = (*results)[r];
      ++passed;
      continue;
    }
    if (!expected.tensors.count(absl::StrCat(c.name, "/out0"))) {
      ++skipped;
      continue;
    }
    std::string problem;
    double worst = 0;
    for (size_t r = 0; r < results->size() && problem.empty(); ++r) {
      if (c.skip.count(r))
        continue;
      auto it = expected.tensors.find(absl::StrCat(c.name, "/out", r));
      if (it == expected.tensors.end()) {
        problem = absl::StrCat("result #", r, " is not in ", expectedPath);
        break;
      }
      problem = compare(c, r, (*results)[r], it->second, worst);
    }
    if (problem.empty()) {
      std::printf("ok   %s (largest relative error %.3g)\n", c.name.c_str(),
                  worst);
      ++passed;
    } else {
      std::printf("FAIL %s: %s\n", c.name.c_str(), problem.c_str());
      ++failed;
    }
  }
  if (!writePath.empty()) {
    if (absl::Status s = writeSafetensors(writePath, written, {}); !s.ok())
      return fail(std::string(s.message()));
  }
  if (skipped)
    std::printf("%d cases left out (%s)\n", skipped,
                writePath.empty() ? "not in the expected file"
                                  : "--max-case-bytes");
  std::printf("%d passed, %d failed\n", passed, failed);
  return failed == 0 ? 0 : 1;
}
