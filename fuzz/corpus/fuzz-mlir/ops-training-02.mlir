
func.func @index_backward_shape(%g: tensor<2x3x8xf32>, %idx: tensor<2x3xi64>) {
  // expected-error @+1 {{'merak.index_backward' op result must be 'tensor<10x8xf32>'}}
  %0 = merak.index_backward %g, %idx {dim = 0 : i64, dim_size = 10 : i64} : (tensor<2x3x8xf32>, tensor<2x3xi64>) -> tensor<10x9xf32>
  return
}

