// Sharding rules of softmax and the normalizations: the normalized
// dimensions are never split (propagation gathers them), every other
// dimension is parallel. Parameter gradients of layer_norm_backward sum
// over the rows and are partial sums when the rows are split. Training
// batch norm with the batch split synchronizes its statistics.
// RUN: merak-opt %s -split-input-file --pass-pipeline='builtin.module(func.func(sharding-propagation))' | FileCheck %s --check-prefix=PROP
// RUN: merak-opt %s -split-input-file --pass-pipeline='builtin.module(func.func(sharding-propagation,mesh-spmdization))' | FileCheck %s --check-prefix=SPMD

mesh.mesh @mesh(shape = 2)

// A batch split passes through layer_norm and softmax: only the normalized
// dimensions are coupled.
func.func @batch(%x: tensor<4x8x16xf32>, %w: tensor<16xf32>, %b: tensor<16xf32>) -> tensor<4x8x16xf32> {
  %xs = mesh.shard %x to <@mesh, [[0]]> : tensor<4x8x16xf32>
  %ws = mesh.shard %w to <@mesh, [[]]> : tensor<16xf32>
  %bs = mesh.shard %b to <@mesh, [[]]> : tensor<16xf32>
  %0 = merak.layer_norm %xs weight %ws bias %bs {normalized_rank = 1 : i64, eps = 1.0e-5 : f64} : (tensor<4x8x16xf32>, tensor<16xf32>, tensor<16xf32>) -> tensor<4x8x16xf32>
  %1 = merak.softmax %0 {dim = 2 : i64} : tensor<4x8x16xf32>
  %2 = merak.rms_norm %1 weight %ws {normalized_rank = 1 : i64, eps = 1.0e-5 : f64} : (tensor<4x8x16xf32>, tensor<16xf32>) -> tensor<4x8x16xf32>
  %r = mesh.shard %2 to <@mesh, [[0]]> annotate_for_users : tensor<4x8x16xf32>
  return %r : tensor<4x8x16xf32>
}

// PROP-LABEL: func.func @batch
// PROP:      %[[LN:.*]] = merak.layer_norm
// PROP-NEXT: mesh.shard %[[LN]] to <@mesh, {{\[\[}}0]]> : tensor<4x8x16xf32>
// PROP:      %[[SM:.*]] = merak.softmax
// PROP-NEXT: mesh.shard %[[SM]] to <@mesh, {{\[\[}}0]]> : tensor<4x8x16xf32>
// PROP:      %[[RMS:.*]] = merak.rms_norm
// PROP-NEXT: mesh.shard %[[RMS]] to <@mesh, {{\[\[}}0]]> : tensor<4x8x16xf32>

// SPMD-LABEL: func.func @batch
// SPMD-NEXT:  merak.layer_norm {{.*}} : (tensor<2x8x16xf32>, tensor<16xf32>, tensor<16xf32>) -> tensor<2x8x16xf32>
// SPMD-NEXT:  merak.softmax {{.*}} : tensor<2x8x16xf32>
// SPMD-NEXT:  merak.rms_norm {{.*}} : (tensor<2x8x16xf32>, tensor<16xf32>) -> tensor<2x8x16xf32>
// SPMD-NEXT:  return

// -----

mesh.mesh @mesh(shape = 2)

// The softmax dimension is never split: the input is gathered first.
func.func @softmax_dim(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %xs = mesh.shard %x to <@mesh, [[], [0]]> : tensor<4x8xf32>
  %0 = merak.log_softmax %xs {dim = 1 : i64} : tensor<4x8xf32>
  %r = mesh.shard %0 to <@mesh, [[], [0]]> annotate_for_users : tensor<4x8xf32>
  return %r : tensor<4x8xf32>
}

// PROP-LABEL: func.func @softmax_dim
// PROP:      mesh.shard %{{.*}} to <@mesh, {{\[\[}}]]> annotate_for_users : tensor<4x8xf32>
// PROP-NEXT: %[[S:.*]] = merak.log_softmax
// PROP-NEXT: mesh.shard %[[S]] to <@mesh, {{\[\[}}]]> : tensor<4x8xf32>

