// Folders and canonicalization patterns of merak ops under --canonicalize: constant, reshape to the same type, identity permute, a linear between a flatten and an unflatten.
// RUN: merak-opt %s -split-input-file --canonicalize | FileCheck %s

// Equal constants are uniqued and hoisted by the folder; unused ones vanish.
// CHECK-LABEL: func.func @constant_dedup
// CHECK-NEXT: %[[C:.*]] = merak.constant dense<[1.000000e+00, 2.000000e+00]> : tensor<2xf32>
// CHECK-NEXT: %[[S:.*]] = merak.add %[[C]], %[[C]]
// CHECK-NEXT: return %[[S]]
func.func @constant_dedup() -> tensor<2xf32> {
  %0 = merak.constant dense<[1.0, 2.0]> : tensor<2xf32>
  %1 = merak.constant dense<[1.0, 2.0]> : tensor<2xf32>
  %2 = merak.constant dense<3> : tensor<4xi64>
  %3 = merak.add %0, %1 : (tensor<2xf32>, tensor<2xf32>) -> tensor<2xf32>
  return %3 : tensor<2xf32>
}

// -----

// Different types or values keep separate constants.
// CHECK-LABEL: func.func @constant_distinct
// CHECK-DAG: merak.constant dense<1.000000e+00> : tensor<2xf32>
// CHECK-DAG: merak.constant dense<1.000000e+00> : tensor<2xbf16>
// CHECK-DAG: merak.constant dense<2.000000e+00> : tensor<2xf32>
func.func @constant_distinct() -> (tensor<2xf32>, tensor<2xbf16>, tensor<2xf32>) {
  %0 = merak.constant dense<1.0> : tensor<2xf32>
  %1 = merak.constant dense<1.0> : tensor<2xbf16>
  %2 = merak.constant dense<2.0> : tensor<2xf32>
  return %0, %1, %2 : tensor<2xf32>, tensor<2xbf16>, tensor<2xf32>
}

// -----

// CHECK-LABEL: func.func @reshape_same_type
// CHECK-SAME: (%[[X:[a-z0-9]+]]: tensor<2x3xf32>)
// CHECK-NEXT: return %[[X]] : tensor<2x3xf32>
func.func @reshape_same_type(%x: tensor<2x3xf32>) -> tensor<2x3xf32> {
  %0 = merak.reshape %x {shape = array<i64: 2, 3>} : (tensor<2x3xf32>) -> tensor<2x3xf32>
  return %0 : tensor<2x3xf32>
}

// -----

// A reshape to another shape stays.
// CHECK-LABEL: func.func @reshape_other_type
// CHECK-SAME: (%[[X:[a-z0-9]+]]: tensor<2x3xf32>)
// CHECK-NEXT: %[[R:.*]] = merak.reshape %[[X]] {shape = array<i64: 3, 2>}
// CHECK-NEXT: return %[[R]]
func.func @reshape_other_type(%x: tensor<2x3xf32>) -> tensor<3x2xf32> {
  %0 = merak.reshape %x {shape = array<i64: 3, 2>} : (tensor<2x3xf32>) -> tensor<3x2xf32>
  return %0 : tensor<3x2xf32>
}

// -----

// CHECK-LABEL: func.func @permute_identity
// CHECK-SAME: (%[[X:[a-z0-9]+]]: tensor<2x3x4xf32>, %[[S:[a-z0-9]+]]: tensor<f32>)
// CHECK-NEXT: return %[[X]], %[[S]] : tensor<2x3x4xf32>, tensor<f32>
func.func @permute_identity(%x: tensor<2x3x4xf32>, %s: tensor<f32>) -> (tensor<2x3x4xf32>, tensor<f32>) {
  %0 = merak.permute %x {permutation = array<i64: 0, 1, 2>} : (tensor<2x3x4xf32>) -> tensor<2x3x4xf32>
  %1 = merak.permute %s {permutation = array<i64>} : (tensor<f32>) -> tensor<f32>
  return %0, %1 : tensor<2x3x4xf32>, tensor<f32>
}

// -----

// A non-identity permutation stays even when it keeps the type.
// CHECK-LABEL: func.func @permute_not_identity
// CHECK-SAME: (%[[X:[a-z0-9]+]]: tensor<3x3xf32>)
// CHECK-NEXT: %[[P:.*]] = merak.permute %[[X]] {permutation = array<i64: 1, 0>} : (tensor<3x3xf32>) -> tensor<3x3xf32>
// CHECK-NEXT: return %[[P]]
func.func @permute_not_identity(%x: tensor<3x3xf32>) -> tensor<3x3xf32> {
  %0 = merak.permute %x {permutation = array<i64: 1, 0>} : (tensor<3x3xf32>) -> tensor<3x3xf32>
  return %0 : tensor<3x3xf32>
}

// -----

// Folded-away ops leave their users intact; dead pure ops are erased.
// CHECK-LABEL: func.func @fold_chain
// CHECK-SAME: (%[[X:[a-z0-9]+]]: tensor<4x4xf32>)
// CHECK-NEXT: %[[E:.*]] = merak.exp %[[X]] : tensor<4x4xf32>
// CHECK-NEXT: return %[[E]]
func.func @fold_chain(%x: tensor<4x4xf32>) -> tensor<4x4xf32> {
  %0 = merak.permute %x {permutation = array<i64: 0, 1>} : (tensor<4x4xf32>) -> tensor<4x4xf32>
  %1 = merak.reshape %0 {shape = array<i64: 4, 4>} : (tensor<4x4xf32>) -> tensor<4x4xf32>
  %2 = merak.exp %1 : tensor<4x4xf32>
  %3 = merak.neg %x : tensor<4x4xf32>
  return %2 : tensor<4x4xf32>
}

