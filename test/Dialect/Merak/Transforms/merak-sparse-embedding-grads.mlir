// Tests --merak-sparse-embedding-grads: a data-parallel sum of an
// embedding's weight gradient (an index_backward) becomes an index_backward
// of the group's gathered activation gradients and ids, where those are
// smaller than the table.
// RUN: merak-opt %s -split-input-file --merak-sparse-embedding-grads | FileCheck %s

mesh.mesh @mesh(shape = 2x2) {merak.axes = ["dp", "tp"]}

// A 1000-row table, 2x8 ids per rank: the gradients and ids of the 2 ranks
// of the dp group are gathered along the batch and scattered on each rank.
// CHECK-LABEL: func.func @gathered
// CHECK: %[[G:.*]] = mesh.all_gather %arg0 on @mesh mesh_axes = [0] gather_axis = 0 {merak.grad_of = 3 : i64} : tensor<2x8x4xf32> -> tensor<4x8x4xf32>
// CHECK: %[[I:.*]] = mesh.all_gather %arg1 on @mesh mesh_axes = [0] gather_axis = 0 {merak.grad_of = 3 : i64} : tensor<2x8xi64> -> tensor<4x8xi64>
// CHECK: %[[W:.*]] = merak.index_backward %[[G]], %[[I]] {dim = 0 : i64, dim_size = 1000 : i64, merak.grad_of = 3 : i64, padding_idx = 0 : i64} : (tensor<4x8x4xf32>, tensor<4x8xi64>) -> tensor<1000x4xf32>
// CHECK-NOT: mesh.all_reduce
// CHECK: return %[[W]]
func.func @gathered(%g: tensor<2x8x4xf32>, %ids: tensor<2x8xi64>) -> tensor<1000x4xf32> {
  %t = merak.index_backward %g, %ids {dim = 0 : i64, dim_size = 1000 : i64, padding_idx = 0 : i64, merak.grad_of = 3 : i64} : (tensor<2x8x4xf32>, tensor<2x8xi64>) -> tensor<1000x4xf32>
  %r = mesh.all_reduce %t on @mesh mesh_axes = [0] : tensor<1000x4xf32> -> tensor<1000x4xf32>
  return %r : tensor<1000x4xf32>
}

// -----

mesh.mesh @mesh(shape = 2x2) {merak.axes = ["dp", "tp"]}

// Indexing along dimension 1: the gradient is gathered along the dimension
// the ids start at, the ids along their first.
// CHECK-LABEL: func.func @inner_dim
// CHECK: mesh.all_gather %arg0 on @mesh mesh_axes = [0, 1] gather_axis = 1 : tensor<3x2x4xf32> -> tensor<3x8x4xf32>
// CHECK: mesh.all_gather %arg1 on @mesh mesh_axes = [0, 1] gather_axis = 0 : tensor<2xi64> -> tensor<8xi64>
// CHECK: merak.index_backward {{.*}} : (tensor<3x8x4xf32>, tensor<8xi64>) -> tensor<3x500x4xf32>
func.func @inner_dim(%g: tensor<3x2x4xf32>, %ids: tensor<2xi64>) -> tensor<3x500x4xf32> {
  %t = merak.index_backward %g, %ids {dim = 1 : i64, dim_size = 500 : i64} : (tensor<3x2x4xf32>, tensor<2xi64>) -> tensor<3x500x4xf32>
  %r = mesh.all_reduce %t on @mesh mesh_axes = [0, 1] : tensor<3x500x4xf32> -> tensor<3x500x4xf32>
  return %r : tensor<3x500x4xf32>
}

// -----

mesh.mesh @mesh(shape = 2) {merak.axes = ["dp"]}

// Left alone: gathering would move more than the table (16 rows, 2x8 ids
// per rank); a maximum is not a sum; the scatter has another reader.
// CHECK-LABEL: func.func @kept
// CHECK-NOT: mesh.all_gather
// CHECK: mesh.all_reduce %{{.*}} on @mesh mesh_axes = [0] : tensor<16x4xf32>
// CHECK: mesh.all_reduce %{{.*}} on @mesh mesh_axes = [0] reduction = <max> : tensor<1000x4xf32>
// CHECK: mesh.all_reduce %{{.*}} on @mesh mesh_axes = [0] : tensor<1000x4xf32>
func.func @kept(%g: tensor<2x8x4xf32>, %ids: tensor<2x8xi64>) -> (tensor<16x4xf32>, tensor<1000x4xf32>, tensor<1000x4xf32>, tensor<1000x4xf32>) {
  %small = merak.index_backward %g, %ids {dim = 0 : i64, dim_size = 16 : i64} : (tensor<2x8x4xf32>, tensor<2x8xi64>) -> tensor<16x4xf32>
  %r0 = mesh.all_reduce %small on @mesh mesh_axes = [0] : tensor<16x4xf32> -> tensor<16x4xf32>
  %t = merak.index_backward %g, %ids {dim = 0 : i64, dim_size = 1000 : i64} : (tensor<2x8x4xf32>, tensor<2x8xi64>) -> tensor<1000x4xf32>
  %r1 = mesh.all_reduce %t on @mesh mesh_axes = [0] reduction = <max> : tensor<1000x4xf32> -> tensor<1000x4xf32>
  %u = merak.index_backward %g, %ids {dim = 0 : i64, dim_size = 1000 : i64} : (tensor<2x8x4xf32>, tensor<2x8xi64>) -> tensor<1000x4xf32>
  %r2 = mesh.all_reduce %u on @mesh mesh_axes = [0] : tensor<1000x4xf32> -> tensor<1000x4xf32>
  return %r0, %r1, %r2, %u : tensor<16x4xf32>, tensor<1000x4xf32>, tensor<1000x4xf32>, tensor<1000x4xf32>
}
