//===- CpuKernels.h - the CPU backend's kernels and their table -*- C++ -*-===//
//
// Each kernel calls the ATen function PyTorch's eager mode calls for the
// same computation (and, for backward ops, the function autograd calls), so
// losses and updates match PyTorch bit for bit on the same inputs. The
// exceptions are the tanh-approximated GELU, which runs VectorMath.h's more
// accurate and faster form, and float32 matrix products, which by default
// run on oneDNN's sgemm (twice OpenBLAS's rate where the CPU has AVX-512)
// and agree with PyTorch's to rounding; `GemmLibrary::Blas` restores the
// BLAS.
//
// Private to lib/Runtime/CPU: what the kernel families share. Each family
// file (Elementwise.cpp, LinearAlgebra.cpp, Attention.cpp, ...) registers
// its kernels in a `KernelTable` through its `register*Kernels`; the
// backend (CpuBackend.cpp) runs an instruction by looking its kind up.
// The family files compile as one translation unit (a unity build), so
// ATen's headers are parsed once: names local to one file live in that
// file's anonymous namespace and must differ from every other file's, and
// a file's macros are undefined at its end.
//
//===----------------------------------------------------------------------===//
#ifndef MERAK_LIB_RUNTIME_CPU_CPUKERNELS_H
#define MERAK_LIB_RUNTIME_CPU_CPUKERNELS_H

#include "../AtenDTypes.h"
#include "../KernelTable.h"
#include "CpuTensor.h"
#include "merak/Runtime/Backend.h"
#include "merak/Runtime/CPU/CpuBackend.h"
#include "merak/Runtime/Program.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <c10/core/InferenceMode.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <vector>

namespace merak::runtime::cpu {

//===----------------------------------------------------------------------===//
// Tensors
//===----------------------------------------------------------------------===//

inline at::TensorOptions optionsFor(DType dtype) {
  return at::TensorOptions().dtype(toAten(dtype)).device(at::kCPU);
}

/// A scalar bound or fill value in the tensor's category, as PyTorch passes
/// a Python int to an integer tensor.
inline at::Scalar scalarFor(DType dtype, double v) {
  if (isFloat(dtype))
    return at::Scalar(v);
  if (dtype == DType::Bool)
    return at::Scalar(v != 0);
  return at::Scalar(int64_t(v));
}

/// Whether `t` is float32 laid out densely in row-major order, as the
/// vecmath kernels read it.
inline bool denseFloat(const at::Tensor &t) {
  return t.scalar_type() == at::kFloat && t.is_contiguous();
}

//===----------------------------------------------------------------------===//
// Kernel context
//===----------------------------------------------------------------------===//

/// One instruction's call as a kernel sees it: its operands as ATen
/// tensors, its attributes, and the results it sets.
struct Ctx {
  KernelCall &call;
  const Instruction &inst;
  const OpAttrs &a;
  const Program &program;
  at::Generator &generator;
  std::vector<at::Tensor> out;

