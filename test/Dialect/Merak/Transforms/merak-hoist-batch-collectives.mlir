// Tests --merak-hoist-batch-collectives: collectives that read only the
// batch (merak.input), buffers and constants move, with the pure ops that
// compute their operands, to the top of the function in their order, and
// equal copies merge; everything else stays where it was.
// RUN: merak-opt %s -split-input-file --merak-hoist-batch-collectives | FileCheck %s

mesh.mesh @mesh(shape = 2) {merak.axes = ["dp"]}

// A mean cross-entropy under dp=2: the forward and the backward each count
// the targets and all-reduce the count. One count, issued first, serves
// both; the cross-entropy and its gradient stay in place.
// CHECK-LABEL: func.func @count_of_targets
// CHECK-NEXT: %[[IGNORE:.*]] = merak.constant dense<-100>
// CHECK-NEXT: %[[NE:.*]] = merak.compare <ne>, %arg1, %[[IGNORE]]
// CHECK-NEXT: %[[F:.*]] = merak.cast %[[NE]]
// CHECK-NEXT: %[[N:.*]] = merak.reduce_sum %[[F]]
// CHECK-NEXT: %[[ALL:.*]] = mesh.all_reduce %[[N]] on @mesh mesh_axes = [0]
// CHECK-NEXT: %[[LOSS:.*]] = merak.cross_entropy %arg0, %arg1
// CHECK-NEXT: merak.div %[[LOSS]], %[[ALL]]
// CHECK-NEXT: %[[GRAD:.*]] = merak.cross_entropy_backward %arg2, %arg0, %arg1
// CHECK-NEXT: merak.div %[[GRAD]], %[[ALL]]
// CHECK-NOT: mesh.all_reduce
// CHECK: return
func.func @count_of_targets(%logits: tensor<4x16xf32> {merak.param = "w"}, %targets: tensor<4xi64> {merak.input = "targets"}, %seed: tensor<f32>) -> (tensor<f32>, tensor<4x16xf32>) {
  %ignore = merak.constant dense<-100> : tensor<i64>
  %loss = merak.cross_entropy %logits, %targets {reduction = #merak.reduction<sum>} : (tensor<4x16xf32>, tensor<4xi64>) -> tensor<f32>
  %ne = merak.compare <ne>, %targets, %ignore : (tensor<4xi64>, tensor<i64>) -> tensor<4xi1>
  %f = merak.cast %ne : tensor<4xi1> -> tensor<4xf32>
  %n = merak.reduce_sum %f {dims = array<i64>} : (tensor<4xf32>) -> tensor<f32>
  %all = mesh.all_reduce %n on @mesh mesh_axes = [0] : tensor<f32> -> tensor<f32>
  %mean = merak.div %loss, %all : (tensor<f32>, tensor<f32>) -> tensor<f32>
  %grad = merak.cross_entropy_backward %seed, %logits, %targets {reduction = #merak.reduction<sum>} : (tensor<f32>, tensor<4x16xf32>, tensor<4xi64>) -> tensor<4x16xf32>
  %ne2 = merak.compare <ne>, %targets, %ignore : (tensor<4xi64>, tensor<i64>) -> tensor<4xi1>
  %f2 = merak.cast %ne2 : tensor<4xi1> -> tensor<4xf32>
  %n2 = merak.reduce_sum %f2 {dims = array<i64>} : (tensor<4xf32>) -> tensor<f32>
  %all2 = mesh.all_reduce %n2 on @mesh mesh_axes = [0] : tensor<f32> -> tensor<f32>
  %scaled = merak.div %grad, %all2 : (tensor<4x16xf32>, tensor<f32>) -> tensor<4x16xf32>
  return %mean, %scaled : tensor<f32>, tensor<4x16xf32>
}

// -----

mesh.mesh @mesh(shape = 2) {merak.axes = ["dp"]}

// The ids an embedding gradient gathers, and a gather of a buffer, go
// first; the gather of activation gradients (they depend on a parameter),
// an op of the batch that feeds no collective, and a sum whose operand
// comes from an op with effects stay where they are.
// CHECK-LABEL: func.func @gathers
// CHECK-NEXT: %[[IDS:.*]] = mesh.all_gather %arg1 on @mesh mesh_axes = [0] gather_axis = 0
// CHECK-NEXT: %[[MASK:.*]] = mesh.all_gather %arg2 on @mesh mesh_axes = [0] gather_axis = 0
// CHECK-NEXT: merak.mul %arg0, %arg0
// CHECK-NEXT: merak.reshape %arg1
// CHECK-NEXT: mesh.all_gather %{{.*}} on @mesh mesh_axes = [0] gather_axis = 0 : tensor<2x4xf32>
// CHECK-NEXT: merak.index_backward {{.*}}, %[[IDS]]
// CHECK-NEXT: merak.dropout_mask %arg3
// CHECK-NEXT: mesh.all_reduce
func.func @gathers(%w: tensor<2x4xf32> {merak.param = "w"}, %ids: tensor<2xi64> {merak.input = "idx"}, %mask: tensor<2x2xi1> {merak.buffer = "mask"}, %x: tensor<2x4xf32> {merak.input = "x"}) -> (tensor<10x4xf32>, tensor<4x2xi1>, tensor<1x2xi64>, tensor<2x4xf32>) {
  %g = merak.mul %w, %w : (tensor<2x4xf32>, tensor<2x4xf32>) -> tensor<2x4xf32>
  %flat = merak.reshape %ids {shape = array<i64: 1, 2>} : (tensor<2xi64>) -> tensor<1x2xi64>
  %gg = mesh.all_gather %g on @mesh mesh_axes = [0] gather_axis = 0 : tensor<2x4xf32> -> tensor<4x4xf32>
  %gi = mesh.all_gather %ids on @mesh mesh_axes = [0] gather_axis = 0 : tensor<2xi64> -> tensor<4xi64>
  %t = merak.index_backward %gg, %gi {dim = 0 : i64, dim_size = 10 : i64} : (tensor<4x4xf32>, tensor<4xi64>) -> tensor<10x4xf32>
  %gm = mesh.all_gather %mask on @mesh mesh_axes = [0] gather_axis = 0 : tensor<2x2xi1> -> tensor<4x2xi1>
  %d = merak.dropout_mask %x {p = 5.000000e-01 : f64} : tensor<2x4xf32>
  %r = mesh.all_reduce %d on @mesh mesh_axes = [0] : tensor<2x4xf32> -> tensor<2x4xf32>
  return %t, %gm, %flat, %r : tensor<10x4xf32>, tensor<4x2xi1>, tensor<1x2xi64>, tensor<2x4xf32>
}
