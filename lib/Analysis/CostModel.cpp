//===- CostModel.cpp - per-op cost of Merak programs ----------------------===//
//
// The per-op rules, one TypeSwitch over the op families, and the analysis
// of a training step's forward ops.
//
//===----------------------------------------------------------------------===//

#include "merak/Analysis/CostModel.h"
#include "merak/Analysis/TrainStep.h"
#include "merak/Dialect/Merak/IR/AttrNames.h"
#include "merak/Dialect/Merak/IR/MerakOps.h"
#include "merak/Hardware/CollectiveCost.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Mesh/IR/MeshDialect.h"
#include "mlir/Dialect/Mesh/IR/MeshOps.h"
#include "mlir/IR/SymbolTable.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/TypeSwitch.h"

#include <algorithm>

using namespace mlir;
using namespace merak;

int64_t merak::numElements(Type type) {
  auto tensor = dyn_cast<RankedTensorType>(type);
  if (!tensor || !tensor.hasStaticShape())
    return 0;
  return tensor.getNumElements();
}

int64_t merak::tensorBytes(Type type) {
  auto tensor = dyn_cast<RankedTensorType>(type);
  if (!tensor || !tensor.hasStaticShape())
    return 0;
  Type element = tensor.getElementType();
  int64_t bits = element.isIntOrFloat() ? element.getIntOrFloatBitWidth() : 32;
  return tensor.getNumElements() * std::max<int64_t>(1, (bits + 7) / 8);
}

bool merak::isContraction(Operation *op) {
  return isa<LinearOp, MatmulOp, LinearWeightBackwardOp, Conv2dOp>(op);
}

bool merak::isGemmOpName(StringRef name) {
  return name == LinearOp::getOperationName() ||
         name == MatmulOp::getOperationName() ||
         name == LinearWeightBackwardOp::getOperationName() ||
         name == Conv2dOp::getOperationName() ||
         name == Conv2dBackwardOp::getOperationName();
}

bool merak::isConstantLike(Operation *op) {
  return isa<ConstantOp, arith::ConstantOp>(op);
}

namespace {

int64_t operandBytes(Operation *op) {
  int64_t bytes = 0;
  for (Value v : op->getOperands())
    bytes += tensorBytes(v.getType());
  return bytes;
}

int64_t resultBytes(Operation *op) {
  int64_t bytes = 0;
  for (Value v : op->getResults())
    bytes += tensorBytes(v.getType());
  return bytes;
}

int64_t resultElements(Operation *op) {
  return op->getNumResults() ? numElements(op->getResult(0).getType()) : 0;
}

/// 2 * (elements of the output) * (multiply-adds per output element).
double convolutionFlops(Type output, Type weight) {
  auto w = cast<RankedTensorType>(weight);
  int64_t perOutput = 1;
  for (int64_t d : w.getShape().drop_front())
    perOutput *= d; // in_channels / groups * kh * kw
  return 2.0 * double(numElements(output)) * double(perOutput);
}

/// Ranks in the group of a collective over `axes` of its mesh (1 when the
/// mesh cannot be found).
int64_t groupSize(Operation *op, FlatSymbolRefAttr meshRef,
                  ArrayRef<mesh::MeshAxis> axes) {
  auto meshOp = SymbolTable::lookupNearestSymbolFrom<mesh::MeshOp>(op, meshRef);
  if (!meshOp)
    return 1;
  int64_t n = 1;
  for (mesh::MeshAxis axis : axes)
    if (axis >= 0 && axis < int64_t(meshOp.getShape().size()))
      n *= std::max<int64_t>(1, meshOp.getShape()[axis]);
  return n;
}

/// What a mesh collective sends per rank (`collectiveBytes`, the formula
/// propagation prices reshardings with); reductions add one FLOP per input
/// element.
void collectiveCost(Operation *op, OpCost &cost) {
  FlatSymbolRefAttr meshRef;
  ArrayRef<mesh::MeshAxis> axes;
  TypeSwitch<Operation *>(op)
      .Case<mesh::AllReduceOp, mesh::AllGatherOp, mesh::AllSliceOp,
            mesh::AllToAllOp, mesh::ReduceScatterOp>([&](auto c) {
        meshRef = c.getMeshAttr();
        axes = c.getMeshAxes();
      });
  if (!meshRef)
    return;
  int64_t n = groupSize(op, meshRef, axes);
  double in = double(tensorBytes(op->getOperand(0).getType()));
  double out = double(tensorBytes(op->getResult(0).getType()));
  auto send = [&](CollectiveKind kind) {
    cost.bytesCommunicated = int64_t(collectiveBytes(kind, n, in, out));
  };
  TypeSwitch<Operation *>(op)
      .Case<mesh::AllReduceOp>([&](auto) {
        send(CollectiveKind::AllReduce);
        cost.flops = double(numElements(op->getOperand(0).getType()));
      })
      .Case<mesh::ReduceScatterOp>([&](auto) {
        send(CollectiveKind::ReduceScatter);
        cost.flops = double(numElements(op->getOperand(0).getType()));
      })
      .Case<mesh::AllToAllOp>([&](auto) { send(CollectiveKind::AllToAll); })
      .Case<mesh::AllGatherOp>([&](auto) { send(CollectiveKind::AllGather); })
      .Case<mesh::AllSliceOp>([&](auto) { send(CollectiveKind::AllSlice); });
  cost.collectives = n > 1 && cost.bytesCommunicated > 0 ? 1 : 0;
}

} // namespace

