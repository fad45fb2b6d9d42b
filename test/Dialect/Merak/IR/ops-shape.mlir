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

// -----

// CHECK-LABEL: func.func @reshape_empty
// CHECK-SAME: (%[[X:[a-z0-9]+]]: tensor<0x5xf32>)
func.func @reshape_empty(%x: tensor<0x5xf32>) -> tensor<5x0xf32> {
  // CHECK: merak.reshape %[[X]] {shape = array<i64: 5, 0>} : (tensor<0x5xf32>) -> tensor<5x0xf32>
  %0 = merak.reshape %x {shape = array<i64: 5, 0>} : (tensor<0x5xf32>) -> tensor<5x0xf32>
  return %0 : tensor<5x0xf32>
}

// -----

// transpose, permute and .t import as permute.
// CHECK-LABEL: func.func @permute
// CHECK-SAME: (%[[X:[a-z0-9]+]]: tensor<2x3x4xbf16>, %[[M:[a-z0-9]+]]: tensor<5x7xi1>)
func.func @permute(%x: tensor<2x3x4xbf16>, %m: tensor<5x7xi1>) {
  // CHECK: merak.permute %[[X]] {permutation = array<i64: 2, 0, 1>} : (tensor<2x3x4xbf16>) -> tensor<4x2x3xbf16>
  %0 = merak.permute %x {permutation = array<i64: 2, 0, 1>} : (tensor<2x3x4xbf16>) -> tensor<4x2x3xbf16>
  // CHECK: merak.permute %[[X]] {permutation = array<i64: 0, 2, 1>} : (tensor<2x3x4xbf16>) -> tensor<2x4x3xbf16>
  %1 = merak.permute %x {permutation = array<i64: 0, 2, 1>} : (tensor<2x3x4xbf16>) -> tensor<2x4x3xbf16>
  // CHECK: merak.permute %[[M]] {permutation = array<i64: 1, 0>} : (tensor<5x7xi1>) -> tensor<7x5xi1>
  %2 = merak.permute %m {permutation = array<i64: 1, 0>} : (tensor<5x7xi1>) -> tensor<7x5xi1>
  return
}

// -----

// split and chunk import as one slice per piece. The default step 1 is not
// printed; a negative dim counts from the end.
// CHECK-LABEL: func.func @slice
// CHECK-SAME: (%[[X:[a-z0-9]+]]: tensor<4x10xf32>)
func.func @slice(%x: tensor<4x10xf32>) {
  // CHECK: merak.slice %[[X]] {dim = 1 : i64, end = 5 : i64, start = 0 : i64} : (tensor<4x10xf32>) -> tensor<4x5xf32>
  %0 = merak.slice %x {dim = 1 : i64, start = 0 : i64, end = 5 : i64} : (tensor<4x10xf32>) -> tensor<4x5xf32>
  // CHECK: merak.slice %[[X]] {dim = -1 : i64, end = 10 : i64, start = 5 : i64} : (tensor<4x10xf32>) -> tensor<4x5xf32>
  %1 = merak.slice %x {dim = -1 : i64, start = 5 : i64, end = 10 : i64, step = 1 : i64} : (tensor<4x10xf32>) -> tensor<4x5xf32>
  // 1, 4, 7: three elements.
  // CHECK: merak.slice %[[X]] {dim = 1 : i64, end = 8 : i64, start = 1 : i64, step = 3 : i64} : (tensor<4x10xf32>) -> tensor<4x3xf32>
  %2 = merak.slice %x {dim = 1 : i64, start = 1 : i64, end = 8 : i64, step = 3 : i64} : (tensor<4x10xf32>) -> tensor<4x3xf32>
  // CHECK: merak.slice %[[X]] {dim = 0 : i64, end = 2 : i64, start = 2 : i64} : (tensor<4x10xf32>) -> tensor<0x10xf32>
  %3 = merak.slice %x {dim = 0 : i64, start = 2 : i64, end = 2 : i64} : (tensor<4x10xf32>) -> tensor<0x10xf32>
  // CHECK: merak.slice %[[X]] {dim = 0 : i64, end = 4 : i64, start = 0 : i64, step = 2 : i64} : (tensor<4x10xf32>) -> tensor<2x10xf32>
  %4 = merak.slice %x {dim = 0 : i64, start = 0 : i64, end = 4 : i64, step = 2 : i64} : (tensor<4x10xf32>) -> tensor<2x10xf32>
  return
}

