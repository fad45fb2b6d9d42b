
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

