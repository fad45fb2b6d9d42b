//===- GradientCheckTest.cpp - every gradient rule vs finite differences --===//

#include "merak/Dialect/Merak/IR/AttrNames.h"
#include "merak/Dialect/Merak/IR/MerakDialect.h"
#include "merak/Dialect/Merak/Transforms/Passes.h"
#include "merak/Runtime/CPU/CpuBackend.h"
#include "merak/Runtime/Executor.h"
#include "merak/Target/RankProgram/RankProgramLowering.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Pass/PassManager.h"
#include "gtest/gtest.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <numeric>
#include <random>
#include <sstream>
#include <string>
#include <vector>

using namespace mlir;
using namespace merak::runtime;
using merak::runtime::TensorType;

namespace {

//===----------------------------------------------------------------------===//
// Cases
//===----------------------------------------------------------------------===//

enum class Role { Param, Input, Buffer };

/// One argument of `@forward`. `values` says how to draw its elements:
///   signed[:lo:hi]   random sign, magnitude in [lo, hi] (default 0.2, 1.2)
///   pos[:lo:hi]      uniform in [lo, hi] (default 0.2, 2)
///   uniform:lo:hi    uniform in [lo, hi]
///   grid:step:off    distinct values k * step + off, shuffled (no ties)
///   choose:a,b,...   each element one of the listed values
///   vals:a,b,...     exactly these values, in row-major order
struct Arg {
  Role role;
  std::string name;
  std::string type; // MLIR tensor type
  std::string values;
};

std::string f64Type(const std::string &shape) {
  return shape.empty() ? "tensor<f64>" : "tensor<" + shape + "xf64>";
}
Arg param(std::string name, const std::string &shape,
          std::string values = "signed") {
  return {Role::Param, std::move(name), f64Type(shape), std::move(values)};
}
Arg input(std::string name, std::string type, std::string values) {
  return {Role::Input, std::move(name), std::move(type), std::move(values)};
}
Arg buffer(std::string name, const std::string &shape, std::string values) {
  return {Role::Buffer, std::move(name), f64Type(shape), std::move(values)};
}

/// Elements [begin, end) of a parameter whose gradient PyTorch defines as
/// zero although the loss depends on them (an embedding's padding row).
struct ZeroByDefinition {
  std::string param;
  int64_t begin = 0, end = 0;
};

struct GradCase {
  std::string name;
  std::vector<Arg> args;
  /// Ops reading the arguments by name (`%x`) and defining `%y`.
  std::string body;
  /// Shape of `%y` (f64); empty for rank 0.
  std::string resultShape;
  /// Finite-difference step.
  double eps = 1e-6;
  ZeroByDefinition zero = {};
};

std::ostream &operator<<(std::ostream &os, const GradCase &c) {
  return os << c.name;
}

/// `@forward` of a case: the body, then loss = reduce_sum(%y * loss_w).
std::string forwardText(const GradCase &c) {
  std::string t = f64Type(c.resultShape);
  std::ostringstream os;
  os << "func.func @forward(";
  for (const Arg &a : c.args) {
    const char *attr = a.role == Role::Param   ? "merak.param"
                       : a.role == Role::Input ? "merak.input"
                                               : "merak.buffer";
    os << "%" << a.name << ": " << a.type << " {" << attr << " = \"" << a.name
       << "\"}, ";
  }
  os << "%loss_w: " << t << " {merak.input = \"loss_w\"}) -> tensor<f64> {\n"
     << c.body << "\n"
     << "  %loss_wy = merak.mul %y, %loss_w : (" << t << ", " << t << ") -> "
     << t << "\n"
     << "  %loss = merak.reduce_sum %loss_wy {dims = array<i64>} : (" << t
     << ") -> tensor<f64>\n"
     << "  return %loss : tensor<f64>\n}\n";
  return os.str();
}

//===----------------------------------------------------------------------===//
// Values
//===----------------------------------------------------------------------===//

std::vector<std::string> split(const std::string &s, char sep) {
  std::vector<std::string> parts;
  std::stringstream ss(s);
  std::string part;
  while (std::getline(ss, part, sep))
    parts.push_back(part);
  return parts;
}

void setElement(HostTensor &t, int64_t i, double v) {
  uint8_t *p = t.mutableBytes() + i * dtypeSize(t.type.dtype);
  switch (t.type.dtype) {
  case DType::F64:
    std::memcpy(p, &v, sizeof(v));
    return;
  case DType::F32: {
    float f = float(v);
    std::memcpy(p, &f, sizeof(f));
    return;
  }
  case DType::I64: {
    int64_t n = int64_t(v);
    std::memcpy(p, &n, sizeof(n));
    return;
  }
  case DType::I32: {
    int32_t n = int32_t(v);
    std::memcpy(p, &n, sizeof(n));
    return;
  }
  case DType::Bool:
    *p = v != 0;
    return;
  default:
    FAIL() << "no generator for " << dtypeName(t.type.dtype);
  }
}

double getF64(const HostTensor &t, int64_t i) {
  double v;
  std::memcpy(&v, t.bytes() + i * sizeof(double), sizeof(v));
  return v;
}

/// A tensor of `type` drawn as `spec` says (see `Arg`).
HostTensor generate(const merak::runtime::TensorType &type,
                    const std::string &spec, std::mt19937_64 &rng) {
  HostTensor t = HostTensor::allocate(type);
  int64_t n = type.numElements();
  std::vector<std::string> f = split(spec, ':');
  auto num = [&](size_t k, double fallback) {
    return k < f.size() ? std::stod(f[k]) : fallback;
  };
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  const std::string &kind = f.at(0);
  if (kind == "grid") {
    // Distinct values at least `step` apart: a shuffled permutation.
    std::vector<int64_t> k(n);
    std::iota(k.begin(), k.end(), -n / 2);
    std::shuffle(k.begin(), k.end(), rng);
    for (int64_t i = 0; i < n; ++i)
      setElement(t, i, double(k[i]) * num(1, 0.1) + num(2, 0.0));
    return t;
  }
  if (kind == "vals") {
    std::vector<std::string> v = split(f.at(1), ',');
    EXPECT_EQ(int64_t(v.size()), n) << "vals: for " << type.str();
    for (int64_t i = 0; i < n && i < int64_t(v.size()); ++i)
      setElement(t, i, std::stod(v[i]));
    return t;
  }
  for (int64_t i = 0; i < n; ++i) {
    double u = unit(rng), v;
    if (kind == "signed") {
      double lo = num(1, 0.2), hi = num(2, 1.2);
      v = (lo + (hi - lo) * u) * (unit(rng) < 0.5 ? -1 : 1);
    } else if (kind == "pos") {
      v = num(1, 0.2) + (num(2, 2.0) - num(1, 0.2)) * u;
    } else if (kind == "uniform") {
      v = num(1, -1) + (num(2, 1) - num(1, -1)) * u;
    } else if (kind == "choose") {
      std::vector<std::string> c = split(f.at(1), ',');
      v = std::stod(c[std::min(size_t(u * c.size()), c.size() - 1)]);
    } else {
      ADD_FAILURE() << "unknown value spec '" << spec << "'";
      return t;
    }
    setElement(t, i, v);
  }
  return t;
}

/// FNV-1a: a seed per case name that is the same with every standard
/// library (std::hash is not).
uint64_t seedOf(const std::string &name) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char ch : name)
    h = (h ^ ch) * 0x100000001b3ull;
  return h;
}

