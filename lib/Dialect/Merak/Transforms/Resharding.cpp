//===- Resharding.cpp - move a value between two shardings ----------------===//
//
// Resharding on meshes of any rank. Upstream's mesh spmdization handles
// one-dimensional meshes only; a data x tensor mesh needs the general case.
// The collectives are chosen per mesh axis:
//   partial -> split on the same axes:  one reduce_scatter
//   partial -> not partial:             all_reduce
//   split on d1 -> split on d2 (1 axis): all_to_all
//   split -> not split:                 all_gather
//   not split -> split:                 all_slice (local, no communication)
//
//===----------------------------------------------------------------------===//

#include "merak/Dialect/Merak/Transforms/Resharding.h"

#include "mlir/Dialect/Mesh/IR/MeshOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinTypes.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/SmallSet.h"

using namespace mlir;
using namespace mlir::mesh;

namespace merak {

SplitAxes splitAxesOf(MeshShardingAttr sharding, int64_t rank) {
  SplitAxes split(rank);
  if (!sharding)
    return split;
  for (auto [dim, axes] : llvm::enumerate(sharding.getSplitAxes()))
    if (static_cast<int64_t>(dim) < rank)
      split[dim].assign(axes.asArrayRef().begin(), axes.asArrayRef().end());
  return split;
}

MeshShardingAttr makeSharding(MLIRContext *ctx, FlatSymbolRefAttr mesh,
                              const SplitAxes &split,
                              ArrayRef<MeshAxis> partial, ReductionKind kind) {
  // Trailing unsplit dimensions are dropped, but one entry stays: the
  // mesh dialect prints a replicated sharding as `[[]]` and cannot parse
  // `[]`.
  SplitAxes trimmed(split);
  while (trimmed.size() > 1 && trimmed.back().empty())
    trimmed.pop_back();
  if (trimmed.empty())
    trimmed.emplace_back();
  return MeshShardingAttr::get(ctx, mesh, trimmed, partial, kind);
}

MeshShardingAttr replicated(MLIRContext *ctx, FlatSymbolRefAttr mesh) {
  return makeSharding(ctx, mesh, {}, {}, ReductionKind::Sum);
}

MeshShardingAttr normalize(MeshShardingAttr sharding, int64_t rank) {
  if (!sharding)
    return sharding;
  SmallVector<MeshAxis> partial(sharding.getPartialAxes());
  llvm::sort(partial);
  return makeSharding(sharding.getContext(), sharding.getMesh(),
                      splitAxesOf(sharding, rank), partial,
                      partial.empty() ? ReductionKind::Sum
                                      : sharding.getPartialType());
}

bool sameSharding(MeshShardingAttr a, MeshShardingAttr b, int64_t rank) {
  return normalize(a, rank) == normalize(b, rank);
}

int64_t groupSize(MeshOp mesh, ArrayRef<MeshAxis> axes) {
  int64_t n = 1;
  for (MeshAxis a : axes)
    n *= mesh.getShape()[a];
  return n;
}

FailureOr<RankedTensorType>
localType(RankedTensorType global, MeshOp mesh, MeshShardingAttr sharding,
          llvm::function_ref<InFlightDiagnostic()> emitError) {
  SplitAxes split = splitAxesOf(sharding, global.getRank());
  SmallVector<int64_t> shape(global.getShape());
  for (int64_t d = 0; d < global.getRank(); ++d) {
    int64_t n = groupSize(mesh, split[d]);
    if (n == 1)
      continue;
    if (shape[d] % n != 0) {
      emitError() << "dimension " << d << " of " << global << " (size "
                  << shape[d] << ") is not divisible by the " << n
                  << " ranks it is split over";
      return failure();
    }
    shape[d] /= n;
  }
  return RankedTensorType::get(shape, global.getElementType());
}

namespace {

struct Resharder {
  OpBuilder &b;
  Location loc;
  MeshOp mesh;
  FlatSymbolRefAttr meshRef;

  RankedTensorType withDim(Value v, int64_t d, int64_t size) {
    auto t = cast<RankedTensorType>(v.getType());
    SmallVector<int64_t> shape(t.getShape());
    shape[d] = size;
    return RankedTensorType::get(shape, t.getElementType());
  }
  int64_t dimOf(Value v, int64_t d) {
    return cast<RankedTensorType>(v.getType()).getDimSize(d);
  }

