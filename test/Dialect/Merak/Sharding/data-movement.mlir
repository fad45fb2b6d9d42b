// Sharding rules of data movement. reshape: one loop per result
// dimension, only the major dimension of each merged or split group may be
// split (the input's other dimensions of a group index the constant 0).
// permute moves splits with their dimensions; expand keeps them; slice,
// select, concat, pad and roll keep their own dimensions whole.
// RUN: merak-opt %s -split-input-file --pass-pipeline='builtin.module(func.func(sharding-propagation))' | FileCheck %s --check-prefix=PROP
// RUN: merak-opt %s -split-input-file --pass-pipeline='builtin.module(func.func(sharding-propagation,mesh-spmdization))' | FileCheck %s --check-prefix=SPMD

mesh.mesh @mesh(shape = 2)

// [2, 16, 96] -> [32, 96]: the merged group's major dimension carries the split.
func.func @merge(%x: tensor<2x16x96xf32>) -> tensor<32x96xf32> {
  %xs = mesh.shard %x to <@mesh, [[0]]> : tensor<2x16x96xf32>
  %0 = merak.reshape %xs {shape = array<i64: 32, 96>} : (tensor<2x16x96xf32>) -> tensor<32x96xf32>
  return %0 : tensor<32x96xf32>
}

// PROP-LABEL: func.func @merge
// PROP:      %[[R:.*]] = merak.reshape
// PROP-NEXT: mesh.shard %[[R]] to <@mesh, {{\[\[}}0]]> : tensor<32x96xf32>

// SPMD-LABEL: func.func @merge
// SPMD-NEXT:  merak.reshape %{{.*}} {shape = array<i64: 16, 96>} : (tensor<1x16x96xf32>) -> tensor<16x96xf32>

// -----

mesh.mesh @mesh(shape = 2)

// Splitting the hidden dimension of [2, 16, 32] splits the heads of
// [2, 16, 4, 8]; permute moves the split with its dimension.
func.func @heads(%x: tensor<2x16x32xf32>) -> tensor<2x4x16x8xf32> {
  %xs = mesh.shard %x to <@mesh, [[], [], [0]]> : tensor<2x16x32xf32>
  %0 = merak.reshape %xs {shape = array<i64: 2, 16, 4, 8>} : (tensor<2x16x32xf32>) -> tensor<2x16x4x8xf32>
  %1 = merak.permute %0 {permutation = array<i64: 0, 2, 1, 3>} : (tensor<2x16x4x8xf32>) -> tensor<2x4x16x8xf32>
  return %1 : tensor<2x4x16x8xf32>
}

// PROP-LABEL: func.func @heads
// PROP:      %[[R:.*]] = merak.reshape
// PROP-NEXT: mesh.shard %[[R]] to <@mesh, {{\[\[}}], [], [0]]> : tensor<2x16x4x8xf32>
// PROP:      %[[P:.*]] = merak.permute
// PROP-NEXT: mesh.shard %[[P]] to <@mesh, {{\[\[}}], [0]]> : tensor<2x4x16x8xf32>

// SPMD-LABEL: func.func @heads
// SPMD-NEXT:  merak.reshape %{{.*}} {shape = array<i64: 2, 16, 2, 8>} : (tensor<2x16x16xf32>) -> tensor<2x16x2x8xf32>
// SPMD-NEXT:  merak.permute %{{.*}} : (tensor<2x16x2x8xf32>) -> tensor<2x2x16x8xf32>

// -----

mesh.mesh @mesh(shape = 2)

// A split minor dimension of a merged group cannot be kept: the input is
// gathered.
func.func @minor(%x: tensor<2x16x96xf32>) -> tensor<32x96xf32> {
  %xs = mesh.shard %x to <@mesh, [[], [0]]> : tensor<2x16x96xf32>
  %0 = merak.reshape %xs {shape = array<i64: 32, 96>} : (tensor<2x16x96xf32>) -> tensor<32x96xf32>
  %r = mesh.shard %0 to <@mesh, [[]]> annotate_for_users : tensor<32x96xf32>
  return %r : tensor<32x96xf32>
}

// PROP-LABEL: func.func @minor
// PROP:      mesh.shard %{{.*}} to <@mesh, {{\[\[}}]]> annotate_for_users : tensor<2x16x96xf32>
// PROP-NEXT: merak.reshape

