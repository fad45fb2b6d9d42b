// Folders of merak ops under --canonicalize: constant, reshape to the same type, identity permute.
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
