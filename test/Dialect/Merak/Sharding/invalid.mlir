// spmdize rejects, with a diagnostic, annotations an op cannot implement
// (written by hand here; propagation never produces them).
// RUN: merak-opt %s -split-input-file -verify-diagnostics --pass-pipeline='builtin.module(func.func(mesh-spmdization))'

mesh.mesh @mesh(shape = 2)

func.func @softmax_dim(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %0 = mesh.shard %x to <@mesh, [[], [0]]> : tensor<4x8xf32>
  %1 = mesh.shard %0 to <@mesh, [[], [0]]> annotate_for_users : tensor<4x8xf32>
  // expected-error @+1 {{'merak.softmax' op cannot be split along dimension 1 of operand #0 (mesh axes [0])}}
  %2 = merak.softmax %1 {dim = 1 : i64} : tensor<4x8xf32>
  %3 = mesh.shard %2 to <@mesh, [[], [0]]> : tensor<4x8xf32>
  return %3 : tensor<4x8xf32>
}

// -----

mesh.mesh @mesh(shape = 2)

func.func @inconsistent(%x: tensor<4x8xf32>, %y: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %0 = mesh.shard %x to <@mesh, [[0]]> : tensor<4x8xf32>
  %1 = mesh.shard %0 to <@mesh, [[0]]> annotate_for_users : tensor<4x8xf32>
  %2 = mesh.shard %y to <@mesh, [[]]> : tensor<4x8xf32>
  %3 = mesh.shard %2 to <@mesh, [[]]> annotate_for_users : tensor<4x8xf32>
  // expected-error @+1 {{'merak.add' op dimension 0 of operand #1 is split over mesh axes [], but dimension 0 of operand #0 over [0]}}
  %4 = merak.add %1, %3 : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %5 = mesh.shard %4 to <@mesh, [[0]]> : tensor<4x8xf32>
  return %5 : tensor<4x8xf32>
}

// -----

mesh.mesh @mesh(shape = 2)

func.func @broadcast_dim(%x: tensor<4x1xf32>, %y: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %0 = mesh.shard %x to <@mesh, [[], [0]]> : tensor<4x1xf32>
  %1 = mesh.shard %0 to <@mesh, [[], [0]]> annotate_for_users : tensor<4x1xf32>
  %2 = mesh.shard %y to <@mesh, [[], [0]]> : tensor<4x8xf32>
  %3 = mesh.shard %2 to <@mesh, [[], [0]]> annotate_for_users : tensor<4x8xf32>
  // expected-error @+1 {{'merak.mul' op cannot split dimension 1 of operand #0 (a broadcast, window or non-major reshape dimension)}}
  %4 = merak.mul %1, %3 : (tensor<4x1xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %5 = mesh.shard %4 to <@mesh, [[], [0]]> : tensor<4x8xf32>
  return %5 : tensor<4x8xf32>
}

// -----

mesh.mesh @mesh(shape = 2)

func.func @partial_operand(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %0 = mesh.shard %x to <@mesh, [[]], partial = sum[0]> : tensor<4x8xf32>
  %1 = mesh.shard %0 to <@mesh, [[]], partial = sum[0]> annotate_for_users : tensor<4x8xf32>
  // expected-error @+1 {{'merak.exp' op operand #0 is partial over mesh axes [0]; it must be reduced first}}
  %2 = merak.exp %1 : tensor<4x8xf32>
  %3 = mesh.shard %2 to <@mesh, [[]]> : tensor<4x8xf32>
  return %3 : tensor<4x8xf32>
}

// -----

mesh.mesh @mesh(shape = 2)

func.func @wrong_partial(%x: tensor<4x8xf32>, %w: tensor<6x8xf32>) -> tensor<4x6xf32> {
  %0 = mesh.shard %x to <@mesh, [[], [0]]> : tensor<4x8xf32>
  %1 = mesh.shard %0 to <@mesh, [[], [0]]> annotate_for_users : tensor<4x8xf32>
  %2 = mesh.shard %w to <@mesh, [[], [0]]> : tensor<6x8xf32>
  %3 = mesh.shard %2 to <@mesh, [[], [0]]> annotate_for_users : tensor<6x8xf32>
  // expected-error @+1 {{'merak.linear' op result #0 is annotated partial over mesh axes [], but the op leaves it partial over [0] (sum)}}
  %4 = merak.linear %1, %3 : (tensor<4x8xf32>, tensor<6x8xf32>) -> tensor<4x6xf32>
  %5 = mesh.shard %4 to <@mesh, [[]]> : tensor<4x6xf32>
  return %5 : tensor<4x6xf32>
}

// -----

mesh.mesh @mesh(shape = 4)

func.func @indivisible(%x: tensor<6x8xf32>) -> tensor<6x2x4xf32> {
  %0 = mesh.shard %x to <@mesh, [[], [0]]> : tensor<6x8xf32>
  %1 = mesh.shard %0 to <@mesh, [[], [0]]> annotate_for_users : tensor<6x8xf32>
  // expected-error @+1 {{'merak.reshape' op cannot split dimension 1 of operand #0 into 4 equal shards}}
  %2 = merak.reshape %1 {shape = array<i64: 6, 2, 4>} : (tensor<6x8xf32>) -> tensor<6x2x4xf32>
  %3 = mesh.shard %2 to <@mesh, [[], [0]]> : tensor<6x2x4xf32>
  return %3 : tensor<6x2x4xf32>
}
