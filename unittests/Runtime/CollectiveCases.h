//===- CollectiveCases.h - the mesh collectives and their answers -*- C++
//-*-===//
//
// Every collective the executor runs, over every kind of group of a 2x2
// mesh (one axis, both axes, both in swapped order), with its expected
// result on each rank computed by ATen from every rank's input. Shared by
// the tests of the Gloo communicator and of the device communicator.
//
//===----------------------------------------------------------------------===//

#ifndef MERAK_UNITTESTS_RUNTIME_COLLECTIVECASES_H
#define MERAK_UNITTESTS_RUNTIME_COLLECTIVECASES_H

#include "merak/Runtime/Mesh.h"
#include "merak/Runtime/Program.h"

#include "gtest/gtest.h"

#include <ATen/ATen.h>

#include <functional>
#include <string>
#include <vector>

namespace merak::runtime::testing {

using Shape = std::vector<int64_t>;
constexpr int kWorld = 4;
const Shape kMesh = {2, 2};

struct Case {
  std::string name;
  OpKind kind;
  OpAttrs attrs;
  Shape in, out;
  /// The expected result of `rank` from every rank's input.
  std::function<at::Tensor(const std::vector<at::Tensor> &, int64_t)> expect;
};

inline OpAttrs collective(std::vector<int64_t> axes,
                          CollectiveReduction r = CollectiveReduction::Sum,
                          int64_t dim = 0, int64_t concatDim = 0,
                          std::vector<int64_t> root = {}) {
  OpAttrs a;
  a.meshAxes = std::move(axes);
  a.collectiveReduction = r;
  a.dim = dim;
  a.concatDim = concatDim;
  a.root = std::move(root);
  return a;
}

/// Distinct values on every rank: 100 (rank + 1) + 0, 1, 2, ...
inline at::Tensor input(const Shape &shape, int64_t rank) {
  int64_t n = 1;
  for (int64_t d : shape)
    n *= d;
  return at::arange(n, at::kFloat).reshape(shape) + 100.0 * double(rank + 1);
}

inline std::vector<at::Tensor> members(const std::vector<at::Tensor> &xs,
                                       int64_t rank, const Shape &axes) {
  std::vector<at::Tensor> result;
  for (int64_t r : processGroup(kMesh, rank, axes).ranks)
    result.push_back(xs[r]);
  return result;
}

inline int64_t indexIn(int64_t rank, const Shape &axes) {
  return processGroup(kMesh, rank, axes).index;
}

inline std::vector<Case> cases() {
  std::vector<Case> c;
  c.push_back({"all_reduce_sum_tp",
               OpKind::AllReduce,
               collective({1}),
               {2, 3},
               {2, 3},
               [](auto &xs, int64_t r) {
                 return at::stack(members(xs, r, {1})).sum(0);
               }});
  c.push_back({"all_reduce_average_all",
               OpKind::AllReduce,
               collective({0, 1}, CollectiveReduction::Average),
               {3},
               {3},
               [](auto &xs, int64_t) { return at::stack(xs).sum(0) / 4; }});
  c.push_back({"all_reduce_max_dp",
               OpKind::AllReduce,
               collective({0}, CollectiveReduction::Max),
               {2, 2},
               {2, 2},
               [](auto &xs, int64_t r) {
                 return std::get<0>(at::stack(members(xs, r, {0})).max(0));
               }});
  c.push_back({"all_reduce_min_tp",
               OpKind::AllReduce,
               collective({1}, CollectiveReduction::Min),
               {4},
               {4},
               [](auto &xs, int64_t r) {
                 return std::get<0>(at::stack(members(xs, r, {1})).min(0));
               }});
  c.push_back({"all_reduce_product_swapped",
               OpKind::AllReduce,
               collective({1, 0}, CollectiveReduction::Product),
               {2},
               {2},
               [](auto &xs, int64_t) { return at::stack(xs).prod(0); }});
  c.push_back({"all_gather_swapped_dim1",
               OpKind::AllGather,
               collective({1, 0}, CollectiveReduction::Sum, /*dim=*/1),
               {2, 3},
               {2, 12},
               [](auto &xs, int64_t r) {
                 return at::cat(members(xs, r, {1, 0}), 1);
               }});
  c.push_back({"reduce_scatter_sum_all_dim0",
               OpKind::ReduceScatter,
               collective({0, 1}, CollectiveReduction::Sum, 0),
               {8, 3},
               {2, 3},
               [](auto &xs, int64_t r) {
                 at::Tensor sum = at::stack(xs).sum(0);
                 return sum.chunk(4, 0)[indexIn(r, {0, 1})];
               }});
  c.push_back({"reduce_scatter_max_tp_dim1",
               OpKind::ReduceScatter,
               collective({1}, CollectiveReduction::Max, 1),
               {3, 4},
               {3, 2},
               [](auto &xs, int64_t r) {
                 at::Tensor m =
                     std::get<0>(at::stack(members(xs, r, {1})).max(0));
                 return m.chunk(2, 1)[indexIn(r, {1})];
               }});
  c.push_back({"reduce_scatter_average_dp_dim1",
               OpKind::ReduceScatter,
               collective({0}, CollectiveReduction::Average, 1),
               {2, 2, 4},
               {2, 1, 4},
               [](auto &xs, int64_t r) {
                 at::Tensor m = at::stack(members(xs, r, {0})).sum(0) / 2;
                 return m.chunk(2, 1)[indexIn(r, {0})];
               }});
  c.push_back({"all_to_all_all_split0_concat1",
               OpKind::AllToAll,
               collective({0, 1}, CollectiveReduction::Sum, 0, 1),
               {4, 3},
               {1, 12},
               [](auto &xs, int64_t r) {
                 std::vector<at::Tensor> pieces;
                 for (const at::Tensor &x : members(xs, r, {0, 1}))
                   pieces.push_back(x.chunk(4, 0)[indexIn(r, {0, 1})]);
                 return at::cat(pieces, 1);
               }});
  c.push_back({"all_to_all_tp_split1_concat0",
               OpKind::AllToAll,
               collective({1}, CollectiveReduction::Sum, 1, 0),
               {2, 4},
               {4, 2},
               [](auto &xs, int64_t r) {
                 std::vector<at::Tensor> pieces;
                 for (const at::Tensor &x : members(xs, r, {1}))
                   pieces.push_back(x.chunk(2, 1)[indexIn(r, {1})]);
                 return at::cat(pieces, 0);
               }});
  c.push_back(
      {"all_slice_tp",
       OpKind::AllSlice,
       collective({1}, CollectiveReduction::Sum, 0),
       {4, 3},
       {2, 3},
       [](auto &xs, int64_t r) { return xs[r].chunk(2, 0)[indexIn(r, {1})]; }});
  c.push_back({"broadcast_dp_root1",
               OpKind::Broadcast,
               collective({0}, CollectiveReduction::Sum, 0, 0, {1}),
               {3, 2},
               {3, 2},
               [](auto &xs, int64_t r) { return members(xs, r, {0})[1]; }});
  return c;
}

/// x -> collective -> result, bound to `rank`.
inline Program collectiveProgram(const Case &c, int64_t rank) {
  Program p;
  p.function = c.name;
  p.mesh = MeshLayout{"mesh", kMesh, {"dp", "tp"}};
  p.values = {ValueInfo{TensorType{DType::F32, c.in}},
              ValueInfo{TensorType{DType::F32, c.out}}};
  Argument x;
  x.value = 0;
  x.role = ArgumentRole::Input;
  x.name = "x";
  p.arguments = {x};
  Instruction inst;
  inst.kind = c.kind;
  inst.attrs = c.attrs;
  inst.operands = {0};
  inst.results = {1};
  p.instructions = {inst};
  ResultInfo res;
  res.value = 1;
  p.results = {res};
  EXPECT_TRUE(bindToRank(p, rank).ok());
  return p;
}

} // namespace merak::runtime::testing

#endif // MERAK_UNITTESTS_RUNTIME_COLLECTIVECASES_H