HostTensor copyOf(const HostTensor &t) {
  HostTensor c = HostTensor::allocate(t.type);
  if (t.byteSize())
    std::memcpy(c.mutableBytes(), t.data, t.byteSize());
  return c;
}

//===----------------------------------------------------------------------===//
// The check
//===----------------------------------------------------------------------===//

/// Per element, |analytic - numeric| / max(|analytic|, |numeric|, floor).
/// Central differences with eps = 1e-6 carry a truncation error of about
/// eps^2 * f''' ~ 1e-12 and a rounding error of about ulp(loss) / eps ~
/// 2e-10 * |loss|. The floor, kFloor * max(1, |loss|), keeps that absolute
/// noise from counting as relative error on gradients near zero.
constexpr double kTolerance = 1e-6;
constexpr double kFloor = 1e-2;

class GradientCheck : public ::testing::TestWithParam<GradCase> {
protected:
  GradientCheck() {
    DialectRegistry registry;
    merak::registerMerakDialects(registry);
    ctx.appendDialectRegistry(registry);
    ctx.loadAllAvailableDialects();
    ctx.getDiagEngine().registerHandler([this](Diagnostic &d) {
      diagnostics += d.str() + "\n";
      return success();
    });
  }

  MLIRContext ctx;
  std::string diagnostics;
};

// For each op with a gradient rule, a small `@forward` in f64 whose loss is
// `reduce_sum(op(...) * W)` (W a random input, so that every output element
// matters) goes through --merak-autodiff; `@train_step` runs on the CPU
// runtime and each `merak.grad` result is compared, element by element, with
// a central finite difference of `@forward` run on the same runtime. Inputs
// are drawn away from the points where an op is not differentiable (relu and
// abs at 0, clamp bounds, ties of max/min and pooling, remainder's jumps).
TEST_P(GradientCheck, MatchesFiniteDifferences) {
  const GradCase &c = GetParam();
  std::string text = forwardText(c);
  OwningOpRef<ModuleOp> module = parseSourceString<ModuleOp>(text, &ctx);
  ASSERT_TRUE(module) << diagnostics << text;
  PassManager pm(&ctx);
  pm.addPass(merak::createAutodiff());
  ASSERT_TRUE(succeeded(pm.run(*module))) << diagnostics << text;

  auto forward = module->lookupSymbol<func::FuncOp>("forward");
  auto step = module->lookupSymbol<func::FuncOp>(merak::kTrainStepName);
  ASSERT_TRUE(forward && step);
  FailureOr<Program> forwardProgram = lowerToProgram(forward);
  FailureOr<Program> stepProgram = lowerToProgram(step);
  ASSERT_TRUE(succeeded(forwardProgram) && succeeded(stepProgram))
      << diagnostics;

  // Draw the arguments (the same in both functions), seeded by the case.
  std::mt19937_64 rng(seedOf(c.name));
  std::map<std::string, HostTensor> state;
  std::vector<HostTensor> inputs;
  std::vector<std::string> params;
  for (const Argument &arg : forwardProgram->arguments) {
    std::string spec = "signed";
    for (const Arg &a : c.args)
      if (a.name == arg.name)
        spec = a.values;
    HostTensor t = generate(forwardProgram->values[arg.value].type, spec, rng);
    if (arg.role == ArgumentRole::Input) {
      inputs.push_back(t);
    } else {
      state[arg.name] = t;
      if (arg.role == ArgumentRole::Param)
        params.push_back(arg.name);
    }
  }

  // One step context for every run: training dropout draws the same mask in
  // @forward (dropout) as in @train_step (dropout_mask).
  StepContext stepContext;
  stepContext.seed = 7;
  std::unique_ptr<Backend> backend = createCpuBackend(CpuBackendOptions{1});

  auto stepExecutor = Executor::create(*stepProgram, *backend);
  ASSERT_TRUE(stepExecutor.ok()) << stepExecutor.status();
  ASSERT_TRUE((*stepExecutor)->loadState(state, "the case", false).ok());
  std::vector<HostTensor> results;
  auto outcome = (*stepExecutor)->runStep(stepContext, inputs, false, &results);
  ASSERT_TRUE(outcome.ok()) << outcome.status();
  std::map<std::string, HostTensor> grads;
  for (unsigned r = 0; r < step.getNumResults(); ++r)
    if (auto name = step.getResultAttrOfType<StringAttr>(r, merak::kGradAttr))
      grads[name.str()] = results[r];

  auto forwardExecutor = Executor::create(*forwardProgram, *backend);
  ASSERT_TRUE(forwardExecutor.ok()) << forwardExecutor.status();
  auto lossAt = [&](const std::map<std::string, HostTensor> &s) {
    EXPECT_TRUE((*forwardExecutor)->loadState(s, "the case", false).ok());
    auto o = (*forwardExecutor)->runStep(stepContext, inputs, false);
    EXPECT_TRUE(o.ok()) << o.status();
    return o.ok() && o->loss ? *o->loss : NAN;
  };
  double loss = lossAt(state);
  ASSERT_TRUE(outcome->loss.has_value());
  EXPECT_NEAR(*outcome->loss, loss, 1e-12 * std::max(1.0, std::abs(loss)))
      << "@train_step and @forward disagree on the loss";

  double floor = kFloor * std::max(1.0, std::abs(loss));
  double worst = 0;
  for (const std::string &p : params) {
    auto it = grads.find(p);
    ASSERT_NE(it, grads.end()) << "no gradient for '" << p << "'";
    const HostTensor &g = it->second;
    const HostTensor &x = state[p];
    ASSERT_EQ(g.type, x.type) << p;
    int reported = 0;
    for (int64_t i = 0; i < x.type.numElements(); ++i) {
      if (p == c.zero.param && i >= c.zero.begin && i < c.zero.end) {
        EXPECT_EQ(getF64(g, i), 0.0)
            << "d loss / d " << p << "[" << i << "] must be zero by definition";
        continue;
      }
      std::map<std::string, HostTensor> moved = state;
      HostTensor plus = copyOf(x), minus = copyOf(x);
      setElement(plus, i, getF64(x, i) + c.eps);
      setElement(minus, i, getF64(x, i) - c.eps);
      moved[p] = plus;
      double lp = lossAt(moved);
      moved[p] = minus;
      double lm = lossAt(moved);
      double numeric = (lp - lm) / (2 * c.eps);
      double analytic = getF64(g, i);
      double err = std::abs(analytic - numeric) /
                   std::max({std::abs(analytic), std::abs(numeric), floor});
      worst = std::max(worst, std::isnan(err) ? INFINITY : err);
      if (!(err < kTolerance) && reported++ < 5)
        ADD_FAILURE() << "d loss / d " << p << "[" << i << "]: analytic "
                      << analytic << ", numeric " << numeric
                      << " (relative error " << err << ")";
    }
  }
  char worstText[32];
  std::snprintf(worstText, sizeof(worstText), "%.3g", worst);
  RecordProperty("max_relative_error", worstText);
}

