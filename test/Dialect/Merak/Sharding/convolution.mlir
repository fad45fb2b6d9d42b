// Sharding rules of convolution and pooling (NCHW): batch and channels are
// parallel (conv2d's input channels are a sum), spatial dimensions and
// windows are never split. Grouped convolutions keep their channels whole.
// RUN: merak-opt %s -split-input-file --pass-pipeline='builtin.module(func.func(sharding-propagation))' | FileCheck %s --check-prefix=PROP
// RUN: merak-opt %s -split-input-file --pass-pipeline='builtin.module(func.func(sharding-propagation,mesh-spmdization))' | FileCheck %s --check-prefix=SPMD

mesh.mesh @mesh(shape = 2)

// conv2d: the batch and the output channels are parallel, the input
// channels a sum; spatial dimensions and windows are never split.
func.func @batch(%x: tensor<4x3x8x8xf32>, %w: tensor<6x3x3x3xf32>, %b: tensor<6xf32>) -> tensor<4x6x3x3xf32> {
  %xs = mesh.shard %x to <@mesh, [[0]]> : tensor<4x3x8x8xf32>
  %ws = mesh.shard %w to <@mesh, [[]]> : tensor<6x3x3x3xf32>
  %bs = mesh.shard %b to <@mesh, [[]]> : tensor<6xf32>
  %0 = merak.conv2d %xs, %ws, %bs {stride = array<i64: 1, 1>, padding = array<i64: 1, 1>, dilation = array<i64: 1, 1>, groups = 1 : i64} : (tensor<4x3x8x8xf32>, tensor<6x3x3x3xf32>, tensor<6xf32>) -> tensor<4x6x8x8xf32>
  %1 = merak.max_pool2d %0 {kernel = array<i64: 2, 2>, stride = array<i64: 2, 2>, padding = array<i64: 0, 0>, dilation = array<i64: 1, 1>} : (tensor<4x6x8x8xf32>) -> tensor<4x6x4x4xf32>
  %2 = merak.avg_pool2d %1 {kernel = array<i64: 2, 2>, stride = array<i64: 1, 1>, padding = array<i64: 0, 0>} : (tensor<4x6x4x4xf32>) -> tensor<4x6x3x3xf32>
  %r = mesh.shard %2 to <@mesh, [[0]]> annotate_for_users : tensor<4x6x3x3xf32>
  return %r : tensor<4x6x3x3xf32>
}

// PROP-LABEL: func.func @batch
// PROP:      %[[C:.*]] = merak.conv2d
// PROP-NEXT: mesh.shard %[[C]] to <@mesh, {{\[\[}}0]]> : tensor<4x6x8x8xf32>
// PROP:      %[[M:.*]] = merak.max_pool2d
// PROP-NEXT: mesh.shard %[[M]] to <@mesh, {{\[\[}}0]]> : tensor<4x6x4x4xf32>
// PROP:      %[[A:.*]] = merak.avg_pool2d
// PROP-NEXT: mesh.shard %[[A]] to <@mesh, {{\[\[}}0]]> : tensor<4x6x3x3xf32>

// SPMD-LABEL: func.func @batch
// SPMD-NEXT:  merak.conv2d {{.*}} : (tensor<2x3x8x8xf32>, tensor<6x3x3x3xf32>, tensor<6xf32>) -> tensor<2x6x8x8xf32>
// SPMD-NEXT:  merak.max_pool2d {{.*}} : (tensor<2x6x8x8xf32>) -> tensor<2x6x4x4xf32>
// SPMD-NEXT:  merak.avg_pool2d {{.*}} : (tensor<2x6x4x4xf32>) -> tensor<2x6x3x3xf32>
// SPMD-NEXT:  return

// -----

mesh.mesh @mesh(shape = 2)