// SPMD-LABEL: func.func @minor
// SPMD:       mesh.all_gather %{{.*}} gather_axis = 1 : tensor<2x8x96xf32> -> tensor<2x16x96xf32>
// SPMD:       merak.reshape %{{.*}} {shape = array<i64: 32, 96>} : (tensor<2x16x96xf32>) -> tensor<32x96xf32>

// -----

mesh.mesh @mesh(shape = 2)

// Heads back to the hidden dimension.
func.func @back(%x: tensor<2x4x16x8xf32>) -> tensor<2x16x32xf32> {
  %xs = mesh.shard %x to <@mesh, [[], [0]]> : tensor<2x4x16x8xf32>
  %1 = merak.permute %xs {permutation = array<i64: 0, 2, 1, 3>} : (tensor<2x4x16x8xf32>) -> tensor<2x16x4x8xf32>
  %0 = merak.reshape %1 {shape = array<i64: 2, 16, 32>} : (tensor<2x16x4x8xf32>) -> tensor<2x16x32xf32>
  %r = mesh.shard %0 to <@mesh, [[], [], [0]]> annotate_for_users : tensor<2x16x32xf32>
  return %r : tensor<2x16x32xf32>
}

// PROP-LABEL: func.func @back
// PROP:      %[[R:.*]] = merak.reshape
// PROP-NEXT: mesh.shard %[[R]] to <@mesh, {{\[\[}}], [], [0]]> : tensor<2x16x32xf32>

// SPMD-LABEL: func.func @back
// SPMD-NEXT:  merak.permute %{{.*}} : (tensor<2x2x16x8xf32>) -> tensor<2x16x2x8xf32>
// SPMD-NEXT:  merak.reshape %{{.*}} {shape = array<i64: 2, 16, 16>} : (tensor<2x16x2x8xf32>) -> tensor<2x16x16xf32>
// SPMD-NEXT:  return

// -----

mesh.mesh @mesh(shape = 2)

// expand keeps splits of kept dimensions and may split stretched ones.
func.func @exp(%x: tensor<4x1xf32>) -> tensor<4x6xf32> {
  %xs = mesh.shard %x to <@mesh, [[0]]> : tensor<4x1xf32>
  %0 = merak.expand %xs {shape = array<i64: 4, 6>} : (tensor<4x1xf32>) -> tensor<4x6xf32>
  %r = mesh.shard %0 to <@mesh, [[0], []]> annotate_for_users : tensor<4x6xf32>
  return %r : tensor<4x6xf32>
}

// SPMD-LABEL: func.func @exp(
// SPMD-NEXT:  merak.expand %{{.*}} {shape = array<i64: 2, 6>} : (tensor<2x1xf32>) -> tensor<2x6xf32>

// -----

mesh.mesh @mesh(shape = 2)

func.func @exp2(%x: tensor<4x1xf32>) -> tensor<4x6xf32> {
  %xs = mesh.shard %x to <@mesh, [[]]> : tensor<4x1xf32>
  %0 = merak.expand %xs {shape = array<i64: 4, 6>} : (tensor<4x1xf32>) -> tensor<4x6xf32>
  %r = mesh.shard %0 to <@mesh, [[], [0]]> annotate_for_users : tensor<4x6xf32>
  return %r : tensor<4x6xf32>
}

// SPMD-LABEL: func.func @exp2(
// SPMD-NEXT:  merak.expand %{{.*}} {shape = array<i64: 4, 3>} : (tensor<4x1xf32>) -> tensor<4x3xf32>

// -----

mesh.mesh @mesh(shape = 2)

// A full slice may be split (its bound becomes local); a partial slice of
// a split dimension gathers it first.
func.func @slices(%x: tensor<4x8xf32>) -> (tensor<4x8xf32>, tensor<4x3xf32>) {
  %xs = mesh.shard %x to <@mesh, [[], [0]]> : tensor<4x8xf32>
  %0 = merak.slice %xs {dim = 1 : i64, start = 0 : i64, end = 8 : i64} : (tensor<4x8xf32>) -> tensor<4x8xf32>
  %1 = merak.slice %xs {dim = 1 : i64, start = 2 : i64, end = 5 : i64} : (tensor<4x8xf32>) -> tensor<4x3xf32>
  %r0 = mesh.shard %0 to <@mesh, [[], [0]]> annotate_for_users : tensor<4x8xf32>
  %r1 = mesh.shard %1 to <@mesh, [[]]> annotate_for_users : tensor<4x3xf32>
  return %r0, %r1 : tensor<4x8xf32>, tensor<4x3xf32>
}