std::string caseName(const ::testing::TestParamInfo<GradCase> &info) {
  return info.param.name;
}

#define GRADIENT_CASES(Suite, ...)                                             \
  INSTANTIATE_TEST_SUITE_P(                                                    \
      Suite, GradientCheck,                                                    \
      ::testing::ValuesIn(std::vector<GradCase>{__VA_ARGS__}), caseName)

//===----------------------------------------------------------------------===//
// Elementwise unary
//===----------------------------------------------------------------------===//

/// `%y = merak.OP %x` on a 2x3 parameter drawn as `values`.
GradCase unary(const std::string &op, const std::string &values = "signed",
               const std::string &attrs = "") {
  return {op,
          {param("x", "2x3", values)},
          "  %y = merak." + op + " %x " + attrs + " : tensor<2x3xf64>",
          "2x3"};
}

GradCase named(GradCase c, std::string name) {
  c.name = std::move(name);
  return c;
}

GRADIENT_CASES(
    Unary, unary("neg"), unary("abs"), unary("exp"), unary("log", "pos"),
    unary("sin"), unary("cos"), unary("sqrt", "pos"), unary("rsqrt", "pos"),
    unary("reciprocal"), unary("erf"), unary("tanh"), unary("sigmoid"),
    unary("silu"), unary("relu"), named(unary("gelu"), "gelu_none"),
    named(unary("gelu", "signed", "{approximate = #merak.gelu<tanh>}"),
          "gelu_tanh"),
    // Grid values k * 0.1 + 0.05 stay 0.05 away from bounds on the 0.1 grid.
    named(unary("clamp", "grid:0.1:0.05", "{min = -0.2 : f64}"), "clamp_min"),
    named(unary("clamp", "grid:0.1:0.05", "{max = 0.1 : f64}"), "clamp_max"),
    named(unary("clamp", "grid:0.1:0.05",
                "{min = -0.2 : f64, max = 0.1 : f64}"),
          "clamp_min_max"),
    GradCase{"clamp_3d_reused_input",
             {param("x", "2x3x4", "grid:0.05:0.025")},
             "  %c = merak.clamp %x {min = -0.3 : f64, max = 0.4 : f64} : "
             "tensor<2x3x4xf64>\n"
             "  %y = merak.mul %c, %x : (tensor<2x3x4xf64>, tensor<2x3x4xf64>) "
             "-> tensor<2x3x4xf64>",
             "2x3x4"},
    // Multiples of 2^-7 and a step of 2^-10 are exact in f32, so the round
    // trip through f32 is the identity at every point the check visits. The
    // gradient goes back through f32 too (as in PyTorch): ~3e-8 relative.
    GradCase{"cast_f64_f32_f64",
             {param("x", "2x3", "grid:0.0078125:0")},
             "  %s = merak.cast %x : tensor<2x3xf64> -> tensor<2x3xf32>\n"
             "  %y = merak.cast %s : tensor<2x3xf32> -> tensor<2x3xf64>",
             "2x3",
             0.0009765625},
    named(unary("dropout", "signed", "{p = 0.0 : f64, training = true}"),
          "dropout_p0_training"),
    named(unary("dropout", "signed", "{p = 0.5 : f64, training = false}"),
          "dropout_eval"),
    // Rewritten to x * dropout_mask(x): the mask gets no gradient, and
    // @forward draws the same mask from the same seed.
    named(unary("dropout", "signed", "{p = 0.5 : f64, training = true}"),
          "dropout_training_mask"),
    GradCase{"dropout_mask",
             {param("x", "3x4")},
             "  %m = merak.dropout_mask %x {p = 0.25 : f64} : tensor<3x4xf64>\n"
             "  %y = merak.mul %x, %m : (tensor<3x4xf64>, tensor<3x4xf64>) -> "
             "tensor<3x4xf64>",
             "3x4"},
    GradCase{"tril",
             {param("x", "3x4")},
             "  %y = merak.tril %x : tensor<3x4xf64>",
             "3x4"},
    GradCase{"tril_diag_minus1_batched",
             {param("x", "2x3x3")},
             "  %y = merak.tril %x {diagonal = -1 : i64} : tensor<2x3x3xf64>",
             "2x3x3"},
    GradCase{"triu_diag1_batched",
             {param("x", "2x3x4")},
             "  %y = merak.triu %x {diagonal = 1 : i64} : tensor<2x3x4xf64>",
             "2x3x4"});

//===----------------------------------------------------------------------===//
// Elementwise binary and where
//===----------------------------------------------------------------------===//

/// `%y = merak.OP %a, %b` with shapes `la` and `lb` broadcast to `ly`.
GradCase binary(const std::string &name, const std::string &op,
                const std::string &la, const std::string &lb,
                const std::string &ly, const std::string &va = "signed",
                const std::string &vb = "signed") {
  return {name,
          {param("a", la, va), param("b", lb, vb)},
          "  %y = merak." + op + " %a, %b : (" + f64Type(la) + ", " +
              f64Type(lb) + ") -> " + f64Type(ly),
          ly};
}

/// pow with a constant exponent `e` (a rank-0 or [3] constant).
GradCase powConstant(const std::string &name, const std::string &constant,
                     const std::string &etype, const std::string &va) {
  return {name,
          {param("a", "2x3", va)},
          "  %e = merak.constant " + constant + " : " + etype +
              "\n  %y = merak.pow %a, %e : (tensor<2x3xf64>, " + etype +
              ") -> tensor<2x3xf64>",
          "2x3"};
}

// maximum/minimum: a on the 0.1 grid, b on it shifted by 0.05, so no pair
// ties or comes within 0.05 of a tie.
constexpr const char *kGridA = "grid:0.1:0";
constexpr const char *kGridB = "grid:0.1:0.05";
// remainder: a = (k + 1/2) / 10 and |b| in {0.4, 0.7, 1.3} keep a / b at
// least 1/26 away from an integer, where remainder jumps.
constexpr const char *kRemA = "grid:0.1:0.05";
constexpr const char *kRemB = "choose:0.4,-0.4,0.7,-0.7,1.3,-1.3";