// Output channels split (column parallel), then input channels split (row
// parallel, a partial sum; the bias is added as 1/k per shard).
func.func @channels(%x: tensor<2x4x8x8xf32>, %w1: tensor<8x4x1x1xf32>, %w2: tensor<4x8x1x1xf32>, %b2: tensor<4xf32>) -> tensor<2x4x8x8xf32> {
  %xs = mesh.shard %x to <@mesh, [[]]> : tensor<2x4x8x8xf32>
  %w1s = mesh.shard %w1 to <@mesh, [[0]]> : tensor<8x4x1x1xf32>
  %w2s = mesh.shard %w2 to <@mesh, [[], [0]]> : tensor<4x8x1x1xf32>
  %b2s = mesh.shard %b2 to <@mesh, [[]]> : tensor<4xf32>
  %0 = merak.conv2d %xs, %w1s {stride = array<i64: 1, 1>, padding = array<i64: 0, 0>, dilation = array<i64: 1, 1>, groups = 1 : i64} : (tensor<2x4x8x8xf32>, tensor<8x4x1x1xf32>) -> tensor<2x8x8x8xf32>
  %1 = merak.relu %0 : tensor<2x8x8x8xf32>
  %2 = merak.conv2d %1, %w2s, %b2s {stride = array<i64: 1, 1>, padding = array<i64: 0, 0>, dilation = array<i64: 1, 1>, groups = 1 : i64} : (tensor<2x8x8x8xf32>, tensor<4x8x1x1xf32>, tensor<4xf32>) -> tensor<2x4x8x8xf32>
  %r = mesh.shard %2 to <@mesh, [[]]> annotate_for_users : tensor<2x4x8x8xf32>
  return %r : tensor<2x4x8x8xf32>
}

// PROP-LABEL: func.func @channels
// PROP:      %[[C1:.*]] = merak.conv2d
// PROP-NEXT: mesh.shard %[[C1]] to <@mesh, {{\[\[}}], [0]]> : tensor<2x8x8x8xf32>
// PROP:      %[[C2:.*]] = merak.conv2d
// PROP-NEXT: mesh.shard %[[C2]] to <@mesh, {{\[\[}}]], partial = sum[0]> : tensor<2x4x8x8xf32>

// SPMD-LABEL: func.func @channels
// SPMD:       merak.conv2d {{.*}} : (tensor<2x4x8x8xf32>, tensor<4x4x1x1xf32>) -> tensor<2x4x8x8xf32>
// SPMD:       %[[HALF:.*]] = merak.constant dense<5.000000e-01>
// SPMD:       %[[B:.*]] = merak.mul %{{.*}}, %[[HALF]]
// SPMD:       %[[Y:.*]] = merak.conv2d %{{.*}}, %{{.*}}, %[[B]] {{.*}} : (tensor<2x4x8x8xf32>, tensor<4x4x1x1xf32>, tensor<4xf32>) -> tensor<2x4x8x8xf32>
// SPMD:       mesh.all_reduce %[[Y]] on @mesh mesh_axes = [0]

// -----

mesh.mesh @mesh(shape = 2)

// A split spatial dimension is gathered.
func.func @spatial(%x: tensor<2x3x8x8xf32>, %w: tensor<4x3x3x3xf32>) -> tensor<2x4x6x6xf32> {
  %xs = mesh.shard %x to <@mesh, [[], [], [0]]> : tensor<2x3x8x8xf32>
  %ws = mesh.shard %w to <@mesh, [[]]> : tensor<4x3x3x3xf32>
  %0 = merak.conv2d %xs, %ws {stride = array<i64: 1, 1>, padding = array<i64: 0, 0>, dilation = array<i64: 1, 1>, groups = 1 : i64} : (tensor<2x3x8x8xf32>, tensor<4x3x3x3xf32>) -> tensor<2x4x6x6xf32>
  %r = mesh.shard %0 to <@mesh, [[]]> annotate_for_users : tensor<2x4x6x6xf32>
  return %r : tensor<2x4x6x6xf32>
}

// PROP-LABEL: func.func @spatial
// PROP:      mesh.shard %{{.*}} to <@mesh, {{\[\[}}]]> annotate_for_users : tensor<2x3x8x8xf32>

// SPMD-LABEL: func.func @spatial
// SPMD:       mesh.all_gather %{{.*}} gather_axis = 2 : tensor<2x3x4x8xf32> -> tensor<2x3x8x8xf32>

// -----

mesh.mesh @mesh(shape = 2)