  bool has(size_t k) const {
    return k < call.operands.size() && call.operands[k];
  }
  const at::Tensor &in(size_t k) const {
    static const at::Tensor undefined;
    return has(k) ? unwrap(*call.operands[k]) : undefined;
  }
  c10::optional<at::Tensor> opt(size_t k) const {
    return has(k) ? c10::optional<at::Tensor>(in(k)) : c10::nullopt;
  }
  /// The operand result `r` is written into, or an undefined tensor.
  at::Tensor inPlace(size_t r) const {
    return r < call.inPlace.size() && call.inPlace[r] ? unwrap(*call.inPlace[r])
                                                      : at::Tensor();
  }
  const TensorType &resultType(size_t r) const {
    return program.values[inst.results[r]].type;
  }
  const TensorType &operandType(size_t k) const {
    return program.values[inst.operands[k]].type;
  }
  /// Whether anything reads result `r`.
  bool needed(size_t r) const {
    return program.values[inst.results[r]].lastUse >= 0;
  }
  /// A scalar operand: the executor's exact value where it has one.
  double scalar(size_t k) const {
    if (k < call.hostScalars.size() && call.hostScalars[k])
      return *call.hostScalars[k];
    return in(k).item<double>();
  }
  at::Tensor zerosFor(size_t r) const {
    return at::zeros(resultType(r).shape, optionsFor(resultType(r).dtype));
  }
  void set(size_t r, at::Tensor t) { out[r] = std::move(t); }
  /// Whether the step evaluates (`StepContext::evaluate`).
  bool evaluating() const { return call.step && call.step->evaluate; }
};

/// An elementwise op: into the dying operand when planned, else fresh.
template <typename Fn, typename OutFn>
void elementwise(Ctx &c, Fn fn, OutFn outFn) {
  at::Tensor target = c.inPlace(0);
  if (target.defined()) {
    outFn(target);
    c.set(0, target);
  } else {
    c.set(0, fn());
  }
}

//===----------------------------------------------------------------------===//
// Work on ATen's threads
//===----------------------------------------------------------------------===//

/// Calls `fn(begin, end)` for blocks of `[0, count)` on ATen's threads: at
/// most one block per thread, each of at least `minPerBlock` items and a
/// multiple of `tile` (for a GEMM the BLAS kernel's row tile, so no block
/// ends in a partial tile that another block could have filled). Inside a
/// parallel region, or where one block is all there is, it runs inline.
/// Returns the number of blocks.
template <typename Fn>
int64_t forBlocks(int64_t count, int64_t minPerBlock, int64_t tile, Fn fn) {
  int64_t threads = at::get_num_threads();
  int64_t blocks = std::min(threads, count / std::max<int64_t>(minPerBlock, 1));
  if (blocks <= 1 || at::in_parallel_region()) {
    fn(int64_t(0), count);
    return 1;
  }
  int64_t per = (count + blocks - 1) / blocks;
  per = (per + tile - 1) / tile * tile;
  at::parallel_for(0, blocks, 1, [&](int64_t first, int64_t last) {
    // Inference mode is thread-local; the pool's threads start without it.
    c10::InferenceMode guard;
    for (int64_t b = first; b < last; ++b) {
      int64_t begin = b * per, end = std::min(count, begin + per);
      if (begin < end)
        fn(begin, end);
    }
  });
  return blocks;
}

//===----------------------------------------------------------------------===//
// GEMMs (LinearAlgebra.cpp)
//===----------------------------------------------------------------------===//

/// Chooses the GEMM library (`gemm`) and, with `oneThreadPool`, makes the
/// BLAS serial where it can so that GEMMs split over ATen's threads; set
/// by the backend when it starts.
void configureGemms(GemmLibrary gemm, bool oneThreadPool);

/// `out = a @ b` for stacks `[n, m, k] @ [n, k, p]` of any strides (views
/// from narrow and transpose are read in place where oneDNN runs them), or
/// `out += a @ b` with `accumulate`.
void bmmInto(at::Tensor &out, const at::Tensor &a, const at::Tensor &b,
             bool accumulate = false);

//===----------------------------------------------------------------------===//
// The kernel table
//===----------------------------------------------------------------------===//

/// The kernel of each op kind, or none (the collectives and `wait`, which
/// the executor runs through a communicator).
using KernelTable = runtime::KernelTable<Ctx>;
using Kernel = KernelTable::Kernel;

/// Every family's kernels, registered once (CpuBackend.cpp).
const KernelTable &kernelTable();

void registerElementwiseKernels(KernelTable &table);
void registerLinearAlgebraKernels(KernelTable &table);
void registerAttentionKernels(KernelTable &table);
void registerNormalizationKernels(KernelTable &table);
void registerShapeKernels(KernelTable &table);
void registerReductionKernels(KernelTable &table);
void registerConvolutionKernels(KernelTable &table);
void registerLossKernels(KernelTable &table);
void registerOptimizerKernels(KernelTable &table);

} // namespace merak::runtime::cpu

#endif // MERAK_LIB_RUNTIME_CPU_CPUKERNELS_H
