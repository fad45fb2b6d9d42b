//===- Mesh.cpp - mesh coordinates, process groups and shard blocks -------===//

#include "merak/Runtime/Mesh.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

#include <algorithm>
#include <cstring>

namespace merak::runtime {

int64_t MeshLayout::size() const {
  int64_t n = 1;
  for (int64_t s : shape)
    n *= s;
  return n;
}

std::string MeshLayout::str() const {
  std::string text = absl::StrJoin(shape, "x");
  bool named = std::any_of(axisNames.begin(), axisNames.end(),
                           [](const std::string &n) { return !n.empty(); });
  if (named) {
    std::vector<std::string> names;
    for (size_t a = 0; a < shape.size(); ++a)
      names.push_back(axisName(int64_t(a)));
    absl::StrAppend(&text, " (", absl::StrJoin(names, ", "), ")");
  }
  return text;
}

std::string MeshLayout::axisName(int64_t a) const {
  if (a >= 0 && size_t(a) < axisNames.size() && !axisNames[a].empty())
    return axisNames[a];
  return absl::StrCat(a);
}

std::vector<int64_t> meshCoordinates(const std::vector<int64_t> &meshShape,
                                     int64_t rank) {
  std::vector<int64_t> coords(meshShape.size(), 0);
  for (size_t a = meshShape.size(); a-- > 0;) {
    coords[a] = rank % meshShape[a];
    rank /= meshShape[a];
  }
  return coords;
}

int64_t meshLinearIndex(const std::vector<int64_t> &meshShape,
                        const std::vector<int64_t> &coordinates) {
  int64_t index = 0;
  for (size_t a = 0; a < meshShape.size(); ++a)
    index = index * meshShape[a] + coordinates[a];
  return index;
}

int64_t groupSize(const std::vector<int64_t> &meshShape,
                  const std::vector<int64_t> &axes) {
  int64_t n = 1;
  for (int64_t a : axes)
    n *= meshShape[a];
  return n;
}

GroupMembership processGroup(const std::vector<int64_t> &meshShape,
                             int64_t rank, const std::vector<int64_t> &axes) {
  std::vector<int64_t> mine = meshCoordinates(meshShape, rank);
  GroupMembership group;
  int64_t n = groupSize(meshShape, axes);
  // Member i has the coordinates of `i` over `axes` (row-major in the listed
  // order) and `rank`'s coordinates elsewhere.
  for (int64_t i = 0; i < n; ++i) {
    std::vector<int64_t> coords = mine;
    int64_t rest = i;
    for (size_t k = axes.size(); k-- > 0;) {
      coords[axes[k]] = rest % meshShape[axes[k]];
      rest /= meshShape[axes[k]];
    }
    int64_t member = meshLinearIndex(meshShape, coords);
    if (member == rank)
      group.index = i;
    group.ranks.push_back(member);
  }
  return group;
}

bool Sharding::isReplicated() const {
  return std::all_of(splitAxes.begin(), splitAxes.end(),
                     [](const auto &axes) { return axes.empty(); });
}

std::string Sharding::str() const {
  if (isReplicated())
    return "replicated";
  std::vector<std::string> dims;
  for (const auto &axes : splitAxes)
    dims.push_back(absl::StrCat("[", absl::StrJoin(axes, ", "), "]"));
  return absl::StrCat("[", absl::StrJoin(dims, ", "), "]");
}

const std::vector<int64_t> &Sharding::axesOf(size_t d) const {
  static const std::vector<int64_t> none;
  return d < splitAxes.size() ? splitAxes[d] : none;
}

bool Sharding::operator==(const Sharding &other) const {
  size_t n = std::max(splitAxes.size(), other.splitAxes.size());
  for (size_t d = 0; d < n; ++d)
    if (axesOf(d) != other.axesOf(d))
      return false;
  return true;
}

absl::Status verifySharding(const Sharding &sharding, size_t rank,
                            const std::vector<int64_t> &meshShape) {
  if (sharding.splitAxes.size() > rank && !sharding.isReplicated()) {
    for (size_t d = rank; d < sharding.splitAxes.size(); ++d)
      if (!sharding.splitAxes[d].empty())
        return absl::InvalidArgumentError(
            absl::StrCat("sharding ", sharding.str(), " splits dimension ", d,
                         " of a rank-", rank, " tensor"));
  }
  std::vector<bool> used(meshShape.size(), false);
  for (const auto &axes : sharding.splitAxes)
    for (int64_t a : axes) {
      if (a < 0 || size_t(a) >= meshShape.size())
        return absl::InvalidArgumentError(
            absl::StrCat("sharding ", sharding.str(), " names mesh axis ", a,
                         ", but the mesh has ", meshShape.size(), " axes"));
      if (used[a])
        return absl::InvalidArgumentError(absl::StrCat(
            "sharding ", sharding.str(), " uses mesh axis ", a, " twice"));
      used[a] = true;
    }
  return absl::OkStatus();
}

int64_t TensorBlock::numElements() const {
  int64_t n = 1;
  for (int64_t s : sizes)
    n *= s;
  return n;
}

std::optional<TensorBlock> intersect(const TensorBlock &a,
                                     const TensorBlock &b) {
  TensorBlock result;
  for (size_t d = 0; d < a.offsets.size(); ++d) {
    int64_t begin = std::max(a.offsets[d], b.offsets[d]);
    int64_t end =
        std::min(a.offsets[d] + a.sizes[d], b.offsets[d] + b.sizes[d]);
    if (end <= begin)
      return std::nullopt;
    result.offsets.push_back(begin);
    result.sizes.push_back(end - begin);
  }
  return result;
}

std::vector<int64_t> globalShape(const std::vector<int64_t> &localShape,
                                 const Sharding &sharding,
                                 const std::vector<int64_t> &meshShape) {
  std::vector<int64_t> shape = localShape;
  for (size_t d = 0; d < shape.size(); ++d)
    shape[d] *= groupSize(meshShape, sharding.axesOf(d));
  return shape;
}

absl::StatusOr<TensorBlock> shardBlock(const std::vector<int64_t> &globalShape,
                                       const Sharding &sharding,
                                       const std::vector<int64_t> &meshShape,
                                       int64_t rank) {
  if (absl::Status s = verifySharding(sharding, globalShape.size(), meshShape);
      !s.ok())
    return s;
  TensorBlock block;
  for (size_t d = 0; d < globalShape.size(); ++d) {
    const std::vector<int64_t> &axes = sharding.axesOf(d);
    int64_t parts = groupSize(meshShape, axes);
    if (globalShape[d] % parts != 0)
      return absl::InvalidArgumentError(
          absl::StrCat("dimension ", d, " of size ", globalShape[d],
                       " does not split evenly into ", parts, " shards"));
    int64_t size = globalShape[d] / parts;
    int64_t index = processGroup(meshShape, rank, axes).index;
    block.offsets.push_back(index * size);
    block.sizes.push_back(size);
  }
  return block;
}

bool ownsBlock(const Sharding &sharding, const std::vector<int64_t> &meshShape,
               int64_t rank) {
  std::vector<bool> used(meshShape.size(), false);
  for (const auto &axes : sharding.splitAxes)
    for (int64_t a : axes)
      if (a >= 0 && size_t(a) < used.size())
        used[a] = true;
  std::vector<int64_t> coords = meshCoordinates(meshShape, rank);
  for (size_t a = 0; a < coords.size(); ++a)
    if (!used[a] && coords[a] != 0)
      return false;
  return true;
}

void copyRegion(const HostTensor &src, const TensorBlock &region,
                const HostTensor &dst, const std::vector<int64_t> &dstOffsets) {
  const std::vector<int64_t> &srcShape = src.type.shape;
  const std::vector<int64_t> &dstShape = dst.type.shape;
  const size_t rank = srcShape.size();
  const size_t width = dtypeSize(src.type.dtype);
  if (region.numElements() == 0)
    return;
  if (rank == 0) {
    std::memcpy(dst.mutableBytes(), src.bytes(), width);
    return;
  }
  // Row-major strides in elements.
  std::vector<int64_t> srcStride(rank, 1), dstStride(rank, 1);
  for (size_t d = rank - 1; d-- > 0;) {
    srcStride[d] = srcStride[d + 1] * srcShape[d + 1];
    dstStride[d] = dstStride[d + 1] * dstShape[d + 1];
  }
  // Copy runs along the innermost dimension, odometer over the others.
  const size_t run = size_t(region.sizes[rank - 1]) * width;
  std::vector<int64_t> index(rank, 0);
  while (true) {
    int64_t s = 0, t = 0;
    for (size_t d = 0; d < rank; ++d) {
      s += (region.offsets[d] + index[d]) * srcStride[d];
      t += (dstOffsets[d] + index[d]) * dstStride[d];
    }
    std::memcpy(dst.mutableBytes() + t * width, src.bytes() + s * width, run);
    size_t d = rank - 1;
    while (d-- > 0) {
      if (++index[d] < region.sizes[d])
        break;
      index[d] = 0;
    }
    if (d == size_t(-1))
      return;
  }
}

HostTensor extractBlock(const HostTensor &src, const TensorBlock &region) {
  if (region.sizes == src.type.shape)
    return src;
  HostTensor out = HostTensor::allocate({src.type.dtype, region.sizes});
  copyRegion(src, region, out, std::vector<int64_t>(region.sizes.size(), 0));
  return out;
}

absl::StatusOr<HostTensor> cutShard(const HostTensor &global,
                                    const Sharding &sharding,
                                    const std::vector<int64_t> &meshShape,
                                    int64_t rank) {
  absl::StatusOr<TensorBlock> block =
      shardBlock(global.type.shape, sharding, meshShape, rank);
  if (!block.ok())
    return block.status();
  return extractBlock(global, *block);
}

} // namespace merak::runtime
