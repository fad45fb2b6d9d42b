// Sharding rules of cross_entropy and its gradient. Loops: the batch N
// (a sum loop for reduction = sum, an average loop for mean, parallel for
// none) and the classes C (a generic reduction that spmdize completes with
// collectives: vocabulary-parallel cross-entropy).
// RUN: merak-opt %s -split-input-file --pass-pipeline='builtin.module(func.func(sharding-propagation))' | FileCheck %s --check-prefix=PROP
// RUN: merak-opt %s -split-input-file --pass-pipeline='builtin.module(func.func(sharding-propagation,mesh-spmdization))' | FileCheck %s --check-prefix=SPMD

mesh.mesh @mesh(shape = 2)

// Data parallel: the batch loop of a `mean` loss is an average. Each rank
// sums its losses and divides by the global number of targets that are
// not ignored (times the number of batch shards), so that the average of
// the partial results is the global mean.
// (A rank-0 value cannot be annotated in text here: MLIR 19 parses no
// sharding without dimensions, and --mesh-spmdization mishandles `[[]]` on
// rank 0. The reshape to [1] carries the replicated annotation instead.)
func.func @batch(%l: tensor<8x10xf32>, %t: tensor<8xi64>) -> tensor<1xf32> {
  %ls = mesh.shard %l to <@mesh, [[0]]> : tensor<8x10xf32>
  %ts = mesh.shard %t to <@mesh, [[0]]> : tensor<8xi64>
  %0 = merak.cross_entropy %ls, %ts : (tensor<8x10xf32>, tensor<8xi64>) -> tensor<f32>
  %1 = merak.reshape %0 {shape = array<i64: 1>} : (tensor<f32>) -> tensor<1xf32>
  %r = mesh.shard %1 to <@mesh, [[]]> annotate_for_users : tensor<1xf32>
  return %r : tensor<1xf32>
}

// PROP-LABEL: func.func @batch
// PROP:      %[[L:.*]] = merak.cross_entropy
// PROP-NEXT: mesh.shard %[[L]] to <@mesh, [], partial = average[0]> : tensor<f32>

// SPMD-LABEL: func.func @batch
// SPMD-SAME:  (%[[X:.*]]: tensor<4x10xf32>, %[[T:.*]]: tensor<4xi64>)
// SPMD:       %[[IGN:.*]] = merak.constant dense<-100> : tensor<i64>
// SPMD:       %[[VALID:.*]] = merak.compare <ne>, %[[T]], %[[IGN]]
// SPMD:       %[[SUM:.*]] = merak.cross_entropy %[[X]], %[[T]] {reduction = #merak.reduction<sum>} : (tensor<4x10xf32>, tensor<4xi64>) -> tensor<f32>
// SPMD:       %[[F:.*]] = merak.cast %[[VALID]]
// SPMD:       %[[LOCAL:.*]] = merak.reduce_sum %[[F]]
// SPMD:       %[[COUNT:.*]] = mesh.all_reduce %[[LOCAL]] on @mesh mesh_axes = [0] : tensor<f32> -> tensor<f32>
// SPMD:       %[[K:.*]] = merak.constant dense<2.000000e+00> : tensor<f32>
// SPMD:       %[[SK:.*]] = merak.mul %[[SUM]], %[[K]]
// SPMD:       %[[PART:.*]] = merak.div %[[SK]], %[[COUNT]]
// SPMD:       mesh.all_reduce %[[PART]] on @mesh mesh_axes = [0] reduction = <average> : tensor<f32> -> tensor<f32>

// -----

mesh.mesh @mesh(shape = 2)

// The gradient of a `mean` loss over a split batch divides by the global
// count of targets.
func.func @batch_backward(%l: tensor<8x10xf32>, %t: tensor<8xi64>) -> tensor<8x10xf32> {
  %ls = mesh.shard %l to <@mesh, [[0]]> : tensor<8x10xf32>
  %ts = mesh.shard %t to <@mesh, [[0]]> : tensor<8xi64>
  %one = merak.constant dense<1.0> : tensor<f32>
  %0 = merak.cross_entropy_backward %one, %ls, %ts : (tensor<f32>, tensor<8x10xf32>, tensor<8xi64>) -> tensor<8x10xf32>
  %r = mesh.shard %0 to <@mesh, [[0]]> annotate_for_users : tensor<8x10xf32>
  return %r : tensor<8x10xf32>
}

