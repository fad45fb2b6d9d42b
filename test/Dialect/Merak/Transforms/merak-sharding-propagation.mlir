// Tests --merak-sharding-propagation.
// RUN: merak-opt %s -split-input-file --merak-sharding-propagation | FileCheck %s
// RUN: merak-opt %S/Inputs/tiny-transformer.mlir --merak-train="optimizer=adamw lr=0.01" --merak-tensor-parallel="tp=2" --merak-sharding-propagation | FileCheck %s --check-prefix=TP

mesh.mesh @mesh(shape = 2) {merak.axes = ["dp"]}

// Forward first: the batch split of %x reaches the weight-gradient
// contraction, which becomes a partial sum, although the replicated
// parameter's update is what sees the gradient.
// CHECK-LABEL: func.func @weight_gradient
// CHECK: %[[G:.*]] = merak.matmul
// CHECK-NEXT: mesh.shard %[[G]] to <@mesh, {{\[\[}}]], partial = sum[0]> : tensor<4x4xf32>
// CHECK: merak.sgd_update
func.func @weight_gradient(%x: tensor<8x4xf32>, %dy: tensor<8x4xf32>,
                           %w: tensor<4x4xf32>, %m: tensor<4x4xf32>,
                           %lr: tensor<f32>, %step: tensor<i64>) -> tensor<4x4xf32> {
  %xs = mesh.shard %x to <@mesh, [[0]]> : tensor<8x4xf32>
  %dys = mesh.shard %dy to <@mesh, [[0]]> : tensor<8x4xf32>
  %ws = mesh.shard %w to <@mesh, [[]]> : tensor<4x4xf32>
  %t = merak.permute %dys {permutation = array<i64: 1, 0>} : (tensor<8x4xf32>) -> tensor<4x8xf32>
  %g = merak.matmul %t, %xs : (tensor<4x8xf32>, tensor<8x4xf32>) -> tensor<4x4xf32>
  %p, %mm = merak.sgd_update %ws, %g, %m, %lr, %step {momentum = 0.0 : f64, dampening = 0.0 : f64, nesterov = false, weight_decay = 0.0 : f64} : (tensor<4x4xf32>, tensor<4x4xf32>, tensor<4x4xf32>, tensor<f32>, tensor<i64>) -> (tensor<4x4xf32>, tensor<4x4xf32>)
  return %p : tensor<4x4xf32>
}

// -----

mesh.mesh @mesh(shape = 2) {merak.axes = ["dp"]}

// nn.MultiheadAttention's layout, [sequence, batch, hidden]: the batch is
// the inner leading dimension. The weight gradient contracts every leading
// dimension at once, so the batch split stays a split there (no gather)
// and the gradient is a partial sum.
// CHECK-LABEL: func.func @weight_gradient_inner_batch
// CHECK: %[[G:.*]] = merak.linear_weight_backward
// CHECK-NEXT: mesh.shard %[[G]] to <@mesh, {{\[\[}}]], partial = sum[0]> : tensor<16x8xf32>
// CHECK-NOT: mesh.shard {{.*}} to <@mesh, {{\[\[}}]]> annotate_for_users : tensor<6x4x
func.func @weight_gradient_inner_batch(%x: tensor<6x4x8xf32>, %dy: tensor<6x4x16xf32>) -> tensor<16x8xf32> {
  %xs = mesh.shard %x to <@mesh, [[], [0]]> : tensor<6x4x8xf32>
  %dys = mesh.shard %dy to <@mesh, [[], [0]]> : tensor<6x4x16xf32>
  %g = merak.linear_weight_backward %dys, %xs : (tensor<6x4x16xf32>, tensor<6x4x8xf32>) -> tensor<16x8xf32>
  return %g : tensor<16x8xf32>
}

// -----

mesh.mesh @mesh(shape = 2) {merak.axes = ["dp"]}

// Conflicting operands: the add follows the larger operand and reshards the
// smaller one (fewest bytes moved), whichever comes first.
// CHECK-LABEL: func.func @fewest_bytes
// CHECK: %[[A:.*]] = mesh.shard %arg0 to <@mesh, {{\[\[}}], [0]]> : tensor<64x64xf32>
// CHECK: %[[B:.*]] = mesh.shard %arg1 to <@mesh, {{\[\[}}0]]> : tensor<64x1xf32>
// CHECK: %[[BU:.*]] = mesh.shard %[[B]] to <@mesh, {{\[\[}}]]> annotate_for_users : tensor<64x1xf32>
// CHECK: %[[S:.*]] = merak.add %[[BU]], %[[A]]
// CHECK: mesh.shard %[[S]] to <@mesh, {{\[\[}}], [0]]> : tensor<64x64xf32>
func.func @fewest_bytes(%a: tensor<64x64xf32>, %b: tensor<64x1xf32>) -> tensor<64x64xf32> {
  %as = mesh.shard %a to <@mesh, [[], [0]]> : tensor<64x64xf32>
  %bs = mesh.shard %b to <@mesh, [[0]]> : tensor<64x1xf32>
  %s = merak.add %bs, %as : (tensor<64x1xf32>, tensor<64x64xf32>) -> tensor<64x64xf32>
  return %s : tensor<64x64xf32>
}