/// masked_attention on `query` [..., T, D] and `value` [..., T, E]: two
/// products of the [..., T, T] scores with D or E features (four backward)
/// plus the softmax or its gradient. The full square: a kernel skipping a
/// causal mask's blocks does about half.
/// FLOPs of masked_attention or its backward; `recomputes`: the backward
/// of the FlashAttention form, which computes the scores and their
/// exponentials again from the rows' log-sum-exp.
static double attentionFlops(Type query, Type value, bool backward,
                             bool recomputes = false) {
  ArrayRef<int64_t> q = cast<RankedTensorType>(query).getShape();
  double scores = double(q[q.size() - 2]);
  for (int64_t d : q.drop_back())
    scores *= double(d);
  double features = double(q.back()) +
                    double(cast<RankedTensorType>(value).getShape().back());
  double flops = (backward ? 4.0 : 2.0) * scores * features +
                 (backward ? 6.0 : 7.0) * scores;
  if (recomputes)
    flops += 2.0 * scores * double(q.back()) + 4.0 * scores;
  return flops;
}

/// Whether masked_attention(_backward) `op` reads or keeps the rows'
/// log-sum-exp rather than the probabilities.
static bool flashForm(Operation *op) {
  Value saved =
      isa<MaskedAttentionOp>(op) ? op->getResult(1) : op->getOperand(5);
  return cast<RankedTensorType>(saved.getType()).getRank() <
         cast<RankedTensorType>(
             op->getOperand(isa<MaskedAttentionOp>(op) ? 0 : 1).getType())
             .getRank();
}

