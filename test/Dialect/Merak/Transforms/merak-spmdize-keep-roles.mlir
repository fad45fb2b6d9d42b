// Tests --merak-spmdize="keep-roles=true": the ops partitioning builds for an
// op take its role in the training step, so that the pipeline passes place
// them with it. Without the option they carry none.
// RUN: merak-opt %s --merak-spmdize="keep-roles=true" | FileCheck %s
// RUN: merak-opt %s --merak-spmdize | FileCheck %s --check-prefix=PLAIN

mesh.mesh @mesh(shape = 2) {merak.axes = ["tp"]}

// The vocabulary-parallel embedding (a forward op) becomes a masked local
// lookup; its clone keeps merak.id = 0 and the mask ops stay untagged (the
// pipeline partitioner makes them forward ops of their own). The slice of
// the backward linear's input and the all-reduce of its partial result are
// built for backward ops: they take merak.grad_of = 1. The all-reduce read
// by a forward op stays untagged.
// CHECK-LABEL: func.func @step
// CHECK: %[[SUB:.*]] = merak.sub %arg1, %{{.*}} : (tensor<2x3xi64>
// CHECK: merak.embedding %arg0, %{{.*}} {merak.id = 0 : i64}
// CHECK: %[[MASKED:.*]] = merak.where %{{.*}}, %{{.*}}, %{{.*}} : (tensor<2x3x1xi1>
// CHECK: %[[G:.*]] = mesh.all_slice %arg3 on @mesh mesh_axes = [0] slice_axis = 2 {merak.grad_of = 1 : i64}
// CHECK: %[[D:.*]] = merak.linear %[[G]], %arg2 {merak.grad_of = 1 : i64}
// CHECK: %[[DR:.*]] = mesh.all_reduce %[[D]] on @mesh mesh_axes = [0] {merak.grad_of = 1 : i64}
// CHECK: merak.neg %[[DR]] {merak.grad_of = 1 : i64}
// CHECK: %[[ER:.*]] = mesh.all_reduce %[[MASKED]] on @mesh mesh_axes = [0] : tensor<2x3x4xf32>
// CHECK: merak.neg %[[ER]] {merak.id = 1 : i64}

// PLAIN-LABEL: func.func @step
// PLAIN: mesh.all_slice %arg3 on @mesh mesh_axes = [0] slice_axis = 2 : tensor<2x3x4xf32>
// PLAIN: mesh.all_reduce %{{.*}} on @mesh mesh_axes = [0] : tensor<2x3x4xf32>
func.func @step(%table: tensor<8x4xf32>, %ids: tensor<2x3xi64>, %w: tensor<4x4xf32>, %g: tensor<2x3x4xf32>) -> (tensor<2x3x4xf32>, tensor<2x3x4xf32>) {
  %ts = mesh.shard %table to <@mesh, [[0]]> : tensor<8x4xf32>
  %e = merak.embedding %ts, %ids {merak.id = 0 : i64} : (tensor<8x4xf32>, tensor<2x3xi64>) -> tensor<2x3x4xf32>
  %es = mesh.shard %e to <@mesh, [[]], partial = sum[0]> : tensor<2x3x4xf32>
  %ws = mesh.shard %w to <@mesh, [[], [0]]> : tensor<4x4xf32>
  %gs = mesh.shard %g to <@mesh, [[], [], [0]]> annotate_for_users : tensor<2x3x4xf32>
  %d = merak.linear %gs, %ws {merak.grad_of = 1 : i64} : (tensor<2x3x4xf32>, tensor<4x4xf32>) -> tensor<2x3x4xf32>
  %ds = mesh.shard %d to <@mesh, [[]], partial = sum[0]> : tensor<2x3x4xf32>
  %du = mesh.shard %ds to <@mesh, [[]]> annotate_for_users : tensor<2x3x4xf32>
  %n = merak.neg %du {merak.grad_of = 1 : i64} : tensor<2x3x4xf32>
  %eu = mesh.shard %es to <@mesh, [[]]> annotate_for_users : tensor<2x3x4xf32>
  %r = merak.neg %eu {merak.id = 1 : i64} : tensor<2x3x4xf32>
  return %r, %n : tensor<2x3x4xf32>, tensor<2x3x4xf32>
}
