// Sharding rules of elementwise ops: one parallel loop per result
// dimension; broadcast operands leave out missing dimensions and index a
// stretched size-1 dimension with the constant 0, so it is never split.
// Constants are replicated; optimizer updates are elementwise with
// replicated scalars.
// RUN: merak-opt %s -split-input-file --pass-pipeline='builtin.module(func.func(sharding-propagation))' | FileCheck %s --check-prefix=PROP
// RUN: merak-opt %s -split-input-file --pass-pipeline='builtin.module(func.func(sharding-propagation,mesh-spmdization))' | FileCheck %s --check-prefix=SPMD

mesh.mesh @mesh(shape = 2)

// A bias add broadcasts the bias: the batch split of the activation does
// not reach it; its own dimension follows the activation's last one.
func.func @bias(%x: tensor<4x8xf32>, %b: tensor<8xf32>) -> tensor<4x8xf32> {
  %xs = mesh.shard %x to <@mesh, [[0]]> : tensor<4x8xf32>
  %bs = mesh.shard %b to <@mesh, [[]]> : tensor<8xf32>
  %0 = merak.add %xs, %bs : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
  %1 = merak.relu %0 : tensor<4x8xf32>
  %r = mesh.shard %1 to <@mesh, [[0]]> annotate_for_users : tensor<4x8xf32>
  return %r : tensor<4x8xf32>
}

// PROP-LABEL: func.func @bias
// PROP:      mesh.shard %{{.*}} to <@mesh, {{\[\[}}]]> annotate_for_users : tensor<8xf32>
// PROP:      %[[A:.*]] = merak.add
// PROP-NEXT: mesh.shard %[[A]] to <@mesh, {{\[\[}}0]]> : tensor<4x8xf32>
// PROP:      %[[R:.*]] = merak.relu
// PROP-NEXT: mesh.shard %[[R]] to <@mesh, {{\[\[}}0]]> : tensor<4x8xf32>

// SPMD-LABEL: func.func @bias
// SPMD:       merak.add %{{.*}}, %{{.*}} : (tensor<2x8xf32>, tensor<8xf32>) -> tensor<2x8xf32>
// SPMD-NEXT:  merak.relu %{{.*}} : tensor<2x8xf32>

// -----

mesh.mesh @mesh(shape = 2)

// A stretched size-1 dimension indexes the constant 0: splitting the
// result along it leaves that operand whole.
func.func @stretch(%x: tensor<4x1x8xf32>, %y: tensor<4x6x8xf32>) -> tensor<4x6x8xf32> {
  %xs = mesh.shard %x to <@mesh, [[]]> : tensor<4x1x8xf32>
  %ys = mesh.shard %y to <@mesh, [[], [0]]> : tensor<4x6x8xf32>
  %0 = merak.mul %xs, %ys : (tensor<4x1x8xf32>, tensor<4x6x8xf32>) -> tensor<4x6x8xf32>
  %r = mesh.shard %0 to <@mesh, [[], [0]]> annotate_for_users : tensor<4x6x8xf32>
  return %r : tensor<4x6x8xf32>
}

// PROP-LABEL: func.func @stretch
// PROP:      mesh.shard %{{.*}} to <@mesh, {{\[\[}}]]> annotate_for_users : tensor<4x1x8xf32>
// PROP:      %[[M:.*]] = merak.mul
// PROP-NEXT: mesh.shard %[[M]] to <@mesh, {{\[\[}}], [0]]> : tensor<4x6x8xf32>

// SPMD-LABEL: func.func @stretch
// SPMD:       merak.mul %{{.*}}, %{{.*}} : (tensor<4x1x8xf32>, tensor<4x3x8xf32>) -> tensor<4x3x8xf32>

// -----

mesh.mesh @mesh(shape = 2)

// A constant is replicated; where a user wants it split it is sliced.
func.func @mask(%x: tensor<2x8x4x4xf32>) -> tensor<2x8x4x4xf32> {
  %xs = mesh.shard %x to <@mesh, [[], [], [0]]> : tensor<2x8x4x4xf32>
  %m = merak.constant dense<true> : tensor<1x1x4x4xi1>
  %v = merak.constant dense<-1.0e9> : tensor<f32>
  %0 = merak.where %m, %xs, %v : (tensor<1x1x4x4xi1>, tensor<2x8x4x4xf32>, tensor<f32>) -> tensor<2x8x4x4xf32>
  %r = mesh.shard %0 to <@mesh, [[], [], [0]]> annotate_for_users : tensor<2x8x4x4xf32>
  return %r : tensor<2x8x4x4xf32>
}

// PROP-LABEL: func.func @mask
// PROP:      %[[M:.*]] = merak.constant dense<true>
// PROP-NEXT: %[[MR:.*]] = mesh.shard %[[M]] to <@mesh, {{\[\[}}]]> : tensor<1x1x4x4xi1>
// PROP:      mesh.shard %[[MR]] to <@mesh, {{\[\[}}], [], [0]]> annotate_for_users : tensor<1x1x4x4xi1>

