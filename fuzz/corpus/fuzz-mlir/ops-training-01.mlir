
// CHECK-LABEL: func.func @training
func.func @training(%p: tensor<4xf32>, %g: tensor<4xf32>, %m: tensor<4xf32>, %v: tensor<4xf32>, %lr: tensor<f32>, %step: tensor<i64>) {
  // CHECK: merak.dropout_mask %{{.*}} {p = 2.500000e-01 : f64} : tensor<4xf32>
  %0 = merak.dropout_mask %p {p = 0.25 : f64} : tensor<4xf32>
  // CHECK: merak.sgd_update
  %1:2 = merak.sgd_update %p, %g, %m, %lr, %step {dampening = 0.0 : f64, momentum = 0.9 : f64, nesterov = true, weight_decay = 0.0 : f64} : (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<f32>, tensor<i64>) -> (tensor<4xf32>, tensor<4xf32>)
  // CHECK: merak.adamw_update
  %2:3 = merak.adamw_update %p, %g, %m, %v, %lr, %step {beta1 = 0.9 : f64, beta2 = 0.999 : f64, eps = 1.0e-8 : f64, weight_decay = 0.01 : f64} : (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<f32>, tensor<i64>) -> (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>)
  return
}

