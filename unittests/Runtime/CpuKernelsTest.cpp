//===- CpuKernelsTest.cpp - CPU kernels against PyTorch's own results -----===//
//
// Each test runs a merak op through the CPU backend (or a small program
// through the executor) and compares, bit for bit, with what PyTorch's C++
// API computes: torch::optim for the updates, autograd for the gradients.
//
//===----------------------------------------------------------------------===//

#include "../../lib/Runtime/CPU/GemmLayout.h"
#include "merak/Runtime/Backend.h"
#include "merak/Runtime/CPU/CpuBackend.h"
#include "merak/Runtime/Executor.h"
#include "merak/Runtime/Random.h"
#include "merak/Runtime/TorchIO.h"

#include "gtest/gtest.h"

#include <torch/torch.h>

#include <cstring>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

using namespace merak::runtime;

namespace {

DType dtypeOf(const at::Tensor &t) {
  switch (t.scalar_type()) {
  case at::kFloat:
    return DType::F32;
  case at::kDouble:
    return DType::F64;
  case at::kLong:
    return DType::I64;
  case at::kInt:
    return DType::I32;
  case at::kBool:
    return DType::Bool;
  default:
    ADD_FAILURE() << "unexpected dtype";
    return DType::F32;
  }
}

at::ScalarType atenOf(DType dtype) {
  switch (dtype) {
  case DType::F64:
    return at::kDouble;
  case DType::I64:
    return at::kLong;
  case DType::I32:
    return at::kInt;
  case DType::Bool:
    return at::kBool;
  default:
    return at::kFloat;
  }
}

TensorType typeOf(const at::Tensor &t) {
  return TensorType{dtypeOf(t),
                    std::vector<int64_t>(t.sizes().begin(), t.sizes().end())};
}

HostTensor toHost(const at::Tensor &t) {
  at::Tensor c = t.detach().contiguous();
  HostTensor h = HostTensor::allocate(typeOf(c));
  std::memcpy(h.mutableBytes(), c.data_ptr(), h.byteSize());
  return h;
}

at::Tensor fromHost(const HostTensor &h) {
  at::Tensor t =
      at::empty(h.type.shape, at::TensorOptions().dtype(atenOf(h.type.dtype)));
  std::memcpy(t.data_ptr(), h.data, h.byteSize());
  return t;
}

/// Appends one input argument to `p` per tensor, typed like it.
void addInputs(Program &p, std::initializer_list<at::Tensor> tensors) {
  for (const at::Tensor &t : tensors) {
    Argument arg;
    arg.value = ValueId(p.values.size());
    arg.role = ArgumentRole::Input;
    p.values.push_back(ValueInfo{typeOf(t)});
    p.arguments.push_back(arg);
  }
}

/// Expects identical shapes, dtypes and bits.
void expectIdentical(const at::Tensor &actual, const at::Tensor &expected,
                     const std::string &what) {
  ASSERT_EQ(actual.sizes(), expected.sizes()) << what;
  ASSERT_EQ(actual.scalar_type(), expected.scalar_type()) << what;
  EXPECT_TRUE(torch::equal(actual, expected.contiguous()))
      << what << ": max abs diff "
      << (actual - expected).abs().max().item<double>();
}

/// Expects identical shapes and dtypes, and values equal to rounding.
void expectClose(const at::Tensor &actual, const at::Tensor &expected,
                 const std::string &what, double rtol = 1e-5,
                 double atol = 1e-5) {
  ASSERT_EQ(actual.sizes(), expected.sizes()) << what;
  ASSERT_EQ(actual.scalar_type(), expected.scalar_type()) << what;
  EXPECT_TRUE(torch::allclose(actual, expected, rtol, atol))
      << what << ": max abs diff "
      << (actual - expected).abs().max().item<double>();
}

/// A CPU backend on `threads` threads whose GEMMs are the BLAS's, as
/// PyTorch's are: the comparisons below are bit for bit.
std::unique_ptr<Backend> blasBackend(int threads, bool arena = true) {
  return createCpuBackend({threads, arena, true, GemmLibrary::Blas});
}

class CpuKernelsTest : public ::testing::Test {
protected:
  CpuKernelsTest() : backend(blasBackend(1)) {}

  /// Runs one op on `operands` (undefined = absent optional operand) with
  /// results of `resultTypes`; returns the results.
  std::vector<at::Tensor> run(OpKind kind, const OpAttrs &attrs,
                              const std::vector<at::Tensor> &operands,
                              const std::vector<TensorType> &resultTypes,
                              const StepContext &step = {},
                              int inPlaceOperand = -1) {
    Program p;
    Instruction inst;
    inst.kind = kind;
    inst.attrs = attrs;
    for (const at::Tensor &t : operands) {
      if (!t.defined()) {
        inst.operands.push_back(kNoValue);
        continue;
      }
      Argument arg;
      arg.value = ValueId(p.values.size());
      arg.role = ArgumentRole::Input;
      p.values.push_back(ValueInfo{typeOf(t)});
      p.arguments.push_back(arg);
      inst.operands.push_back(arg.value);
    }
    for (const TensorType &type : resultTypes) {
      ValueId v = ValueId(p.values.size());
      p.values.push_back(ValueInfo{type});
      inst.results.push_back(v);
      p.results.push_back(ResultInfo{v});
    }
    p.instructions.push_back(inst);
    EXPECT_TRUE(planProgram(p).ok());
    if (inPlaceOperand >= 0)
      p.instructions[0].storage[0] = {ResultStorage::Kind::InPlace,
                                      inPlaceOperand};

    std::vector<TensorHandle> handles;
    KernelCall call;
    call.instruction = &p.instructions[0];
    call.program = &p;
    call.step = &step;
    for (const at::Tensor &t : operands) {
      if (!t.defined()) {
        call.operands.push_back(nullptr);
        continue;
      }
      handles.push_back(*backend->upload(toHost(t)));
      call.operands.push_back(handles.back().get());
    }
    call.hostScalars.resize(call.operands.size());
    call.inPlace.resize(resultTypes.size());
    if (inPlaceOperand >= 0)
      call.inPlace[0] = call.operands[inPlaceOperand];
    EXPECT_TRUE(backend->beginStep(step).ok());
    absl::Status s = backend->execute(call);
    EXPECT_TRUE(s.ok()) << s;
    std::vector<at::Tensor> results;
    for (size_t r = 0; r < call.results.size(); ++r)
      results.push_back(
          fromHost(*backend->download(*call.results[r], resultTypes[r])));
    // An in-place result is the operand's own storage.
    if (inPlaceOperand >= 0 && !call.results.empty())
      EXPECT_EQ(
          backend->download(*call.operands[inPlaceOperand], resultTypes[0])
              ->elementAsDouble(0),
          results[0].flatten()[0].item<double>());
    return results;
  }

  /// Runs one op on two operands, with one result of `resultType`, without
  /// planning (so shapes may disagree); returns the kernel's status.
  absl::Status runUnchecked(OpKind kind, const at::Tensor &x,
                            const at::Tensor &y, const TensorType &resultType) {
    Program p;
    p.values = {ValueInfo{typeOf(x)}, ValueInfo{typeOf(y)},
                ValueInfo{resultType}};
    Instruction inst;
    inst.kind = kind;
    inst.operands = {0, 1};
    inst.results = {2};
    inst.storage = {ResultStorage()};
    p.instructions.push_back(inst);
    auto a = *backend->upload(toHost(x));
    auto b = *backend->upload(toHost(y));
    KernelCall call;
    StepContext step;
    call.instruction = &p.instructions[0];
    call.program = &p;
    call.step = &step;
    call.operands = {a.get(), b.get()};
    call.hostScalars.resize(2);
    call.inPlace.resize(1);
    return backend->execute(call);
  }

