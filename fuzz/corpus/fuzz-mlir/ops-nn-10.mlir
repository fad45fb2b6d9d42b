
// The defaults ignore_index = -100, reduction = mean and label_smoothing = 0.0
// are not printed. mean and sum give a rank-0 result, none gives [N].
// CHECK-LABEL: func.func @cross_entropy
// CHECK-SAME: (%[[L:[a-z0-9]+]]: tensor<8x10xf32>, %[[T:[a-z0-9]+]]: tensor<8xi64>, %[[T32:[a-z0-9]+]]: tensor<8xi32>)
func.func @cross_entropy(%l: tensor<8x10xf32>, %t: tensor<8xi64>, %t32: tensor<8xi32>) {
  // CHECK: merak.cross_entropy %[[L]], %[[T]] : (tensor<8x10xf32>, tensor<8xi64>) -> tensor<f32>
  %0 = merak.cross_entropy %l, %t : (tensor<8x10xf32>, tensor<8xi64>) -> tensor<f32>
  // CHECK: merak.cross_entropy %[[L]], %[[T]] {reduction = #merak.reduction<none>} : (tensor<8x10xf32>, tensor<8xi64>) -> tensor<8xf32>
  %1 = merak.cross_entropy %l, %t {reduction = #merak.reduction<none>} : (tensor<8x10xf32>, tensor<8xi64>) -> tensor<8xf32>
  // CHECK: merak.cross_entropy %[[L]], %[[T32]] {ignore_index = 0 : i64, label_smoothing = 1.000000e-01 : f64, reduction = #merak.reduction<sum>} : (tensor<8x10xf32>, tensor<8xi32>) -> tensor<f32>
  %2 = merak.cross_entropy %l, %t32 {ignore_index = 0 : i64, reduction = #merak.reduction<sum>, label_smoothing = 0.1 : f64} : (tensor<8x10xf32>, tensor<8xi32>) -> tensor<f32>
  // CHECK: merak.cross_entropy %[[L]], %[[T]] : (tensor<8x10xf32>, tensor<8xi64>) -> tensor<f32>
  %3 = merak.cross_entropy %l, %t {ignore_index = -100 : i64, reduction = #merak.reduction<mean>, label_smoothing = 0.0 : f64} : (tensor<8x10xf32>, tensor<8xi64>) -> tensor<f32>
  return
}