// PROP-LABEL: func.func @batch_backward
// PROP:      %[[G:.*]] = merak.cross_entropy_backward
// PROP-NEXT: mesh.shard %[[G]] to <@mesh, {{\[\[}}0]]> : tensor<8x10xf32>

// SPMD-LABEL: func.func @batch_backward
// SPMD:       %[[G:.*]] = merak.cross_entropy_backward %{{.*}}, %{{.*}}, %{{.*}} {reduction = #merak.reduction<sum>} : (tensor<f32>, tensor<4x10xf32>, tensor<4xi64>) -> tensor<4x10xf32>
// SPMD:       %[[COUNT:.*]] = mesh.all_reduce %{{.*}} on @mesh mesh_axes = [0] : tensor<f32> -> tensor<f32>
// SPMD:       %[[R:.*]] = merak.div %[[G]], %[[COUNT]] : (tensor<4x10xf32>, tensor<f32>) -> tensor<4x10xf32>
// SPMD:       return %[[R]]

// -----

mesh.mesh @mesh(shape = 2)

// Vocabulary-parallel cross-entropy (Megatron): the classes are split; the
// row maximum, the sum of exponentials and the target's logit are reduced
// over the class axis. The result is replicated.
func.func @vocab(%l: tensor<8x10xf32>, %t: tensor<8xi64>) -> tensor<f32> {
  %ls = mesh.shard %l to <@mesh, [[], [0]]> : tensor<8x10xf32>
  %ts = mesh.shard %t to <@mesh, [[]]> : tensor<8xi64>
  %0 = merak.cross_entropy %ls, %ts {label_smoothing = 0.1 : f64} : (tensor<8x10xf32>, tensor<8xi64>) -> tensor<f32>
  return %0 : tensor<f32>
}

// PROP-LABEL: func.func @vocab
// PROP:      %[[L:.*]] = merak.cross_entropy
// PROP-NEXT: mesh.shard %[[L]] to <@mesh, []> : tensor<f32>

// SPMD-LABEL: func.func @vocab
// SPMD-SAME:  (%[[X:.*]]: tensor<8x5xf32>, %[[T:.*]]: tensor<8xi64>)
// This rank's first class: a slice of [0, 5], no index arithmetic.
// SPMD:       %[[STARTS:.*]] = merak.constant dense<[0, 5]> : tensor<2xi64>
// SPMD:       %[[MINE:.*]] = mesh.all_slice %[[STARTS]] on @mesh mesh_axes = [0] slice_axis = 0 : tensor<2xi64> -> tensor<1xi64>
// SPMD:       %[[OFF:.*]] = merak.reshape %[[MINE]] {shape = array<i64>}
// SPMD:       %[[SHIFT:.*]] = merak.sub %[[T]], %[[OFF]]
// SPMD:       %[[MAX:.*]] = merak.reduce_max %[[X]] {dims = array<i64: 1>, keepdim = true}
// SPMD:       %[[GMAX:.*]] = mesh.all_reduce %[[MAX]] on @mesh mesh_axes = [0] reduction = <max> : tensor<8x1xf32> -> tensor<8x1xf32>
// SPMD:       %[[Z:.*]] = merak.sub %[[X]], %[[GMAX]]
// SPMD:       %[[E:.*]] = merak.exp %[[Z]]
// SPMD:       %[[S:.*]] = merak.reduce_sum %[[E]] {dims = array<i64: 1>, keepdim = true}
// SPMD:       %[[GS:.*]] = mesh.all_reduce %[[S]] on @mesh mesh_axes = [0] : tensor<8x1xf32> -> tensor<8x1xf32>
// SPMD:       %[[LSE:.*]] = merak.log %[[GS]]
// SPMD:       %[[IOTA:.*]] = merak.constant dense<{{\[\[}}0, 1, 2, 3, 4]]> : tensor<1x5xi64>
// SPMD:       %[[HOT:.*]] = merak.compare <eq>, %[[IOTA]], %{{.*}} : (tensor<1x5xi64>, tensor<8x1xi64>) -> tensor<8x5xi1>
// SPMD:       %[[PICK:.*]] = merak.where %[[HOT]], %[[Z]], %{{.*}}
// SPMD:       %[[PS:.*]] = merak.reduce_sum %[[PICK]]
// SPMD:       %[[GPS:.*]] = mesh.all_reduce %[[PS]] on @mesh mesh_axes = [0] : tensor<8x1xf32> -> tensor<8x1xf32>
// SPMD:       merak.sub %[[LSE]], %[[GPS]]
// Label smoothing: the mean of z over all 10 classes.
// SPMD:       %[[SZ:.*]] = merak.reduce_sum %[[Z]]
// SPMD:       mesh.all_reduce %[[SZ]] on @mesh mesh_axes = [0]
// SPMD:       merak.constant dense<1.000000e+01> : tensor<f32>
// SPMD:       %[[LOSS:.*]] = merak.div %{{.*}}, %{{.*}} : (tensor<f32>, tensor<f32>) -> tensor<f32>
// SPMD-NEXT:  return %[[LOSS]] : tensor<f32>

