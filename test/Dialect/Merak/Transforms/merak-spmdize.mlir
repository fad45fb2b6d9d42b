// Tests --merak-spmdize: annotated functions become the program of one
// rank, with local shard types and the collectives each resharding needs,
// on a 2x2 mesh (upstream spmdization handles 1-D meshes only).
// RUN: merak-opt %s -split-input-file --merak-spmdize -verify-diagnostics | FileCheck %s

mesh.mesh @mesh(shape = 2x2) {merak.axes = ["dp", "tp"]}

// A partial sum over dp that its user wants split over dp along dimension
// 0: one reduce_scatter, not all_reduce + all_slice. Arguments keep their
// sharding as merak.sharding.
// CHECK-LABEL: func.func @partial_to_split
// CHECK-SAME: (%[[X:.*]]: tensor<4x8xf32> {merak.sharding = #mesh.shard<@mesh, {{\[\[}}0]]>}, %[[W:.*]]: tensor<8x8xf32>)
// CHECK-SAME: -> (tensor<4x8xf32> {merak.sharding = #mesh.shard<@mesh, {{\[\[}}0]]>, merak.update_arg = 0 : i64})
// CHECK: %[[T:.*]] = merak.permute %[[X]]
// CHECK: %[[P:.*]] = merak.matmul %[[T]], %[[X]] : (tensor<8x4xf32>, tensor<4x8xf32>) -> tensor<8x8xf32>
// CHECK: %[[RS:.*]] = mesh.reduce_scatter %[[P]] on @mesh mesh_axes = [0] scatter_axis = 0 : tensor<8x8xf32> -> tensor<4x8xf32>
// CHECK-NOT: mesh.all_reduce
// CHECK: merak.matmul %[[RS]], %[[W]]
func.func @partial_to_split(%x: tensor<8x8xf32>, %w: tensor<8x8xf32>) -> (tensor<8x8xf32> {merak.update_arg = 0 : i64}) {
  %xs = mesh.shard %x to <@mesh, [[0]]> : tensor<8x8xf32>
  %t = merak.permute %xs {permutation = array<i64: 1, 0>} : (tensor<8x8xf32>) -> tensor<8x8xf32>
  %ts = mesh.shard %t to <@mesh, [[], [0]]> : tensor<8x8xf32>
  %p = merak.matmul %ts, %xs : (tensor<8x8xf32>, tensor<8x8xf32>) -> tensor<8x8xf32>
  %ps = mesh.shard %p to <@mesh, [[]], partial = sum[0]> : tensor<8x8xf32>
  %pu = mesh.shard %ps to <@mesh, [[0]]> annotate_for_users : tensor<8x8xf32>
  %y = merak.matmul %pu, %w : (tensor<8x8xf32>, tensor<8x8xf32>) -> tensor<8x8xf32>
  %ys = mesh.shard %y to <@mesh, [[0]]> : tensor<8x8xf32>
  return %ys : tensor<8x8xf32>
}

// -----

mesh.mesh @mesh(shape = 2x2) {merak.axes = ["dp", "tp"]}

// Gathers, slices and all-to-all on a two-axis mesh; a partial sum returned
// replicated is all-reduced with its reduction kind.
// CHECK-LABEL: func.func @moves
// CHECK-SAME: (%[[A:.*]]: tensor<4x2x6xf32> {merak.sharding = #mesh.shard<@mesh, {{\[\[}}0], [1]]>})
// CHECK: %[[T:.*]] = mesh.all_to_all %[[A]] on @mesh mesh_axes = [1] split_axis = 2 concat_axis = 1 : tensor<4x2x6xf32> -> tensor<4x4x3xf32>
// CHECK: %[[N:.*]] = merak.neg %[[T]] : tensor<4x4x3xf32>
// CHECK: %[[M:.*]] = merak.reduce_max %[[A]] {dims = array<i64: 0>} : (tensor<4x2x6xf32>) -> tensor<2x6xf32>
// CHECK: %[[R:.*]] = mesh.all_reduce %[[M]] on @mesh mesh_axes = [0] reduction = <max> : tensor<2x6xf32> -> tensor<2x6xf32>
// CHECK: mesh.all_gather %[[R]] on @mesh mesh_axes = [1] gather_axis = 0 : tensor<2x6xf32> -> tensor<4x6xf32>
// Results are returned whole: one gather per split mesh axis.
// CHECK: %[[G0:.*]] = mesh.all_gather %[[N]] on @mesh mesh_axes = [0] gather_axis = 0 : tensor<4x4x3xf32> -> tensor<8x4x3xf32>
// CHECK: mesh.all_gather %[[G0]] on @mesh mesh_axes = [1] gather_axis = 2 : tensor<8x4x3xf32> -> tensor<8x4x6xf32>
func.func @moves(%a: tensor<8x4x6xf32>) -> (tensor<8x4x6xf32>, tensor<8x4x6xf32>, tensor<4x6xf32>) {
  %as = mesh.shard %a to <@mesh, [[0], [1]]> : tensor<8x4x6xf32>
  // [[0], [1]] -> [[0], [], [1]]: one mesh axis moves between tensor
  // dimensions, an all-to-all.
  %u1 = mesh.shard %as to <@mesh, [[0], [], [1]]> annotate_for_users : tensor<8x4x6xf32>
  %n1 = merak.neg %u1 : tensor<8x4x6xf32>
  %n1s = mesh.shard %n1 to <@mesh, [[0], [], [1]]> : tensor<8x4x6xf32>
  %u2 = mesh.shard %as to <@mesh, [[0], [], [1]]> annotate_for_users : tensor<8x4x6xf32>
  %n2 = merak.abs %u2 : tensor<8x4x6xf32>
  %n2s = mesh.shard %n2 to <@mesh, [[0], [], [1]]> : tensor<8x4x6xf32>
  %m = merak.reduce_max %as {dims = array<i64: 0>} : (tensor<8x4x6xf32>) -> tensor<4x6xf32>
  %ms = mesh.shard %m to <@mesh, [[1]], partial = max[0]> : tensor<4x6xf32>
  %mu = mesh.shard %ms to <@mesh, [[]]> annotate_for_users : tensor<4x6xf32>
  %mr = merak.neg %mu : tensor<4x6xf32>
  return %n1s, %n2s, %mr : tensor<8x4x6xf32>, tensor<8x4x6xf32>, tensor<4x6xf32>
}

