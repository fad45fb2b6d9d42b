
func.func @sgd_types(%p: tensor<4xf32>, %g: tensor<3xf32>, %lr: tensor<f32>, %step: tensor<i64>) {
  // expected-error @+1 {{'merak.sgd_update' op failed to verify that all of {param, grad, momentum_buffer, new_param, new_momentum_buffer} have same type}}
  %0:2 = merak.sgd_update %p, %g, %p, %lr, %step {dampening = 0.0 : f64, momentum = 0.0 : f64, nesterov = false, weight_decay = 0.0 : f64} : (tensor<4xf32>, tensor<3xf32>, tensor<4xf32>, tensor<f32>, tensor<i64>) -> (tensor<4xf32>, tensor<4xf32>)
  return
}