  std::unique_ptr<Backend> backend;
};

//===----------------------------------------------------------------------===//
// Optimizers: three steps through the executor against torch::optim
//===----------------------------------------------------------------------===//

/// A program with one update op: param, grad (an input), state, lr, step.
Program updateProgram(OpKind kind, const OpAttrs &attrs,
                      const std::vector<int64_t> &shape, int numState) {
  Program p;
  p.function = "train_step";
  TensorType t{DType::F32, shape};
  auto addArg = [&](ArgumentRole role, const std::string &name,
                    TensorType type) {
    Argument a;
    a.value = ValueId(p.values.size());
    a.role = role;
    a.name = name;
    p.values.push_back(ValueInfo{type});
    p.arguments.push_back(a);
    return a.value;
  };
  Instruction inst;
  inst.kind = kind;
  inst.attrs = attrs;
  inst.operands.push_back(addArg(ArgumentRole::Param, "w", t));
  inst.operands.push_back(addArg(ArgumentRole::Input, "grad", t));
  const char *stateNames[] = {"w/exp_avg", "w/exp_avg_sq"};
  for (int i = 0; i < numState; ++i)
    inst.operands.push_back(addArg(
        ArgumentRole::OptState,
        kind == OpKind::SgdUpdate ? "w/momentum_buffer" : stateNames[i], t));
  inst.operands.push_back(
      addArg(ArgumentRole::LearningRate, "lr", TensorType{DType::F32, {}}));
  inst.operands.push_back(
      addArg(ArgumentRole::Step, "step", TensorType{DType::I64, {}}));
  for (int r = 0; r < 1 + numState; ++r) {
    ValueId v = ValueId(p.values.size());
    p.values.push_back(ValueInfo{t});
    inst.results.push_back(v);
    int arg = r == 0 ? 0 : 1 + r;
    p.results.push_back(ResultInfo{v, false, arg});
    p.arguments[arg].updatedBy = r;
  }
  p.instructions.push_back(inst);
  EXPECT_TRUE(planProgram(p).ok());
  return p;
}

void checkSgd(Backend &backend, double momentum, double dampening,
              bool nesterov, double weightDecay) {
  SCOPED_TRACE(testing::Message()
               << "momentum " << momentum << " dampening " << dampening
               << " nesterov " << nesterov << " weight decay " << weightDecay);
  torch::manual_seed(1);
  at::Tensor w0 = torch::randn({3, 5});
  std::vector<at::Tensor> grads = {torch::randn({3, 5}), torch::randn({3, 5}),
                                   torch::randn({3, 5})};
  double lr = 0.05;

  OpAttrs attrs;
  attrs.momentum = momentum;
  attrs.dampening = dampening;
  attrs.nesterov = nesterov;
  attrs.weightDecay = weightDecay;
  Program p = updateProgram(OpKind::SgdUpdate, attrs, {3, 5}, 1);
  // The update writes the parameter and buffer in place.
  ASSERT_EQ(p.instructions[0].storage[0].kind, ResultStorage::Kind::InPlace);
  auto executor = Executor::create(p, backend);
  ASSERT_TRUE(executor.ok());
  ASSERT_TRUE((*executor)->loadState({{"w", toHost(w0)}}, "test", false).ok());

  at::Tensor w = w0.clone().requires_grad_(true);
  torch::optim::SGD sgd({w}, torch::optim::SGDOptions(lr)
                                 .momentum(momentum)
                                 .dampening(dampening)
                                 .nesterov(nesterov)
                                 .weight_decay(weightDecay));
  for (int step = 1; step <= 3; ++step) {
    StepContext ctx;
    ctx.globalStep = ctx.optimizerStep = step;
    ctx.learningRate = lr;
    ASSERT_TRUE(
        (*executor)->runStep(ctx, {toHost(grads[step - 1])}, false).ok());
    w.mutable_grad() = grads[step - 1].clone();
    sgd.step();
  }
  auto state = (*executor)->stateToHost();
  ASSERT_TRUE(state.ok());
  expectIdentical(fromHost(state->at("w")), w.detach(), "parameter");
  if (momentum != 0) {
    auto &buf = static_cast<torch::optim::SGDParamState &>(
        *sgd.state().at(c10::guts::to_string(w.unsafeGetTensorImpl())));
    expectIdentical(fromHost(state->at("w/momentum_buffer")),
                    buf.momentum_buffer(), "momentum buffer");
  }
}

TEST_F(CpuKernelsTest, SgdUpdateMatchesTorchOptim) {
  checkSgd(*backend, 0.0, 0.0, false, 0.0);
  checkSgd(*backend, 0.9, 0.0, false, 0.0);
  checkSgd(*backend, 0.9, 0.1, false, 1e-2);
  checkSgd(*backend, 0.8, 0.0, true, 1e-3);
}

void checkAdamw(Backend &backend, double weightDecay,
                std::vector<int64_t> shape = {4, 6}) {
  SCOPED_TRACE(testing::Message()
               << "weight decay " << weightDecay << " elements "
               << c10::multiply_integers(shape));
  torch::manual_seed(2);
  at::Tensor w0 = torch::randn(shape);
  std::vector<at::Tensor> grads = {torch::randn(shape), torch::randn(shape),
                                   torch::randn(shape)};
  double lr = 1e-3;
  OpAttrs attrs;
  attrs.beta1 = 0.9;
  attrs.beta2 = 0.999;
  attrs.eps = 1e-8;
  attrs.weightDecay = weightDecay;
  Program p = updateProgram(OpKind::AdamwUpdate, attrs, shape, 2);
  auto executor = Executor::create(p, backend);
  ASSERT_TRUE(executor.ok());
  ASSERT_TRUE((*executor)->loadState({{"w", toHost(w0)}}, "test", false).ok());

  at::Tensor w = w0.clone().requires_grad_(true);
  torch::optim::AdamW adamw({w}, torch::optim::AdamWOptions(lr)
                                     .betas({0.9, 0.999})
                                     .eps(1e-8)
                                     .weight_decay(weightDecay));
  for (int step = 1; step <= 3; ++step) {
    StepContext ctx;
    ctx.globalStep = ctx.optimizerStep = step;
    ctx.learningRate = lr;
    ASSERT_TRUE(
        (*executor)->runStep(ctx, {toHost(grads[step - 1])}, false).ok());
    w.mutable_grad() = grads[step - 1].clone();
    adamw.step();
  }
  auto state = (*executor)->stateToHost();
  ASSERT_TRUE(state.ok());
  auto &s = static_cast<torch::optim::AdamWParamState &>(
      *adamw.state().at(c10::guts::to_string(w.unsafeGetTensorImpl())));
  expectIdentical(fromHost(state->at("w")), w.detach(), "parameter");
  expectIdentical(fromHost(state->at("w/exp_avg")), s.exp_avg(), "exp_avg");
  expectIdentical(fromHost(state->at("w/exp_avg_sq")), s.exp_avg_sq(),
                  "exp_avg_sq");
}

TEST_F(CpuKernelsTest, AdamwUpdateMatchesTorchOptim) {
  checkAdamw(*backend, 0.01);
  checkAdamw(*backend, 0.0);
  // The fused update by blocks over two threads, eight elements at a time
  // and the rest one by one: still torch.optim's results bit for bit.
  backend = blasBackend(2);
  checkAdamw(*backend, 0.1, {301, 1003});
  backend = blasBackend(1);
}

//===----------------------------------------------------------------------===//
// Gradients against autograd
//===----------------------------------------------------------------------===//

TEST_F(CpuKernelsTest, CrossEntropyBackwardMatchesAutograd) {
  torch::manual_seed(3);
  at::Tensor logits = torch::randn({6, 5});
  at::Tensor target = torch::tensor({0, 4, 2, -100, 1, 2}, torch::kLong);
  for (LossReduction reduction :
       {LossReduction::Mean, LossReduction::Sum, LossReduction::None})
    for (double smoothing : {0.0, 0.1})
      for (int64_t ignore : {int64_t(-100), int64_t(2)}) {
        SCOPED_TRACE(testing::Message()
                     << "reduction " << int(reduction) << " smoothing "
                     << smoothing << " ignore " << ignore);
        at::Tensor t = ignore == -100 ? target : target.clamp_min(0);
        int64_t red = reduction == LossReduction::Mean  ? at::Reduction::Mean
                      : reduction == LossReduction::Sum ? at::Reduction::Sum
                                                        : at::Reduction::None;
        at::Tensor x = logits.clone().requires_grad_(true);
        at::Tensor loss =
            at::cross_entropy_loss(x, t, {}, red, ignore, smoothing);
        at::Tensor grad = reduction == LossReduction::None
                              ? torch::randn({6})
                              : torch::tensor(0.75f);
        loss.backward(grad);

        OpAttrs attrs;
        attrs.reduction = reduction;
        attrs.ignoreIndex = ignore;
        attrs.labelSmoothing = smoothing;
        std::vector<at::Tensor> forward =
            run(OpKind::CrossEntropy, attrs, {logits, t}, {typeOf(loss)});
        expectIdentical(forward[0], loss.detach(), "loss");
        std::vector<at::Tensor> backward =
            run(OpKind::CrossEntropyBackward, attrs, {grad, logits, t},
                {typeOf(logits)});
        expectIdentical(backward[0], x.grad(), "gradient");
      }
}

TEST_F(CpuKernelsTest, CrossEntropyByBlocksOnThreadsMatchesAutograd) {
  // Enough rows and classes for many blocks of rows over two threads; each
  // row goes through the same ATen functions as in autograd, and nll_loss
  // reduces in its own order, so the results are PyTorch's bit for bit.
  // ignore_index 0 is a class of its own.
  backend = blasBackend(2);
  torch::manual_seed(5);
  at::Tensor logits = torch::randn({203, 3001}) * 4;
  at::Tensor target = torch::randint(0, 3001, {203}, torch::kLong);
  target.index_put_({torch::arange(0, 203, 7)}, -100);
  for (int64_t ignore : {int64_t(-100), int64_t(0)})
    for (double smoothing : {0.0, 0.2}) {
      SCOPED_TRACE(testing::Message()
                   << "smoothing " << smoothing << " ignore " << ignore);
      at::Tensor tgt = ignore == -100 ? target : target.clamp_min(0);
      at::Tensor x = logits.clone().requires_grad_(true);
      at::Tensor loss = at::cross_entropy_loss(x, tgt, {}, at::Reduction::Mean,
                                               ignore, smoothing);
      loss.backward(torch::tensor(1.5f));
      OpAttrs attrs;
      attrs.labelSmoothing = smoothing;
      attrs.ignoreIndex = ignore;
      expectIdentical(
          run(OpKind::CrossEntropy, attrs, {logits, tgt}, {typeOf(loss)})[0],
          loss.detach(), "loss");
      expectIdentical(run(OpKind::CrossEntropyBackward, attrs,
                          {torch::tensor(1.5f), logits, tgt},
                          {typeOf(logits)})[0],
                      x.grad(), "gradient");
    }

  // A target outside the classes is an error, as in nll_loss.
  at::Tensor bad = target.clone();
  bad[3] = 3001;
  EXPECT_EQ(runUnchecked(OpKind::CrossEntropy, logits, bad,
                         TensorType{DType::F32, {}})
                .message(),
            "Target 3001 is out of bounds.");
  backend = blasBackend(1);
}

TEST_F(CpuKernelsTest, SoftmaxBackwardMatchesAutograd) {
  // Rows of 37 (not a multiple of the vector width), some entries masked
  // to -inf as in causal attention, along the last and a middle dimension.
  torch::manual_seed(6);
  at::Tensor x0 = torch::randn({3, 4, 37});
  x0.index_put_({torch::indexing::Slice(), 0, torch::indexing::Slice(5)},
                -INFINITY);
  for (int64_t dim : {int64_t(2), int64_t(1)}) {
    at::Tensor x = x0.clone().requires_grad_(true);
    at::Tensor y = at::softmax(x, dim);
    at::Tensor g = torch::randn(y.sizes());
    y.backward(g);
    OpAttrs attrs;
    attrs.dim = dim;
    expectIdentical(
        run(OpKind::SoftmaxBackward, attrs, {g, y.detach()}, {typeOf(x0)})[0],
        x.grad(), "softmax gradient along " + std::to_string(dim));
  }
}

TEST_F(CpuKernelsTest, SoftmaxAndCrossEntropyBackwardReadStridedOperands) {
  // LibTorch 1.13's kernels misread a strided softmax output (a tp rank's
  // slice of the heads) and write a strided `out` wrongly (the gradient of
  // logits that are a transposed view, CLIP's loss over the columns); the
  // kernels' results are those of dense operands.
  torch::manual_seed(9);
  at::Tensor y = at::softmax(torch::randn({4, 4, 9, 9}), 3).narrow(1, 2, 2);
  at::Tensor g = torch::randn({4, 2, 9, 9});
  OpAttrs attrs;
  attrs.dim = 3;
  expectIdentical(run(OpKind::SoftmaxBackward, attrs, {g, y}, {typeOf(g)})[0],
                  at::_softmax_backward_data(g, y.contiguous(), 3, at::kFloat),
                  "softmax gradient of a slice");

  at::Tensor logits = torch::randn({5, 5}).t();
  at::Tensor target = torch::arange(5, torch::kLong);
  at::Tensor x = logits.contiguous().requires_grad_(true);
  at::cross_entropy_loss(x, target).backward(torch::tensor(0.5f));
  expectIdentical(run(OpKind::CrossEntropyBackward, OpAttrs(),
                      {torch::tensor(0.5f), logits, target}, {typeOf(x)})[0],
                  x.grad(), "cross-entropy gradient of a transpose");
}

/// What masked_attention stands for, as the unfused ops compute it, with
/// autograd's gradients of `sum(result * g)`.
struct UnfusedAttention {
  at::Tensor result, probs, gq, gk, gv;
};

UnfusedAttention unfusedAttention(const at::Tensor &q0, const at::Tensor &k0,
                                  const at::Tensor &v0, const at::Tensor &mask,
                                  float scale, bool divide,
                                  const at::Tensor &g) {
  at::Tensor q = q0.clone().requires_grad_(true);
  at::Tensor k = k0.clone().requires_grad_(true);
  at::Tensor v = v0.clone().requires_grad_(true);
  at::Tensor scores = at::matmul(q, k.transpose(-2, -1));
  at::Tensor c = at::scalar_tensor(scale, at::kFloat);
  scores = divide ? scores / c : scores * c;
  if (mask.scalar_type() == at::kBool)
    scores =
        at::where(mask.logical_not(), at::scalar_tensor(-INFINITY), scores);
  else
    scores = scores + mask;
  at::Tensor probs = at::softmax(scores, -1);
  at::Tensor result = at::matmul(probs, v);
  result.backward(g);
  return {result.detach(), probs.detach(), q.grad(), k.grad(), v.grad()};
}

TEST_F(CpuKernelsTest, MaskedAttentionMatchesUnfusedOps) {
  // Causal masks (the blocked path; 150 rows are 3 blocks, the last one
  // partial), a per-batch padding mask and a mask that is almost causal
  // (the general path), on [batch, heads, T, D] with E != D: boolean masks
  // with the scores multiplied by the scale (GPT-2), additive ones with
  // the scores divided by it (LLaMA's causal mask, BERT's padding mask).
  torch::manual_seed(9);
  for (int64_t t : {int64_t(5), int64_t(64), int64_t(150)}) {
    for (int kind = 0; kind < 5; ++kind) {
      int64_t b = 2, h = 3, d = 8, e = 6;
      at::Tensor q = torch::randn({b, h, t, d}), k = torch::randn({b, h, t, d});
      at::Tensor v = torch::randn({b, h, t, e}), g = torch::randn({b, h, t, e});
      at::Tensor mask = torch::ones({1, 1, t, t}, at::kBool).tril();
      if (kind == 1) {
        mask = torch::ones({b, 1, t, t}, at::kBool).tril();
        mask.index_put_(
            {1, 0, torch::indexing::Slice(), torch::indexing::Slice(t / 2 + 1)},
            false);
      } else if (kind == 2) {
        mask = mask.clone();
        mask.index_put_({0, 0, t - 1, 0}, false);
      } else if (kind == 3) {
        mask = torch::full({t, t}, -INFINITY).triu(1);
      } else if (kind == 4) {
        mask = torch::zeros({b, 1, 1, t});
        mask.index_put_({1, 0, 0, torch::indexing::Slice(t / 2 + 1)}, -10000.0);
      }
      bool divide = kind >= 3;
      float scale = divide ? std::sqrt(float(d)) : 1.0f / std::sqrt(float(d));
      UnfusedAttention want = unfusedAttention(q, k, v, mask, scale, divide, g);
      OpAttrs attrs;
      attrs.scale = scale;
      attrs.scaleDivides = divide;
      bool causal = kind == 0 || kind == 3;
      std::string what =
          "T=" + std::to_string(t) + " mask " + std::to_string(kind) + ": ";
      int64_t causalBefore = causalAttentionCalls();
      auto fwd = run(OpKind::MaskedAttention, attrs, {q, k, v, mask},
                     {typeOf(want.result), typeOf(want.probs)});
      auto bwd = run(OpKind::MaskedAttentionBackward, attrs,
                     {g, q, k, v, mask, want.probs},
                     {typeOf(q), typeOf(k), typeOf(v)});
      // Causal masks (boolean or additive) take the blocked path, forward
      // and backward; the others do not.
      EXPECT_EQ(causalAttentionCalls() - causalBefore, causal ? 2 : 0)
          << what << "causal path";
      // The general path runs the unfused ops' kernels: the same bits
      // forward. The causal blocks sum rows of other lengths and GEMMs of
      // other shapes: within rounding.
      if (!causal || t <= 64) {
        expectIdentical(fwd[0], want.result, what + "result");
        expectIdentical(fwd[1], want.probs, what + "probs");
      }
      expectClose(fwd[0], want.result, what + "result", 1e-5, 1e-6);
      expectClose(fwd[1], want.probs, what + "probs", 1e-5, 1e-6);
      expectClose(bwd[0], want.gq, what + "grad query", 1e-5, 1e-6);
      expectClose(bwd[1], want.gk, what + "grad key", 1e-5, 1e-6);
      expectClose(bwd[2], want.gv, what + "grad value", 1e-5, 1e-6);
      if (causal) {
        // The blocks a causal mask skips are zero, as softmax leaves them.
        at::Tensor upper = torch::ones({t, t}, at::kBool).triu(1);
        EXPECT_TRUE(torch::all(fwd[1].masked_select(upper) == 0).item<bool>())
            << what << "probs above the diagonal";
      }
    }
  }
}

TEST_F(CpuKernelsTest, LayerNormBackwardMatchesAutograd) {
  torch::manual_seed(4);
  at::Tensor x0 = torch::randn({2, 3, 8});
  at::Tensor w0 = torch::randn({8}), b0 = torch::randn({8});
  at::Tensor x = x0.clone().requires_grad_(true);
  at::Tensor w = w0.clone().requires_grad_(true);
  at::Tensor b = b0.clone().requires_grad_(true);
  at::Tensor y = at::layer_norm(x, {8}, w, b, 1e-5);
  at::Tensor g = torch::randn({2, 3, 8});
  y.backward(g);
  OpAttrs attrs;
  attrs.normalizedRank = 1;
  attrs.eps = 1e-5;
  expectIdentical(run(OpKind::LayerNorm, attrs, {x0, w0, b0}, {typeOf(x0)})[0],
                  y.detach(), "forward");
  std::vector<at::Tensor> grads =
      run(OpKind::LayerNormBackward, attrs, {g, x0, w0, b0},
          {typeOf(x0), typeOf(w0), typeOf(b0)});
  expectIdentical(grads[0], x.grad(), "input gradient");
  expectIdentical(grads[1], w.grad(), "weight gradient");
  expectIdentical(grads[2], b.grad(), "bias gradient");
}

TEST_F(CpuKernelsTest, EmbeddingBackwardMatchesAutograd) {
  torch::manual_seed(5);
  at::Tensor table = torch::randn({7, 4});
  at::Tensor ids = torch::tensor({{1, 3, 3, 0}, {6, 1, 0, 3}}, torch::kLong);
  at::Tensor w = table.clone().requires_grad_(true);
  at::Tensor y = at::embedding(w, ids, /*padding_idx=*/0);
  at::Tensor g = torch::randn({2, 4, 4});
  y.backward(g);
  OpAttrs attrs;
  attrs.paddingIdx = 0;
  expectIdentical(run(OpKind::Embedding, attrs, {table, ids}, {typeOf(y)})[0],
                  y.detach(), "forward");
  attrs.dim = 0;
  attrs.dimSize = 7;
  expectIdentical(
      run(OpKind::IndexBackward, attrs, {g, ids}, {typeOf(table)})[0], w.grad(),
      "gradient");
}

TEST_F(CpuKernelsTest, ExactGeluBackwardReadsATransposedGradient) {
  // A gradient that reaches GELU through a transpose (wav2vec2's feature
  // extractor): LibTorch 1.13's own kernel misreads it when the input is
  // laid out otherwise; the kernel's result is the float64 one.
  torch::manual_seed(8);
  at::Tensor x = torch::randn({2, 16, 39});
  at::Tensor dy = torch::randn({2, 39, 16}).transpose(1, 2);
  at::Tensor want = at::gelu_backward(dy.to(at::kDouble).contiguous(),
                                      x.to(at::kDouble), "none")
                        .to(at::kFloat);
  OpAttrs attrs;
  at::Tensor got = run(OpKind::GeluBackward, attrs, {dy, x}, {typeOf(x)})[0];
  EXPECT_LT((got - want).abs().max().item<double>(), 1e-6);
  // Written into the dying gradient's own (transposed) storage.
  at::Tensor inPlace = run(OpKind::GeluBackward, attrs, {dy.clone(), x},
                           {typeOf(x)}, {}, /*inPlaceOperand=*/0)[0];
  EXPECT_LT((inPlace - want).abs().max().item<double>(), 1e-6);
}

TEST_F(CpuKernelsTest, UpdateSliceWritesAtTheRunTimePosition) {
  torch::manual_seed(7);
  at::Tensor cache = torch::randn({2, 3, 6, 4});
  at::Tensor update = torch::randn({2, 3, 2, 4});
  OpAttrs attrs;
  attrs.dim = 2;
  for (int64_t at : {0, 3, 4}) {
    at::Tensor want = cache.clone();
    want.narrow(2, at, 2).copy_(update);
    at::Tensor position = torch::tensor({at}, torch::kLong);
    expectIdentical(run(OpKind::UpdateSlice, attrs, {cache, update, position},
                        {typeOf(cache)})[0],
                    want, "update at " + std::to_string(at));
  }
  // Into the dying cache (a decode step's), when the plan says so.
  at::Tensor want = cache.clone();
  want.narrow(2, 1, 2).copy_(update);
  expectIdentical(run(OpKind::UpdateSlice, attrs,
                      {cache, update, torch::tensor({1}, torch::kLong)},
                      {typeOf(cache)}, {}, /*inPlaceOperand=*/0)[0],
                  want, "in place");
}

TEST_F(CpuKernelsTest, BatchNormMatchesPyTorchTraining) {
  torch::manual_seed(6);
  at::Tensor x0 = torch::randn({4, 3, 5, 5});
  at::Tensor w0 = torch::randn({3}), b0 = torch::randn({3});
  at::Tensor mean0 = torch::randn({3}), var0 = torch::rand({3}) + 0.5;
  at::Tensor x = x0.clone().requires_grad_(true);
  at::Tensor w = w0.clone().requires_grad_(true);
  at::Tensor b = b0.clone().requires_grad_(true);
  at::Tensor mean = mean0.clone(), var = var0.clone();
  at::Tensor y = at::batch_norm(x, w, b, mean, var, true, 0.1, 1e-5, false);
  at::Tensor g = torch::randn({4, 3, 5, 5});
  y.backward(g);

  OpAttrs attrs;
  attrs.training = true;
  attrs.momentum = 0.1;
  attrs.eps = 1e-5;
  std::vector<at::Tensor> out =
      run(OpKind::BatchNorm, attrs, {x0, w0, b0, mean0, var0},
          {typeOf(x0), typeOf(mean0), typeOf(var0)});
  expectIdentical(out[0], y.detach(), "output");
  expectIdentical(out[1], mean, "running mean");
  expectIdentical(out[2], var, "running variance");
  std::vector<at::Tensor> grads =
      run(OpKind::BatchNormBackward, attrs, {g, x0, w0, out[1], out[2]},
          {typeOf(x0), typeOf(w0), typeOf(b0)});
  expectIdentical(grads[0], x.grad(), "input gradient");
  expectIdentical(grads[1], w.grad(), "weight gradient");
  expectIdentical(grads[2], b.grad(), "bias gradient");
}

TEST_F(CpuKernelsTest, Conv2dBackwardMatchesAutograd) {
  torch::manual_seed(7);
  at::Tensor x0 = torch::randn({2, 4, 7, 7});
  at::Tensor w0 = torch::randn({6, 2, 3, 3}), b0 = torch::randn({6});
  at::Tensor x = x0.clone().requires_grad_(true);
  at::Tensor w = w0.clone().requires_grad_(true);
  at::Tensor b = b0.clone().requires_grad_(true);
  at::Tensor y = at::conv2d(x, w, b, {2, 2}, {1, 1}, {1, 1}, 2);
  at::Tensor g = torch::randn(y.sizes());
  y.backward(g);
  OpAttrs attrs;
  attrs.stride = {2, 2};
  attrs.padding = {1, 1};
  attrs.dilation = {1, 1};
  attrs.groups = 2;
  expectIdentical(run(OpKind::Conv2d, attrs, {x0, w0, b0}, {typeOf(y)})[0],
                  y.detach(), "forward");
  std::vector<at::Tensor> grads =
      run(OpKind::Conv2dBackward, attrs, {g, x0, w0},
          {typeOf(x0), typeOf(w0), typeOf(b0)});
  expectIdentical(grads[0], x.grad(), "input gradient");
  expectIdentical(grads[1], w.grad(), "weight gradient");
  expectIdentical(grads[2], b.grad(), "bias gradient");
}

TEST_F(CpuKernelsTest, PoolingBackwardMatchesAutograd) {
  torch::manual_seed(8);
  at::Tensor x0 = torch::randn({2, 3, 6, 6});
  {
    at::Tensor x = x0.clone().requires_grad_(true);
    at::Tensor y = at::max_pool2d(x, {3, 3}, {2, 2}, {1, 1}, {1, 1}, true);
    at::Tensor g = torch::randn(y.sizes());
    y.backward(g);
    OpAttrs attrs;
    attrs.kernel = {3, 3};
    attrs.stride = {2, 2};
    attrs.padding = {1, 1};
    attrs.dilation = {1, 1};
    attrs.ceilMode = true;
    expectIdentical(run(OpKind::MaxPool2d, attrs, {x0}, {typeOf(y)})[0],
                    y.detach(), "max pool");
    expectIdentical(
        run(OpKind::MaxPool2dBackward, attrs, {g, x0}, {typeOf(x0)})[0],
        x.grad(), "max pool gradient");
  }
  {
    at::Tensor x = x0.clone().requires_grad_(true);
    at::Tensor y = at::avg_pool2d(x, {3, 3}, {2, 2}, {1, 1}, false, false);
    at::Tensor g = torch::randn(y.sizes());
    y.backward(g);
    OpAttrs attrs;
    attrs.kernel = {3, 3};
    attrs.stride = {2, 2};
    attrs.padding = {1, 1};
    attrs.countIncludePad = false;
    expectIdentical(run(OpKind::AvgPool2d, attrs, {x0}, {typeOf(y)})[0],
                    y.detach(), "avg pool");
    expectIdentical(
        run(OpKind::AvgPool2dBackward, attrs, {g, x0}, {typeOf(x0)})[0],
        x.grad(), "avg pool gradient");
  }
  for (std::vector<int64_t> size : {std::vector<int64_t>{1, 1}, {4, 3}}) {
    at::Tensor x = x0.clone().requires_grad_(true);
    at::Tensor y = at::adaptive_avg_pool2d(x, size);
    at::Tensor g = torch::randn(y.sizes());
    y.backward(g);
    OpAttrs attrs;
    attrs.outputSize = size;
    expectIdentical(run(OpKind::AdaptiveAvgPool2d, attrs, {x0}, {typeOf(y)})[0],
                    y.detach(), "adaptive pool");
    expectIdentical(
        run(OpKind::AdaptiveAvgPool2dBackward, attrs, {g, x0}, {typeOf(x0)})[0],
        x.grad(), "adaptive pool gradient");
  }
}

TEST_F(CpuKernelsTest, GeluAndSliceBackwardMatchAutograd) {
  torch::manual_seed(9);
  at::Tensor x0 = torch::randn({4, 10});
  for (bool tanh : {false, true}) {
    at::Tensor x = x0.clone().requires_grad_(true);
    at::Tensor y = at::gelu(x, tanh ? "tanh" : "none");
    at::Tensor g = torch::randn(y.sizes());
    y.backward(g);
    OpAttrs attrs;
    attrs.tanhApproximation = tanh;
    at::Tensor mine = run(OpKind::Gelu, attrs, {x0}, {typeOf(y)})[0];
    at::Tensor grad =
        run(OpKind::GeluBackward, attrs, {g, x0}, {typeOf(x0)})[0];
    if (tanh) {
      // The tanh form runs the backend's own kernel (VectorMathTest holds
      // it to the exact function); ATen's differs from it by rounding.
      expectClose(mine, y.detach(), "gelu", 1e-6, 1e-7);
      expectClose(grad, x.grad(), "gelu gradient", 1e-6, 1e-7);
    } else {
      expectIdentical(mine, y.detach(), "gelu");
      expectIdentical(grad, x.grad(), "gelu gradient");
    }
  }
  at::Tensor x = x0.clone().requires_grad_(true);
  at::Tensor y = x.slice(1, 1, 8, 3);
  at::Tensor g = torch::randn(y.sizes());
  y.backward(g);
  OpAttrs attrs;
  attrs.dim = 1;
  attrs.start = 1;
  attrs.end = 8;
  attrs.step = 3;
  attrs.dimSize = 10;
  expectIdentical(run(OpKind::SliceBackward, attrs, {g}, {typeOf(x0)})[0],
                  x.grad(), "slice gradient");
}

TEST_F(CpuKernelsTest, GeluTanhOnThreadsMatchesOneThread) {
  // Blocks of elements over two threads, each a multiple of the vector
  // width: the same bits as one call over everything.
  torch::manual_seed(12);
  at::Tensor x = torch::randn({3, 50001}) * 3;
  at::Tensor g = torch::randn({3, 50001});
  OpAttrs attrs;
  attrs.tanhApproximation = true;
  at::Tensor y1 = run(OpKind::Gelu, attrs, {x}, {typeOf(x)})[0];
  at::Tensor d1 = run(OpKind::GeluBackward, attrs, {g, x}, {typeOf(x)})[0];
  backend = blasBackend(2);
  expectIdentical(run(OpKind::Gelu, attrs, {x}, {typeOf(x)})[0], y1, "gelu");
  expectIdentical(run(OpKind::GeluBackward, attrs, {g, x}, {typeOf(x)})[0], d1,
                  "gelu gradient");
  backend = blasBackend(1);
  // ATen forms 1 + tanh(u), which cancels for negative x.
  expectClose(y1, at::gelu(x, "tanh"), "gelu against ATen", 1e-6, 1e-6);
}

TEST_F(CpuKernelsTest, MaskedAttentionOnThreadsMatchesOneThread) {
  // The (batch, head) stacks split over two threads: each stack is
  // computed as on one thread.
  torch::manual_seed(13);
  int64_t t = 130;
  at::Tensor q = torch::randn({3, 5, t, 8}), k = torch::randn({3, 5, t, 8});
  at::Tensor v = torch::randn({3, 5, t, 4}), g = torch::randn({3, 5, t, 4});
  at::Tensor mask = torch::ones({t, t}, at::kBool).tril();
  OpAttrs attrs;
  attrs.scale = 0.25;
  std::vector<TensorType> types = {typeOf(v),
                                   typeOf(torch::empty({3, 5, t, t}))};
  auto fwd = run(OpKind::MaskedAttention, attrs, {q, k, v, mask}, types);
  std::vector<at::Tensor> bwdOperands = {g, q, k, v, mask, fwd[1]};
  std::vector<TensorType> grads = {typeOf(q), typeOf(k), typeOf(v)};
  auto bwd = run(OpKind::MaskedAttentionBackward, attrs, bwdOperands, grads);
  backend = blasBackend(2);
  auto fwd2 = run(OpKind::MaskedAttention, attrs, {q, k, v, mask}, types);
  auto bwd2 = run(OpKind::MaskedAttentionBackward, attrs, bwdOperands, grads);
  backend = blasBackend(1);
  for (size_t i = 0; i < fwd.size(); ++i)
    expectIdentical(fwd2[i], fwd[i], "forward result " + std::to_string(i));
  for (size_t i = 0; i < bwd.size(); ++i)
    expectIdentical(bwd2[i], bwd[i], "gradient " + std::to_string(i));
}

TEST_F(CpuKernelsTest, InPlaceResultsMatchFreshOnes) {
  torch::manual_seed(12);
  at::Tensor a = torch::rand({3, 7}) + 0.5, b = torch::randn({3, 7});
  at::Tensor cond = torch::rand({3, 7}) > 0.5;
  struct Case {
    OpKind kind;
    std::vector<at::Tensor> operands;
    int inPlace;
  } cases[] = {
      {OpKind::Neg, {b}, 0},
      {OpKind::Abs, {b}, 0},
      {OpKind::Exp, {b}, 0},
      {OpKind::Log, {a}, 0},
      {OpKind::Sqrt, {a}, 0},
      {OpKind::Rsqrt, {a}, 0},
      {OpKind::Reciprocal, {a}, 0},
      {OpKind::Erf, {b}, 0},
      {OpKind::Tanh, {b}, 0},
      {OpKind::Sigmoid, {b}, 0},
      {OpKind::Silu, {b}, 0},
      {OpKind::Relu, {b}, 0},
      {OpKind::Gelu, {b}, 0},
      {OpKind::Add, {a, b}, 0},
      {OpKind::Sub, {a, b}, 1},
      {OpKind::Mul, {a, b}, 1},
      {OpKind::Div, {b, a}, 0},
      {OpKind::Div, {b, a}, 1},
      {OpKind::Pow, {a, b}, 1},
      {OpKind::Remainder, {b, a}, 0},
      {OpKind::FloorDivide, {b, a}, 1},
      {OpKind::Minimum, {a, b}, 0},
      {OpKind::Maximum, {a, b}, 1},
      {OpKind::Where, {cond, a, b}, 2},
      {OpKind::GeluBackward, {b, a}, 0},
  };
  for (const Case &c : cases) {
    SCOPED_TRACE(opKindName(c.kind));
    OpAttrs attrs;
    std::vector<at::Tensor> fresh = run(c.kind, attrs, c.operands, {typeOf(a)});
    std::vector<at::Tensor> inPlace =
        run(c.kind, attrs, c.operands, {typeOf(a)}, {}, c.inPlace);
    expectIdentical(inPlace[0], fresh[0], "in-place result");
  }
  OpAttrs clamp;
  clamp.min = -0.5;
  clamp.max = 0.5;
  expectIdentical(run(OpKind::Clamp, clamp, {b}, {typeOf(b)}, {}, 0)[0],
                  b.clamp(-0.5, 0.5), "clamp");
}

// A temporary the plan places in the arena lands there: t = exp(x) dies in
// the matmul, so its slot is reused every step; the results are the same
// with the arena off.
TEST_F(CpuKernelsTest, TemporariesLandInTheArena) {
  torch::manual_seed(3);
  at::Tensor x = torch::randn({4, 8}), w = torch::randn({8, 3});
  Program p;
  addInputs(p, {x, w});
  p.values.push_back(ValueInfo{typeOf(x)});                      // %2 = exp
  p.values.push_back(ValueInfo{TensorType{DType::F32, {4, 3}}}); // %3
  Instruction exp;
  exp.kind = OpKind::Exp;
  exp.operands = {0};
  exp.results = {2};
  Instruction matmul;
  matmul.kind = OpKind::Matmul;
  matmul.operands = {2, 1};
  matmul.results = {3};
  p.instructions = {exp, matmul};
  p.results.push_back(ResultInfo{3});
  ASSERT_TRUE(planProgram(p).ok());
  ASSERT_EQ(p.instructions[0].storage[0].arenaOffset, 0);
  EXPECT_EQ(p.instructions[1].storage[0].arenaOffset, -1); // a result
  EXPECT_EQ(p.arenaBytes, 128);

  std::vector<at::Tensor> got;
  for (bool arena : {true, false}) {
    std::unique_ptr<Backend> b = blasBackend(1, arena);
    auto executor = Executor::create(p, *b);
    ASSERT_TRUE(executor.ok()) << executor.status();
    int64_t before = b->memoryStats().arenaResults;
    std::vector<HostTensor> results;
    for (int step = 0; step < 2; ++step)
      ASSERT_TRUE(
          (*executor)
              ->runStep(StepContext{}, {toHost(x), toHost(w)}, false, &results)
              .ok());
    EXPECT_EQ(b->memoryStats().arenaResults - before, arena ? 2 : 0);
    got.push_back(fromHost(results[0]));
  }
  expectIdentical(got[0], got[1], "with and without the arena");
  expectIdentical(got[0], at::matmul(x.exp(), w), "exp(x) w");
}

//===----------------------------------------------------------------------===//
// Forward numerics and randomness
//===----------------------------------------------------------------------===//

TEST_F(CpuKernelsTest, GemmsSplitOverThreadsMatchATen) {
  // Two intra-op threads: GEMMs split their rows (or batch) over them, each
  // block a serial BLAS call. Which rows the BLAS kernels take together
  // changes the order of some additions (as a multithreaded BLAS's own split
  // does), so results agree with ATen's single call to rounding.
  backend = blasBackend(2);
  int64_t splitBefore = gemmsSplitOverThreads();
  torch::manual_seed(3);
  OpAttrs none;
  struct Case {
    std::vector<int64_t> a, b;
    bool transposeA;
  };
  // Row counts that are not multiples of the 16-row tile, a transposed
  // left operand (a weight gradient), a stack times a matrix, equal batches,
  // a broadcast batch (ATen's own path) and a small product (one block).
  std::vector<Case> cases = {{{1000, 96}, {96, 130}, false},
                             {{37, 300}, {300, 64}, false},
                             {{200, 515}, {200, 48}, true},
                             {{4, 70, 96}, {96, 33}, false},
                             {{2, 3, 50, 64}, {2, 3, 64, 50}, false},
                             {{2, 3, 50, 64}, {64, 50}, false},
                             {{5, 50, 64}, {1, 64, 50}, false},
                             {{8, 8}, {8, 8}, false}};
  for (const Case &k : cases) {
    at::Tensor a = torch::randn(k.a);
    if (k.transposeA)
      a = a.t(); // a non-contiguous operand, as the IR's permute gives it
    at::Tensor b = torch::randn(k.b);
    at::Tensor expected = at::matmul(a, b);
    auto out = run(OpKind::Matmul, none, {a, b}, {typeOf(expected)});
    expectClose(out[0], expected,
                "matmul " + std::to_string(a.dim()) + "d x " +
                    std::to_string(b.dim()) + "d");
  }
  at::Tensor x = torch::randn({3, 170, 96}), w = torch::randn({80, 96}),
             bias = torch::randn({80});
  at::Tensor expected = at::linear(x, w, bias);
  expectClose(run(OpKind::Linear, none, {x, w, bias}, {typeOf(expected)})[0],
              expected, "linear with bias");
  expected = at::linear(x, w);
  expectClose(
      run(OpKind::Linear, none, {x, w, at::Tensor()}, {typeOf(expected)})[0],
      expected, "linear without bias");
  // Two blocks where each gets at least half a million multiply-adds (the
  // 1000-row and the transposed products, the equal batches, both linears);
  // one where that is too little, and ATen's own call for a broadcast batch.
  // (With a BLAS that cannot be made serial, GEMMs stay whole.)
  bool openBlas = blasDescription().rfind("OpenBLAS", 0) == 0;
  EXPECT_EQ(gemmsSplitOverThreads() - splitBefore, openBlas ? 5 : 0);
  backend = blasBackend(1);
}

TEST_F(CpuKernelsTest, LinearWeightBackwardSumsOverEveryLeadingDimension) {
  // grad[..., N]^T input[..., K] over all leading positions, as ATen's
  // product of the flattened operands: on ATen's GEMMs, the BLAS split over
  // two threads and oneDNN; contiguous operands, a permuted gradient (a
  // view, as the IR's permute gives it) and float64 (ATen's own product).
  torch::manual_seed(5);
  OpAttrs none;
  at::Tensor g = torch::randn({3, 5, 7, 16}), x = torch::randn({3, 5, 7, 8});
  at::Tensor gt = torch::randn({7, 5, 16}).permute({1, 0, 2});
  at::Tensor xt = torch::randn({5, 7, 8});
  for (int variant = 0; variant < 3; ++variant) {
    backend = variant == 0 ? blasBackend(1)
              : variant == 1
                  ? blasBackend(2)
                  : createCpuBackend({1, true, true, GemmLibrary::OneDnn});
    std::string on = " on backend variant " + std::to_string(variant);
    at::Tensor expected = at::mm(g.reshape({-1, 16}).t(), x.reshape({-1, 8}));
    expectClose(
        run(OpKind::LinearWeightBackward, none, {g, x}, {typeOf(expected)})[0],
        expected, "rank-4 operands" + on, 1e-5, 1e-4);
    expected = at::mm(gt.reshape({-1, 16}).t(), xt.reshape({-1, 8}));
    expectClose(run(OpKind::LinearWeightBackward, none, {gt, xt},
                    {typeOf(expected)})[0],
                expected, "a permuted gradient" + on, 1e-5, 1e-4);
    at::Tensor gd = g.to(at::kDouble), xd = x.to(at::kDouble);
    expected = at::mm(gd.reshape({-1, 16}).t(), xd.reshape({-1, 8}));
    expectClose(run(OpKind::LinearWeightBackward, none, {gd, xd},
                    {typeOf(expected)})[0],
                expected, "float64" + on, 1e-12, 1e-12);
  }
  backend = blasBackend(1);
}

/// Expects sgemm to read a `rows x cols` matrix with those strides as
/// `trans` with leading dimension `ld`.
void expectLayout(int64_t rows, int64_t cols, int64_t rowStride,
                  int64_t colStride, char trans, int64_t ld) {
  std::optional<GemmLayout> l = gemmLayout(rows, cols, rowStride, colStride);
  std::string what = std::to_string(rows) + "x" + std::to_string(cols) +
                     " strides (" + std::to_string(rowStride) + ", " +
                     std::to_string(colStride) + ")";
  ASSERT_TRUE(l) << what;
  EXPECT_EQ(l->trans, trans) << what;
  EXPECT_EQ(l->ld, ld) << what;
}

TEST(GemmLayoutTest, ReadsRowMajorTransposedAndNarrowedMatricesInPlace) {
  // Row-major [3, 4]: rows 4 apart; a narrow of a wider matrix: rows
  // further apart than their length.
  expectLayout(3, 4, 4, 1, 'N', 4);
  expectLayout(3, 4, 10, 1, 'N', 10);
  // The transpose of a row-major [4, 3]: columns 3 apart.
  expectLayout(3, 4, 1, 3, 'T', 3);
  // A single row or column: its stride in the size-1 dimension does not
  // matter, and the leading dimension is the smallest sgemm accepts.
  expectLayout(1, 5, 999, 1, 'N', 5);
  expectLayout(5, 1, 7, 999, 'N', 7);
  expectLayout(1, 5, 1, 8, 'T', 8); // a row of a transposed matrix
  expectLayout(1, 1, 0, 0, 'N', 1);
  // Not readable in place: a broadcast (stride 0) dimension, strides in
  // both dimensions, rows that overlap.
  EXPECT_FALSE(gemmLayout(3, 4, 0, 1));
  EXPECT_FALSE(gemmLayout(3, 4, 8, 2));
  EXPECT_FALSE(gemmLayout(3, 4, 2, 1));
  EXPECT_FALSE(gemmLayout(3, 4, 1, 2));
}

/// Runs `x` through `first` (with `attrs`) and its result through
/// `second` with `y` as the other operand (the right one, or the left with
/// `yFirst`) on `backend`, so the second kernel reads the first one's view:
/// a permute or slice hands a strided tensor on, as it does in a plan.
at::Tensor runChain(Backend &backend, OpKind first, const OpAttrs &attrs,
                    const at::Tensor &x, const at::Tensor &firstResult,
                    OpKind second, const at::Tensor &y,
                    const at::Tensor &expected, bool yFirst = false) {
  Program p;
  addInputs(p, {x, y});
  p.values.push_back(ValueInfo{typeOf(firstResult)}); // %2
  p.values.push_back(ValueInfo{typeOf(expected)});    // %3
  Instruction a;
  a.kind = first;
  a.attrs = attrs;
  a.operands = {0};
  a.results = {2};
  Instruction b;
  b.kind = second;
  b.operands = yFirst ? std::vector<ValueId>{1, 2} : std::vector<ValueId>{2, 1};
  b.results = {3};
  p.instructions = {a, b};
  p.results.push_back(ResultInfo{3});
  EXPECT_TRUE(planProgram(p).ok());
  auto executor = Executor::create(p, backend);
  EXPECT_TRUE(executor.ok()) << executor.status();
  std::vector<HostTensor> results;
  auto outcome = (*executor)->runStep(StepContext{}, {toHost(x), toHost(y)},
                                      false, &results);
  EXPECT_TRUE(outcome.ok()) << outcome.status();
  return fromHost(results.at(0));
}

TEST_F(CpuKernelsTest, OneDnnGemmsAgreeWithATenToRounding) {
  // oneDNN's sgemm adds the products in its own order: results agree with
  // ATen's (the BLAS) to rounding. Operands reach it in place: transposed
  // and narrowed views, stacks of matrices, single rows and columns.
  for (int threads : {1, 2}) {
    backend = createCpuBackend({threads, true, true, GemmLibrary::OneDnn});
    EXPECT_NE(blasDescription().find("oneDNN"), std::string::npos)
        << blasDescription();
    torch::manual_seed(21);
    OpAttrs none;
    std::string on = " on " + std::to_string(threads) + " thread(s)";
    std::vector<std::pair<std::vector<int64_t>, std::vector<int64_t>>> cases = {
        {{1000, 96}, {96, 130}},
        {{37, 300}, {300, 64}},
        {{1, 64}, {64, 50}},
        {{50, 1}, {1, 30}},
        {{37, 300}, {300, 1}},
        {{4, 70, 96}, {96, 33}},
        {{2, 3, 50, 64}, {2, 3, 64, 50}},
        {{5, 50, 64}, {1, 64, 50}}};
    for (const auto &[sa, sb] : cases) {
      at::Tensor a = torch::randn(sa), b = torch::randn(sb);
      at::Tensor expected = at::matmul(a, b);
      // A broadcast batch is ATen's; everything else oneDNN's.
      int64_t before = oneDnnGemmCalls();
      expectClose(run(OpKind::Matmul, none, {a, b}, {typeOf(expected)})[0],
                  expected,
                  "matmul " + std::to_string(a.dim()) + "d x " +
                      std::to_string(b.dim()) + "d" + on,
                  1e-5, 1e-4);
      bool broadcast = a.dim() == 3 && b.dim() == 3 && b.size(0) == 1;
      EXPECT_EQ(oneDnnGemmCalls() - before, broadcast ? 0 : 1)
          << "oneDNN calls for " << a.sizes() << " x " << b.sizes();
    }
    int64_t before = oneDnnGemmCalls();
    // A weight gradient reads a transposed operand; attention's scores a
    // transposed stack.
    at::Tensor x = torch::randn({200, 515}), g = torch::randn({200, 48});
    OpAttrs transpose;
    transpose.permutation = {1, 0};
    at::Tensor expected = at::matmul(x.t(), g);
    expectClose(runChain(*backend, OpKind::Permute, transpose, x, x.t(),
                         OpKind::Matmul, g, expected),
                expected, "transposed left operand" + on, 1e-5, 1e-4);
    at::Tensor w = torch::randn({48, 515});
    expected = at::matmul(g, w);
    at::Tensor wt = w.t().contiguous();
    expectClose(runChain(*backend, OpKind::Permute, transpose, wt, w,
                         OpKind::Matmul, g, expected, /*yFirst=*/true),
                expected, "transposed right operand" + on, 1e-5, 1e-4);
    at::Tensor q = torch::randn({6, 40, 16}), k = torch::randn({6, 40, 16});
    OpAttrs swap;
    swap.permutation = {0, 2, 1};
    expected = at::matmul(q, k.transpose(1, 2));
    expectClose(runChain(*backend, OpKind::Permute, swap, k, k.transpose(1, 2),
                         OpKind::Matmul, q, expected,
                         /*yFirst=*/true),
                expected, "transposed stack" + on, 1e-5, 1e-4);
    // Rows of a wider matrix: the leading dimension is not the row length.
    OpAttrs columns;
    columns.dim = 1;
    columns.start = 10;
    columns.end = 74;
    columns.step = 1;
    at::Tensor wide = torch::randn({30, 100}), right = torch::randn({64, 20});
    expected = at::matmul(wide.slice(1, 10, 74), right);
    expectClose(runChain(*backend, OpKind::Slice, columns, wide,
                         wide.slice(1, 10, 74), OpKind::Matmul, right,
                         expected),
                expected, "narrowed operand" + on, 1e-5, 1e-4);
    // A linear with a bias: the bias fills the result, the product is added.
    at::Tensor in = torch::randn({3, 170, 96}), weight = torch::randn({80, 96}),
               bias = torch::randn({80});
    expected = at::linear(in, weight, bias);
    expectClose(
        run(OpKind::Linear, none, {in, weight, bias}, {typeOf(expected)})[0],
        expected, "linear with bias" + on, 1e-5, 1e-4);
    expected = at::linear(in, weight);
    expectClose(run(OpKind::Linear, none, {in, weight, at::Tensor()},
                    {typeOf(expected)})[0],
                expected, "linear without bias" + on, 1e-5, 1e-4);
    // Two transposes, a stack, a narrow, two linears: all in place.
    EXPECT_EQ(oneDnnGemmCalls() - before, 6);
    // Float64 stays on ATen, bit for bit.
    at::Tensor a64 = torch::randn({20, 30}, at::kDouble),
               b64 = torch::randn({30, 10}, at::kDouble);
    before = oneDnnGemmCalls();
    expectIdentical(run(OpKind::Matmul, none, {a64, b64},
                        {typeOf(at::matmul(a64, b64))})[0],
                    at::matmul(a64, b64), "float64 matmul" + on);
    EXPECT_EQ(oneDnnGemmCalls(), before);
  }
  backend = blasBackend(1);
}

TEST_F(CpuKernelsTest, OneDnnAttentionAgreesWithUnfusedOps) {
  // Attention's batched products (causal blocks accumulating into the key
  // and value gradients) on oneDNN: within rounding of autograd's.
  backend = createCpuBackend({1, true, true, GemmLibrary::OneDnn});
  torch::manual_seed(22);
  for (int64_t t : {int64_t(20), int64_t(150)}) {
    for (bool causal : {true, false}) {
      int64_t b = 2, h = 3, d = 8, e = 6;
      at::Tensor q = torch::randn({b, h, t, d}), k = torch::randn({b, h, t, d});
      at::Tensor v = torch::randn({b, h, t, e}), g = torch::randn({b, h, t, e});
      at::Tensor mask = torch::ones({1, 1, t, t}, at::kBool).tril();
      if (!causal)
        mask.index_put_({0, 0, t - 1, 0}, false);
      float scale = 1.0f / std::sqrt(float(d));
      UnfusedAttention want = unfusedAttention(q, k, v, mask, scale, false, g);
      OpAttrs attrs;
      attrs.scale = scale;
      std::string what =
          "T=" + std::to_string(t) + (causal ? " causal: " : " general: ");
      int64_t before = oneDnnGemmCalls();
      auto fwd = run(OpKind::MaskedAttention, attrs, {q, k, v, mask},
                     {typeOf(want.result), typeOf(want.probs)});
      auto bwd = run(OpKind::MaskedAttentionBackward, attrs,
                     {g, q, k, v, mask, want.probs},
                     {typeOf(q), typeOf(k), typeOf(v)});
      // Two products forward, four backward, per block of rows.
      int64_t blocks = causal ? (t + 63) / 64 : 1;
      EXPECT_EQ(oneDnnGemmCalls() - before, 6 * blocks) << what;
      expectClose(fwd[0], want.result, what + "result", 1e-5, 1e-5);
      expectClose(fwd[1], want.probs, what + "probs", 1e-5, 1e-6);
      expectClose(bwd[0], want.gq, what + "grad query", 1e-5, 1e-5);
      expectClose(bwd[1], want.gk, what + "grad key", 1e-5, 1e-5);
      expectClose(bwd[2], want.gv, what + "grad value", 1e-5, 1e-5);
    }
  }
  backend = blasBackend(1);
}

TEST_F(CpuKernelsTest, PowByANumberTakesPyTorchsScalarPath) {
  torch::manual_seed(10);
  at::Tensor x = torch::rand({1000}) * 3;
  // Exponents a float holds exactly: the IR keeps Python numbers in the
  // tensor's element type, so 1.7 would reach the kernel as 1.7f.
  for (double e : {2.0, 0.5, 3.0, -1.0, -0.5, -2.0, 1.5, 0.25}) {
    SCOPED_TRACE(e);
    at::Tensor exponent = torch::tensor(float(e));
    expectIdentical(run(OpKind::Pow, OpAttrs(), {x, exponent}, {typeOf(x)})[0],
                    x.pow(e), "pow");
  }
}

TEST_F(CpuKernelsTest, RmsNormIsPyTorchsComposite) {
  torch::manual_seed(11);
  at::Tensor x = torch::randn({2, 3, 8}), w = torch::randn({8});
  at::Tensor expected =
      x.mul(at::rsqrt(at::pow(x, 2).mean({-1}, true).add_(1e-6))).mul(w);
  OpAttrs attrs;
  attrs.normalizedRank = 1;
  attrs.eps = 1e-6;
  expectIdentical(run(OpKind::RmsNorm, attrs, {x, w}, {typeOf(x)})[0], expected,
                  "rms_norm");
}

TEST_F(CpuKernelsTest, DropoutMaskIsPyTorchsDropoutUnderTheStepSeed) {
  StepContext step;
  step.seed = 7;
  step.globalStep = 3;
  OpAttrs attrs;
  attrs.p = 0.25;
  at::Tensor x = torch::ones({8, 16});
  at::Tensor mask = run(OpKind::DropoutMask, attrs, {x}, {typeOf(x)}, step)[0];
  torch::manual_seed(stepSeed(7, 3, RandomStream::Dropout));
  at::Tensor expected = at::dropout(x, 0.25, /*train=*/true);
  expectIdentical(mask, expected, "mask");
  // Another step or another seed draws another mask.
  step.globalStep = 4;
  at::Tensor other = run(OpKind::DropoutMask, attrs, {x}, {typeOf(x)}, step)[0];
  EXPECT_FALSE(torch::equal(mask, other));
  step.globalStep = 3;
  step.seed = 8;
  other = run(OpKind::DropoutMask, attrs, {x}, {typeOf(x)}, step)[0];
  EXPECT_FALSE(torch::equal(mask, other));
}

TEST_F(CpuKernelsTest, KernelErrorsAreStatuses) {
  // Operands that do not fit: a status naming the shapes, on either GEMM
  // library (oneDNN never reads past an operand: the shapes go to ATen).
  for (GemmLibrary gemm : {GemmLibrary::Blas, GemmLibrary::OneDnn}) {
    backend = createCpuBackend({1, true, true, gemm});
    absl::Status s =
        runUnchecked(OpKind::Matmul, torch::zeros({2, 3}), torch::zeros({4, 5}),
                     TensorType{DType::F32, {2, 5}});
    EXPECT_FALSE(s.ok());
    EXPECT_NE(std::string(s.message()).find("2x3"), std::string::npos) << s;
    EXPECT_EQ(std::string(s.message()).find('\n'), std::string::npos);
    s = runUnchecked(OpKind::Matmul, torch::zeros({2, 2, 3}),
                     torch::zeros({3, 3, 5}),
                     TensorType{DType::F32, {2, 2, 5}});
    EXPECT_FALSE(s.ok());
  }
  backend = blasBackend(1);
}

TEST_F(CpuKernelsTest, MemoryStatsCountLiveTensors) {
  MemoryStats before = backend->memoryStats();
  auto t = *backend->zeros(TensorType{DType::F32, {1024, 256}});
  MemoryStats during = backend->memoryStats();
  EXPECT_GE(during.liveBytes - before.liveBytes, 1024 * 256 * 4);
  EXPECT_GE(during.peakBytes, during.liveBytes);
  t.reset();
  EXPECT_LE(backend->memoryStats().liveBytes, before.liveBytes);
}

#if defined(__GLIBC__)
TEST(CpuBackendTest, FreedBlocksUnder32MiBStayInTheHeap) {
  // A tensor freed and allocated again every step (a pipeline's held
  // activations) comes back from the heap, not from a fresh mapping whose
  // pages fault in again: with the CPU backend made, an 8 MiB block is not
  // mmapped (glibc's default would map anything above 128 KiB).
  std::unique_ptr<Backend> backend = blasBackend(1);
  const size_t mapped = mallinfo2().hblkhd;
  absl::StatusOr<TensorHandle> t = backend->zeros({DType::F32, {2 << 20}});
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_LT(mallinfo2().hblkhd, mapped + (size_t(8) << 20));
}
#endif

TEST(CpuBackendTest, FailedAllocationsAreErrorsNamingTheBytes) {
  std::unique_ptr<Backend> backend = blasBackend(1);
  // 2^62 bytes: more than any machine holds.
  const int64_t huge = int64_t(1) << 62;
  absl::StatusOr<TensorHandle> arena = backend->allocateArena(huge);
  ASSERT_FALSE(arena.ok());
  EXPECT_EQ(arena.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(arena.status().message().find(
                "cannot allocate 4611686018427387904 bytes for the program's "
                "arena (its planned temporaries)"),
            std::string::npos)
      << arena.status();

  absl::StatusOr<TensorHandle> zeros =
      backend->zeros({DType::F32, {int64_t(1) << 30, int64_t(1) << 30}});
  ASSERT_FALSE(zeros.ok());
  EXPECT_NE(zeros.status().message().find(
                "cannot allocate 4611686018427387904 bytes for a "
                "1073741824x1073741824xf32 tensor"),
            std::string::npos)
      << zeros.status();

  // Synthetic data of such a shape (a step built for huge inputs).
  absl::StatusOr<std::vector<HostTensor>> drawn =
      randomTensors(0, {{DType::I64, {99999999999, 1 << 20}}});
  ASSERT_FALSE(drawn.ok());
  EXPECT_NE(drawn.status().message().find(
                "cannot allocate 838860799991611392 bytes for a random "
                "99999999999x1048576xi64 tensor"),
            std::string::npos)
      << drawn.status();

  // The backend still works afterwards.
  EXPECT_TRUE(backend->zeros({DType::F32, {2, 2}}).ok());
}

} // namespace
