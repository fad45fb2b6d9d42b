
// CHECK-LABEL: func.func @reshape_empty
// CHECK-SAME: (%[[X:[a-z0-9]+]]: tensor<0x5xf32>)
func.func @reshape_empty(%x: tensor<0x5xf32>) -> tensor<5x0xf32> {
  // CHECK: merak.reshape %[[X]] {shape = array<i64: 5, 0>} : (tensor<0x5xf32>) -> tensor<5x0xf32>
  %0 = merak.reshape %x {shape = array<i64: 5, 0>} : (tensor<0x5xf32>) -> tensor<5x0xf32>
  return %0 : tensor<5x0xf32>
}

