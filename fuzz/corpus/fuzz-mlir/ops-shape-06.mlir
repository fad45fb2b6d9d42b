
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

