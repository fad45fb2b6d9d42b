// Sharding rules of reductions: reduced dimensions are reduction loops of
// the op's kind (sum, average, max); kept dimensions are parallel.
// RUN: merak-opt %s -split-input-file --pass-pipeline='builtin.module(func.func(sharding-propagation))' | FileCheck %s --check-prefix=PROP
// RUN: merak-opt %s -split-input-file --pass-pipeline='builtin.module(func.func(sharding-propagation,mesh-spmdization))' | FileCheck %s --check-prefix=SPMD

mesh.mesh @mesh(shape = 2)

// Splitting a reduced dimension leaves a partial result of the reduction's
// kind: sum, average (reduce_mean over equal shards) or max.
func.func @kinds(%x: tensor<4x8xf32>) -> (tensor<4xf32>, tensor<4x1xf32>, tensor<4xf32>) {
  %xs = mesh.shard %x to <@mesh, [[], [0]]> : tensor<4x8xf32>
  %0 = merak.reduce_sum %xs {dims = array<i64: 1>} : (tensor<4x8xf32>) -> tensor<4xf32>
  %1 = merak.reduce_mean %xs {dims = array<i64: -1>, keepdim = true} : (tensor<4x8xf32>) -> tensor<4x1xf32>
  %2 = merak.reduce_max %xs {dims = array<i64: 1>} : (tensor<4x8xf32>) -> tensor<4xf32>
  %r0 = mesh.shard %0 to <@mesh, [[]]> annotate_for_users : tensor<4xf32>
  %r1 = mesh.shard %1 to <@mesh, [[]]> annotate_for_users : tensor<4x1xf32>
  %r2 = mesh.shard %2 to <@mesh, [[]]> annotate_for_users : tensor<4xf32>
  return %r0, %r1, %r2 : tensor<4xf32>, tensor<4x1xf32>, tensor<4xf32>
}

// PROP-LABEL: func.func @kinds
// PROP:      %[[S:.*]] = merak.reduce_sum
// PROP-NEXT: mesh.shard %[[S]] to <@mesh, {{\[\[}}]], partial = sum[0]> : tensor<4xf32>
// PROP:      %[[M:.*]] = merak.reduce_mean
// PROP-NEXT: mesh.shard %[[M]] to <@mesh, {{\[\[}}]], partial = average[0]> : tensor<4x1xf32>
// PROP:      %[[X:.*]] = merak.reduce_max
// PROP-NEXT: mesh.shard %[[X]] to <@mesh, {{\[\[}}]], partial = max[0]> : tensor<4xf32>

// SPMD-LABEL: func.func @kinds
// SPMD:       merak.reduce_sum %{{.*}} : (tensor<4x4xf32>) -> tensor<4xf32>
// SPMD-NEXT:  mesh.all_reduce %{{.*}} on @mesh mesh_axes = [0] : tensor<4xf32> -> tensor<4xf32>
// SPMD-NEXT:  merak.reduce_mean %{{.*}} : (tensor<4x4xf32>) -> tensor<4x1xf32>
// SPMD-NEXT:  mesh.all_reduce %{{.*}} on @mesh mesh_axes = [0] reduction = <average> : tensor<4x1xf32> -> tensor<4x1xf32>
// SPMD-NEXT:  merak.reduce_max %{{.*}} : (tensor<4x4xf32>) -> tensor<4xf32>
// SPMD-NEXT:  mesh.all_reduce %{{.*}} on @mesh mesh_axes = [0] reduction = <max> : tensor<4xf32> -> tensor<4xf32>

// -----

mesh.mesh @mesh(shape = 2)

// Kept dimensions pass their split through.
func.func @kept(%x: tensor<4x8xf32>) -> tensor<4xf32> {
  %xs = mesh.shard %x to <@mesh, [[0]]> : tensor<4x8xf32>
  %0 = merak.reduce_sum %xs {dims = array<i64: 1>} : (tensor<4x8xf32>) -> tensor<4xf32>
  %r = mesh.shard %0 to <@mesh, [[0]]> annotate_for_users : tensor<4xf32>
  return %r : tensor<4xf32>
}

// PROP-LABEL: func.func @kept
// PROP:      %[[S:.*]] = merak.reduce_sum
// PROP-NEXT: mesh.shard %[[S]] to <@mesh, {{\[\[}}0]]> : tensor<4xf32>

// SPMD-LABEL: func.func @kept
// SPMD-NEXT:  merak.reduce_sum %{{.*}} {dims = array<i64: 1>} : (tensor<2x8xf32>) -> tensor<2xf32>
// SPMD-NEXT:  return
