// Sharding rules of contractions (linear, matmul): batch and free loops
// are parallel, the contracted loop is a sum whose split leaves a partial
// sum.
// RUN: merak-opt %s -split-input-file --pass-pipeline='builtin.module(func.func(sharding-propagation))' | FileCheck %s --check-prefix=PROP
// RUN: merak-opt %s -split-input-file --pass-pipeline='builtin.module(func.func(sharding-propagation,mesh-spmdization))' | FileCheck %s --check-prefix=SPMD

mesh.mesh @mesh(shape = 2)

// Megatron's MLP from one seed: the first weight split by rows (column
// parallel). The hidden activation is split, the second linear contracts
// the split dimension and its result is a partial sum.
func.func @mlp(%x: tensor<4x8xf32>, %w1: tensor<16x8xf32>, %b1: tensor<16xf32>,
               %w2: tensor<8x16xf32>, %b2: tensor<8xf32>) -> tensor<4x8xf32> {
  %xs = mesh.shard %x to <@mesh, [[]]> : tensor<4x8xf32>
  %w1s = mesh.shard %w1 to <@mesh, [[0]]> : tensor<16x8xf32>
  %b1s = mesh.shard %b1 to <@mesh, [[]]> : tensor<16xf32>
  %w2s = mesh.shard %w2 to <@mesh, [[]]> : tensor<8x16xf32>
  %b2s = mesh.shard %b2 to <@mesh, [[]]> : tensor<8xf32>
  %h = merak.linear %xs, %w1s, %b1s : (tensor<4x8xf32>, tensor<16x8xf32>, tensor<16xf32>) -> tensor<4x16xf32>
  %g = merak.gelu %h : tensor<4x16xf32>
  %y = merak.linear %g, %w2s, %b2s : (tensor<4x16xf32>, tensor<8x16xf32>, tensor<8xf32>) -> tensor<4x8xf32>
  %r = mesh.shard %y to <@mesh, [[]]> annotate_for_users : tensor<4x8xf32>
  return %r : tensor<4x8xf32>
}

// PROP-LABEL: func.func @mlp
// PROP:      %[[H:.*]] = merak.linear
// PROP-NEXT: mesh.shard %[[H]] to <@mesh, {{\[\[}}], [0]]> : tensor<4x16xf32>
// PROP:      %[[G:.*]] = merak.gelu
// PROP-NEXT: mesh.shard %[[G]] to <@mesh, {{\[\[}}], [0]]> : tensor<4x16xf32>
// PROP:      mesh.shard %{{.*}} to <@mesh, {{\[\[}}], [0]]> annotate_for_users : tensor<8x16xf32>
// PROP:      %[[Y:.*]] = merak.linear
// PROP-NEXT: mesh.shard %[[Y]] to <@mesh, {{\[\[}}]], partial = sum[0]> : tensor<4x8xf32>

// SPMD-LABEL: func.func @mlp
// SPMD-SAME:  (%[[X:.*]]: tensor<4x8xf32>, %[[W1:.*]]: tensor<8x8xf32>, %[[B1:.*]]: tensor<16xf32>, %[[W2:.*]]: tensor<8x16xf32>, %[[B2:.*]]: tensor<8xf32>)
// SPMD:       %[[B1L:.*]] = mesh.all_slice %[[B1]] on @mesh mesh_axes = [0] slice_axis = 0 : tensor<16xf32> -> tensor<8xf32>
// SPMD:       %[[H:.*]] = merak.linear %[[X]], %[[W1]], %[[B1L]] : (tensor<4x8xf32>, tensor<8x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
// SPMD:       %[[G:.*]] = merak.gelu %[[H]] : tensor<4x8xf32>
// SPMD:       %[[W2L:.*]] = mesh.all_slice %[[W2]] on @mesh mesh_axes = [0] slice_axis = 1 : tensor<8x16xf32> -> tensor<8x8xf32>
// The bias of a split contraction is added as 1/k per shard.
// SPMD:       %[[HALF:.*]] = merak.constant dense<5.000000e-01> : tensor<f32>
// SPMD:       %[[B2L:.*]] = merak.mul %[[B2]], %[[HALF]]
// SPMD:       %[[Y:.*]] = merak.linear %[[G]], %[[W2L]], %[[B2L]] : (tensor<4x8xf32>, tensor<8x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
// SPMD:       %[[R:.*]] = mesh.all_reduce %[[Y]] on @mesh mesh_axes = [0] : tensor<4x8xf32> -> tensor<4x8xf32>
// SPMD:       return %[[R]]

// -----

mesh.mesh @mesh(shape = 2)