// SPMD-LABEL: func.func @softmax_dim
// SPMD:       mesh.all_gather %{{.*}} on @mesh mesh_axes = [0] gather_axis = 1 : tensor<4x4xf32> -> tensor<4x8xf32>
// SPMD:       merak.log_softmax %{{.*}} {dim = 1 : i64} : tensor<4x8xf32>
// SPMD:       mesh.all_slice %{{.*}} on @mesh mesh_axes = [0] slice_axis = 1 : tensor<4x8xf32> -> tensor<4x4xf32>

// -----

mesh.mesh @mesh(shape = 2)

// layer_norm_backward: with the rows split, grad_input is split and the
// parameter gradients (sums over the rows) are partial sums.
func.func @layer_norm_backward(%g: tensor<4x16xf32>, %x: tensor<4x16xf32>, %w: tensor<16xf32>) -> (tensor<4x16xf32>, tensor<16xf32>, tensor<16xf32>) {
  %gs = mesh.shard %g to <@mesh, [[0]]> : tensor<4x16xf32>
  %xs = mesh.shard %x to <@mesh, [[0]]> : tensor<4x16xf32>
  %ws = mesh.shard %w to <@mesh, [[]]> : tensor<16xf32>
  %0:3 = merak.layer_norm_backward %gs, %xs weight %ws {eps = 1.0e-5 : f64, normalized_rank = 1 : i64} : (tensor<4x16xf32>, tensor<4x16xf32>, tensor<16xf32>) -> (tensor<4x16xf32>, tensor<16xf32>, tensor<16xf32>)
  %r0 = mesh.shard %0#0 to <@mesh, [[0]]> annotate_for_users : tensor<4x16xf32>
  %r1 = mesh.shard %0#1 to <@mesh, [[]]> annotate_for_users : tensor<16xf32>
  %r2 = mesh.shard %0#2 to <@mesh, [[]]> annotate_for_users : tensor<16xf32>
  return %r0, %r1, %r2 : tensor<4x16xf32>, tensor<16xf32>, tensor<16xf32>
}

// PROP-LABEL: func.func @layer_norm_backward
// PROP:      %[[GI:.*]], %[[GW:.*]], %[[GB:.*]] = merak.layer_norm_backward
// PROP-DAG:  mesh.shard %[[GB]] to <@mesh, {{\[\[}}]], partial = sum[0]> : tensor<16xf32>
// PROP-DAG:  mesh.shard %[[GW]] to <@mesh, {{\[\[}}]], partial = sum[0]> : tensor<16xf32>
// PROP-DAG:  mesh.shard %[[GI]] to <@mesh, {{\[\[}}0]]> : tensor<4x16xf32>

// SPMD-LABEL: func.func @layer_norm_backward
// SPMD:       %[[GI:.*]], %[[GW:.*]], %[[GB:.*]] = merak.layer_norm_backward {{.*}} -> (tensor<2x16xf32>, tensor<16xf32>, tensor<16xf32>)
// SPMD-DAG:   %[[RB:.*]] = mesh.all_reduce %[[GB]] on @mesh mesh_axes = [0]
// SPMD-DAG:   %[[RW:.*]] = mesh.all_reduce %[[GW]] on @mesh mesh_axes = [0]
// SPMD:       return %[[GI]], %[[RW]], %[[RB]]

// -----

mesh.mesh @mesh(shape = 2)

// batch_norm: channels split freely; in evaluation mode the batch too.
func.func @batch_norm_eval(%x: tensor<4x6x8x8xf32>, %c: tensor<6xf32>) -> tensor<4x6x8x8xf32> {
  %xs = mesh.shard %x to <@mesh, [[0]]> : tensor<4x6x8x8xf32>
  %cs = mesh.shard %c to <@mesh, [[]]> : tensor<6xf32>
  %0:3 = merak.batch_norm %xs, %cs, %cs, %cs, %cs {training = false, momentum = 0.1 : f64, eps = 1.0e-5 : f64} : (tensor<4x6x8x8xf32>, tensor<6xf32>, tensor<6xf32>, tensor<6xf32>, tensor<6xf32>) -> (tensor<4x6x8x8xf32>, tensor<6xf32>, tensor<6xf32>)
  %r = mesh.shard %0#0 to <@mesh, [[0]]> annotate_for_users : tensor<4x6x8x8xf32>
  return %r : tensor<4x6x8x8xf32>
}

