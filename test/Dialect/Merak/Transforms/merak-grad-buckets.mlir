// Tests --merak-grad-buckets: gradient all-reduces (and ZeRO's
// reduce-scatters) over dp move to just after their gradient and
// neighbouring ones are packed into one collective per bucket, as are
// ZeRO's gathers of updated shards.
// RUN: merak-opt %s --merak-grad-buckets | FileCheck %s
// RUN: merak-opt %s --merak-grad-buckets="bucket-mb=0 zero-bucket-mb=0" | FileCheck %s --check-prefix=MOVE
// RUN: merak-opt %s --merak-grad-buckets="bucket-mb=0.00005" | FileCheck %s --check-prefix=SMALL
// RUN: not merak-opt %s --merak-grad-buckets="zero-bucket-mb=-1" 2>&1 | FileCheck %s --check-prefix=NEGATIVE

// NEGATIVE: error: zero-bucket-mb must be >= 0, got -1

mesh.mesh @mesh(shape = 2x2) {merak.axes = ["dp", "tp"]}

// CHECK-LABEL: func.func @step
// CHECK: %[[G1:.*]] = merak.matmul %arg0, %arg1 {merak.grad_of = 1 : i64}
// CHECK: %[[G2:.*]] = merak.reduce_sum %arg0 {dims = array<i64: 0>, merak.grad_of = 1 : i64}
// CHECK: %[[G3:.*]] = merak.mul %arg2, %arg2 {merak.grad_of = 2 : i64}
// CHECK: %[[F1:.*]] = merak.reshape %[[G1]] {shape = array<i64: 64>}
// CHECK: %[[F3:.*]] = merak.reshape %[[G3]] {shape = array<i64: 8>}
// CHECK: %[[C:.*]] = merak.concat %[[F1]], %[[G2]], %[[F3]] {dim = 0 : i64}
// CHECK: %[[R:.*]] = mesh.all_reduce %[[C]] on @mesh mesh_axes = [0] : tensor<80xf32> -> tensor<80xf32>
// CHECK: merak.slice %[[R]] {dim = 0 : i64, end = 64 : i64, start = 0 : i64}
// CHECK: merak.slice %[[R]] {dim = 0 : i64, end = 72 : i64, start = 64 : i64}
// CHECK: merak.slice %[[R]] {dim = 0 : i64, end = 80 : i64, start = 72 : i64}
// A reduction over tp is left where it is.
// CHECK: merak.exp
// CHECK: mesh.all_reduce %{{.*}} on @mesh mesh_axes = [1]

// MOVE: %[[G1:.*]] = merak.matmul
// MOVE-NEXT: mesh.all_reduce %[[G1]] on @mesh mesh_axes = [0] : tensor<8x8xf32>
// MOVE-NEXT: %[[G2:.*]] = merak.reduce_sum
// MOVE-NEXT: mesh.all_reduce %[[G2]] on @mesh mesh_axes = [0] : tensor<8xf32>
// MOVE-NOT: merak.concat

// Buckets of about 50 bytes: the 256-byte gradient alone, the two small
// ones together.
// SMALL: mesh.all_reduce %{{.*}} : tensor<8x8xf32>
// SMALL: mesh.all_reduce %{{.*}} : tensor<16xf32>
func.func @step(%a: tensor<8x8xf32>, %b: tensor<8x8xf32>, %c: tensor<2x4xf32>)
    -> (tensor<8x8xf32>, tensor<8xf32>, tensor<2x4xf32>, tensor<8x8xf32>) {
  %g1 = merak.matmul %a, %b {merak.grad_of = 1 : i64} : (tensor<8x8xf32>, tensor<8x8xf32>) -> tensor<8x8xf32>
  %g2 = merak.reduce_sum %a {dims = array<i64: 0>, merak.grad_of = 1 : i64} : (tensor<8x8xf32>) -> tensor<8xf32>
  %g3 = merak.mul %c, %c {merak.grad_of = 2 : i64} : (tensor<2x4xf32>, tensor<2x4xf32>) -> tensor<2x4xf32>
  %e = merak.exp %b : tensor<8x8xf32>
  %t = mesh.all_reduce %e on @mesh mesh_axes = [1] : tensor<8x8xf32> -> tensor<8x8xf32>
  %r1 = mesh.all_reduce %g1 on @mesh mesh_axes = [0] : tensor<8x8xf32> -> tensor<8x8xf32>
  %r2 = mesh.all_reduce %g2 on @mesh mesh_axes = [0] : tensor<8xf32> -> tensor<8xf32>
  %r3 = mesh.all_reduce %g3 on @mesh mesh_axes = [0] : tensor<2x4xf32> -> tensor<2x4xf32>
  return %r1, %r2, %r3, %t : tensor<8x8xf32>, tensor<8xf32>, tensor<2x4xf32>, tensor<8x8xf32>
}

