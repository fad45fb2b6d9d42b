// Tests --merak-grad-buckets: gradient all-reduces over dp move to just
// after their gradient and neighbouring ones are packed into one flat
// all-reduce per bucket.
// RUN: merak-opt %s --merak-grad-buckets | FileCheck %s
// RUN: merak-opt %s --merak-grad-buckets="bucket-mb=0" | FileCheck %s --check-prefix=MOVE
// RUN: merak-opt %s --merak-grad-buckets="bucket-mb=0.00005" | FileCheck %s --check-prefix=SMALL

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
