//===- CostModel.h - per-op cost of Merak programs --------------*- C++ -*-===//
//
// FLOPs, memory traffic and parameter/activation bytes of merak ops and of
// the forward ops of a training step, and the time they take on a hardware
// profile (a roofline: the larger of compute and memory time). The pipeline
// partitioner balances stages with it; an automatic search can use it the
// same way. docs/pipeline.md lists the per-op rules.
//
//===----------------------------------------------------------------------===//
#ifndef MERAK_ANALYSIS_COSTMODEL_H
#define MERAK_ANALYSIS_COSTMODEL_H

#include "merak/Hardware/HardwareProfile.h"

#include "mlir/IR/Operation.h"
#include "mlir/IR/Types.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/SmallVector.h"

#include <cstdint>
#include <vector>

namespace mlir::func {
class FuncOp;
} // namespace mlir::func

namespace merak {

/// What executing one op once costs.
struct OpCost {
  double flops = 0;
  int64_t bytesRead = 0;
  int64_t bytesWritten = 0;
  /// Bytes one rank sends in a collective (a ring all-reduce of B bytes
  /// over n ranks: 2 (n - 1) / n B), and the number of collectives.
  int64_t bytesCommunicated = 0;
  int64_t collectives = 0;

  OpCost &operator+=(const OpCost &other) {
    flops += other.flops;
    bytesRead += other.bytesRead;
    bytesWritten += other.bytesWritten;
    bytesCommunicated += other.bytesCommunicated;
    collectives += other.collectives;
    return *this;
  }
  int64_t bytes() const { return bytesRead + bytesWritten; }
};

/// Elements of a statically shaped tensor type (1 for a scalar; 0 for
/// anything that is not a ranked tensor).
int64_t numElements(mlir::Type type);
/// Bytes of a statically shaped tensor type (i1 counts one byte).
int64_t tensorBytes(mlir::Type type);

/// True for the ops whose cost dominates a layer: linear, matmul, conv2d
/// (and linear_weight_backward, a linear's weight gradient).
bool isContraction(mlir::Operation *op);
/// Whether the op of this full name (`merak.linear`) runs as GEMMs: the
/// contractions and conv2d_backward, as a profile of a run names its
/// kernels (`merak-exec --profile-json`).
bool isGemmOpName(llvm::StringRef name);
/// True for ops that produce a value without reading memory (constants).
bool isConstantLike(mlir::Operation *op);

/// The cost of `op` by its own rule (2·M·N·K for a contraction, a few FLOPs
/// per element for elementwise ops and normalizations, bytes moved for
/// data movement, bytes sent for a mesh collective, ...). Unknown ops cost
/// one FLOP per result element.
OpCost estimateOp(mlir::Operation *op);

/// The backward cost of forward op `op` when its gradient ops are not in
/// the IR (a forward function): twice the forward for contractions (input
/// and weight gradients), the forward's cost otherwise.
OpCost estimateBackwardByRule(mlir::Operation *op);

/// Figures of one forward op of a function.
struct ForwardOpCost {
  mlir::Operation *op = nullptr;
  /// `merak.id`, or the op's position when the function has no ids.
  int64_t id = -1;
  OpCost forward;
  /// All its gradient ops (`merak.grad_of = id`), or the rule's estimate.
  OpCost backward;
  /// The part of `backward` that only computes weight gradients (the W of
  /// the zero-bubble split; see weightGradientOps).
  OpCost backwardWeight;
  /// Its recomputed copies (`merak.recompute_of = id`).
  OpCost recompute;
  /// Bytes of the parameters (`merak.param` arguments) it reads.
  int64_t paramBytes = 0;
  /// Bytes of its results that backward or recomputed ops read: the
  /// activations kept from forward to backward.
  int64_t savedBytes = 0;
};

/// Time estimates on a hardware profile, and the analysis of a function.
class CostModel {
public:
  explicit CostModel(HardwareProfile hardware = {}) : hw(hardware) {}

  const HardwareProfile &hardware() const { return hw; }

  /// Roofline time of `cost`: max(flops / peak, bytes / bandwidth), plus
  /// the per-kernel overhead when the op does anything, plus the time of
  /// its collectives (latency + bytes sent / collective bandwidth).
  double time(const OpCost &cost) const;
  /// Time to send `bytes` to a neighbouring pipeline rank (0 for 0 bytes).
  double transferTime(int64_t bytes) const;

  /// One entry per forward op of `func` in block order, constants included.
  /// In a training step the forward ops are those with `merak.id` and the
  /// backward figures come from the ops that name them in `merak.grad_of`;
  /// in a function without ids every op is forward and backward follows
  /// estimateBackwardByRule.
  std::vector<ForwardOpCost> analyze(mlir::func::FuncOp func) const;

private:
  HardwareProfile hw;
};

} // namespace merak

#endif // MERAK_ANALYSIS_COSTMODEL_H
