
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