// conv2d_backward with the batch split: grad_input is split, the weight and
// bias gradients are partial sums.
func.func @backward(%g: tensor<4x6x6x6xf32>, %x: tensor<4x3x8x8xf32>, %w: tensor<6x3x3x3xf32>) -> (tensor<4x3x8x8xf32>, tensor<6x3x3x3xf32>, tensor<6xf32>) {
  %gs = mesh.shard %g to <@mesh, [[0]]> : tensor<4x6x6x6xf32>
  %xs = mesh.shard %x to <@mesh, [[0]]> : tensor<4x3x8x8xf32>
  %ws = mesh.shard %w to <@mesh, [[]]> : tensor<6x3x3x3xf32>
  %0:3 = merak.conv2d_backward %gs, %xs, %ws {dilation = array<i64: 1, 1>, groups = 1 : i64, padding = array<i64: 0, 0>, stride = array<i64: 1, 1>} : (tensor<4x6x6x6xf32>, tensor<4x3x8x8xf32>, tensor<6x3x3x3xf32>) -> (tensor<4x3x8x8xf32>, tensor<6x3x3x3xf32>, tensor<6xf32>)
  %r0 = mesh.shard %0#0 to <@mesh, [[0]]> annotate_for_users : tensor<4x3x8x8xf32>
  %r1 = mesh.shard %0#1 to <@mesh, [[]]> annotate_for_users : tensor<6x3x3x3xf32>
  %r2 = mesh.shard %0#2 to <@mesh, [[]]> annotate_for_users : tensor<6xf32>
  return %r0, %r1, %r2 : tensor<4x3x8x8xf32>, tensor<6x3x3x3xf32>, tensor<6xf32>
}

// PROP-LABEL: func.func @backward
// PROP:      %[[GI:.*]], %[[GW:.*]], %[[GB:.*]] = merak.conv2d_backward
// PROP-DAG:  mesh.shard %[[GB]] to <@mesh, {{\[\[}}]], partial = sum[0]> : tensor<6xf32>
// PROP-DAG:  mesh.shard %[[GW]] to <@mesh, {{\[\[}}]], partial = sum[0]> : tensor<6x3x3x3xf32>
// PROP-DAG:  mesh.shard %[[GI]] to <@mesh, {{\[\[}}0]]> : tensor<4x3x8x8xf32>

// SPMD-LABEL: func.func @backward
// SPMD:       merak.conv2d_backward {{.*}} : (tensor<2x6x6x6xf32>, tensor<2x3x8x8xf32>, tensor<6x3x3x3xf32>) -> (tensor<2x3x8x8xf32>, tensor<6x3x3x3xf32>, tensor<6xf32>)
// SPMD-COUNT-2: mesh.all_reduce

// -----

mesh.mesh @mesh(shape = 2)

func.func @pool_backward(%g: tensor<4x6x4x4xf32>, %x: tensor<4x6x8x8xf32>) -> tensor<4x6x1x1xf32> {
  %gs = mesh.shard %g to <@mesh, [[], [0]]> : tensor<4x6x4x4xf32>
  %xs = mesh.shard %x to <@mesh, [[], [0]]> : tensor<4x6x8x8xf32>
  %0 = merak.max_pool2d_backward %gs, %xs {dilation = array<i64: 1, 1>, kernel = array<i64: 2, 2>, padding = array<i64: 0, 0>, stride = array<i64: 2, 2>} : (tensor<4x6x4x4xf32>, tensor<4x6x8x8xf32>) -> tensor<4x6x8x8xf32>
  %1 = merak.adaptive_avg_pool2d %0 {output_size = array<i64: 1, 1>} : (tensor<4x6x8x8xf32>) -> tensor<4x6x1x1xf32>
  %r = mesh.shard %1 to <@mesh, [[], [0]]> annotate_for_users : tensor<4x6x1x1xf32>
  return %r : tensor<4x6x1x1xf32>
}

// SPMD-LABEL: func.func @pool_backward
// SPMD-NEXT:  merak.max_pool2d_backward {{.*}} : (tensor<4x3x4x4xf32>, tensor<4x3x8x8xf32>) -> tensor<4x3x8x8xf32>
// SPMD-NEXT:  merak.adaptive_avg_pool2d {{.*}} : (tensor<4x3x8x8xf32>) -> tensor<4x3x1x1xf32>