// -----

mesh.mesh @mesh(shape = 2x2) {merak.axes = ["dp", "tp"]}

// expected-error @+1 {{argument 0: dimension 0 of 'tensor<3x4xf32>' (size 3) is not divisible by the 2 ranks it is split over}}
func.func @not_divisible(%a: tensor<3x4xf32>) -> tensor<3x4xf32> {
  %as = mesh.shard %a to <@mesh, [[0]]> : tensor<3x4xf32>
  return %as : tensor<3x4xf32>
}

// -----

mesh.mesh @mesh(shape = 2) {merak.axes = ["tp"]}

// Sums and reshapes of partial sums (as propagation leaves them) run on the
// local partial values; the one reader that needs the whole value gets one
// all_reduce.
// CHECK-LABEL: func.func @partial_sums
// CHECK: %[[Q:.*]] = merak.matmul %{{.*}} : (tensor<8x2xf32>, tensor<2x4xf32>) -> tensor<8x4xf32>
// CHECK: %[[K:.*]] = merak.matmul %{{.*}} : (tensor<8x2xf32>, tensor<2x4xf32>) -> tensor<8x4xf32>
// CHECK-NOT: mesh.all_reduce
// CHECK: %[[S:.*]] = merak.add %[[Q]], %[[K]] : (tensor<8x4xf32>, tensor<8x4xf32>) -> tensor<8x4xf32>
// CHECK-NOT: mesh.all_reduce
// CHECK: %[[R:.*]] = merak.reshape %[[S]]
// CHECK-NEXT: %[[A:.*]] = mesh.all_reduce %[[R]] on @mesh mesh_axes = [0] : tensor<2x4x4xf32>
// CHECK-NEXT: merak.add %[[A]], %{{.*}}
// CHECK-NOT: mesh.all_reduce
func.func @partial_sums(%dq: tensor<8x4xf32>, %dk: tensor<8x4xf32>,
                        %wq: tensor<4x4xf32>, %wk: tensor<4x4xf32>,
                        %res: tensor<2x4x4xf32>) -> tensor<2x4x4xf32> {
  %dqs = mesh.shard %dq to <@mesh, [[], [0]]> : tensor<8x4xf32>
  %dks = mesh.shard %dk to <@mesh, [[], [0]]> : tensor<8x4xf32>
  %wqs = mesh.shard %wq to <@mesh, [[0]]> : tensor<4x4xf32>
  %wks = mesh.shard %wk to <@mesh, [[0]]> : tensor<4x4xf32>
  %ress = mesh.shard %res to <@mesh, [[]]> : tensor<2x4x4xf32>
  %gq = merak.matmul %dqs, %wqs : (tensor<8x4xf32>, tensor<4x4xf32>) -> tensor<8x4xf32>
  %gqs = mesh.shard %gq to <@mesh, [[]], partial = sum[0]> : tensor<8x4xf32>
  %gk = merak.matmul %dks, %wks : (tensor<8x4xf32>, tensor<4x4xf32>) -> tensor<8x4xf32>
  %gks = mesh.shard %gk to <@mesh, [[]], partial = sum[0]> : tensor<8x4xf32>
  %g = merak.add %gqs, %gks : (tensor<8x4xf32>, tensor<8x4xf32>) -> tensor<8x4xf32>
  %gs = mesh.shard %g to <@mesh, [[]], partial = sum[0]> : tensor<8x4xf32>
  %g3 = merak.reshape %gs {shape = array<i64: 2, 4, 4>} : (tensor<8x4xf32>) -> tensor<2x4x4xf32>
  %g3s = mesh.shard %g3 to <@mesh, [[]], partial = sum[0]> : tensor<2x4x4xf32>
  %g3u = mesh.shard %g3s to <@mesh, [[]]> annotate_for_users : tensor<2x4x4xf32>
  %out = merak.add %g3u, %ress : (tensor<2x4x4xf32>, tensor<2x4x4xf32>) -> tensor<2x4x4xf32>
  %outs = mesh.shard %out to <@mesh, [[]]> : tensor<2x4x4xf32>
  return %outs : tensor<2x4x4xf32>
}