// -----

mesh.mesh @mesh(shape = 2)

// Its gradient: the global softmax minus the (smoothed) one-hot of the
// classes this rank holds, per sample (reduction = none).
func.func @vocab_backward(%l: tensor<8x10xf32>, %t: tensor<8xi64>, %g: tensor<8xf32>) -> tensor<8x10xf32> {
  %ls = mesh.shard %l to <@mesh, [[], [0]]> : tensor<8x10xf32>
  %ts = mesh.shard %t to <@mesh, [[]]> : tensor<8xi64>
  %gs = mesh.shard %g to <@mesh, [[]]> : tensor<8xf32>
  %0 = merak.cross_entropy_backward %gs, %ls, %ts {ignore_index = 0 : i64, reduction = #merak.reduction<none>} : (tensor<8xf32>, tensor<8x10xf32>, tensor<8xi64>) -> tensor<8x10xf32>
  return %0 : tensor<8x10xf32>
}

// SPMD-LABEL: func.func @vocab_backward
// SPMD-SAME:  (%[[X:.*]]: tensor<8x5xf32>, %[[T:.*]]: tensor<8xi64>, %[[G:.*]]: tensor<8xf32>)
// SPMD:       %[[IGN:.*]] = merak.constant dense<0> : tensor<i64>
// SPMD:       %[[VALID:.*]] = merak.compare <ne>, %[[T]], %[[IGN]]
// SPMD:       mesh.all_reduce %{{.*}} reduction = <max>
// SPMD:       %[[E:.*]] = merak.exp
// SPMD:       %[[GS:.*]] = mesh.all_reduce
// SPMD:       %[[P:.*]] = merak.div %[[E]], %[[GS]]
// SPMD:       %[[HOT:.*]] = merak.cast %{{.*}} : tensor<8x5xi1> -> tensor<8x5xf32>
// SPMD:       %[[G2:.*]] = merak.reshape %[[G]] {shape = array<i64: 8, 1>}
// SPMD:       %[[D:.*]] = merak.sub %[[P]], %[[HOT]]
// SPMD:       %[[DX:.*]] = merak.mul %[[D]], %[[G2]]
// SPMD:       %[[V2:.*]] = merak.reshape %[[VALID]] {shape = array<i64: 8, 1>}
// SPMD:       %[[R:.*]] = merak.where %[[V2]], %[[DX]], %{{.*}} : (tensor<8x1xi1>, tensor<8x5xf32>, tensor<f32>) -> tensor<8x5xf32>
// SPMD:       return %[[R]]