// SPMD-LABEL: func.func @mask
// SPMD:       %[[M:.*]] = merak.constant dense<true> : tensor<1x1x4x4xi1>
// SPMD:       %[[ML:.*]] = mesh.all_slice %[[M]] on @mesh mesh_axes = [0] slice_axis = 2 : tensor<1x1x4x4xi1> -> tensor<1x1x2x4xi1>
// SPMD:       merak.where %[[ML]], %{{.*}}, %{{.*}} : (tensor<1x1x2x4xi1>, tensor<2x8x2x4xf32>, tensor<f32>) -> tensor<2x8x2x4xf32>

// -----

mesh.mesh @mesh(shape = 2)

// Optimizer updates are elementwise over the parameter and its state; the
// learning rate and the step are replicated scalars.
func.func @adamw(%p: tensor<8x4xf32>, %g: tensor<8x4xf32>, %m: tensor<8x4xf32>, %v: tensor<8x4xf32>,
                 %lr: tensor<f32>, %step: tensor<i64>) -> (tensor<8x4xf32>, tensor<8x4xf32>, tensor<8x4xf32>) {
  %ps = mesh.shard %p to <@mesh, [[0]]> : tensor<8x4xf32>
  %gs = mesh.shard %g to <@mesh, [[]]> : tensor<8x4xf32>
  %ms = mesh.shard %m to <@mesh, [[0]]> : tensor<8x4xf32>
  %vs = mesh.shard %v to <@mesh, [[0]]> : tensor<8x4xf32>
  %0:3 = merak.adamw_update %ps, %gs, %ms, %vs, %lr, %step {beta1 = 0.9 : f64, beta2 = 0.999 : f64, eps = 1.0e-8 : f64, weight_decay = 0.01 : f64} : (tensor<8x4xf32>, tensor<8x4xf32>, tensor<8x4xf32>, tensor<8x4xf32>, tensor<f32>, tensor<i64>) -> (tensor<8x4xf32>, tensor<8x4xf32>, tensor<8x4xf32>)
  return %0#0, %0#1, %0#2 : tensor<8x4xf32>, tensor<8x4xf32>, tensor<8x4xf32>
}

// PROP-LABEL: func.func @adamw
// PROP-COUNT-4: annotate_for_users : tensor<8x4xf32>
// PROP:      mesh.shard %{{.*}} to <@mesh, []> annotate_for_users : tensor<f32>
// PROP:      mesh.shard %{{.*}} to <@mesh, []> annotate_for_users : tensor<i64>
// PROP:      merak.adamw_update
// PROP-COUNT-3: mesh.shard %{{.*}} to <@mesh, {{\[\[}}0]]> : tensor<8x4xf32>

// The replicated gradient is sliced; everything else is local.
// SPMD-LABEL: func.func @adamw
// SPMD-SAME:  (%[[P:.*]]: tensor<4x4xf32>, %[[G:.*]]: tensor<8x4xf32>, %[[M:.*]]: tensor<4x4xf32>, %[[V:.*]]: tensor<4x4xf32>, %[[LR:.*]]: tensor<f32>, %[[STEP:.*]]: tensor<i64>)
// SPMD:       %[[GL:.*]] = mesh.all_slice %[[G]] on @mesh mesh_axes = [0] slice_axis = 0 : tensor<8x4xf32> -> tensor<4x4xf32>
// SPMD:       merak.adamw_update %[[P]], %[[GL]], %[[M]], %[[V]], %[[LR]], %[[STEP]] {{.*}} : (tensor<4x4xf32>, tensor<4x4xf32>, tensor<4x4xf32>, tensor<4x4xf32>, tensor<f32>, tensor<i64>) -> (tensor<4x4xf32>, tensor<4x4xf32>, tensor<4x4xf32>)

// -----

mesh.mesh @mesh(shape = 2)

func.func @sgd(%p: tensor<8xf32>, %g: tensor<8xf32>, %b: tensor<8xf32>, %lr: tensor<f32>, %step: tensor<i64>) -> (tensor<8xf32>, tensor<8xf32>) {
  %ps = mesh.shard %p to <@mesh, [[0]]> : tensor<8xf32>
  %gs = mesh.shard %g to <@mesh, [[0]]> : tensor<8xf32>
  %bs = mesh.shard %b to <@mesh, [[0]]> : tensor<8xf32>
  %0:2 = merak.sgd_update %ps, %gs, %bs, %lr, %step {dampening = 0.0 : f64, momentum = 0.9 : f64, nesterov = false, weight_decay = 0.0 : f64} : (tensor<8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<f32>, tensor<i64>) -> (tensor<8xf32>, tensor<8xf32>)
  return %0#0, %0#1 : tensor<8xf32>, tensor<8xf32>
}

// SPMD-LABEL: func.func @sgd
// SPMD:       merak.sgd_update {{.*}} : (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<f32>, tensor<i64>) -> (tensor<4xf32>, tensor<4xf32>)
