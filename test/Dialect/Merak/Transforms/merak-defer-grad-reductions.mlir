// Tests --merak-defer-grad-reductions: every sum over the mesh whose result
// only reaches optimizer updates moves to just before the update, past the
// linear ops in between, so that a pipeline runs it once per step.
// With merge-only (what --merak-parallelize runs without pipelines), only
// the reductions of a sum's contributions merge, where the sum is.
// RUN: merak-opt %s -split-input-file --merak-defer-grad-reductions | FileCheck %s
// RUN: merak-opt %s -split-input-file --merak-defer-grad-reductions=merge-only | FileCheck %s --check-prefix=MERGE

mesh.mesh @mesh(shape = 2x2) {merak.axes = ["dp", "tp"]}

// A data-parallel all-reduce before an index_backward whose indices are the
// same on every data-parallel rank (positions) moves after it; one before
// an index_backward of batch-split indices (%ids, split over dp) cannot.
// CHECK-LABEL: func.func @past_index_backward
// CHECK: %[[P:.*]] = merak.index_backward %arg0, %[[POS:.*]] {dim = 0 : i64, dim_size = 16 : i64, merak.grad_of = 4 : i64}
// CHECK-NEXT: %[[R:.*]] = mesh.all_reduce %[[P]] on @mesh mesh_axes = [0] : tensor<16x4xf32>
// CHECK: %[[E:.*]] = mesh.all_reduce %arg1 on @mesh mesh_axes = [0]
// CHECK-NEXT: merak.index_backward %[[E]], %arg2
// CHECK: merak.sgd_update %arg3, %[[R]]
func.func @past_index_backward(%g: tensor<16x4xf32>, %h: tensor<2x8x4xf32>, %ids: tensor<2x8xi64> {merak.sharding = #mesh.shard<@mesh, [[0]]>}, %wpe: tensor<16x4xf32>, %wte: tensor<16x4xf32>, %lr: tensor<f32>, %step: tensor<i64>) -> (tensor<16x4xf32>, tensor<16x4xf32>) {
  %pos = merak.constant dense<[0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15]> : tensor<16xi64>
  %r = mesh.all_reduce %g on @mesh mesh_axes = [0] {merak.grad_of = 5 : i64} : tensor<16x4xf32> -> tensor<16x4xf32>
  %p = merak.index_backward %r, %pos {dim = 0 : i64, dim_size = 16 : i64, merak.grad_of = 4 : i64} : (tensor<16x4xf32>, tensor<16xi64>) -> tensor<16x4xf32>
  %e = mesh.all_reduce %h on @mesh mesh_axes = [0] : tensor<2x8x4xf32> -> tensor<2x8x4xf32>
  %t = merak.index_backward %e, %ids {dim = 0 : i64, dim_size = 16 : i64, merak.grad_of = 3 : i64} : (tensor<2x8x4xf32>, tensor<2x8xi64>) -> tensor<16x4xf32>
  %u:2 = merak.sgd_update %wpe, %p, %p, %lr, %step {dampening = 0.0 : f64, momentum = 0.0 : f64, nesterov = false, weight_decay = 0.0 : f64} : (tensor<16x4xf32>, tensor<16x4xf32>, tensor<16x4xf32>, tensor<f32>, tensor<i64>) -> (tensor<16x4xf32>, tensor<16x4xf32>)
  %v:2 = merak.sgd_update %wte, %t, %t, %lr, %step {dampening = 0.0 : f64, momentum = 0.0 : f64, nesterov = false, weight_decay = 0.0 : f64} : (tensor<16x4xf32>, tensor<16x4xf32>, tensor<16x4xf32>, tensor<f32>, tensor<i64>) -> (tensor<16x4xf32>, tensor<16x4xf32>)
  return %u#0, %v#0 : tensor<16x4xf32>, tensor<16x4xf32>
}

// -----

mesh.mesh @mesh(shape = 2x2) {merak.axes = ["dp", "tp"]}

// A tied weight (GPT-2's embedding and head): the head's gradient is
// all-reduced over dp; the embedding's, a whole-vocabulary gradient, is
// all-reduced over dp and sliced over tp. The slice moves before the
// reduction, then the two reductions become one after the sum: the sum
// adds local contributions the pipeline can split by stage.
// CHECK-LABEL: func.func @tied
// CHECK: %[[S:.*]] = mesh.all_slice %arg1 on @mesh mesh_axes = [1] slice_axis = 0 {merak.grad_of = 3 : i64} : tensor<16x4xf32> -> tensor<8x4xf32>
// CHECK: %[[SUM:.*]] = merak.add %arg0, %[[S]] {merak.grad_of = 3 : i64}
// CHECK: %[[R:.*]] = mesh.all_reduce %[[SUM]] on @mesh mesh_axes = [0] : tensor<8x4xf32>
// CHECK: merak.sgd_update %arg2, %[[R]]
func.func @tied(%head: tensor<8x4xf32>, %emb: tensor<16x4xf32>, %w: tensor<8x4xf32>, %lr: tensor<f32>, %step: tensor<i64>) -> tensor<8x4xf32> {
  %a = mesh.all_reduce %head on @mesh mesh_axes = [0] {merak.grad_of = 3 : i64} : tensor<8x4xf32> -> tensor<8x4xf32>
  %b = mesh.all_reduce %emb on @mesh mesh_axes = [0] {merak.grad_of = 3 : i64} : tensor<16x4xf32> -> tensor<16x4xf32>
  %c = mesh.all_slice %b on @mesh mesh_axes = [1] slice_axis = 0 {merak.grad_of = 3 : i64} : tensor<16x4xf32> -> tensor<8x4xf32>
  %g = merak.add %a, %c {merak.grad_of = 3 : i64} : (tensor<8x4xf32>, tensor<8x4xf32>) -> tensor<8x4xf32>
  %u:2 = merak.sgd_update %w, %g, %g, %lr, %step {dampening = 0.0 : f64, momentum = 0.0 : f64, nesterov = false, weight_decay = 0.0 : f64} : (tensor<8x4xf32>, tensor<8x4xf32>, tensor<8x4xf32>, tensor<f32>, tensor<i64>) -> (tensor<8x4xf32>, tensor<8x4xf32>)
  return %u#0 : tensor<8x4xf32>
}

// -----

mesh.mesh @mesh(shape = 2x2) {merak.axes = ["dp", "tp"]}

// ZeRO: an all-reduce then a slice over the same axis is one
// reduce-scatter; a slice over part of the axes is a reduce-scatter over
// those and an all-reduce over the rest.
// CHECK-LABEL: func.func @slices
// CHECK: %[[A:.*]] = mesh.reduce_scatter %arg0 on @mesh mesh_axes = [0] scatter_axis = 0 : tensor<8x4xf32> -> tensor<4x4xf32>
// CHECK: %[[B:.*]] = mesh.reduce_scatter %arg1 on @mesh mesh_axes = [1] scatter_axis = 0 : tensor<8x4xf32> -> tensor<4x4xf32>
// CHECK-NEXT: %[[C:.*]] = mesh.all_reduce %[[B]] on @mesh mesh_axes = [0] : tensor<4x4xf32>
// CHECK: merak.sgd_update %arg2, %[[A]]
// CHECK: merak.sgd_update %arg3, %[[C]]
func.func @slices(%g: tensor<8x4xf32>, %h: tensor<8x4xf32>, %w: tensor<4x4xf32>, %v: tensor<4x4xf32>, %lr: tensor<f32>, %step: tensor<i64>) -> (tensor<4x4xf32>, tensor<4x4xf32>) {
  %a = mesh.all_reduce %g on @mesh mesh_axes = [0] : tensor<8x4xf32> -> tensor<8x4xf32>
  %as = mesh.all_slice %a on @mesh mesh_axes = [0] slice_axis = 0 : tensor<8x4xf32> -> tensor<4x4xf32>
  %b = mesh.all_reduce %h on @mesh mesh_axes = [0, 1] : tensor<8x4xf32> -> tensor<8x4xf32>
  %bs = mesh.all_slice %b on @mesh mesh_axes = [1] slice_axis = 0 : tensor<8x4xf32> -> tensor<4x4xf32>
  %u:2 = merak.sgd_update %w, %as, %as, %lr, %step {dampening = 0.0 : f64, momentum = 0.0 : f64, nesterov = false, weight_decay = 0.0 : f64} : (tensor<4x4xf32>, tensor<4x4xf32>, tensor<4x4xf32>, tensor<f32>, tensor<i64>) -> (tensor<4x4xf32>, tensor<4x4xf32>)
  %t:2 = merak.sgd_update %v, %bs, %bs, %lr, %step {dampening = 0.0 : f64, momentum = 0.0 : f64, nesterov = false, weight_decay = 0.0 : f64} : (tensor<4x4xf32>, tensor<4x4xf32>, tensor<4x4xf32>, tensor<f32>, tensor<i64>) -> (tensor<4x4xf32>, tensor<4x4xf32>)
  return %u#0, %t#0 : tensor<4x4xf32>, tensor<4x4xf32>
}

// -----

mesh.mesh @mesh(shape = 2x2) {merak.axes = ["dp", "sp"]}

// Reduce-scatters over dp on both sides of a sum, one of them under an
// all-reduce over sp: the reduce-scatter moves past the all-reduce (the two
// commute) and then past the sum. The all-reduce over sp, which must run
// before the sum, stays.
// CHECK-LABEL: func.func @scatter_past_sum
// CHECK: %[[S:.*]] = mesh.all_reduce %arg1 on @mesh mesh_axes = [1] : tensor<8x4xf32>
// CHECK: %[[SUM:.*]] = merak.add %arg0, %[[S]] : (tensor<8x4xf32>, tensor<8x4xf32>) -> tensor<8x4xf32>
// CHECK: %[[R:.*]] = mesh.reduce_scatter %[[SUM]] on @mesh mesh_axes = [0] scatter_axis = 0 : tensor<8x4xf32> -> tensor<4x4xf32>
// CHECK: merak.sgd_update %arg2, %[[R]]
func.func @scatter_past_sum(%head: tensor<8x4xf32>, %emb: tensor<8x4xf32>, %w: tensor<4x4xf32>, %lr: tensor<f32>, %step: tensor<i64>) -> tensor<4x4xf32> {
  %a = mesh.reduce_scatter %head on @mesh mesh_axes = [0] scatter_axis = 0 : tensor<8x4xf32> -> tensor<4x4xf32>
  %b = mesh.reduce_scatter %emb on @mesh mesh_axes = [0] scatter_axis = 0 : tensor<8x4xf32> -> tensor<4x4xf32>
  %c = mesh.all_reduce %b on @mesh mesh_axes = [1] : tensor<4x4xf32> -> tensor<4x4xf32>
  %g = merak.add %a, %c : (tensor<4x4xf32>, tensor<4x4xf32>) -> tensor<4x4xf32>
  %u:2 = merak.sgd_update %w, %g, %g, %lr, %step {dampening = 0.0 : f64, momentum = 0.0 : f64, nesterov = false, weight_decay = 0.0 : f64} : (tensor<4x4xf32>, tensor<4x4xf32>, tensor<4x4xf32>, tensor<f32>, tensor<i64>) -> (tensor<4x4xf32>, tensor<4x4xf32>)
  return %u#0 : tensor<4x4xf32>
}

// -----

mesh.mesh @mesh(shape = 2x2) {merak.axes = ["dp", "tp"]}

// A slice of a sum of gradient contributions slices each contribution; a
// reduction whose result also feeds backward (an activation gradient)
// stays where it is.
// CHECK-LABEL: func.func @stays
// CHECK: %[[A:.*]] = mesh.all_slice %arg0 on @mesh mesh_axes = [1] slice_axis = 0
// CHECK: %[[B:.*]] = mesh.all_slice %arg1 on @mesh mesh_axes = [1] slice_axis = 0
// CHECK: merak.add %[[A]], %[[B]] : (tensor<4x4xf32>, tensor<4x4xf32>) -> tensor<4x4xf32>
// CHECK: %[[X:.*]] = mesh.all_reduce %arg0 on @mesh mesh_axes = [1] : tensor<8x4xf32>
// CHECK-NEXT: merak.neg %[[X]] {merak.grad_of = 2 : i64}
func.func @stays(%x: tensor<8x4xf32>, %y: tensor<8x4xf32>, %w: tensor<4x4xf32>, %lr: tensor<f32>, %step: tensor<i64>) -> (tensor<4x4xf32>, tensor<8x4xf32>) {
  %s = merak.add %x, %y : (tensor<8x4xf32>, tensor<8x4xf32>) -> tensor<8x4xf32>
  %g = mesh.all_slice %s on @mesh mesh_axes = [1] slice_axis = 0 : tensor<8x4xf32> -> tensor<4x4xf32>
  %u:2 = merak.sgd_update %w, %g, %g, %lr, %step {dampening = 0.0 : f64, momentum = 0.0 : f64, nesterov = false, weight_decay = 0.0 : f64} : (tensor<4x4xf32>, tensor<4x4xf32>, tensor<4x4xf32>, tensor<f32>, tensor<i64>) -> (tensor<4x4xf32>, tensor<4x4xf32>)
  %r = mesh.all_reduce %x on @mesh mesh_axes = [1] : tensor<8x4xf32> -> tensor<8x4xf32>
  %n = merak.neg %r {merak.grad_of = 2 : i64} : tensor<8x4xf32>
  return %u#0, %n : tensor<4x4xf32>, tensor<8x4xf32>
}

// -----

mesh.mesh @mesh(shape = 2) {merak.axes = ["dp"]}

// A tied weight without pipelines: the two contributions are summed, then
// all-reduced once, where the sum was; the reduction of the position
// embedding's gradient stays before its index_backward under merge-only
// and moves past it otherwise.
// CHECK-LABEL: func.func @merge_only
// CHECK: merak.index_backward %arg2
// CHECK-NEXT: mesh.all_reduce
// MERGE-LABEL: func.func @merge_only
// MERGE: %[[SUM:.*]] = merak.add %arg0, %arg1
// MERGE-NEXT: %[[R:.*]] = mesh.all_reduce %[[SUM]] on @mesh mesh_axes = [0] {merak.grad_of = 3 : i64} : tensor<8x4xf32>
// MERGE: %[[P:.*]] = mesh.all_reduce %arg2
// MERGE-NEXT: merak.index_backward %[[P]]
// MERGE: merak.sgd_update %arg3, %[[R]]
func.func @merge_only(%head: tensor<8x4xf32>, %emb: tensor<8x4xf32>, %g: tensor<16x4xf32>, %w: tensor<8x4xf32>, %wpe: tensor<16x4xf32>, %lr: tensor<f32>, %step: tensor<i64>) -> (tensor<8x4xf32>, tensor<16x4xf32>) {
  %a = mesh.all_reduce %head on @mesh mesh_axes = [0] {merak.grad_of = 3 : i64} : tensor<8x4xf32> -> tensor<8x4xf32>
  %b = mesh.all_reduce %emb on @mesh mesh_axes = [0] {merak.grad_of = 3 : i64} : tensor<8x4xf32> -> tensor<8x4xf32>
  %sum = merak.add %a, %b {merak.grad_of = 3 : i64} : (tensor<8x4xf32>, tensor<8x4xf32>) -> tensor<8x4xf32>
  %pos = merak.constant dense<[0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15]> : tensor<16xi64>
  %r = mesh.all_reduce %g on @mesh mesh_axes = [0] {merak.grad_of = 5 : i64} : tensor<16x4xf32> -> tensor<16x4xf32>
  %p = merak.index_backward %r, %pos {dim = 0 : i64, dim_size = 16 : i64, merak.grad_of = 4 : i64} : (tensor<16x4xf32>, tensor<16xi64>) -> tensor<16x4xf32>
  %u:2 = merak.sgd_update %w, %sum, %sum, %lr, %step {dampening = 0.0 : f64, momentum = 0.0 : f64, nesterov = false, weight_decay = 0.0 : f64} : (tensor<8x4xf32>, tensor<8x4xf32>, tensor<8x4xf32>, tensor<f32>, tensor<i64>) -> (tensor<8x4xf32>, tensor<8x4xf32>)
  %v:2 = merak.sgd_update %wpe, %p, %p, %lr, %step {dampening = 0.0 : f64, momentum = 0.0 : f64, nesterov = false, weight_decay = 0.0 : f64} : (tensor<16x4xf32>, tensor<16x4xf32>, tensor<16x4xf32>, tensor<f32>, tensor<i64>) -> (tensor<16x4xf32>, tensor<16x4xf32>)
  return %u#0, %v#0 : tensor<8x4xf32>, tensor<16x4xf32>
}