// -----

// CHECK-LABEL: func.func @select
// CHECK-SAME: (%[[X:[a-z0-9]+]]: tensor<2x3x4xi32>, %[[V:[a-z0-9]+]]: tensor<5xf32>)
func.func @select(%x: tensor<2x3x4xi32>, %v: tensor<5xf32>) {
  // CHECK: merak.select %[[X]] {dim = 1 : i64, index = 2 : i64} : (tensor<2x3x4xi32>) -> tensor<2x4xi32>
  %0 = merak.select %x {dim = 1 : i64, index = 2 : i64} : (tensor<2x3x4xi32>) -> tensor<2x4xi32>
  // CHECK: merak.select %[[X]] {dim = -1 : i64, index = 0 : i64} : (tensor<2x3x4xi32>) -> tensor<2x3xi32>
  %1 = merak.select %x {dim = -1 : i64, index = 0 : i64} : (tensor<2x3x4xi32>) -> tensor<2x3xi32>
  // CHECK: merak.select %[[V]] {dim = 0 : i64, index = 4 : i64} : (tensor<5xf32>) -> tensor<f32>
  %2 = merak.select %v {dim = 0 : i64, index = 4 : i64} : (tensor<5xf32>) -> tensor<f32>
  return
}

// -----

// cat imports as concat; stack as unsqueeze (reshape) then concat.
// CHECK-LABEL: func.func @concat
// CHECK-SAME: (%[[A:[a-z0-9]+]]: tensor<2x3xf32>, %[[B:[a-z0-9]+]]: tensor<2x5xf32>, %[[C:[a-z0-9]+]]: tensor<4x3xf32>)
func.func @concat(%a: tensor<2x3xf32>, %b: tensor<2x5xf32>, %c: tensor<4x3xf32>) {
  // CHECK: merak.concat %[[A]], %[[B]], %[[A]] {dim = 1 : i64} : (tensor<2x3xf32>, tensor<2x5xf32>, tensor<2x3xf32>) -> tensor<2x11xf32>
  %0 = merak.concat %a, %b, %a {dim = 1 : i64} : (tensor<2x3xf32>, tensor<2x5xf32>, tensor<2x3xf32>) -> tensor<2x11xf32>
  // CHECK: merak.concat %[[A]], %[[C]] {dim = -2 : i64} : (tensor<2x3xf32>, tensor<4x3xf32>) -> tensor<6x3xf32>
  %1 = merak.concat %a, %c {dim = -2 : i64} : (tensor<2x3xf32>, tensor<4x3xf32>) -> tensor<6x3xf32>
  // CHECK: merak.concat %[[A]] {dim = 0 : i64} : (tensor<2x3xf32>) -> tensor<2x3xf32>
  %2 = merak.concat %a {dim = 0 : i64} : (tensor<2x3xf32>) -> tensor<2x3xf32>
  return
}

// -----

// expand, expand_as and broadcast_to import as expand.
// CHECK-LABEL: func.func @expand
// CHECK-SAME: (%[[X:[a-z0-9]+]]: tensor<3x1xf32>, %[[S:[a-z0-9]+]]: tensor<i1>)
func.func @expand(%x: tensor<3x1xf32>, %s: tensor<i1>) {
  // CHECK: merak.expand %[[X]] {shape = array<i64: 3, 4>} : (tensor<3x1xf32>) -> tensor<3x4xf32>
  %0 = merak.expand %x {shape = array<i64: 3, 4>} : (tensor<3x1xf32>) -> tensor<3x4xf32>
  // CHECK: merak.expand %[[X]] {shape = array<i64: 2, 5, 3, 4>} : (tensor<3x1xf32>) -> tensor<2x5x3x4xf32>
  %1 = merak.expand %x {shape = array<i64: 2, 5, 3, 4>} : (tensor<3x1xf32>) -> tensor<2x5x3x4xf32>
  // CHECK: merak.expand %[[S]] {shape = array<i64: 2, 2>} : (tensor<i1>) -> tensor<2x2xi1>
  %2 = merak.expand %s {shape = array<i64: 2, 2>} : (tensor<i1>) -> tensor<2x2xi1>
  // CHECK: merak.expand %[[X]] {shape = array<i64: 3, 0>} : (tensor<3x1xf32>) -> tensor<3x0xf32>
  %3 = merak.expand %x {shape = array<i64: 3, 0>} : (tensor<3x1xf32>) -> tensor<3x0xf32>
  return
}