// -----

mesh.mesh @mesh(shape = 2) {merak.axes = ["dp"]}

// ZeRO-3: a parameter split over dp is gathered for each reader on its own
// (here a forward and a backward use), so the whole parameter lives only
// around each use; an activation read whole twice is gathered once.
// CHECK-LABEL: func.func @zero3
// CHECK: %[[G1:.*]] = mesh.all_gather %arg0 on @mesh mesh_axes = [0] gather_axis = 0 : tensor<2x4xf32> -> tensor<4x4xf32>
// CHECK-NEXT: %[[X:.*]] = mesh.all_gather %arg1
// CHECK-NEXT: merak.matmul %[[X]], %[[G1]]
// CHECK-NEXT: %[[G2:.*]] = mesh.all_gather %arg0 on @mesh mesh_axes = [0] gather_axis = 0 : tensor<2x4xf32> -> tensor<4x4xf32>
// CHECK-NEXT: merak.matmul %[[X]], %[[G2]]
// CHECK-NOT: mesh.all_gather
func.func @zero3(%w: tensor<4x4xf32> {merak.param = "w"}, %x: tensor<4x4xf32>) -> (tensor<4x4xf32>, tensor<4x4xf32>) {
  %ws = mesh.shard %w to <@mesh, [[0]]> : tensor<4x4xf32>
  %xs = mesh.shard %x to <@mesh, [[0]]> : tensor<4x4xf32>
  %w1 = mesh.shard %ws to <@mesh, [[]]> annotate_for_users : tensor<4x4xf32>
  %x1 = mesh.shard %xs to <@mesh, [[]]> annotate_for_users : tensor<4x4xf32>
  %y = merak.matmul %x1, %w1 : (tensor<4x4xf32>, tensor<4x4xf32>) -> tensor<4x4xf32>
  %ys = mesh.shard %y to <@mesh, [[]]> : tensor<4x4xf32>
  %w2 = mesh.shard %ws to <@mesh, [[]]> annotate_for_users : tensor<4x4xf32>
  %x2 = mesh.shard %xs to <@mesh, [[]]> annotate_for_users : tensor<4x4xf32>
  %z = merak.matmul %x2, %w2 : (tensor<4x4xf32>, tensor<4x4xf32>) -> tensor<4x4xf32>
  %zs = mesh.shard %z to <@mesh, [[]]> : tensor<4x4xf32>
  return %ys, %zs : tensor<4x4xf32>, tensor<4x4xf32>
}

// -----

mesh.mesh @mesh(shape = 2x2) {merak.axes = ["sp", "tp"]}

// [[], [0], [1]] -> [[], [], [0]]: mesh axis 0 moves from dimension 1 to
// dimension 2, which drops axis 1. Gathered over axis 1 first, then one
// all_to_all over axis 0: an all_to_all first would split within the axis-1
// slices (dimension 2 split [1, 0], not [0]).
// CHECK-LABEL: func.func @move_into_gathered
// CHECK-SAME: (%[[A:.*]]: tensor<2x4x4xf32>
// CHECK: %[[G:.*]] = mesh.all_gather %[[A]] on @mesh mesh_axes = [1] gather_axis = 2 : tensor<2x4x4xf32> -> tensor<2x4x8xf32>
// CHECK-NEXT: %[[T:.*]] = mesh.all_to_all %[[G]] on @mesh mesh_axes = [0] split_axis = 2 concat_axis = 1 : tensor<2x4x8xf32> -> tensor<2x8x4xf32>
// CHECK-NEXT: merak.neg %[[T]] : tensor<2x8x4xf32>
func.func @move_into_gathered(%a: tensor<2x8x8xf32>) -> tensor<2x8x8xf32> {
  %as = mesh.shard %a to <@mesh, [[], [0], [1]]> : tensor<2x8x8xf32>
  %u = mesh.shard %as to <@mesh, [[], [], [0]]> annotate_for_users : tensor<2x8x8xf32>
  %n = merak.neg %u : tensor<2x8x8xf32>
  %ns = mesh.shard %n to <@mesh, [[], [], [0]]> : tensor<2x8x8xf32>
  return %ns : tensor<2x8x8xf32>
}