GRADIENT_CASES(
    Binary, binary("add", "add", "2x3", "2x3", "2x3"),
    binary("add_2x3_3", "add", "2x3", "3", "2x3"),
    binary("add_2x1x4_3x1", "add", "2x1x4", "3x1", "2x3x4"),
    binary("add_rank0", "add", "2x3", "", "2x3"),
    binary("sub", "sub", "2x3", "2x3", "2x3"),
    binary("sub_2x3_3", "sub", "2x3", "3", "2x3"),
    binary("sub_3x1_2x1x4", "sub", "3x1", "2x1x4", "2x3x4"),
    binary("mul", "mul", "2x3", "2x3", "2x3"),
    binary("mul_2x3_3", "mul", "2x3", "3", "2x3"),
    binary("mul_2x1x4_3x1", "mul", "2x1x4", "3x1", "2x3x4"),
    binary("mul_rank0", "mul", "", "2x3", "2x3"),
    binary("div", "div", "2x3", "2x3", "2x3"),
    binary("div_2x3_3", "div", "2x3", "3", "2x3"),
    binary("div_2x1x4_3x1", "div", "2x1x4", "3x1", "2x3x4"),
    binary("pow_tensor_exponent", "pow", "2x3", "2x3", "2x3", "pos",
           "uniform:-1.5:1.5"),
    binary("pow_tensor_exponent_2x3_3", "pow", "2x3", "3", "2x3", "pos",
           "uniform:-1.5:1.5"),
    binary("pow_tensor_exponent_rank0", "pow", "2x3", "", "2x3", "pos",
           "uniform:-1.5:1.5"),
    binary("pow_tensor_exponent_2x1x4_3x1", "pow", "2x1x4", "3x1", "2x3x4",
           "pos", "uniform:-1.5:1.5"),
    powConstant("pow_constant_3", "dense<3.0>", "tensor<f64>", "signed"),
    powConstant("pow_constant_2", "dense<2.0>", "tensor<f64>", "signed"),
    powConstant("pow_constant_half", "dense<0.5>", "tensor<f64>", "pos"),
    powConstant("pow_constant_minus1_5", "dense<-1.5>", "tensor<f64>", "pos"),
    powConstant("pow_constant_tensor_3", "dense<[2.0, 0.5, -1.0]>",
                "tensor<3xf64>", "pos"),
    binary("remainder", "remainder", "2x3", "2x3", "2x3", kRemA, kRemB),
    binary("remainder_2x3_3", "remainder", "2x3", "3", "2x3", kRemA, kRemB),
    binary("remainder_2x1x4_3x1", "remainder", "2x1x4", "3x1", "2x3x4", kRemA,
           kRemB),
    binary("minimum", "minimum", "2x3", "2x3", "2x3", kGridA, kGridB),
    binary("minimum_2x3_3", "minimum", "2x3", "3", "2x3", kGridA, kGridB),
    binary("minimum_2x1x4_3x1", "minimum", "2x1x4", "3x1", "2x3x4", kGridA,
           kGridB),
    binary("maximum", "maximum", "2x3", "2x3", "2x3", kGridA, kGridB),
    binary("maximum_2x3_3", "maximum", "2x3", "3", "2x3", kGridA, kGridB),
    binary("maximum_2x1x4_3x1", "maximum", "2x1x4", "3x1", "2x3x4", kGridA,
           kGridB),
    GradCase{"where",
             {input("c", "tensor<2x3xi1>", "vals:1,0,1,1,0,0"),
              param("a", "2x3"), param("b", "2x3")},
             "  %y = merak.where %c, %a, %b : (tensor<2x3xi1>, "
             "tensor<2x3xf64>, tensor<2x3xf64>) -> tensor<2x3xf64>",
             "2x3"},
    GradCase{"where_2x3_3_rank0",
             {input("c", "tensor<2x3xi1>", "vals:0,1,1,1,0,0"), param("a", "3"),
              param("b", "")},
             "  %y = merak.where %c, %a, %b : (tensor<2x3xi1>, tensor<3xf64>, "
             "tensor<f64>) -> tensor<2x3xf64>",
             "2x3"},
    GradCase{"where_cond_3x1_2x1x4",
             {input("c", "tensor<3x1xi1>", "vals:1,0,1"), param("a", "2x1x4"),
              param("b", "3x4")},
             "  %y = merak.where %c, %a, %b : (tensor<3x1xi1>, "
             "tensor<2x1x4xf64>, tensor<3x4xf64>) -> tensor<2x3x4xf64>",
             "2x3x4"},
    // The condition computed from a parameter: no gradient through compare.
    GradCase{"where_compare",
             {param("a", "2x3", kGridA), param("b", "3", kGridB)},
             "  %c = merak.compare #merak.cmp<gt>, %a, %b : (tensor<2x3xf64>, "
             "tensor<3xf64>) -> tensor<2x3xi1>\n"
             "  %y = merak.where %c, %a, %b : (tensor<2x3xi1>, "
             "tensor<2x3xf64>, tensor<3xf64>) -> tensor<2x3xf64>",
             "2x3"},
    // A value used several times: its gradients are added.
    GradCase{"reuse_accumulates",
             {param("a", "2x3")},
             "  %s = merak.sin %a : tensor<2x3xf64>\n"
             "  %m = merak.mul %a, %a : (tensor<2x3xf64>, tensor<2x3xf64>) -> "
             "tensor<2x3xf64>\n"
             "  %y = merak.add %m, %s : (tensor<2x3xf64>, tensor<2x3xf64>) -> "
             "tensor<2x3xf64>",
             "2x3"});

//===----------------------------------------------------------------------===//
// Linear algebra
//===----------------------------------------------------------------------===//

GradCase matmul(const std::string &name, const std::string &la,
                const std::string &lb, const std::string &ly) {
  return {name,
          {param("a", la), param("b", lb)},
          "  %y = merak.matmul %a, %b : (" + f64Type(la) + ", " + f64Type(lb) +
              ") -> " + f64Type(ly),
          ly};
}

GRADIENT_CASES(LinearAlgebra,
               GradCase{
                   "linear_bias_3d",
                   {param("x", "2x3x4"), param("w", "5x4"), param("b", "5")},
                   "  %y = merak.linear %x, %w, %b : (tensor<2x3x4xf64>, "
                   "tensor<5x4xf64>, tensor<5xf64>) -> tensor<2x3x5xf64>",
                   "2x3x5"},
               GradCase{"linear_no_bias_3d",
                        {param("x", "2x3x4"), param("w", "5x4")},
                        "  %y = merak.linear %x, %w : (tensor<2x3x4xf64>, "
                        "tensor<5x4xf64>) -> tensor<2x3x5xf64>",
                        "2x3x5"},
               GradCase{"linear_bias_2d",
                        {param("x", "3x4"), param("w", "2x4"), param("b", "2")},
                        "  %y = merak.linear %x, %w, %b : (tensor<3x4xf64>, "
                        "tensor<2x4xf64>, tensor<2xf64>) -> tensor<3x2xf64>",
                        "3x2"},
               GradCase{"linear_bias_1d",
                        {param("x", "4"), param("w", "3x4"), param("b", "3")},
                        "  %y = merak.linear %x, %w, %b : (tensor<4xf64>, "
                        "tensor<3x4xf64>, tensor<3xf64>) -> tensor<3xf64>",
                        "3"},
               matmul("matmul_2d", "3x4", "4x2", "3x2"),
               matmul("matmul_batched", "2x3x4", "2x4x5", "2x3x5"),
               matmul("matmul_broadcast_batch", "2x1x3x4", "3x4x2", "2x3x3x2"),
               matmul("matmul_2d_lhs_batched_rhs", "3x4", "2x4x5", "2x3x5"),
               matmul("matmul_batched_lhs_2d_rhs", "2x3x4", "4x5", "2x3x5"));

//===----------------------------------------------------------------------===//
// Softmax and normalization
//===----------------------------------------------------------------------===//

