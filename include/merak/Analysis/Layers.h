//===- Layers.h - layers of a model and stage balancing --------*- C++ -*-===//
//
// Finds the "layers" of a forward pass by its structure, not by names: the
// positions in the forward op order where the fewest values are live (a
// transformer's residual stream between an attention and an MLP block, a
// ResNet block's output) are the places a pipeline may be cut, and a layer
// is the span between two such cuts that contains a contraction (linear,
// matmul, conv2d); a span without one joins the layer before it. Each layer
// carries its cost-model figures, so a partitioner can balance stages.
//
//===----------------------------------------------------------------------===//
#ifndef MERAK_ANALYSIS_LAYERS_H
#define MERAK_ANALYSIS_LAYERS_H

#include "merak/Analysis/CostModel.h"

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/SmallVector.h"

#include <vector>

namespace merak {

/// A run of consecutive forward ops between two cut points.
struct Layer {
  /// Range [begin, end) into LayerAnalysis::forwardOps().
  unsigned begin = 0, end = 0;
  /// `merak.id` of its first and last op.
  int64_t firstId = -1, lastId = -1;
  /// Estimated forward and backward time (recomputation included).
  double forwardTime = 0, backwardTime = 0;
  /// Bytes of the distinct parameters its ops read.
  int64_t paramBytes = 0;
  /// Bytes of the activations its ops keep for backward.
  int64_t savedBytes = 0;
  /// Bytes live across the cut after it (0 for the last layer).
  int64_t outBytes = 0;
  double flops = 0;
};

/// The layers of a training step (ops with `merak.id`) or of a forward
/// function (every op).
class LayerAnalysis {
public:
  LayerAnalysis(mlir::func::FuncOp func, const CostModel &model);

  /// Forward ops in block order but constants and invariantOps() (those
  /// are free or recomputed by every stage that uses them).
  llvm::ArrayRef<mlir::Operation *> forwardOps() const { return ops; }
  llvm::ArrayRef<Layer> layers() const { return layerList; }
  /// Layer of a forward op, -1 for constants and non-forward ops.
  int layerOf(mlir::Operation *op) const;
  /// Number and bytes of the forward values defined at or before position
  /// `pos` of forwardOps() and used after it. The number leaves out values
  /// read by several layers (three or more uses, contractions between
  /// them: a bias added in every block, an encoder output read by every
  /// decoder block), which cross every cut of their span anyway.
  unsigned liveCount(unsigned pos) const { return counts[pos]; }
  int64_t liveBytes(unsigned pos) const { return bytes[pos]; }
  /// The cost figures of every forward op (constants included); their
  /// `backwardWeight` is found per layer, every layer boundary taken for a
  /// stage cut (the W a pipeline of these layers runs).
  llvm::ArrayRef<ForwardOpCost> opCosts() const { return costs; }

private:
  std::vector<ForwardOpCost> costs;
  llvm::SmallVector<mlir::Operation *> ops;
  llvm::SmallVector<unsigned> counts;
  llvm::SmallVector<int64_t> bytes;
  llvm::SmallVector<Layer> layerList;
  llvm::DenseMap<mlir::Operation *, int> layerIndex;
};

/// Splits layers with times `layerTime` into `stages` contiguous stages
/// (each at least one layer) minimizing the slowest stage's time; splits
/// whose slowest stage is within `tolerance` (relative) of each other count
/// as equally fast, and among those the one with the fewest bytes crossing
/// its cuts wins (`cutBytes[i]`: the bytes live after layer i). Returns the
/// first layer of every stage (the first is 0).
llvm::SmallVector<unsigned> balanceStages(llvm::ArrayRef<double> layerTime,
                                          llvm::ArrayRef<double> cutBytes,
                                          unsigned stages,
                                          double tolerance = 0.01);

} // namespace merak

#endif // MERAK_ANALYSIS_LAYERS_H
