//===- SparseEmbeddingGrads.cpp - embedding gradients reduced as rows -----===//
//
// An embedding's weight gradient is an `index_backward`: the activation
// gradient of the batch scattered into the rows its tokens pick. Data
// parallelism all-reduces that whole table, vocabulary x width, although
// each rank touched only the rows of its own tokens. Gathering the
// activation gradients and the token ids of every rank of the group and
// scattering them all on each rank gives the same sum, with far fewer bytes
// whenever the group's batch is smaller than the vocabulary.
//
//===----------------------------------------------------------------------===//

#include "merak/Analysis/CostModel.h"
#include "merak/Dialect/Merak/IR/AttrNames.h"
#include "merak/Dialect/Merak/IR/MerakOps.h"
#include "merak/Dialect/Merak/Transforms/Passes.h"
#include "merak/Dialect/Merak/Transforms/Resharding.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Mesh/IR/MeshOps.h"
#include "mlir/IR/Builders.h"

namespace merak {
#define GEN_PASS_DEF_SPARSEEMBEDDINGGRADS
#include "merak/Dialect/Merak/Transforms/Passes.h.inc"
} // namespace merak

using namespace mlir;
using namespace mlir::mesh;
using namespace merak;

namespace {

/// `v`'s type with dimension `d` `n` times as large.
RankedTensorType gathered(Value v, int64_t d, int64_t n) {
  auto t = cast<RankedTensorType>(v.getType());
  SmallVector<int64_t> shape(t.getShape());
  shape[d] *= n;
  return RankedTensorType::get(shape, t.getElementType());
}

struct SparseEmbeddingGradsPass
    : public merak::impl::SparseEmbeddingGradsBase<SparseEmbeddingGradsPass> {
  using SparseEmbeddingGradsBase::SparseEmbeddingGradsBase;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    MeshOp mesh = lookupMesh(module);
    if (!mesh)
      return;
    SmallVector<AllReduceOp> reductions;
    module.walk([&](AllReduceOp op) { reductions.push_back(op); });
    for (AllReduceOp reduce : reductions)
      rewrite(mesh, reduce);
  }

  /// AR(index_backward(g, i)) = index_backward(AG(g), AG(i)) over the same
  /// group: the sum over ranks of scatters is the scatter of everything the
  /// ranks scatter. Done where the gathered operands are smaller than the
  /// table.
  void rewrite(MeshOp mesh, AllReduceOp reduce) {
    auto scatter = reduce.getInput().getDefiningOp<IndexBackwardOp>();
    if (reduce.getReduction() != ReductionKind::Sum || !scatter ||
        !scatter->hasOneUse() || reduce.getMesh() != mesh.getSymName())
      return;
    Value grad = scatter.getGrad(), indices = scatter.getIndices();
    auto indexType = cast<RankedTensorType>(indices.getType());
    int64_t n = groupSize(mesh, reduce.getMeshAxes());
    if (indexType.getRank() == 0 || n <= 1 ||
        n * (tensorBytes(grad.getType()) + tensorBytes(indices.getType())) >=
            tensorBytes(reduce.getType()))
      return;
    // The ids' dimensions sit in the gradient from `dim` on (the op's
    // layout); gathering both along those keeps each row with its id.
    int64_t dim = scatter.getDim();
    OpBuilder b(reduce);
    Location loc = reduce.getLoc();
    auto allGrads =
        b.create<AllGatherOp>(loc, gathered(grad, dim, n), reduce.getMesh(),
                              reduce.getMeshAxes(), grad, APInt(64, dim));
    auto allIndices =
        b.create<AllGatherOp>(loc, gathered(indices, 0, n), reduce.getMesh(),
                              reduce.getMeshAxes(), indices, APInt(64, 0));
    if (Attribute gradOf = scatter->getAttr(kGradOfAttr)) {
      allGrads->setAttr(kGradOfAttr, gradOf);
      allIndices->setAttr(kGradOfAttr, gradOf);
    }
    Operation *whole = b.clone(*scatter);
    whole->setOperands({allGrads.getResult(), allIndices.getResult()});
    reduce.getResult().replaceAllUsesWith(whole->getResult(0));
    reduce.erase();
    scatter.erase();
  }
};

} // namespace