// -----

// The default padding value 0.0 is not printed.
// CHECK-LABEL: func.func @pad
// CHECK-SAME: (%[[X:[a-z0-9]+]]: tensor<1x3x4x4xf32>, %[[I:[a-z0-9]+]]: tensor<5xi64>)
func.func @pad(%x: tensor<1x3x4x4xf32>, %i: tensor<5xi64>) {
  // CHECK: merak.pad %[[X]] {high = array<i64: 0, 0, 1, 2>, low = array<i64: 0, 0, 1, 0>} : (tensor<1x3x4x4xf32>) -> tensor<1x3x6x6xf32>
  %0 = merak.pad %x {low = array<i64: 0, 0, 1, 0>, high = array<i64: 0, 0, 1, 2>} : (tensor<1x3x4x4xf32>) -> tensor<1x3x6x6xf32>
  // CHECK: merak.pad %[[I]] {high = array<i64: 0>, low = array<i64: 3>, value = -1.000000e+00 : f64} : (tensor<5xi64>) -> tensor<8xi64>
  %1 = merak.pad %i {low = array<i64: 3>, high = array<i64: 0>, value = -1.0 : f64} : (tensor<5xi64>) -> tensor<8xi64>
  return
}

// -----

// CHECK-LABEL: func.func @roll
// CHECK-SAME: (%[[X:[a-z0-9]+]]: tensor<4x6xf32>)
func.func @roll(%x: tensor<4x6xf32>) {
  // CHECK: merak.roll %[[X]] {dims = array<i64: 1>, shifts = array<i64: 2>} : tensor<4x6xf32>
  %0 = merak.roll %x {shifts = array<i64: 2>, dims = array<i64: 1>} : tensor<4x6xf32>
  // CHECK: merak.roll %[[X]] {dims = array<i64: 0, -1>, shifts = array<i64: -1, 7>} : tensor<4x6xf32>
  %1 = merak.roll %x {shifts = array<i64: -1, 7>, dims = array<i64: 0, -1>} : tensor<4x6xf32>
  // CHECK: merak.roll %[[X]] {dims = array<i64>, shifts = array<i64>} : tensor<4x6xf32>
  %2 = merak.roll %x {shifts = array<i64>, dims = array<i64>} : tensor<4x6xf32>
  return
}

// -----

// Integer-tensor indexing along one dimension: input.shape[:dim] +
// indices.shape + input.shape[dim+1:].
// CHECK-LABEL: func.func @update_slice
func.func @update_slice(%c: tensor<2x4x16x8xf32>, %u: tensor<2x4x1x8xf32>, %p: tensor<1xi64>) -> tensor<2x4x16x8xf32> {
  // CHECK: merak.update_slice %{{.*}}, %{{.*}}, %{{.*}} {dim = 2 : i64} : (tensor<2x4x16x8xf32>, tensor<2x4x1x8xf32>, tensor<1xi64>) -> tensor<2x4x16x8xf32>
  %0 = merak.update_slice %c, %u, %p {dim = 2 : i64} : (tensor<2x4x16x8xf32>, tensor<2x4x1x8xf32>, tensor<1xi64>) -> tensor<2x4x16x8xf32>
  return %0 : tensor<2x4x16x8xf32>
}