// ZeRO: gradients reduce-scattered along dimension 0 are viewed as
// [n, numel / n] (row r is rank r's shard) and set side by side, so one
// reduce_scatter gives every rank all its shards; the updated shards, side
// by side in one row, are gathered by one all_gather into [n, total] whose
// columns of each shard are its tensor's dimension-0 blocks in rank order.
// CHECK-LABEL: func.func @zero
// CHECK: %[[G1:.*]] = merak.mul
// CHECK: %[[G2:.*]] = merak.exp
// CHECK: %[[V1:.*]] = merak.reshape %[[G1]] {shape = array<i64: 2, 32>}
// CHECK: %[[V2:.*]] = merak.reshape %[[G2]] {shape = array<i64: 2, 2>}
// CHECK: %[[C:.*]] = merak.concat %[[V1]], %[[V2]] {dim = 1 : i64}
// CHECK: %[[S:.*]] = mesh.reduce_scatter %[[C]] on @mesh mesh_axes = [0] scatter_axis = 0 : tensor<2x34xf32> -> tensor<1x34xf32>
// CHECK: %[[S1:.*]] = merak.slice %[[S]] {dim = 1 : i64, end = 32 : i64, start = 0 : i64}
// CHECK: %[[L1:.*]] = merak.reshape %[[S1]] {shape = array<i64: 4, 8>}
// CHECK: %[[S2:.*]] = merak.slice %[[S]] {dim = 1 : i64, end = 34 : i64, start = 32 : i64}
// CHECK: %[[L2:.*]] = merak.reshape %[[S2]] {shape = array<i64: 2>}
// CHECK: %[[N1:.*]], %{{.*}} = merak.sgd_update %arg2, %[[L1]]
// CHECK: %[[N2:.*]], %{{.*}} = merak.sgd_update %arg3, %[[L2]]
// CHECK: %[[R1:.*]] = merak.reshape %[[N1]] {shape = array<i64: 1, 32>}
// CHECK: %[[R2:.*]] = merak.reshape %[[N2]] {shape = array<i64: 1, 2>}
// CHECK: %[[P:.*]] = merak.concat %[[R1]], %[[R2]] {dim = 1 : i64}
// CHECK: %[[A:.*]] = mesh.all_gather %[[P]] on @mesh mesh_axes = [0] gather_axis = 0 : tensor<1x34xf32> -> tensor<2x34xf32>
// CHECK: %[[A1:.*]] = merak.slice %[[A]] {dim = 1 : i64, end = 32 : i64, start = 0 : i64}
// CHECK: merak.reshape %[[A1]] {shape = array<i64: 8, 8>}
// CHECK: %[[A2:.*]] = merak.slice %[[A]] {dim = 1 : i64, end = 34 : i64, start = 32 : i64}
// CHECK: merak.reshape %[[A2]] {shape = array<i64: 4>}
// With both bucket sizes 0 each collective stays on its own, the reduce-scatters
// moved to their gradients.
// MOVE-LABEL: func.func @zero
// MOVE: %[[G1:.*]] = merak.mul
// MOVE-NEXT: mesh.reduce_scatter %[[G1]]
// MOVE-NEXT: %[[G2:.*]] = merak.exp
// MOVE-NEXT: mesh.reduce_scatter %[[G2]]
// MOVE-COUNT-2: mesh.all_gather
func.func @zero(%a: tensor<8x8xf32>, %c: tensor<4xf32>, %p1: tensor<4x8xf32>,
                %p2: tensor<2xf32>, %m1: tensor<4x8xf32>, %m2: tensor<2xf32>,
                %lr: tensor<f32>, %step: tensor<i64>)
    -> (tensor<8x8xf32>, tensor<4xf32>) {
  %g1 = merak.mul %a, %a {merak.grad_of = 1 : i64} : (tensor<8x8xf32>, tensor<8x8xf32>) -> tensor<8x8xf32>
  %g2 = merak.exp %c {merak.grad_of = 2 : i64} : tensor<4xf32>
  %s1 = mesh.reduce_scatter %g1 on @mesh mesh_axes = [0] scatter_axis = 0 : tensor<8x8xf32> -> tensor<4x8xf32>
  %s2 = mesh.reduce_scatter %g2 on @mesh mesh_axes = [0] scatter_axis = 0 : tensor<4xf32> -> tensor<2xf32>
  %n1, %mm1 = merak.sgd_update %p1, %s1, %m1, %lr, %step {momentum = 0.0 : f64, dampening = 0.0 : f64, nesterov = false, weight_decay = 0.0 : f64} : (tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>, tensor<f32>, tensor<i64>) -> (tensor<4x8xf32>, tensor<4x8xf32>)
  %n2, %mm2 = merak.sgd_update %p2, %s2, %m2, %lr, %step {momentum = 0.0 : f64, dampening = 0.0 : f64, nesterov = false, weight_decay = 0.0 : f64} : (tensor<2xf32>, tensor<2xf32>, tensor<2xf32>, tensor<f32>, tensor<i64>) -> (tensor<2xf32>, tensor<2xf32>)
  %a1 = mesh.all_gather %n1 on @mesh mesh_axes = [0] gather_axis = 0 : tensor<4x8xf32> -> tensor<8x8xf32>
  %a2 = mesh.all_gather %n2 on @mesh mesh_axes = [0] gather_axis = 0 : tensor<2xf32> -> tensor<4xf32>
  return %a1, %a2 : tensor<8x8xf32>, tensor<4xf32>
}