GradCase alongDim(const std::string &name, const std::string &op, int dim) {
  return {name,
          {param("x", "2x3x4")},
          "  %y = merak." + op + " %x {dim = " + std::to_string(dim) +
              " : i64} : tensor<2x3x4xf64>",
          "2x3x4"};
}

/// layer_norm or rms_norm of a 2x3x4 input over `rank` trailing dims, with
/// or without the optional weight and bias parameters.
GradCase norm(const std::string &name, const std::string &op, int rank,
              bool weight, bool bias) {
  std::string pshape = rank == 1 ? "4" : "3x4";
  GradCase c{name, {param("x", "2x3x4")}, "", "2x3x4"};
  std::string operands, types = "tensor<2x3x4xf64>";
  if (weight) {
    c.args.push_back(param("w", pshape));
    operands += " weight %w";
    types += ", " + f64Type(pshape);
  }
  if (bias) {
    c.args.push_back(param("b", pshape));
    operands += " bias %b";
    types += ", " + f64Type(pshape);
  }
  c.body = "  %y = merak." + op + " %x" + operands +
           " {normalized_rank = " + std::to_string(rank) +
           " : i64, eps = 1.0e-5 : f64} : (" + types + ") -> tensor<2x3x4xf64>";
  return c;
}

GradCase batchNorm(const std::string &name, const std::string &shape,
                   bool training) {
  std::string t = f64Type(shape);
  return {name,
          {param("x", shape), param("w", "3"), param("b", "3"),
           buffer("rm", "3", "signed"), buffer("rv", "3", "pos:0.5:2")},
          "  %y, %m, %v = merak.batch_norm %x, %w, %b, %rm, %rv {eps = 1.0e-5 "
          ": f64, momentum = 0.1 : f64, training = " +
              std::string(training ? "true" : "false") + "} : (" + t +
              ", tensor<3xf64>, tensor<3xf64>, tensor<3xf64>, tensor<3xf64>) "
              "-> (" +
              t + ", tensor<3xf64>, tensor<3xf64>)",
          shape};
}

GRADIENT_CASES(Normalization, alongDim("softmax_dim1", "softmax", 1),
               alongDim("softmax_dim_minus1", "softmax", -1),
               alongDim("log_softmax_dim0", "log_softmax", 0),
               alongDim("log_softmax_dim_minus1", "log_softmax", -1),
               norm("layer_norm_rank1_weight_bias", "layer_norm", 1, true,
                    true),
               norm("layer_norm_rank1_plain", "layer_norm", 1, false, false),
               norm("layer_norm_rank1_weight", "layer_norm", 1, true, false),
               norm("layer_norm_rank1_bias", "layer_norm", 1, false, true),
               norm("layer_norm_rank2_weight_bias", "layer_norm", 2, true,
                    true),
               norm("layer_norm_rank2_plain", "layer_norm", 2, false, false),
               norm("rms_norm_rank1_weight", "rms_norm", 1, true, false),
               norm("rms_norm_rank1_plain", "rms_norm", 1, false, false),
               norm("rms_norm_rank2_weight", "rms_norm", 2, true, false),
               norm("rms_norm_rank2_plain", "rms_norm", 2, false, false),
               batchNorm("batch_norm_training_2d", "4x3", true),
               batchNorm("batch_norm_training_4d", "2x3x2x2", true),
               batchNorm("batch_norm_eval_2d", "4x3", false),
               batchNorm("batch_norm_eval_4d", "2x3x2x2", false));

//===----------------------------------------------------------------------===//
// Embedding and indexing
//===----------------------------------------------------------------------===//

GRADIENT_CASES(
    Indexing,
    // Repeated rows accumulate. Row 0 is padding: the forward reads it, but
    // PyTorch's embedding backward leaves its gradient zero.
    GradCase{"embedding_padding_idx",
             {param("w", "5x3"),
              input("i", "tensor<2x4xi64>", "vals:1,0,3,1,4,0,1,2")},
             "  %y = merak.embedding %w, %i {padding_idx = 0 : i64} : "
             "(tensor<5x3xf64>, tensor<2x4xi64>) -> tensor<2x4x3xf64>",
             "2x4x3",
             1e-6,
             {"w", 0, 3}},
    GradCase{"embedding_i32",
             {param("w", "4x2"), input("i", "tensor<5xi32>", "vals:3,0,3,2,0")},
             "  %y = merak.embedding %w, %i : (tensor<4x2xf64>, "
             "tensor<5xi32>) -> tensor<5x2xf64>",
             "5x2"},
    GradCase{"index_dim0",
             {param("x", "4x3"), input("i", "tensor<5xi64>", "vals:2,0,2,3,2")},
             "  %y = merak.index %x, %i {dim = 0 : i64} : (tensor<4x3xf64>, "
             "tensor<5xi64>) -> tensor<5x3xf64>",
             "5x3"},
    GradCase{
        "index_dim1_2d_indices",
        {param("x", "2x4x3"), input("i", "tensor<2x2xi64>", "vals:3,1,1,0")},
        "  %y = merak.index %x, %i {dim = 1 : i64} : (tensor<2x4x3xf64>, "
        "tensor<2x2xi64>) -> tensor<2x2x2x3xf64>",
        "2x2x2x3"},
    GradCase{"index_dim_minus1",
             {param("x", "2x4"), input("i", "tensor<3xi32>", "vals:3,3,0")},
             "  %y = merak.index %x, %i {dim = -1 : i64} : (tensor<2x4xf64>, "
             "tensor<3xi32>) -> tensor<2x3xf64>",
             "2x3"});

//===----------------------------------------------------------------------===//
// Shape manipulation
//===----------------------------------------------------------------------===//

/// A one-operand shape op on a 2x3x4 parameter.
GradCase reshape(const std::string &name, const std::string &op,
                 const std::string &attrs, const std::string &ly,
                 const std::string &lx = "2x3x4") {
  return {name,
          {param("x", lx)},
          "  %y = merak." + op + " %x " + attrs + " : (" + f64Type(lx) +
              ") -> " + f64Type(ly),
          ly};
}