// CHECK-LABEL: func.func @index
// CHECK-SAME: (%[[X:[a-z0-9]+]]: tensor<5x6x7xf32>, %[[I:[a-z0-9]+]]: tensor<2x3xi64>, %[[J:[a-z0-9]+]]: tensor<4xi32>, %[[S:[a-z0-9]+]]: tensor<i64>)
func.func @index(%x: tensor<5x6x7xf32>, %i: tensor<2x3xi64>, %j: tensor<4xi32>, %s: tensor<i64>) {
  // CHECK: merak.index %[[X]], %[[I]] {dim = 1 : i64} : (tensor<5x6x7xf32>, tensor<2x3xi64>) -> tensor<5x2x3x7xf32>
  %0 = merak.index %x, %i {dim = 1 : i64} : (tensor<5x6x7xf32>, tensor<2x3xi64>) -> tensor<5x2x3x7xf32>
  // CHECK: merak.index %[[X]], %[[J]] {dim = -1 : i64} : (tensor<5x6x7xf32>, tensor<4xi32>) -> tensor<5x6x4xf32>
  %1 = merak.index %x, %j {dim = -1 : i64} : (tensor<5x6x7xf32>, tensor<4xi32>) -> tensor<5x6x4xf32>
  // CHECK: merak.index %[[X]], %[[S]] {dim = 0 : i64} : (tensor<5x6x7xf32>, tensor<i64>) -> tensor<6x7xf32>
  %2 = merak.index %x, %s {dim = 0 : i64} : (tensor<5x6x7xf32>, tensor<i64>) -> tensor<6x7xf32>
  return
}

// -----

// Empty dims reduce over every dimension; the default keepdim = false is not
// printed.
// CHECK-LABEL: func.func @reductions
// CHECK-SAME: (%[[X:[a-z0-9]+]]: tensor<2x3x4xf32>, %[[I:[a-z0-9]+]]: tensor<5x6xi64>)
func.func @reductions(%x: tensor<2x3x4xf32>, %i: tensor<5x6xi64>) {
  // CHECK: merak.reduce_sum %[[X]] {dims = array<i64: 1>} : (tensor<2x3x4xf32>) -> tensor<2x4xf32>
  %0 = merak.reduce_sum %x {dims = array<i64: 1>} : (tensor<2x3x4xf32>) -> tensor<2x4xf32>
  // CHECK: merak.reduce_sum %[[X]] {dims = array<i64>} : (tensor<2x3x4xf32>) -> tensor<f32>
  %1 = merak.reduce_sum %x {dims = array<i64>} : (tensor<2x3x4xf32>) -> tensor<f32>
  // CHECK: merak.reduce_sum %[[I]] {dims = array<i64>, keepdim = true} : (tensor<5x6xi64>) -> tensor<1x1xi64>
  %2 = merak.reduce_sum %i {dims = array<i64>, keepdim = true} : (tensor<5x6xi64>) -> tensor<1x1xi64>
  // CHECK: merak.reduce_mean %[[X]] {dims = array<i64: -1>, keepdim = true} : (tensor<2x3x4xf32>) -> tensor<2x3x1xf32>
  %3 = merak.reduce_mean %x {dims = array<i64: -1>, keepdim = true} : (tensor<2x3x4xf32>) -> tensor<2x3x1xf32>
  // CHECK: merak.reduce_mean %[[X]] {dims = array<i64: 0, 2>} : (tensor<2x3x4xf32>) -> tensor<3xf32>
  %4 = merak.reduce_mean %x {dims = array<i64: 0, 2>, keepdim = false} : (tensor<2x3x4xf32>) -> tensor<3xf32>
  // CHECK: merak.reduce_max %[[X]] {dims = array<i64: 2, 0>, keepdim = true} : (tensor<2x3x4xf32>) -> tensor<1x3x1xf32>
  %5 = merak.reduce_max %x {dims = array<i64: 2, 0>, keepdim = true} : (tensor<2x3x4xf32>) -> tensor<1x3x1xf32>
  // CHECK: merak.reduce_max %[[I]] {dims = array<i64: 1>} : (tensor<5x6xi64>) -> tensor<5xi64>
  %6 = merak.reduce_max %i {dims = array<i64: 1>} : (tensor<5x6xi64>) -> tensor<5xi64>
  return
}