// SPMD-LABEL: func.func @batch_norm_eval
// SPMD-NEXT:  merak.batch_norm {{.*}} : (tensor<2x6x8x8xf32>, tensor<6xf32>, tensor<6xf32>, tensor<6xf32>, tensor<6xf32>) -> (tensor<2x6x8x8xf32>, tensor<6xf32>, tensor<6xf32>)

// -----

mesh.mesh @mesh(shape = 2)

func.func @batch_norm_channels(%x: tensor<4x6x8x8xf32>, %c: tensor<6xf32>) -> (tensor<4x6x8x8xf32>, tensor<6xf32>) {
  %xs = mesh.shard %x to <@mesh, [[], [0]]> : tensor<4x6x8x8xf32>
  %cs = mesh.shard %c to <@mesh, [[0]]> : tensor<6xf32>
  %0:3 = merak.batch_norm %xs, %cs, %cs, %cs, %cs {training = true, momentum = 0.1 : f64, eps = 1.0e-5 : f64} : (tensor<4x6x8x8xf32>, tensor<6xf32>, tensor<6xf32>, tensor<6xf32>, tensor<6xf32>) -> (tensor<4x6x8x8xf32>, tensor<6xf32>, tensor<6xf32>)
  %r = mesh.shard %0#0 to <@mesh, [[], [0]]> annotate_for_users : tensor<4x6x8x8xf32>
  %r1 = mesh.shard %0#1 to <@mesh, [[0]]> annotate_for_users : tensor<6xf32>
  return %r, %r1 : tensor<4x6x8x8xf32>, tensor<6xf32>
}

// PROP-LABEL: func.func @batch_norm_channels
// PROP:      %[[Y:.*]], %[[M:.*]], %[[V:.*]] = merak.batch_norm
// PROP-DAG:  mesh.shard %[[V]] to <@mesh, {{\[\[}}0]]> : tensor<6xf32>
// PROP-DAG:  mesh.shard %[[M]] to <@mesh, {{\[\[}}0]]> : tensor<6xf32>
// PROP-DAG:  mesh.shard %[[Y]] to <@mesh, {{\[\[}}], [0]]> : tensor<4x6x8x8xf32>

// SPMD-LABEL: func.func @batch_norm_channels
// SPMD-NEXT:  merak.batch_norm {{.*}} -> (tensor<4x3x8x8xf32>, tensor<3xf32>, tensor<3xf32>)

// -----
mesh.mesh @mesh(shape = 2)

// Training batch norm with the batch split: synchronized statistics.
func.func @batch_norm_sync(%x: tensor<4x6x8x8xf32>, %c: tensor<6xf32>) -> (tensor<4x6x8x8xf32>, tensor<6xf32>) {
  %xs = mesh.shard %x to <@mesh, [[0]]> : tensor<4x6x8x8xf32>
  %cs = mesh.shard %c to <@mesh, [[]]> : tensor<6xf32>
  %0:3 = merak.batch_norm %xs, %cs, %cs, %cs, %cs {training = true, momentum = 0.1 : f64, eps = 1.0e-5 : f64} : (tensor<4x6x8x8xf32>, tensor<6xf32>, tensor<6xf32>, tensor<6xf32>, tensor<6xf32>) -> (tensor<4x6x8x8xf32>, tensor<6xf32>, tensor<6xf32>)
  %r0 = mesh.shard %0#0 to <@mesh, [[0]]> annotate_for_users : tensor<4x6x8x8xf32>
  %r1 = mesh.shard %0#1 to <@mesh, [[]]> annotate_for_users : tensor<6xf32>
  return %r0, %r1 : tensor<4x6x8x8xf32>, tensor<6xf32>
}

// PROP-LABEL: func.func @batch_norm_sync
// PROP:      %[[Y:.*]], %[[M:.*]], %[[V:.*]] = merak.batch_norm
// PROP-DAG:  mesh.shard %[[V]] to <@mesh, {{\[\[}}]]> : tensor<6xf32>
// PROP-DAG:  mesh.shard %[[M]] to <@mesh, {{\[\[}}]]> : tensor<6xf32>
// PROP-DAG:  mesh.shard %[[Y]] to <@mesh, {{\[\[}}0]]> : tensor<4x6x8x8xf32>