GRADIENT_CASES(
    Shape, reshape("reshape", "reshape", "{shape = array<i64: 4, 6>}", "4x6"),
    reshape("permute", "permute", "{permutation = array<i64: 2, 0, 1>}",
            "4x2x3"),
    reshape("slice_step1", "slice",
            "{dim = 1 : i64, start = 1 : i64, end = 3 : i64}", "2x2x4"),
    reshape("slice_step2", "slice",
            "{dim = 2 : i64, start = 0 : i64, end = 4 : i64, step = 2 : i64}",
            "2x3x2"),
    reshape("slice_step2_odd_end_dim_minus1", "slice",
            "{dim = -1 : i64, start = 1 : i64, end = 4 : i64, step = 2 : i64}",
            "2x3x2"),
    reshape("select", "select", "{dim = 1 : i64, index = 2 : i64}", "2x4"),
    reshape("select_dim_minus1", "select", "{dim = -1 : i64, index = 0 : i64}",
            "2x3"),
    reshape("select_to_rank0", "select", "{dim = 0 : i64, index = 3 : i64}", "",
            "5"),
    GradCase{"concat_reused_operand",
             {param("a", "2x3"), param("b", "2x2")},
             "  %y = merak.concat %a, %b, %a {dim = 1 : i64} : "
             "(tensor<2x3xf64>, tensor<2x2xf64>, tensor<2x3xf64>) -> "
             "tensor<2x8xf64>",
             "2x8"},
    GradCase{"concat_dim_minus2",
             {param("a", "2x3"), param("b", "1x3")},
             "  %y = merak.concat %a, %b {dim = -2 : i64} : (tensor<2x3xf64>, "
             "tensor<1x3xf64>) -> tensor<3x3xf64>",
             "3x3"},
    reshape("expand_3x1_to_2x3x4", "expand", "{shape = array<i64: 2, 3, 4>}",
            "2x3x4", "3x1"),
    reshape("expand_1x3_to_4x3", "expand", "{shape = array<i64: 4, 3>}", "4x3",
            "1x3"),
    reshape("pad", "pad",
            "{low = array<i64: 1, 0>, high = array<i64: 0, 2>, value = 1.5 : "
            "f64}",
            "3x5", "2x3"),
    reshape("pad_3d", "pad",
            "{low = array<i64: 0, 2, 1>, high = array<i64: 1, 0, 1>}", "3x5x6"),
    GradCase{"roll",
             {param("x", "3x4")},
             "  %y = merak.roll %x {shifts = array<i64: 1, -2>, dims = "
             "array<i64: 0, 1>} : tensor<3x4xf64>",
             "3x4"},
    GradCase{"cumsum",
             {param("x", "3x4")},
             "  %y = merak.cumsum %x {dim = 1 : i64} : tensor<3x4xf64>",
             "3x4"},
    GradCase{"cumsum_reverse_3d",
             {param("x", "3x4x2")},
             "  %y = merak.cumsum %x {dim = -3 : i64, reverse = true} : "
             "tensor<3x4x2xf64>",
             "3x4x2"},
    GradCase{"update_slice_rows",
             {param("x", "2x5x3"), param("u", "2x2x3"),
              input("p", "tensor<1xi64>", "vals:2")},
             "  %y = merak.update_slice %x, %u, %p {dim = 1 : i64} : "
             "(tensor<2x5x3xf64>, tensor<2x2x3xf64>, tensor<1xi64>) -> "
             "tensor<2x5x3xf64>",
             "2x5x3"},
    GradCase{"update_slice_one_row_last_dim",
             {param("x", "3x4"), param("u", "3x1"),
              input("p", "tensor<1xi64>", "vals:3")},
             "  %y = merak.update_slice %x, %u, %p {dim = -1 : i64} : "
             "(tensor<3x4xf64>, tensor<3x1xf64>, tensor<1xi64>) -> "
             "tensor<3x4xf64>",
             "3x4"},
    GradCase{"roll_dim_minus1_wraps",
             {param("x", "2x3x4")},
             "  %y = merak.roll %x {shifts = array<i64: 5>, dims = array<i64: "
             "-1>} : tensor<2x3x4xf64>",
             "2x3x4"});

//===----------------------------------------------------------------------===//
// Reductions
//===----------------------------------------------------------------------===//

GradCase reduce(const std::string &name, const std::string &op,
                const std::string &dims, bool keepdim, const std::string &ly) {
  return {
      name,
      {param("x", "2x3x4", op == "reduce_max" ? "grid:0.1:0.05" : "signed")},
      "  %y = merak." + op + " %x {dims = array<i64" + dims +
          ">, keepdim = " + (keepdim ? "true" : "false") +
          "} : (tensor<2x3x4xf64>) -> " + f64Type(ly),
      ly};
}

GRADIENT_CASES(
    Reduction, reduce("reduce_sum_dim1", "reduce_sum", ": 1", false, "2x4"),
    reduce("reduce_sum_dims02_keepdim", "reduce_sum", ": 0, 2", true, "1x3x1"),
    reduce("reduce_sum_all", "reduce_sum", "", false, ""),
    reduce("reduce_sum_dim_minus1_keepdim", "reduce_sum", ": -1", true,
           "2x3x1"),
    reduce("reduce_mean_dim1", "reduce_mean", ": 1", false, "2x4"),
    reduce("reduce_mean_dims02_keepdim", "reduce_mean", ": 0, 2", true,
           "1x3x1"),
    reduce("reduce_mean_all", "reduce_mean", "", false, ""),
    reduce("reduce_max_dim1", "reduce_max", ": 1", false, "2x4"),
    reduce("reduce_max_dim1_keepdim", "reduce_max", ": 1", true, "2x1x4"),
    reduce("reduce_max_dims02", "reduce_max", ": 0, 2", false, "3"),
    reduce("reduce_max_all", "reduce_max", "", false, ""),
    reduce("reduce_max_all_keepdim", "reduce_max", "", true, "1x1x1"));

//===----------------------------------------------------------------------===//
// Convolution and pooling
//===----------------------------------------------------------------------===//

GradCase conv(const std::string &name, const std::string &lx,
              const std::string &lw, bool bias, const std::string &ly,
              const std::string &attrs) {
  GradCase c{name, {param("x", lx), param("w", lw)}, "", ly};
  std::string operands = "%x, %w", types = f64Type(lx) + ", " + f64Type(lw);
  if (bias) {
    std::string lb = lw.substr(0, lw.find('x'));
    c.args.push_back(param("b", lb));
    operands += ", %b";
    types += ", " + f64Type(lb);
  }
  c.body = "  %y = merak.conv2d " + operands + " {" + attrs + "} : (" + types +
           ") -> " + f64Type(ly);
  return c;
}

/// A pooling op; inputs are on a grid so that no window has tied maxima.
GradCase pool(const std::string &name, const std::string &op,
              const std::string &lx, const std::string &ly,
              const std::string &attrs) {
  return {name,
          {param("x", lx, "grid:0.05:0.025")},
          "  %y = merak." + op + " %x {" + attrs + "} : (" + f64Type(lx) +
              ") -> " + f64Type(ly),
          ly};
}