// Attention with the heads split: scores, softmax and the weighted sum of
// values stay local to each head shard.
func.func @attention(%q: tensor<2x4x16x8xf32>, %k: tensor<2x4x8x16xf32>, %v: tensor<2x4x16x8xf32>) -> tensor<2x4x16x8xf32> {
  %qs = mesh.shard %q to <@mesh, [[], [0]]> : tensor<2x4x16x8xf32>
  %ks = mesh.shard %k to <@mesh, [[], [0]]> : tensor<2x4x8x16xf32>
  %vs = mesh.shard %v to <@mesh, [[], [0]]> : tensor<2x4x16x8xf32>
  %s = merak.matmul %qs, %ks : (tensor<2x4x16x8xf32>, tensor<2x4x8x16xf32>) -> tensor<2x4x16x16xf32>
  %p = merak.softmax %s {dim = -1 : i64} : tensor<2x4x16x16xf32>
  %o = merak.matmul %p, %vs : (tensor<2x4x16x16xf32>, tensor<2x4x16x8xf32>) -> tensor<2x4x16x8xf32>
  %r = mesh.shard %o to <@mesh, [[], [0]]> annotate_for_users : tensor<2x4x16x8xf32>
  return %r : tensor<2x4x16x8xf32>
}

// PROP-LABEL: func.func @attention
// PROP:      %[[S:.*]] = merak.matmul
// PROP-NEXT: mesh.shard %[[S]] to <@mesh, {{\[\[}}], [0]]> : tensor<2x4x16x16xf32>
// PROP:      %[[P:.*]] = merak.softmax
// PROP-NEXT: mesh.shard %[[P]] to <@mesh, {{\[\[}}], [0]]> : tensor<2x4x16x16xf32>

// SPMD-LABEL: func.func @attention
// SPMD:       merak.matmul %{{.*}}, %{{.*}} : (tensor<2x2x16x8xf32>, tensor<2x2x8x16xf32>) -> tensor<2x2x16x16xf32>
// SPMD-NEXT:  merak.softmax %{{.*}} {dim = -1 : i64} : tensor<2x2x16x16xf32>
// SPMD-NEXT:  merak.matmul %{{.*}}, %{{.*}} : (tensor<2x2x16x16xf32>, tensor<2x2x16x8xf32>) -> tensor<2x2x16x8xf32>
// SPMD-NOT:   mesh.
// SPMD:       return

// -----

mesh.mesh @mesh(shape = 2)

// A weight gradient under data parallelism: the batch is the contracted
// dimension, so the gradient is a partial sum, all-reduced for its
// replicated user.
func.func @weight_grad(%x: tensor<8x4xf32>, %dy: tensor<8x6xf32>) -> tensor<4x6xf32> {
  %xs = mesh.shard %x to <@mesh, [[0]]> : tensor<8x4xf32>
  %dys = mesh.shard %dy to <@mesh, [[0]]> : tensor<8x6xf32>
  %xt = merak.permute %xs {permutation = array<i64: 1, 0>} : (tensor<8x4xf32>) -> tensor<4x8xf32>
  %dw = merak.matmul %xt, %dys : (tensor<4x8xf32>, tensor<8x6xf32>) -> tensor<4x6xf32>
  %r = mesh.shard %dw to <@mesh, [[]]> annotate_for_users : tensor<4x6xf32>
  return %r : tensor<4x6xf32>
}

// PROP-LABEL: func.func @weight_grad
// PROP:      %[[DW:.*]] = merak.matmul
// PROP-NEXT: mesh.shard %[[DW]] to <@mesh, {{\[\[}}]], partial = sum[0]> : tensor<4x6xf32>

// SPMD-LABEL: func.func @weight_grad
// SPMD:       %[[DW:.*]] = merak.matmul %{{.*}}, %{{.*}} : (tensor<4x4xf32>, tensor<4x6xf32>) -> tensor<4x6xf32>
// SPMD-NEXT:  mesh.all_reduce %[[DW]] on @mesh mesh_axes = [0] : tensor<4x6xf32> -> tensor<4x6xf32>

// -----

mesh.mesh @mesh(shape = 2)

// Broadcast batch dimensions of matmul: the size-1 batch dimension of the
// lhs is never split.
func.func @broadcast_batch(%a: tensor<1x4x3x8xf32>, %b: tensor<6x1x8x5xf32>) -> tensor<6x4x3x5xf32> {
  %as = mesh.shard %a to <@mesh, [[]]> : tensor<1x4x3x8xf32>
  %bs = mesh.shard %b to <@mesh, [[0]]> : tensor<6x1x8x5xf32>
  %0 = merak.matmul %as, %bs : (tensor<1x4x3x8xf32>, tensor<6x1x8x5xf32>) -> tensor<6x4x3x5xf32>
  %r = mesh.shard %0 to <@mesh, [[0]]> annotate_for_users : tensor<6x4x3x5xf32>
  return %r : tensor<6x4x3x5xf32>
}

// PROP-LABEL: func.func @broadcast_batch
// PROP:      mesh.shard %{{.*}} to <@mesh, {{\[\[}}]]> annotate_for_users : tensor<1x4x3x8xf32>
// PROP:      %[[M:.*]] = merak.matmul
// PROP-NEXT: mesh.shard %[[M]] to <@mesh, {{\[\[}}0]]> : tensor<6x4x3x5xf32>

// SPMD-LABEL: func.func @broadcast_batch
// SPMD:       merak.matmul %{{.*}}, %{{.*}} : (tensor<1x4x3x8xf32>, tensor<3x1x8x5xf32>) -> tensor<3x4x3x5xf32>