// ZeRO-3: gathers of parameters stay right before their readers; those
// standing together (a weight and its bias) share one all_gather, a gather
// after the first reader of the bucket starts another.
// CHECK-LABEL: func.func @zero3
// CHECK: %[[C:.*]] = merak.concat %{{.*}}, %{{.*}} {dim = 1 : i64} : (tensor<1x16xf32>, tensor<1x2xf32>) -> tensor<1x18xf32>
// CHECK-NEXT: %[[A:.*]] = mesh.all_gather %[[C]] on @mesh mesh_axes = [0] gather_axis = 0 : tensor<1x18xf32> -> tensor<2x18xf32>
// CHECK: merak.linear
// CHECK-NEXT: %[[W2:.*]] = mesh.all_gather %arg0 on @mesh mesh_axes = [0] gather_axis = 0 : tensor<2x8xf32> -> tensor<4x8xf32>
// CHECK-NEXT: merak.matmul %{{.*}}, %[[W2]]
func.func @zero3(%w: tensor<2x8xf32> {merak.param = "w"},
                 %b: tensor<2xf32> {merak.param = "b"}, %x: tensor<3x8xf32>,
                 %d: tensor<3x4xf32>) -> (tensor<3x4xf32>, tensor<3x8xf32>) {
  %wg = mesh.all_gather %w on @mesh mesh_axes = [0] gather_axis = 0 : tensor<2x8xf32> -> tensor<4x8xf32>
  %bg = mesh.all_gather %b on @mesh mesh_axes = [0] gather_axis = 0 : tensor<2xf32> -> tensor<4xf32>
  %y = merak.linear %x, %wg, %bg : (tensor<3x8xf32>, tensor<4x8xf32>, tensor<4xf32>) -> tensor<3x4xf32>
  %wg2 = mesh.all_gather %w on @mesh mesh_axes = [0] gather_axis = 0 : tensor<2x8xf32> -> tensor<4x8xf32>
  %dx = merak.matmul %d, %wg2 {merak.grad_of = 1 : i64} : (tensor<3x4xf32>, tensor<4x8xf32>) -> tensor<3x8xf32>
  return %y, %dx : tensor<3x4xf32>, tensor<3x8xf32>
}
