
// CHECK-LABEL: func.func @embedding
// CHECK-SAME: (%[[W:[a-z0-9]+]]: tensor<100x16xf32>, %[[I:[a-z0-9]+]]: tensor<2x8xi64>, %[[J:[a-z0-9]+]]: tensor<i32>)
func.func @embedding(%w: tensor<100x16xf32>, %i: tensor<2x8xi64>, %j: tensor<i32>) {
  // CHECK: merak.embedding %[[W]], %[[I]] : (tensor<100x16xf32>, tensor<2x8xi64>) -> tensor<2x8x16xf32>
  %0 = merak.embedding %w, %i : (tensor<100x16xf32>, tensor<2x8xi64>) -> tensor<2x8x16xf32>
  // CHECK: merak.embedding %[[W]], %[[I]] {padding_idx = 0 : i64} : (tensor<100x16xf32>, tensor<2x8xi64>) -> tensor<2x8x16xf32>
  %1 = merak.embedding %w, %i {padding_idx = 0 : i64} : (tensor<100x16xf32>, tensor<2x8xi64>) -> tensor<2x8x16xf32>
  // CHECK: merak.embedding %[[W]], %[[J]] {padding_idx = 99 : i64} : (tensor<100x16xf32>, tensor<i32>) -> tensor<16xf32>
  %2 = merak.embedding %w, %j {padding_idx = 99 : i64} : (tensor<100x16xf32>, tensor<i32>) -> tensor<16xf32>
  return
}

