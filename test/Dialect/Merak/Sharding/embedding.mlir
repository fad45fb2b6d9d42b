// Sharding rules of embedding, index and index_backward. embedding's
// vocabulary V is a sum loop: with V split each rank looks up the rows it
// holds (indices shifted by its first row, a slice of a constant) and
// zeroes the others, leaving a partial sum. index_backward's index loops
// are sums; with V split each rank scatters the rows it holds.
// RUN: merak-opt %s -split-input-file --pass-pipeline='builtin.module(func.func(sharding-propagation))' | FileCheck %s --check-prefix=PROP
// RUN: merak-opt %s -split-input-file --pass-pipeline='builtin.module(func.func(sharding-propagation,mesh-spmdization))' | FileCheck %s --check-prefix=SPMD

mesh.mesh @mesh(shape = 2)

// Vocabulary-parallel embedding: each rank looks up the rows it holds and
// zeroes the others; the result is a partial sum over the vocabulary axis.
func.func @vocab(%w: tensor<16x4xf32>, %i: tensor<2x3xi64>) -> tensor<2x3x4xf32> {
  %ws = mesh.shard %w to <@mesh, [[0]]> : tensor<16x4xf32>
  %is = mesh.shard %i to <@mesh, [[]]> : tensor<2x3xi64>
  %0 = merak.embedding %ws, %is {padding_idx = 0 : i64} : (tensor<16x4xf32>, tensor<2x3xi64>) -> tensor<2x3x4xf32>
  %r = mesh.shard %0 to <@mesh, [[]]> annotate_for_users : tensor<2x3x4xf32>
  return %r : tensor<2x3x4xf32>
}

// PROP-LABEL: func.func @vocab
// PROP:      %[[E:.*]] = merak.embedding
// PROP-NEXT: mesh.shard %[[E]] to <@mesh, {{\[\[}}]], partial = sum[0]> : tensor<2x3x4xf32>

// SPMD-LABEL: func.func @vocab
// SPMD-SAME:  (%[[W:.*]]: tensor<8x4xf32>, %[[I:.*]]: tensor<2x3xi64>)
// SPMD:       %[[STARTS:.*]] = merak.constant dense<[0, 8]> : tensor<2xi64>
// SPMD:       %[[MINE:.*]] = mesh.all_slice %[[STARTS]] on @mesh mesh_axes = [0] slice_axis = 0
// SPMD:       %[[OFF:.*]] = merak.reshape %[[MINE]]
// SPMD:       %[[SH:.*]] = merak.sub %[[I]], %[[OFF]]
// SPMD:       %[[LT:.*]] = merak.compare <lt>, %[[SH]]
// SPMD:       %[[GE:.*]] = merak.compare <ge>, %[[SH]]
// SPMD:       %[[IN:.*]] = merak.and %[[GE]], %[[LT]]
// SPMD:       %[[SAFE:.*]] = merak.where %[[IN]], %[[SH]]
// SPMD:       %[[E:.*]] = merak.embedding %[[W]], %[[SAFE]] : (tensor<8x4xf32>, tensor<2x3xi64>) -> tensor<2x3x4xf32>
// SPMD:       %[[M:.*]] = merak.reshape %[[IN]] {shape = array<i64: 2, 3, 1>}
// SPMD:       %[[Y:.*]] = merak.where %[[M]], %[[E]], %{{.*}} : (tensor<2x3x1xi1>, tensor<2x3x4xf32>, tensor<f32>) -> tensor<2x3x4xf32>
// SPMD:       mesh.all_reduce %[[Y]] on @mesh mesh_axes = [0] : tensor<2x3x4xf32> -> tensor<2x3x4xf32>

// -----

mesh.mesh @mesh(shape = 2)

// Splitting the hidden dimension, or the indices, needs nothing special.
func.func @hidden(%w: tensor<16x4xf32>, %i: tensor<2x3xi64>) -> tensor<2x3x4xf32> {
  %ws = mesh.shard %w to <@mesh, [[], [0]]> : tensor<16x4xf32>
  %is = mesh.shard %i to <@mesh, [[]]> : tensor<2x3xi64>
  %0 = merak.embedding %ws, %is : (tensor<16x4xf32>, tensor<2x3xi64>) -> tensor<2x3x4xf32>
  %r = mesh.shard %0 to <@mesh, [[], [], [0]]> annotate_for_users : tensor<2x3x4xf32>
  return %r : tensor<2x3x4xf32>
}

// SPMD-LABEL: func.func @hidden
// SPMD-NEXT:  merak.embedding %{{.*}}, %{{.*}} : (tensor<16x2xf32>, tensor<2x3xi64>) -> tensor<2x3x2xf32>

// -----

mesh.mesh @mesh(shape = 2)