// SPMD-LABEL: func.func @batch_norm_sync
// SPMD-SAME:  (%[[X:.*]]: tensor<2x6x8x8xf32>, %{{.*}}: tensor<6xf32>)
// SPMD:       %[[X64:.*]] = merak.cast %[[X]] : tensor<2x6x8x8xf32> -> tensor<2x6x8x8xf64>
// SPMD:       %[[S:.*]] = merak.reduce_sum %[[X64]] {dims = array<i64: 0, 2, 3>, keepdim = true}
// SPMD:       %[[GS:.*]] = mesh.all_reduce %[[S]] on @mesh mesh_axes = [0] : tensor<1x6x1x1xf64> -> tensor<1x6x1x1xf64>
// SPMD:       merak.div %[[GS]]
// SPMD:       mesh.all_reduce %{{.*}} on @mesh mesh_axes = [0] : tensor<1x6x1x1xf64> -> tensor<1x6x1x1xf64>
// SPMD:       merak.rsqrt
// SPMD:       %[[Y:.*]] = merak.add %{{.*}}, %{{.*}} : (tensor<2x6x8x8xf32>, tensor<1x6x1x1xf32>) -> tensor<2x6x8x8xf32>
// SPMD:       %[[RM:.*]] = merak.cast %{{.*}} : tensor<6xf64> -> tensor<6xf32>
// SPMD:       return %[[Y]], %[[RM]]

// -----

mesh.mesh @mesh(shape = 2)

// Its gradient: grad_input from all-reduced sums, parameter gradients
// partial sums.
func.func @batch_norm_backward_sync(%g: tensor<4x6x8x8xf32>, %x: tensor<4x6x8x8xf32>, %c: tensor<6xf32>) -> (tensor<4x6x8x8xf32>, tensor<6xf32>) {
  %gs = mesh.shard %g to <@mesh, [[0]]> : tensor<4x6x8x8xf32>
  %xs = mesh.shard %x to <@mesh, [[0]]> : tensor<4x6x8x8xf32>
  %cs = mesh.shard %c to <@mesh, [[]]> : tensor<6xf32>
  %0:3 = merak.batch_norm_backward %gs, %xs, %cs, %cs, %cs {training = true, eps = 1.0e-5 : f64} : (tensor<4x6x8x8xf32>, tensor<4x6x8x8xf32>, tensor<6xf32>, tensor<6xf32>, tensor<6xf32>) -> (tensor<4x6x8x8xf32>, tensor<6xf32>, tensor<6xf32>)
  %r0 = mesh.shard %0#0 to <@mesh, [[0]]> annotate_for_users : tensor<4x6x8x8xf32>
  %r1 = mesh.shard %0#1 to <@mesh, [[]]> annotate_for_users : tensor<6xf32>
  return %r0, %r1 : tensor<4x6x8x8xf32>, tensor<6xf32>
}

// PROP-LABEL: func.func @batch_norm_backward_sync
// PROP:      %[[GI:.*]], %[[GW:.*]], %[[GB:.*]] = merak.batch_norm_backward
// PROP-DAG:  mesh.shard %[[GB]] to <@mesh, {{\[\[}}]], partial = sum[0]> : tensor<6xf32>
// PROP-DAG:  mesh.shard %[[GW]] to <@mesh, {{\[\[}}]], partial = sum[0]> : tensor<6xf32>
// PROP-DAG:  mesh.shard %[[GI]] to <@mesh, {{\[\[}}0]]> : tensor<4x6x8x8xf32>

// SPMD-LABEL: func.func @batch_norm_backward_sync
// SPMD-COUNT-4: mesh.all_reduce %{{.*}} on @mesh mesh_axes = [0] : tensor<1x6x1x1xf64> -> tensor<1x6x1x1xf64>
// The weight gradient is this rank's sum until its user all-reduces it.
// SPMD:       %[[GW:.*]] = merak.reshape %{{.*}} {shape = array<i64: 6>} : (tensor<1x6x1x1xf32>) -> tensor<6xf32>
// SPMD-NEXT:  %[[GWR:.*]] = mesh.all_reduce %[[GW]] on @mesh mesh_axes = [0] : tensor<6xf32> -> tensor<6xf32>
// SPMD:       return %{{.*}}, %[[GWR]] : tensor<2x6x8x8xf32>, tensor<6xf32>