GRADIENT_CASES(
    ConvPool,
    conv("conv2d_bias_padding", "1x2x5x5", "3x2x3x3", true, "1x3x5x5",
         "stride = array<i64: 1, 1>, padding = array<i64: 1, 1>, dilation = "
         "array<i64: 1, 1>, groups = 1 : i64"),
    conv("conv2d_stride2_no_bias", "2x2x5x5", "2x2x3x3", false, "2x2x2x2",
         "stride = array<i64: 2, 2>, padding = array<i64: 0, 0>, dilation = "
         "array<i64: 1, 1>, groups = 1 : i64"),
    conv("conv2d_dilation2_groups2_bias", "1x4x5x5", "4x2x3x3", true, "1x4x5x5",
         "stride = array<i64: 1, 1>, padding = array<i64: 2, 2>, dilation = "
         "array<i64: 2, 2>, groups = 2 : i64"),
    conv("conv2d_depthwise", "1x3x4x4", "3x1x3x3", false, "1x3x4x4",
         "stride = array<i64: 1, 1>, padding = array<i64: 1, 1>, dilation = "
         "array<i64: 1, 1>, groups = 3 : i64"),
    conv("conv2d_asymmetric_groups2", "1x4x5x7", "6x2x1x3", true, "1x6x5x3",
         "stride = array<i64: 1, 2>, padding = array<i64: 0, 0>, dilation = "
         "array<i64: 1, 1>, groups = 2 : i64"),
    pool("max_pool2d_k2s2", "max_pool2d", "1x2x4x4", "1x2x2x2",
         "kernel = array<i64: 2, 2>, stride = array<i64: 2, 2>, padding = "
         "array<i64: 0, 0>, dilation = array<i64: 1, 1>"),
    pool("max_pool2d_k3s2p1_overlap", "max_pool2d", "1x2x5x5", "1x2x3x3",
         "kernel = array<i64: 3, 3>, stride = array<i64: 2, 2>, padding = "
         "array<i64: 1, 1>, dilation = array<i64: 1, 1>"),
    pool("max_pool2d_ceil_mode", "max_pool2d", "1x1x5x5", "1x1x3x3",
         "kernel = array<i64: 2, 2>, stride = array<i64: 2, 2>, padding = "
         "array<i64: 0, 0>, dilation = array<i64: 1, 1>, ceil_mode = true"),
    pool("max_pool2d_dilation2_unbatched", "max_pool2d", "2x6x6", "2x4x4",
         "kernel = array<i64: 2, 2>, stride = array<i64: 1, 1>, padding = "
         "array<i64: 0, 0>, dilation = array<i64: 2, 2>"),
    pool("avg_pool2d_k3s2p1_include_pad", "avg_pool2d", "1x2x5x5", "1x2x3x3",
         "kernel = array<i64: 3, 3>, stride = array<i64: 2, 2>, padding = "
         "array<i64: 1, 1>, count_include_pad = true"),
    pool("avg_pool2d_k3s2p1_exclude_pad", "avg_pool2d", "1x2x5x5", "1x2x3x3",
         "kernel = array<i64: 3, 3>, stride = array<i64: 2, 2>, padding = "
         "array<i64: 1, 1>, count_include_pad = false"),
    pool("avg_pool2d_ceil_mode_include_pad", "avg_pool2d", "1x1x5x5", "1x1x3x3",
         "kernel = array<i64: 2, 2>, stride = array<i64: 2, 2>, padding = "
         "array<i64: 0, 0>, ceil_mode = true, count_include_pad = true"),
    pool("avg_pool2d_ceil_mode_p1_exclude_pad", "avg_pool2d", "1x1x6x6",
         "1x1x4x4",
         "kernel = array<i64: 3, 3>, stride = array<i64: 2, 2>, padding = "
         "array<i64: 1, 1>, ceil_mode = true, count_include_pad = false"),
    pool("avg_pool2d_unbatched", "avg_pool2d", "3x4x4", "3x2x2",
         "kernel = array<i64: 2, 2>, stride = array<i64: 2, 2>, padding = "
         "array<i64: 0, 0>"),
    pool("adaptive_avg_pool2d_1x1", "adaptive_avg_pool2d", "2x3x4x4", "2x3x1x1",
         "output_size = array<i64: 1, 1>"),
    pool("adaptive_avg_pool2d_overlapping", "adaptive_avg_pool2d", "1x2x5x7",
         "1x2x2x3", "output_size = array<i64: 2, 3>"),
    pool("adaptive_avg_pool2d_unbatched", "adaptive_avg_pool2d", "3x5x5",
         "3x2x2", "output_size = array<i64: 2, 2>"));

//===----------------------------------------------------------------------===//
// Losses and small compositions
//===----------------------------------------------------------------------===//

/// cross_entropy of 4x5 logits and the given targets.
GradCase crossEntropy(const std::string &name, const std::string &targets,
                      const std::string &attrs, bool none = false,
                      const std::string &targetType = "i64") {
  std::string ly = none ? "4" : "";
  return {name,
          {param("x", "4x5"),
           input("t", "tensor<4x" + targetType + ">", "vals:" + targets)},
          "  %y = merak.cross_entropy %x, %t {" + attrs +
              "} : (tensor<4x5xf64>, tensor<4x" + targetType + ">) -> " +
              f64Type(ly),
          ly};
}

GRADIENT_CASES(
    Loss,
    crossEntropy("cross_entropy_mean", "1,4,0,2",
                 "reduction = #merak.reduction<mean>"),
    crossEntropy("cross_entropy_sum", "1,4,0,2",
                 "reduction = #merak.reduction<sum>"),
    crossEntropy("cross_entropy_none", "1,4,0,2",
                 "reduction = #merak.reduction<none>", true),
    crossEntropy("cross_entropy_default_ignore_index", "1,-100,0,-100", ""),
    crossEntropy("cross_entropy_ignore_index_mean", "1,3,1,2",
                 "ignore_index = 1 : i64"),
    crossEntropy("cross_entropy_ignore_index_sum", "1,3,1,2",
                 "ignore_index = 1 : i64, reduction = #merak.reduction<sum>"),
    crossEntropy("cross_entropy_ignore_index_none", "1,3,1,2",
                 "ignore_index = 1 : i64, reduction = #merak.reduction<none>",
                 true),
    crossEntropy("cross_entropy_label_smoothing_mean", "1,4,0,2",
                 "label_smoothing = 0.1 : f64"),
    crossEntropy(
        "cross_entropy_label_smoothing_sum", "1,4,0,2",
        "label_smoothing = 0.2 : f64, reduction = #merak.reduction<sum>"),
    crossEntropy(
        "cross_entropy_label_smoothing_none", "1,4,0,2",
        "label_smoothing = 0.1 : f64, reduction = #merak.reduction<none>",
        true),
    crossEntropy("cross_entropy_label_smoothing_ignore_index_mean", "4,2,4,0",
                 "ignore_index = 4 : i64, label_smoothing = 0.3 : f64"),
    crossEntropy("cross_entropy_i32_targets", "3,0,0,1", "", false, "i32"),
    // Scaled dot-product attention: matmul, permute, mul, softmax, matmul.
    GradCase{"attention",
             {param("q", "2x3x4"), param("k", "2x3x4"), param("v", "2x3x4")},
             "  %kt = merak.permute %k {permutation = array<i64: 0, 2, 1>} : "
             "(tensor<2x3x4xf64>) -> tensor<2x4x3xf64>\n"
             "  %s = merak.matmul %q, %kt : (tensor<2x3x4xf64>, "
             "tensor<2x4x3xf64>) -> tensor<2x3x3xf64>\n"
             "  %c = merak.constant dense<0.5> : tensor<f64>\n"
             "  %sc = merak.mul %s, %c : (tensor<2x3x3xf64>, tensor<f64>) -> "
             "tensor<2x3x3xf64>\n"
             "  %p = merak.softmax %sc {dim = -1 : i64} : tensor<2x3x3xf64>\n"
             "  %y = merak.matmul %p, %v : (tensor<2x3x3xf64>, "
             "tensor<2x3x4xf64>) -> tensor<2x3x4xf64>",
             "2x3x4"},
    // An MLP block ending in the loss itself (W multiplies a rank-0 loss).
    GradCase{"mlp_layer_norm_cross_entropy",
             {param("x", "4x3"), param("w1", "6x3"), param("b1", "6"),
              param("g", "6"), param("w2", "5x6"),
              input("t", "tensor<4xi64>", "vals:0,4,2,2")},
             "  %h = merak.linear %x, %w1, %b1 : (tensor<4x3xf64>, "
             "tensor<6x3xf64>, tensor<6xf64>) -> tensor<4x6xf64>\n"
             "  %a = merak.gelu %h : tensor<4x6xf64>\n"
             "  %n = merak.layer_norm %a weight %g {normalized_rank = 1 : i64, "
             "eps = 1.0e-5 : f64} : (tensor<4x6xf64>, tensor<6xf64>) -> "
             "tensor<4x6xf64>\n"
             "  %o = merak.linear %n, %w2 : (tensor<4x6xf64>, tensor<5x6xf64>) "
             "-> tensor<4x5xf64>\n"
             "  %y = merak.cross_entropy %o, %t : (tensor<4x5xf64>, "
             "tensor<4xi64>) -> tensor<f64>",
             ""});

