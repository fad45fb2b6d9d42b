//===- Fusion.h - chains of elementwise ops as single kernels -*- C++ -*-===//
//
// A GPU spends most of an elementwise op's time moving its operands through
// memory: `x + b`, GELU and a residual add are three passes over the
// activations where one would do. `fuseElementwise` finds chains of
// elementwise instructions in a bound program and replaces each with one
// `fused` instruction; `fusedKernelSource` writes a chain as a CUDA kernel,
// which the CUDA backend compiles with NVRTC when it first runs it
// (docs/cuda.md). Backends without a kernel for `fused` run its members one
// by one (the executor does), so a fused program runs everywhere with the
// losses of the unfused one. Nothing here depends on CUDA.
//
//===----------------------------------------------------------------------===//

#ifndef MERAK_RUNTIME_FUSION_H
#define MERAK_RUNTIME_FUSION_H

#include "merak/Runtime/Program.h"

#include <cstdint>
#include <optional>
#include <string>

namespace merak::runtime {

/// Whether `inst` may join a chain: an elementwise op a fused kernel
/// computes (unary and binary math, comparisons, `where`, `clamp`, `cast`,
/// GELU and its gradient, dropout's mask and a training dropout) on f32,
/// bf16, f16 or i1 values, whose result has at most eight dimensions and
/// at least one element.
bool fusible(const Program &program, const Instruction &inst);

/// Whether `inst` draws a dropout mask from the step's generator (when
/// the step trains and its p is above 0): `dropout_mask`, or `dropout` in
/// training with p > 0. Such members of a chain draw in program order.
bool drawsDropoutMask(const Instruction &inst);

/// Which operands and results of an op may take another floating type than
/// the one it computes in (`CastFolding`): a kernel reads such an operand
/// as if cast to the compute type and rounds such a result from it once,
/// so `foldCasts` can drop the casts around the op.
struct CastFolding {
  /// Bit i: operand i is read in any of f32, bf16 and f16.
  uint32_t operands = 0;
  /// Bit i: result i is written in any of f32, bf16 and f16.
  uint32_t results = 0;
  /// The value whose element type the op computes in: operand
  /// `computeOperand`, or result `computeResult` when that is -1.
  int computeOperand = -1, computeResult = -1;
};
/// The op's `CastFolding`; none for an op whose kernels take one type.
/// Cross-entropy reads its logits (and its gradient writes its result) in
/// any of them; layer norm and RMS norm write their output, layer norm's
/// gradient reads the incoming gradient.
CastFolding castFolding(OpKind kind);

/// The element type `inst` computes in when it is an op of `castFolding`
/// and some operand or result named there has another type (a folded
/// cast); nullopt otherwise. Backends use it to run such instructions.
std::optional<DType> foldedComputeType(const Program &program,
                                       const Instruction &inst);

/// Removes the casts that an op of `castFolding` can do itself, computing
/// in float32: a cast from bf16 or f16 to f32 all of whose readers take
/// that operand in any type (they read the cast's operand instead), and a
/// cast of an f32 result to bf16 or f16 that is the result's only reader
/// (the op writes the cast's result instead). The values computed are the
/// same bit for bit: the widening cast is exact, and the op rounds once
/// where the cast did. A mixed-precision program's logits then stay bf16
/// through the cross-entropy and its gradient (the f32 copy of the
/// `[tokens, vocabulary]` logits is never made), and layer norm writes the
/// bf16 input of the next matrix product. Call it before
/// `fuseElementwise`; `bindToRank` does with `BindOptions::fuseElementwise`.
void foldCasts(Program &program);

/// Replaces every chain of two or more fusible instructions of one result
/// shape with a `fused` instruction (`Program::fusedKernels`), at the place
/// of the chain's last member. A member joins the chain of an operand's
/// producer only while nothing outside the chain has read a value of it,
/// so the values a chain reads are ready where it runs and the values it
/// defines are read only after it. A chain's inputs and members number at
/// most `kMaxFusedOperands`, so that what it reads and defines fits one
/// kernel's parameters, and at most `kMaxFusedDropouts` of them draw a
/// dropout mask. Masks are drawn in the order of the unfused program: a
/// chain with such a member is closed where another mask is drawn before
/// its last member, and runs its members in program order. Call it before
/// `planProgram`; `bindToRank` does with `BindOptions::fuseElementwise`.
void fuseElementwise(Program &program);

/// Replaces the float32 AdamW updates of a program that share their
/// hyperparameters, learning rate and step with one `fused` instruction,
/// and likewise its float32 SGD updates
/// (at the place of the last), which the CUDA backend runs as one
/// multi-tensor kernel launch (a few for many tensors) instead of one per
/// parameter; a backend without it runs the updates one by one. An update
/// joins a group while nothing outside the group has read a result of it.
/// Called with `fuseElementwise` (`BindOptions::fuseElementwise`).
void fuseOptimizerUpdates(Program &program);

/// Whether chain `index` is a group of optimizer updates
/// (`fuseOptimizerUpdates`), not an elementwise chain.
bool isOptimizerGroup(const Program &program, int index);

/// The most inputs plus outputs of one chain's kernel (its parameters have
/// room for so many pointers).
constexpr int kMaxFusedOperands = 24;
/// The most members of one chain that draw a dropout mask (their draws are
/// kernel parameters).
constexpr int kMaxFusedDropouts = 4;

/// The CUDA source of `program`'s chain `index`, run by `fused` (which
/// names its inputs and outputs), a kernel named
/// `merak_fused` over the chain's elements whose parameters are a
/// `FusedParams` (lib/Runtime/CUDA/DeviceMath.h, its one include): inputs
/// loaded in their element types, every value computed in float as the
/// unfused kernel computes it and rounded to its own element type, the
/// outputs stored. Chains that compute the same thing (one per layer of a
/// model) have the same source.
std::string fusedKernelSource(const Program &program, const Instruction &fused,
                              int index);

/// Every distinct kernel source of `program`'s chains, each after a
/// comment naming the `fused` instructions that run it
/// (`--print-fused-kernels`).
std::string listFusedKernels(const Program &program);

/// The ops of chain `index` in order, e.g. "add, gelu, mul" (listings).
std::string describeFusedKernel(const Program &program, int index);

} // namespace merak::runtime

#endif // MERAK_RUNTIME_FUSION_H