OpCost merak::estimateOp(Operation *op) {
  OpCost cost;
  if (isConstantLike(op))
    return cost;
  cost.bytesRead = operandBytes(op);
  cost.bytesWritten = resultBytes(op);
  int64_t out = resultElements(op);

  if (op->getName().getDialectNamespace() ==
      mesh::MeshDialect::getDialectNamespace()) {
    collectiveCost(op, cost);
    return cost;
  }

  TypeSwitch<Operation *>(op)
      .Case<LinearOp>([&](LinearOp linear) {
        auto input = cast<RankedTensorType>(linear.getInput().getType());
        auto weight = cast<RankedTensorType>(linear.getWeight().getType());
        int64_t k = input.getShape().back();
        int64_t n = weight.getShape().front();
        int64_t m = k ? input.getNumElements() / k : 0;
        cost.flops = 2.0 * double(m) * double(n) * double(k);
        if (linear.getBias())
          cost.flops += double(m) * double(n);
      })
      .Case<LinearWeightBackwardOp>([&](LinearWeightBackwardOp grad) {
        auto input = cast<RankedTensorType>(grad.getInput().getType());
        int64_t k = input.getShape().back();
        int64_t m = k ? input.getNumElements() / k : 0;
        cost.flops = 2.0 * double(m) * double(out);
      })
      .Case<MatmulOp>([&](MatmulOp matmul) {
        auto lhs = cast<RankedTensorType>(matmul.getLhs().getType());
        cost.flops = 2.0 * double(out) * double(lhs.getShape().back());
      })
      .Case<Conv2dOp>([&](Conv2dOp conv) {
        cost.flops = convolutionFlops(conv.getResult().getType(),
                                      conv.getWeight().getType());
        if (conv.getBias())
          cost.flops += double(out);
      })
      .Case<Conv2dBackwardOp>([&](Conv2dBackwardOp conv) {
        // Input and weight gradients are each a convolution of the forward's
        // size; the bias gradient a sum over the output gradient.
        double forward = convolutionFlops(conv.getGrad().getType(),
                                          conv.getWeight().getType());
        cost.flops =
            2.0 * forward + double(numElements(conv.getGrad().getType()));
      })
      .Case<SoftmaxOp, LogSoftmaxOp>(
          [&](Operation *) { cost.flops = 5.0 * double(out); })
      .Case<SoftmaxBackwardOp>(
          [&](SoftmaxBackwardOp) { cost.flops = 4.0 * double(out); })
      .Case<MaskedAttentionOp, MaskedAttentionBackwardOp>([&](Operation *o) {
        bool backward = isa<MaskedAttentionBackwardOp>(o);
        cost.flops = attentionFlops(o->getOperand(backward).getType(),
                                    o->getOperand(backward + 2).getType(),
                                    backward, backward && flashForm(o));
      })
      .Case<LayerNormOp, BatchNormOp>(
          [&](Operation *) { cost.flops = 8.0 * double(out); })
      .Case<RmsNormOp>([&](RmsNormOp) { cost.flops = 6.0 * double(out); })
      .Case<LayerNormBackwardOp, BatchNormBackwardOp>([&](Operation *o) {
        cost.flops = 12.0 * double(numElements(o->getOperand(1).getType()));
      })
      .Case<GeluBackwardOp>(
          [&](GeluBackwardOp) { cost.flops = 12.0 * double(out); })
      .Case<ReduceSumOp, ReduceMeanOp, ReduceMaxOp>([&](Operation *o) {
        cost.flops = double(numElements(o->getOperand(0).getType()));
      })
      .Case<CrossEntropyOp>([&](CrossEntropyOp ce) {
        cost.flops = 5.0 * double(numElements(ce.getLogits().getType()));
      })
      .Case<CrossEntropyBackwardOp>([&](CrossEntropyBackwardOp ce) {
        cost.flops = 4.0 * double(numElements(ce.getLogits().getType()));
      })
      .Case<MaxPool2dOp, AvgPool2dOp>([&](auto pool) {
        int64_t window = 1;
        for (int64_t k : pool.getKernel())
          window *= k;
        cost.flops = double(out) * double(window);
      })
      .Case<MaxPool2dBackwardOp, AvgPool2dBackwardOp>([&](auto pool) {
        int64_t window = 1;
        for (int64_t k : pool.getKernel())
          window *= k;
        cost.flops = double(numElements(pool.getGrad().getType())) * window;
      })
      .Case<AdaptiveAvgPool2dOp, AdaptiveAvgPool2dBackwardOp>(
          [&](Operation *o) {
            cost.flops = double(numElements(o->getOperand(0).getType()));
          })
      .Case<IndexBackwardOp>([&](IndexBackwardOp scatter) {
        cost.flops = double(numElements(scatter.getGrad().getType()));
      })
      .Case<EmbeddingOp, IndexOp>([&](Operation *o) {
        // A gather reads the rows it picks and the indices, not the table.
        cost.bytesRead =
            cost.bytesWritten + tensorBytes(o->getOperand(1).getType());
      })
      .Case<SliceOp, SelectOp>(
          [&](Operation *) { cost.bytesRead = cost.bytesWritten; })
      .Case<UpdateSliceOp>([&](UpdateSliceOp op) {
        // In place: reads and writes the update's rows only.
        cost.bytesRead = tensorBytes(op.getUpdate().getType());
        cost.bytesWritten = cost.bytesRead;
      })
      .Case<ReshapeOp>([&](ReshapeOp) {
        // A view: no kernel, no traffic.
        cost.bytesRead = 0;
        cost.bytesWritten = 0;
      })
      .Case<PermuteOp, ExpandOp, ConcatOp, PadOp, RollOp, SliceBackwardOp>(
          [&](Operation *) {})
      .Case<SgdUpdateOp>([&](SgdUpdateOp update) {
        bool momentum = update.getMomentum().convertToDouble() != 0.0;
        cost.flops = (momentum ? 6.0 : 3.0) * double(out);
      })
      .Case<AdamwUpdateOp>(
          [&](AdamwUpdateOp) { cost.flops = 14.0 * double(out); })
      .Default([&](Operation *o) {
        // Elementwise ops and anything without a rule of its own.
        cost.flops = elementFlops(o) * double(out);
      });
  return cost;
}

