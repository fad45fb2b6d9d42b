
func.func @slice_backward_count(%g: tensor<2x3xf32>) {
  // expected-error @+1 {{'merak.slice_backward' op slice [1, 5) step 2 of size 5 does not give 3 elements}}
  %0 = merak.slice_backward %g {dim = 1 : i64, start = 1 : i64, end = 5 : i64, step = 2 : i64, dim_size = 5 : i64} : (tensor<2x3xf32>) -> tensor<2x5xf32>
  return
}