//===----------------------------------------------------------------------===//
// What gets no gradient, and what cannot be differentiated
//===----------------------------------------------------------------------===//

class AutodiffGradients : public ::testing::Test {
protected:
  AutodiffGradients() {
    DialectRegistry registry;
    merak::registerMerakDialects(registry);
    ctx.appendDialectRegistry(registry);
    ctx.loadAllAvailableDialects();
    ctx.getDiagEngine().registerHandler([this](Diagnostic &d) {
      std::string where = "?";
      if (auto loc = dyn_cast<FileLineColLoc>(d.getLocation()))
        where = (loc.getFilename().str() + ":" + std::to_string(loc.getLine()) +
                 ":" + std::to_string(loc.getColumn()));
      diagnostics.push_back(where + ": " + d.str());
      return success();
    });
  }

  /// Parses `text` and runs --merak-autodiff on it.
  LogicalResult differentiate(const char *text) {
    module = parseSourceString<ModuleOp>(text, &ctx);
    if (!module)
      return failure();
    PassManager pm(&ctx);
    pm.addPass(merak::createAutodiff());
    return pm.run(*module);
  }

  MLIRContext ctx;
  OwningOpRef<ModuleOp> module;
  std::vector<std::string> diagnostics;
};

// `unused` is not read; `threshold` reaches the loss only through a
// comparison, which is piecewise constant. Neither gets a gradient result,
// as PyTorch leaves their .grad unset.
TEST_F(AutodiffGradients, ParametersTheLossDoesNotDependOnGetNoGradient) {
  ASSERT_TRUE(succeeded(differentiate(R"mlir(
func.func @forward(%w: tensor<3xf64> {merak.param = "w"},
                   %unused: tensor<2xf64> {merak.param = "unused"},
                   %threshold: tensor<f64> {merak.param = "threshold"},
                   %x: tensor<3xf64> {merak.input = "x"}) -> tensor<f64> {
  %c = merak.compare #merak.cmp<gt>, %x, %threshold : (tensor<3xf64>, tensor<f64>) -> tensor<3xi1>
  %z = merak.constant dense<0.0> : tensor<f64>
  %m = merak.where %c, %w, %z : (tensor<3xi1>, tensor<3xf64>, tensor<f64>) -> tensor<3xf64>
  %l = merak.reduce_sum %m {dims = array<i64>} : (tensor<3xf64>) -> tensor<f64>
  return %l : tensor<f64>
}
)mlir")));
  auto step = module->lookupSymbol<func::FuncOp>(merak::kTrainStepName);
  ASSERT_TRUE(step);
  std::vector<std::string> grads;
  for (unsigned r = 0; r < step.getNumResults(); ++r)
    if (auto name = step.getResultAttrOfType<StringAttr>(r, merak::kGradAttr))
      grads.push_back(name.str());
  EXPECT_EQ(grads, std::vector<std::string>{"w"});
  EXPECT_EQ(step.getNumResults(), 2u);

  // The step still runs: the gradient of w is the mask x > threshold.
  FailureOr<Program> program = lowerToProgram(step);
  ASSERT_TRUE(succeeded(program));
  std::unique_ptr<Backend> backend = createCpuBackend(CpuBackendOptions{1});
  auto executor = Executor::create(*program, *backend);
  ASSERT_TRUE(executor.ok());
  std::map<std::string, HostTensor> state{
      {"w", HostTensor::allocate({DType::F64, {3}})},
      {"unused", HostTensor::allocate({DType::F64, {2}})},
      {"threshold", HostTensor::scalar(DType::F64, 0.5)}};
  ASSERT_TRUE((*executor)->loadState(state, "the test", false).ok());
  HostTensor x = HostTensor::allocate({DType::F64, {3}});
  setElement(x, 0, 1.0), setElement(x, 1, 0.0), setElement(x, 2, 2.0);
  std::vector<HostTensor> results;
  ASSERT_TRUE((*executor)->runStep({}, {x}, false, &results).ok());
  ASSERT_EQ(results.size(), 2u);
  EXPECT_EQ(getF64(results[1], 0), 1.0);
  EXPECT_EQ(getF64(results[1], 1), 0.0);
  EXPECT_EQ(getF64(results[1], 2), 1.0);
}

// gelu_backward has no gradient rule (no second derivatives): on the path
// from a parameter to the loss it is an error at the op's location; on
// inputs alone it is fine.
TEST_F(AutodiffGradients, OpWithoutGradientRuleOnThePathIsReported) {
  EXPECT_TRUE(failed(differentiate(R"mlir(
func.func @forward(%w: tensor<2xf64> {merak.param = "w"},
                   %x: tensor<2xf64> {merak.input = "x"}) -> tensor<f64> {
  %0 = merak.gelu_backward %x, %w : (tensor<2xf64>, tensor<2xf64>) -> tensor<2xf64> loc("model.py":7:5)
  %1 = merak.reduce_sum %0 {dims = array<i64>} : (tensor<2xf64>) -> tensor<f64>
  return %1 : tensor<f64>
}
)mlir")));
  ASSERT_EQ(diagnostics.size(), 1u);
  EXPECT_EQ(diagnostics[0],
            "model.py:7:5: has no gradient rule, but the loss depends on it "
            "through a parameter");

  diagnostics.clear();
  EXPECT_TRUE(succeeded(differentiate(R"mlir(
func.func @forward(%w: tensor<2xf64> {merak.param = "w"},
                   %x: tensor<2xf64> {merak.input = "x"}) -> tensor<f64> {
  %0 = merak.gelu_backward %x, %x : (tensor<2xf64>, tensor<2xf64>) -> tensor<2xf64>
  %1 = merak.mul %0, %w : (tensor<2xf64>, tensor<2xf64>) -> tensor<2xf64>
  %2 = merak.reduce_sum %1 {dims = array<i64>} : (tensor<2xf64>) -> tensor<f64>
  return %2 : tensor<f64>
}
)mlir")));
  EXPECT_TRUE(diagnostics.empty());
}

} // namespace