// PROP-LABEL: func.func @slices
// PROP:      %[[F:.*]] = merak.slice %{{.*}} {dim = 1 : i64, end = 8 : i64
// PROP-NEXT: mesh.shard %[[F]] to <@mesh, {{\[\[}}], [0]]> : tensor<4x8xf32>
// PROP:      mesh.shard %{{.*}} to <@mesh, {{\[\[}}]]> annotate_for_users : tensor<4x8xf32>
// PROP-NEXT: merak.slice %{{.*}} {dim = 1 : i64, end = 5 : i64

// SPMD-LABEL: func.func @slices
// SPMD-SAME:  (%[[X:.*]]: tensor<4x4xf32>)
// SPMD:       %[[G:.*]] = mesh.all_gather %[[X]]
// SPMD:       merak.slice %[[X]] {dim = 1 : i64, end = 4 : i64, start = 0 : i64} : (tensor<4x4xf32>) -> tensor<4x4xf32>
// SPMD:       merak.slice %{{.*}} {dim = 1 : i64, end = 5 : i64, start = 2 : i64} : (tensor<4x8xf32>) -> tensor<4x3xf32>

// -----

mesh.mesh @mesh(shape = 2)

// concat, select, pad and roll keep their own dimension whole and pass the
// others through.
func.func @others(%a: tensor<4x3xf32>, %b: tensor<4x5xf32>) -> (tensor<4x8xf32>, tensor<4xf32>, tensor<4x7xf32>, tensor<4x3xf32>) {
  %as = mesh.shard %a to <@mesh, [[0]]> : tensor<4x3xf32>
  %bs = mesh.shard %b to <@mesh, [[0]]> : tensor<4x5xf32>
  %0 = merak.concat %as, %bs {dim = 1 : i64} : (tensor<4x3xf32>, tensor<4x5xf32>) -> tensor<4x8xf32>
  %1 = merak.select %as {dim = 1 : i64, index = 2 : i64} : (tensor<4x3xf32>) -> tensor<4xf32>
  %2 = merak.pad %as {low = array<i64: 0, 1>, high = array<i64: 0, 3>} : (tensor<4x3xf32>) -> tensor<4x7xf32>
  %3 = merak.roll %as {shifts = array<i64: 1>, dims = array<i64: 1>} : tensor<4x3xf32>
  %r0 = mesh.shard %0 to <@mesh, [[0]]> annotate_for_users : tensor<4x8xf32>
  %r1 = mesh.shard %1 to <@mesh, [[0]]> annotate_for_users : tensor<4xf32>
  %r2 = mesh.shard %2 to <@mesh, [[0]]> annotate_for_users : tensor<4x7xf32>
  %r3 = mesh.shard %3 to <@mesh, [[0]]> annotate_for_users : tensor<4x3xf32>
  return %r0, %r1, %r2, %r3 : tensor<4x8xf32>, tensor<4xf32>, tensor<4x7xf32>, tensor<4x3xf32>
}

// SPMD-LABEL: func.func @others
// SPMD-NEXT:  merak.concat {{.*}} : (tensor<2x3xf32>, tensor<2x5xf32>) -> tensor<2x8xf32>
// SPMD-NEXT:  merak.select {{.*}} : (tensor<2x3xf32>) -> tensor<2xf32>
// SPMD-NEXT:  merak.pad {{.*}} : (tensor<2x3xf32>) -> tensor<2x7xf32>
// SPMD-NEXT:  merak.roll {{.*}} : tensor<2x3xf32>
// SPMD-NEXT:  return

// -----

mesh.mesh @mesh(shape = 2)

// A negative dimension counts from the end.
func.func @negative_dim(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %xs = mesh.shard %x to <@mesh, [[], [0]]> : tensor<4x8xf32>
  %0 = merak.slice %xs {dim = -1 : i64, start = 0 : i64, end = 8 : i64} : (tensor<4x8xf32>) -> tensor<4x8xf32>
  %r = mesh.shard %0 to <@mesh, [[], [0]]> annotate_for_users : tensor<4x8xf32>
  return %r : tensor<4x8xf32>
}

// SPMD-LABEL: func.func @negative_dim
// SPMD-NEXT:  merak.slice %{{.*}} {dim = -1 : i64, end = 4 : i64, start = 0 : i64} : (tensor<4x4xf32>) -> tensor<4x4xf32>