// -----

mesh.mesh @mesh(shape = 2) {merak.axes = ["tp"]}

// Partial sums stay partial through what is linear in them: the input
// gradients of two projections split by features (q and k) are summed as
// partial sums, reshaped, and reduced once by the reader that needs the
// whole value; a partial sum added to a replicated value is reduced first.
// CHECK-LABEL: func.func @partial_sums
// CHECK: %[[Q:.*]] = merak.matmul
// CHECK-NEXT: mesh.shard %[[Q]] to <@mesh, {{\[\[}}]], partial = sum[0]> : tensor<8x4xf32>
// CHECK: %[[K:.*]] = merak.matmul
// CHECK-NEXT: mesh.shard %[[K]] to <@mesh, {{\[\[}}]], partial = sum[0]> : tensor<8x4xf32>
// CHECK: %[[S:.*]] = merak.add
// CHECK-NEXT: mesh.shard %[[S]] to <@mesh, {{\[\[}}]], partial = sum[0]> : tensor<8x4xf32>
// CHECK: %[[R:.*]] = merak.reshape
// CHECK-NEXT: %[[RS:.*]] = mesh.shard %[[R]] to <@mesh, {{\[\[}}]], partial = sum[0]> : tensor<2x4x4xf32>
// CHECK: %[[RU:.*]] = mesh.shard %[[RS]] to <@mesh, {{\[\[}}]]> annotate_for_users : tensor<2x4x4xf32>
// CHECK: merak.add %[[RU]], %{{.*}} : (tensor<2x4x4xf32>, tensor<2x4x4xf32>)
func.func @partial_sums(%dq: tensor<8x4xf32>, %dk: tensor<8x4xf32>,
                        %wq: tensor<4x4xf32>, %wk: tensor<4x4xf32>,
                        %res: tensor<2x4x4xf32>) -> tensor<2x4x4xf32> {
  %dqs = mesh.shard %dq to <@mesh, [[], [0]]> : tensor<8x4xf32>
  %dks = mesh.shard %dk to <@mesh, [[], [0]]> : tensor<8x4xf32>
  %wqs = mesh.shard %wq to <@mesh, [[0]]> : tensor<4x4xf32>
  %wks = mesh.shard %wk to <@mesh, [[0]]> : tensor<4x4xf32>
  %ress = mesh.shard %res to <@mesh, [[]]> : tensor<2x4x4xf32>
  %gq = merak.matmul %dqs, %wqs : (tensor<8x4xf32>, tensor<4x4xf32>) -> tensor<8x4xf32>
  %gk = merak.matmul %dks, %wks : (tensor<8x4xf32>, tensor<4x4xf32>) -> tensor<8x4xf32>
  %g = merak.add %gq, %gk : (tensor<8x4xf32>, tensor<8x4xf32>) -> tensor<8x4xf32>
  %g3 = merak.reshape %g {shape = array<i64: 2, 4, 4>} : (tensor<8x4xf32>) -> tensor<2x4x4xf32>
  %out = merak.add %g3, %ress : (tensor<2x4x4xf32>, tensor<2x4x4xf32>) -> tensor<2x4x4xf32>
  return %out : tensor<2x4x4xf32>
}

// TP: mesh.mesh @mesh(shape = 2) {merak.axes = ["tp"]}
// Column-parallel fc1 (weight split by rows): its result is split by
// features, GELU runs on the shard, and row-parallel fc2 gives a partial
// sum, which layers outside the MLP see reduced.
// TP: %[[F1:.*]] = merak.linear %{{.*}}, %{{.*}}, %{{.*}} {merak.id = {{[0-9]+}} : i64} : (tensor<2x6x4xf32>, tensor<16x4xf32>, tensor<16xf32>) -> tensor<2x6x16xf32>
// TP-NEXT: mesh.shard %[[F1]] to <@mesh, {{\[\[}}], [], [0]]> : tensor<2x6x16xf32>
// TP: merak.gelu
// TP-NEXT: mesh.shard %{{.*}} to <@mesh, {{\[\[}}], [], [0]]> : tensor<2x6x16xf32>
// TP: %[[F2:.*]] = merak.linear %{{.*}} : (tensor<2x6x16xf32>, tensor<4x16xf32>, tensor<4xf32>) -> tensor<2x6x4xf32>
// TP-NEXT: mesh.shard %[[F2]] to <@mesh, {{\[\[}}]], partial = sum[0]> : tensor<2x6x4xf32>