  Value allReduce(Value v, ArrayRef<MeshAxis> axes, ReductionKind kind) {
    return b.create<AllReduceOp>(loc, v.getType(), meshRef.getValue(), axes, v,
                                 kind);
  }
  Value reduceScatter(Value v, ArrayRef<MeshAxis> axes, ReductionKind kind,
                      int64_t d) {
    int64_t n = groupSize(mesh, axes);
    return b.create<ReduceScatterOp>(loc, withDim(v, d, dimOf(v, d) / n),
                                     meshRef.getValue(), axes, v, kind,
                                     APInt(64, d));
  }
  Value allGather(Value v, ArrayRef<MeshAxis> axes, int64_t d) {
    int64_t n = groupSize(mesh, axes);
    return b.create<AllGatherOp>(loc, withDim(v, d, dimOf(v, d) * n),
                                 meshRef.getValue(), axes, v, APInt(64, d));
  }
  Value allSlice(Value v, ArrayRef<MeshAxis> axes, int64_t d) {
    int64_t n = groupSize(mesh, axes);
    return b.create<AllSliceOp>(loc, withDim(v, d, dimOf(v, d) / n),
                                meshRef.getValue(), axes, v, APInt(64, d));
  }
  Value allToAll(Value v, MeshAxis axis, int64_t splitDim, int64_t concatDim) {
    int64_t n = mesh.getShape()[axis];
    auto t = cast<RankedTensorType>(v.getType());
    SmallVector<int64_t> shape(t.getShape());
    shape[splitDim] /= n;
    shape[concatDim] *= n;
    return b.create<AllToAllOp>(
        loc, RankedTensorType::get(shape, t.getElementType()),
        meshRef.getValue(), ArrayRef<MeshAxis>{axis}, v, APInt(64, splitDim),
        APInt(64, concatDim));
  }
};

} // namespace

FailureOr<Value> reshard(OpBuilder &b, Location loc, MeshOp mesh, Value local,
                         int64_t rank, MeshShardingAttr source,
                         MeshShardingAttr target) {
  MLIRContext *ctx = b.getContext();
  FlatSymbolRefAttr meshRef = FlatSymbolRefAttr::get(mesh.getSymNameAttr());
  if (!source)
    source = replicated(ctx, meshRef);
  if (!target)
    target = replicated(ctx, meshRef);
  if (sameSharding(source, target, rank))
    return local;

  Resharder r{b, loc, mesh, meshRef};
  SplitAxes src = splitAxesOf(source, rank);
  SplitAxes dst = splitAxesOf(target, rank);

  // Partial sums first.
  llvm::SmallSet<MeshAxis, 4> dstPartial;
  for (MeshAxis a : target.getPartialAxes())
    dstPartial.insert(a);
  for (MeshAxis a : target.getPartialAxes())
    if (!llvm::is_contained(source.getPartialAxes(), a))
      return emitError(loc) << "cannot turn a value into a partial sum over "
                               "mesh axis "
                            << a;
  SmallVector<MeshAxis> reduce;
  for (MeshAxis a : source.getPartialAxes())
    if (!dstPartial.contains(a))
      reduce.push_back(a);
  if (!reduce.empty()) {
    ReductionKind kind = source.getPartialType();
    // A dimension whose target split extends the source split by exactly
    // the reduced axes takes one reduce_scatter instead of all_reduce +
    // all_slice: half the bytes.
    std::optional<int64_t> scatterDim;
    for (int64_t d = 0; d < rank && !scatterDim; ++d) {
      if (dst[d].size() != src[d].size() + reduce.size() ||
          !llvm::equal(src[d],
                       ArrayRef<MeshAxis>(dst[d]).take_front(src[d].size())))
        continue;
      ArrayRef<MeshAxis> suffix =
          ArrayRef<MeshAxis>(dst[d]).drop_front(src[d].size());
      if (llvm::all_of(suffix, [&](MeshAxis a) {
            return llvm::is_contained(reduce, a);
          }))
        scatterDim = d;
    }
    if (scatterDim) {
      ArrayRef<MeshAxis> dstAxes = dst[*scatterDim];
      SmallVector<MeshAxis> axes(dstAxes.drop_front(src[*scatterDim].size()));
      if (r.dimOf(local, *scatterDim) % groupSize(mesh, axes) != 0)
        return emitError(loc) << "dimension " << *scatterDim
                              << " is not divisible by the reduce-scatter "
                                 "group";
      local = r.reduceScatter(local, axes, kind, *scatterDim);
      src[*scatterDim] = dst[*scatterDim];
    } else {
      llvm::sort(reduce);
      local = r.allReduce(local, reduce, kind);
    }
  }

  // Then splits, dimension by dimension: what to drop, what to add.
  SmallVector<SmallVector<MeshAxis>> drop(rank), add(rank);
  for (int64_t d = 0; d < rank; ++d) {
    size_t common = 0;
    while (common < src[d].size() && common < dst[d].size() &&
           src[d][common] == dst[d][common])
      ++common;
    drop[d].assign(src[d].begin() + common, src[d].end());
    add[d].assign(dst[d].begin() + common, dst[d].end());
  }
  // One axis moving from one dimension to another: all_to_all. The axis
  // leaves `from` as its innermost split (the only one dropped there) and
  // joins `to` as its innermost: the axes `to` drops are gathered first,
  // or the all_to_all would split within them (`to` split [tp, sp] where
  // [sp] is meant, its heads out of order once tp is gathered).
  for (int64_t from = 0; from < rank; ++from) {
    if (drop[from].size() != 1)
      continue;
    for (int64_t to = 0; to < rank; ++to) {
      if (to == from || add[to].size() != 1 || add[to][0] != drop[from][0])
        continue;
      int64_t gathered = r.dimOf(local, to) * groupSize(mesh, drop[to]);
      if (gathered % mesh.getShape()[add[to][0]] != 0)
        continue;
      if (!drop[to].empty()) {
        local = r.allGather(local, drop[to], to);
        drop[to].clear();
      }
      local = r.allToAll(local, add[to][0], to, from);
      drop[from].clear();
      add[to].clear();
      break;
    }
  }
  for (int64_t d = 0; d < rank; ++d)
    if (!drop[d].empty())
      local = r.allGather(local, drop[d], d);
  for (int64_t d = 0; d < rank; ++d) {
    if (add[d].empty())
      continue;
    if (r.dimOf(local, d) % groupSize(mesh, add[d]) != 0)
      return emitError(loc)
             << "dimension " << d << " (size " << r.dimOf(local, d)
             << ") is not divisible by the " << groupSize(mesh, add[d])
             << " ranks it is split over";
    local = r.allSlice(local, add[d], d);
  }
  return local;
}

} // namespace merak