// -----

// nn.MultiheadAttention's output projection: the sequence and the batch
// flattened into one dimension around a linear. The linear reads the rows
// unflattened instead, the batch in a dimension of its own; the ids of the
// inner reshape and the linear carry over.
// CHECK-LABEL: func.func @linear_over_flattened_rows
// CHECK-SAME: (%[[X:[a-z0-9]+]]: tensor<6x8x4xf32>, %[[W:[a-z0-9]+]]: tensor<16x16xf32>, %[[B:[a-z0-9]+]]: tensor<16xf32>)
// CHECK-NEXT: %[[R:.*]] = merak.reshape %[[X]] {merak.id = 1 : i64, shape = array<i64: 6, 2, 16>} : (tensor<6x8x4xf32>) -> tensor<6x2x16xf32>
// CHECK-NEXT: %[[L:.*]] = merak.linear %[[R]], %[[W]], %[[B]] {merak.id = 2 : i64} : (tensor<6x2x16xf32>, tensor<16x16xf32>, tensor<16xf32>) -> tensor<6x2x16xf32>
// CHECK-NEXT: return %[[L]]
func.func @linear_over_flattened_rows(%x: tensor<6x8x4xf32>, %w: tensor<16x16xf32>, %b: tensor<16xf32>) -> tensor<6x2x16xf32> {
  %0 = merak.reshape %x {merak.id = 1 : i64, shape = array<i64: 12, 16>} : (tensor<6x8x4xf32>) -> tensor<12x16xf32>
  %1 = merak.linear %0, %w, %b {merak.id = 2 : i64} : (tensor<12x16xf32>, tensor<16x16xf32>, tensor<16xf32>) -> tensor<12x16xf32>
  %2 = merak.reshape %1 {merak.id = 3 : i64, shape = array<i64: 6, 2, 16>} : (tensor<12x16xf32>) -> tensor<6x2x16xf32>
  return %2 : tensor<6x2x16xf32>
}

// -----

// Without a bias, and unflattened into three leading dimensions; the
// flattened rows keep their other reader.
// CHECK-LABEL: func.func @linear_over_flattened_rows_shared
// CHECK-SAME: (%[[X:[a-z0-9]+]]: tensor<3x16xf32>, %[[W:[a-z0-9]+]]: tensor<8x4xf32>)
// CHECK-NEXT: %[[F:.*]] = merak.reshape %[[X]] {shape = array<i64: 12, 4>}
// CHECK-NEXT: %[[R:.*]] = merak.reshape %[[X]] {shape = array<i64: 2, 3, 2, 4>}
// CHECK-NEXT: %[[L:.*]] = merak.linear %[[R]], %[[W]] : (tensor<2x3x2x4xf32>, tensor<8x4xf32>) -> tensor<2x3x2x8xf32>
// CHECK-NEXT: return %[[L]], %[[F]]
func.func @linear_over_flattened_rows_shared(%x: tensor<3x16xf32>, %w: tensor<8x4xf32>) -> (tensor<2x3x2x8xf32>, tensor<12x4xf32>) {
  %0 = merak.reshape %x {shape = array<i64: 12, 4>} : (tensor<3x16xf32>) -> tensor<12x4xf32>
  %1 = merak.linear %0, %w : (tensor<12x4xf32>, tensor<8x4xf32>) -> tensor<12x8xf32>
  %2 = merak.reshape %1 {shape = array<i64: 2, 3, 2, 8>} : (tensor<12x8xf32>) -> tensor<2x3x2x8xf32>
  return %2, %0 : tensor<2x3x2x8xf32>, tensor<12x4xf32>
}

// -----

// Left alone: a linear whose result has another reader, and an unflatten
// that moves the last dimension's elements.
// CHECK-LABEL: func.func @linear_over_flattened_rows_kept
// CHECK: merak.linear {{.*}} -> tensor<12x16xf32>
// CHECK-NEXT: merak.reshape {{.*}} -> tensor<6x2x16xf32>
// CHECK-NEXT: merak.linear {{.*}} -> tensor<12x16xf32>
// CHECK-NEXT: merak.reshape {{.*}} -> tensor<6x32xf32>
func.func @linear_over_flattened_rows_kept(%x: tensor<6x8x4xf32>, %w: tensor<16x16xf32>) -> (tensor<6x2x16xf32>, tensor<12x16xf32>, tensor<6x32xf32>) {
  %0 = merak.reshape %x {shape = array<i64: 12, 16>} : (tensor<6x8x4xf32>) -> tensor<12x16xf32>
  %1 = merak.linear %0, %w : (tensor<12x16xf32>, tensor<16x16xf32>) -> tensor<12x16xf32>
  %2 = merak.reshape %1 {shape = array<i64: 6, 2, 16>} : (tensor<12x16xf32>) -> tensor<6x2x16xf32>
  %3 = merak.linear %0, %w : (tensor<12x16xf32>, tensor<16x16xf32>) -> tensor<12x16xf32>
  %4 = merak.reshape %3 {shape = array<i64: 6, 32>} : (tensor<12x16xf32>) -> tensor<6x32xf32>
  return %2, %1, %4 : tensor<6x2x16xf32>, tensor<12x16xf32>, tensor<6x32xf32>
}
