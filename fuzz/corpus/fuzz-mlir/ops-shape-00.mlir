// Round trip of merak shape ops (reshape, permute, slice, select, concat, expand, pad, roll, index) and reductions.
// RUN: merak-opt %s -split-input-file | merak-opt -split-input-file | FileCheck %s

// view, reshape, flatten, squeeze and unsqueeze all import as reshape.
// CHECK-LABEL: func.func @reshape
// CHECK-SAME: (%[[X:[a-z0-9]+]]: tensor<2x3x4xf32>, %[[S:[a-z0-9]+]]: tensor<i64>)
func.func @reshape(%x: tensor<2x3x4xf32>, %s: tensor<i64>) {
  // CHECK: merak.reshape %[[X]] {shape = array<i64: 6, 4>} : (tensor<2x3x4xf32>) -> tensor<6x4xf32>
  %0 = merak.reshape %x {shape = array<i64: 6, 4>} : (tensor<2x3x4xf32>) -> tensor<6x4xf32>
  // CHECK: merak.reshape %[[X]] {shape = array<i64: 24>} : (tensor<2x3x4xf32>) -> tensor<24xf32>
  %1 = merak.reshape %x {shape = array<i64: 24>} : (tensor<2x3x4xf32>) -> tensor<24xf32>
  // CHECK: merak.reshape %[[X]] {shape = array<i64: 1, 2, 3, 1, 4>} : (tensor<2x3x4xf32>) -> tensor<1x2x3x1x4xf32>
  %2 = merak.reshape %x {shape = array<i64: 1, 2, 3, 1, 4>} : (tensor<2x3x4xf32>) -> tensor<1x2x3x1x4xf32>
  // CHECK: merak.reshape %[[S]] {shape = array<i64: 1, 1>} : (tensor<i64>) -> tensor<1x1xi64>
  %3 = merak.reshape %s {shape = array<i64: 1, 1>} : (tensor<i64>) -> tensor<1x1xi64>
  // CHECK: merak.reshape %{{.*}} {shape = array<i64>} : (tensor<1x1xi64>) -> tensor<i64>
  %4 = merak.reshape %3 {shape = array<i64>} : (tensor<1x1xi64>) -> tensor<i64>
  return
}