OpCost merak::estimateBackwardByRule(Operation *op) {
  OpCost forward = estimateOp(op);
  if (auto attention = dyn_cast<MaskedAttentionOp>(op)) {
    OpCost backward = forward;
    backward.flops =
        attentionFlops(attention.getQuery().getType(),
                       attention.getValue().getType(), true, flashForm(op));
    return backward;
  }
  if (!isContraction(op))
    return forward;
  OpCost backward;
  backward.flops = 2.0 * forward.flops;
  backward.bytesRead = 2 * forward.bytesRead;
  backward.bytesWritten = 2 * forward.bytesWritten;
  return backward;
}

double CostModel::time(const OpCost &cost) const {
  if (cost.flops == 0 && cost.bytes() == 0 && cost.bytesCommunicated == 0)
    return 0;
  double compute = hw.peakFlops > 0 ? cost.flops / hw.peakFlops : 0;
  double memory =
      hw.memoryBandwidth > 0 ? double(cost.bytes()) / hw.memoryBandwidth : 0;
  double communication =
      double(cost.collectives) * hw.collectiveLatency +
      (hw.collectiveBandwidth > 0
           ? double(cost.bytesCommunicated) / hw.collectiveBandwidth
           : 0);
  return std::max(compute, memory) + hw.opOverhead + communication;
}

double CostModel::transferTime(int64_t bytes) const {
  if (bytes <= 0)
    return 0;
  double wire = hw.linkBandwidth > 0 ? double(bytes) / hw.linkBandwidth : 0;
  return hw.linkLatency + wire;
}

std::vector<ForwardOpCost> CostModel::analyze(func::FuncOp func) const {
  std::vector<ForwardOpCost> result;
  if (func.getBody().empty())
    return result;
  Block &body = func.getBody().front();

  bool hasIds = false;
  for (Operation &op : body)
    if (getForwardId(&op)) {
      hasIds = true;
      break;
    }

  llvm::DenseMap<int64_t, size_t> index;
  int64_t position = 0;
  for (Operation &op : body.without_terminator()) {
    std::optional<int64_t> id =
        hasIds ? getForwardId(&op) : std::optional<int64_t>(position);
    ++position;
    if (!id)
      continue;
    ForwardOpCost entry;
    entry.op = &op;
    entry.id = *id;
    entry.forward = estimateOp(&op);
    if (!hasIds)
      entry.backward = estimateBackwardByRule(&op);
    llvm::SmallDenseSet<Value, 4> params;
    for (Value operand : op.getOperands()) {
      auto arg = dyn_cast<BlockArgument>(operand);
      if (arg && arg.getOwner() == &body &&
          func.getArgAttr(arg.getArgNumber(), kParamAttr) &&
          params.insert(operand).second)
        entry.paramBytes += tensorBytes(operand.getType());
    }
    for (Value res : op.getResults()) {
      bool saved = false;
      for (Operation *user : res.getUsers())
        if (hasIds ? (getGradOf(user) || getRecomputeOf(user))
                   : !isa<func::ReturnOp>(user))
          saved = true;
      // Without gradient ops, a non-view result is assumed to be kept.
      if (!hasIds && isa<ReshapeOp>(op))
        saved = false;
      if (saved)
        entry.savedBytes += tensorBytes(res.getType());
    }
    index[*id] = result.size();
    result.push_back(std::move(entry));
  }
  if (!hasIds)
    return result;

  llvm::DenseSet<Operation *> weight = weightGradientOps(func);
  for (Operation &op : body.without_terminator()) {
    if (std::optional<int64_t> of = getRecomputeOf(&op)) {
      auto it = index.find(*of);
      if (it != index.end())
        result[it->second].recompute += estimateOp(&op);
      continue;
    }
    std::optional<int64_t> of = getGradOf(&op);
    if (!of)
      continue;
    auto it = index.find(*of);
    if (it == index.end())
      continue;
    OpCost cost = estimateOp(&op);
    result[it->second].backward += cost;
    if (weight.contains(&op))
      result[it->second].backwardWeight += cost;
  }
  return result;
}