// The embedding gradient with the batch split is a partial sum; with the
// vocabulary split each rank scatters the rows it holds (padding rows stay
// zero).
func.func @gradient(%g: tensor<2x3x4xf32>, %i: tensor<2x3xi64>) -> tensor<16x4xf32> {
  %gs = mesh.shard %g to <@mesh, [[0]]> : tensor<2x3x4xf32>
  %is = mesh.shard %i to <@mesh, [[0]]> : tensor<2x3xi64>
  %0 = merak.index_backward %gs, %is {dim = 0 : i64, dim_size = 16 : i64} : (tensor<2x3x4xf32>, tensor<2x3xi64>) -> tensor<16x4xf32>
  %r0 = mesh.shard %0 to <@mesh, [[]]> annotate_for_users : tensor<16x4xf32>
  return %r0 : tensor<16x4xf32>
}

// PROP-LABEL: func.func @gradient
// PROP:      %[[G:.*]] = merak.index_backward
// PROP-NEXT: mesh.shard %[[G]] to <@mesh, {{\[\[}}]], partial = sum[0]> : tensor<16x4xf32>

// SPMD-LABEL: func.func @gradient
// SPMD:       %[[G:.*]] = merak.index_backward %{{.*}}, %{{.*}} {dim = 0 : i64, dim_size = 16 : i64} : (tensor<1x3x4xf32>, tensor<1x3xi64>) -> tensor<16x4xf32>
// SPMD-NEXT:  mesh.all_reduce %[[G]] on @mesh mesh_axes = [0]

// -----

mesh.mesh @mesh(shape = 2)

func.func @vocab_gradient(%g: tensor<2x3x4xf32>, %i: tensor<2x3xi64>) -> tensor<16x4xf32> {
  %gs = mesh.shard %g to <@mesh, [[]]> : tensor<2x3x4xf32>
  %is = mesh.shard %i to <@mesh, [[]]> : tensor<2x3xi64>
  %0 = merak.index_backward %gs, %is {dim = 0 : i64, dim_size = 16 : i64, padding_idx = 0 : i64} : (tensor<2x3x4xf32>, tensor<2x3xi64>) -> tensor<16x4xf32>
  %r = mesh.shard %0 to <@mesh, [[0]]> annotate_for_users : tensor<16x4xf32>
  return %r : tensor<16x4xf32>
}

// PROP-LABEL: func.func @vocab_gradient
// PROP:      %[[G:.*]] = merak.index_backward
// PROP-NEXT: mesh.shard %[[G]] to <@mesh, {{\[\[}}0]]> : tensor<16x4xf32>

// SPMD-LABEL: func.func @vocab_gradient
// SPMD-SAME:  (%[[G:.*]]: tensor<2x3x4xf32>, %[[I:.*]]: tensor<2x3xi64>)
// SPMD:       %[[IN:.*]] = merak.and
// SPMD:       %[[PAD:.*]] = merak.compare <ne>, %[[I]]
// SPMD:       %[[KEEP:.*]] = merak.and %[[IN]], %[[PAD]]
// SPMD:       %[[SAFE:.*]] = merak.where %[[KEEP]]
// SPMD:       %[[M:.*]] = merak.reshape %[[KEEP]] {shape = array<i64: 2, 3, 1>}
// SPMD:       %[[GM:.*]] = merak.where %[[M]], %[[G]], %{{.*}}
// SPMD:       merak.index_backward %[[GM]], %[[SAFE]] {dim = 0 : i64, dim_size = 8 : i64} : (tensor<2x3x4xf32>, tensor<2x3xi64>) -> tensor<8x4xf32>

// -----

mesh.mesh @mesh(shape = 2)

// index keeps its indexed dimension whole.
func.func @index(%x: tensor<4x6x8xf32>, %i: tensor<3xi64>) -> tensor<4x3x8xf32> {
  %xs = mesh.shard %x to <@mesh, [[], [0]]> : tensor<4x6x8xf32>
  %is = mesh.shard %i to <@mesh, [[]]> : tensor<3xi64>
  %0 = merak.index %xs, %is {dim = 1 : i64} : (tensor<4x6x8xf32>, tensor<3xi64>) -> tensor<4x3x8xf32>
  %r = mesh.shard %0 to <@mesh, [[]]> annotate_for_users : tensor<4x3x8xf32>
  return %r : tensor<4x3x8xf32>
}

// PROP-LABEL: func.func @index
// PROP:      mesh.shard %{{.*}} to <@mesh, {{\[\[}}]]> annotate_for_users : tensor<4x6x8xf32>
// PROP-NEXT: mesh.shard
// PROP-NEXT: merak.index

// SPMD-LABEL: func.func @index
// SPMD:       mesh.all_gather %{{.*}} gather_axis = 1 : tensor<4x3x8xf32> -> tensor<4x6x8xf32>