//===----------------------------------------------------------------------===//
// Mesh and annotation helpers
//===----------------------------------------------------------------------===//

namespace merak {

bool isCollective(Operation *op) {
  return isa<AllReduceOp, AllGatherOp, ReduceScatterOp, AllToAllOp, AllSliceOp>(
      op);
}

Value stripShards(Value v) {
  while (auto s = v.getDefiningOp<ShardOp>())
    v = s.getSrc();
  return v;
}

MeshOp lookupMesh(ModuleOp module) {
  return module.lookupSymbol<MeshOp>("mesh");
}

int64_t meshAxisIndex(MeshOp mesh, StringRef name) {
  auto names = mesh->getAttrOfType<ArrayAttr>("merak.axes");
  if (!names)
    return -1;
  for (auto [i, n] : llvm::enumerate(names))
    if (auto s = dyn_cast<StringAttr>(n); s && s.getValue() == name)
      return i;
  return -1;
}

MeshOp createMesh(ModuleOp module,
                  ArrayRef<std::pair<StringRef, int64_t>> axes) {
  OpBuilder b(module.getContext());
  b.setInsertionPointToStart(module.getBody());
  SmallVector<int64_t> shape;
  SmallVector<Attribute> names;
  for (auto [name, size] : axes) {
    shape.push_back(size);
    names.push_back(b.getStringAttr(name));
  }
  auto mesh = b.create<MeshOp>(module.getLoc(), "mesh", shape);
  mesh->setAttr("merak.axes", b.getArrayAttr(names));
  return mesh;
}

ShardOp argAnnotation(BlockArgument arg) {
  for (Operation *user : arg.getUsers())
    if (auto shard = dyn_cast<ShardOp>(user);
        shard && !shard.getAnnotateForUsers())
      return shard;
  return nullptr;
}

static void annotateValue(Value v, MeshShardingAttr sharding, OpBuilder &b) {
  for (Operation *user : llvm::to_vector(v.getUsers())) {
    auto shard = dyn_cast<ShardOp>(user);
    if (shard && !shard.getAnnotateForUsers()) {
      shard.setShardAttr(sharding);
      return;
    }
  }
  auto shard = b.create<ShardOp>(v.getLoc(), v, sharding);
  v.replaceAllUsesExcept(shard.getResult(), shard);
}

void annotateArg(BlockArgument arg, MeshShardingAttr sharding) {
  OpBuilder b(arg.getContext());
  b.setInsertionPointToStart(arg.getOwner());
  annotateValue(arg, sharding, b);
}

void annotateResult(OpResult result, MeshShardingAttr sharding) {
  OpBuilder b(result.getContext());
  b.setInsertionPointAfter(result.getOwner());
  annotateValue(result, sharding, b);
}

} // namespace merak
