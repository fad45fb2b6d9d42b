//===- Mesh.h - device meshes, process groups and shards ------*- C++ -*-===//
//
// The arithmetic of SPMD programs (docs/sharding.md), without MLIR: a rank's
// coordinates on the mesh, the process group of a collective over some mesh
// axes, and the block of a global tensor that a sharding gives each rank.
// Checkpoints, data loading and the communicators all use these, so the
// rules live in one place.
//
//===----------------------------------------------------------------------===//

#ifndef MERAK_RUNTIME_MESH_H
#define MERAK_RUNTIME_MESH_H

#include "merak/Runtime/Tensor.h"

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace merak::runtime {

/// A `mesh.mesh`: its shape (outermost axis first) and axis names.
struct MeshLayout {
  std::string name = "mesh";
  std::vector<int64_t> shape;
  /// From `merak.axes`; empty names where absent.
  std::vector<std::string> axisNames;
  /// How the all-reduces run (`merak.all_reduce_algorithm`): "ring",
  /// "tree" (NCCL's tree, Gloo's halving-doubling) or empty (the
  /// libraries' own choice: NCCL's tuner, Gloo's ring).
  std::string allReduceAlgorithm;

  int64_t size() const;
  /// `2x2`, or `2x2 (dp, tp)` with names.
  std::string str() const;
  /// The name of axis `a`, or its number when unnamed.
  std::string axisName(int64_t a) const;
};

/// Row-major coordinates of `rank` (last axis fastest).
std::vector<int64_t> meshCoordinates(const std::vector<int64_t> &meshShape,
                                     int64_t rank);
/// The inverse of `meshCoordinates`.
int64_t meshLinearIndex(const std::vector<int64_t> &meshShape,
                        const std::vector<int64_t> &coordinates);

/// The ranks of a collective over `axes` that `rank` belongs to: the ranks
/// whose coordinates agree with it on every other axis, ordered by their
/// linear index over `axes` in the listed order; `index` is `rank`'s place.
struct GroupMembership {
  std::vector<int64_t> ranks;
  int64_t index = 0;
};
GroupMembership processGroup(const std::vector<int64_t> &meshShape,
                             int64_t rank, const std::vector<int64_t> &axes);

/// The product of the mesh sizes of `axes`.
int64_t groupSize(const std::vector<int64_t> &meshShape,
                  const std::vector<int64_t> &axes);

/// How a value is split: per tensor dimension, the mesh axes it is split
/// over (major first). Missing trailing dimensions are not split; all empty
/// (or no entries) is replicated. Results and arguments are never partial.
struct Sharding {
  std::vector<std::vector<int64_t>> splitAxes;

  bool isReplicated() const;
  /// `[[0], []]` as in `#mesh.shard`; `replicated` when replicated.
  std::string str() const;
  /// The axes dimension `d` is split over (empty beyond the listed ones).
  const std::vector<int64_t> &axesOf(size_t d) const;
  bool operator==(const Sharding &other) const;
};

/// Checks that `sharding` fits a tensor of rank `rank` on `mesh`: known
/// axes, each used at most once.
absl::Status verifySharding(const Sharding &sharding, size_t rank,
                            const std::vector<int64_t> &meshShape);

/// A box inside a tensor: `offsets[d]` to `offsets[d] + sizes[d]`.
struct TensorBlock {
  std::vector<int64_t> offsets;
  std::vector<int64_t> sizes;

  int64_t numElements() const;
  bool operator==(const TensorBlock &other) const {
    return offsets == other.offsets && sizes == other.sizes;
  }
};

/// The intersection of two boxes of the same rank, or nothing.
std::optional<TensorBlock> intersect(const TensorBlock &a,
                                     const TensorBlock &b);

/// The global shape of a value whose shard on every rank has `localShape`.
std::vector<int64_t> globalShape(const std::vector<int64_t> &localShape,
                                 const Sharding &sharding,
                                 const std::vector<int64_t> &meshShape);

/// The block of a `globalShape` tensor that `rank` holds. Fails when a
/// split dimension does not divide evenly.
absl::StatusOr<TensorBlock> shardBlock(const std::vector<int64_t> &globalShape,
                                       const Sharding &sharding,
                                       const std::vector<int64_t> &meshShape,
                                       int64_t rank);

/// Whether `rank` is the one rank among those holding the same block that
/// writes it (coordinate 0 on every axis the sharding does not use), so a
/// checkpoint holds every block exactly once.
bool ownsBlock(const Sharding &sharding, const std::vector<int64_t> &meshShape,
               int64_t rank);

/// Copies the box `region` of `src` into `dst` at `dstOffsets` (both row-
/// major, same dtype). `dst` must be made by `HostTensor::allocate`.
void copyRegion(const HostTensor &src, const TensorBlock &region,
                const HostTensor &dst, const std::vector<int64_t> &dstOffsets);

/// The box `region` of `src` as a tensor of its own (shares `src`'s bytes
/// when the box is all of it).
HostTensor extractBlock(const HostTensor &src, const TensorBlock &region);

/// `rank`'s shard of the global tensor `global` (extractBlock of its
/// shardBlock).
absl::StatusOr<HostTensor> cutShard(const HostTensor &global,
                                    const Sharding &sharding,
                                    const std::vector<int64_t> &meshShape,
                                    int64_t rank);

} // namespace merak::runtime

#endif // MERAK_RUNTIME_MESH_H
