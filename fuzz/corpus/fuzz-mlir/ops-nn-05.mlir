
// Three results: the normalized input and the new running statistics, printed
// with their names.
// CHECK-LABEL: func.func @batch_norm
// CHECK-SAME: (%[[X:[a-z0-9]+]]: tensor<4x3x8x8xf32>, %[[W:[a-z0-9]+]]: tensor<3xf32>, %[[B:[a-z0-9]+]]: tensor<3xf32>, %[[M:[a-z0-9]+]]: tensor<3xf32>, %[[V:[a-z0-9]+]]: tensor<3xf32>, %[[Y:[a-z0-9]+]]: tensor<4x3xf32>)
func.func @batch_norm(%x: tensor<4x3x8x8xf32>, %w: tensor<3xf32>, %b: tensor<3xf32>, %m: tensor<3xf32>, %v: tensor<3xf32>, %y: tensor<4x3xf32>) {
  // CHECK: %result, %new_running_mean, %new_running_var = merak.batch_norm %[[X]], %[[W]], %[[B]], %[[M]], %[[V]] {eps = 1.000000e-05 : f64, momentum = 1.000000e-01 : f64, training = true} : (tensor<4x3x8x8xf32>, tensor<3xf32>, tensor<3xf32>, tensor<3xf32>, tensor<3xf32>) -> (tensor<4x3x8x8xf32>, tensor<3xf32>, tensor<3xf32>)
  %0:3 = merak.batch_norm %x, %w, %b, %m, %v {training = true, momentum = 0.1 : f64, eps = 1.0e-5 : f64} : (tensor<4x3x8x8xf32>, tensor<3xf32>, tensor<3xf32>, tensor<3xf32>, tensor<3xf32>) -> (tensor<4x3x8x8xf32>, tensor<3xf32>, tensor<3xf32>)
  // CHECK: %result_0, %new_running_mean_1, %new_running_var_2 = merak.batch_norm %[[Y]], %[[W]], %[[B]], %[[M]], %[[V]] {eps = 1.000000e-05 : f64, momentum = 1.000000e-01 : f64, training = false} : (tensor<4x3xf32>, tensor<3xf32>, tensor<3xf32>, tensor<3xf32>, tensor<3xf32>) -> (tensor<4x3xf32>, tensor<3xf32>, tensor<3xf32>)
  %1:3 = merak.batch_norm %y, %w, %b, %m, %v {training = false, momentum = 0.1 : f64, eps = 1.0e-5 : f64} : (tensor<4x3xf32>, tensor<3xf32>, tensor<3xf32>, tensor<3xf32>, tensor<3xf32>) -> (tensor<4x3xf32>, tensor<3xf32>, tensor<3xf32>)
  return
}

