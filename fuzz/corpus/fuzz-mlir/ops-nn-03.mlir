
// CHECK-LABEL: func.func @layer_norm
// CHECK-SAME: (%[[X:[a-z0-9]+]]: tensor<2x5x8xf32>, %[[W:[a-z0-9]+]]: tensor<8xf32>, %[[B:[a-z0-9]+]]: tensor<8xf32>, %[[W2:[a-z0-9]+]]: tensor<5x8xf32>)
func.func @layer_norm(%x: tensor<2x5x8xf32>, %w: tensor<8xf32>, %b: tensor<8xf32>, %w2: tensor<5x8xf32>) {
  // CHECK: merak.layer_norm %[[X]] weight %[[W]] bias %[[B]] {eps = 1.000000e-05 : f64, normalized_rank = 1 : i64} : (tensor<2x5x8xf32>, tensor<8xf32>, tensor<8xf32>) -> tensor<2x5x8xf32>
  %0 = merak.layer_norm %x weight %w bias %b {normalized_rank = 1 : i64, eps = 1.0e-5 : f64} : (tensor<2x5x8xf32>, tensor<8xf32>, tensor<8xf32>) -> tensor<2x5x8xf32>
  // CHECK: merak.layer_norm %[[X]] weight %[[W]] {eps = 1.000000e-05 : f64, normalized_rank = 1 : i64} : (tensor<2x5x8xf32>, tensor<8xf32>) -> tensor<2x5x8xf32>
  %1 = merak.layer_norm %x weight %w {normalized_rank = 1 : i64, eps = 1.0e-5 : f64} : (tensor<2x5x8xf32>, tensor<8xf32>) -> tensor<2x5x8xf32>
  // CHECK: merak.layer_norm %[[X]] bias %[[B]] {eps = 1.000000e-05 : f64, normalized_rank = 1 : i64} : (tensor<2x5x8xf32>, tensor<8xf32>) -> tensor<2x5x8xf32>
  %2 = merak.layer_norm %x bias %b {normalized_rank = 1 : i64, eps = 1.0e-5 : f64} : (tensor<2x5x8xf32>, tensor<8xf32>) -> tensor<2x5x8xf32>
  // CHECK: merak.layer_norm %[[X]] {eps = 9.9999999999999995E-7 : f64, normalized_rank = 3 : i64} : (tensor<2x5x8xf32>) -> tensor<2x5x8xf32>
  %3 = merak.layer_norm %x {normalized_rank = 3 : i64, eps = 1.0e-6 : f64} : (tensor<2x5x8xf32>) -> tensor<2x5x8xf32>
  // CHECK: merak.layer_norm %[[X]] weight %[[W2]] {eps = 1.000000e-05 : f64, normalized_rank = 2 : i64} : (tensor<2x5x8xf32>, tensor<5x8xf32>) -> tensor<2x5x8xf32>
  %4 = merak.layer_norm %x weight %w2 {normalized_rank = 2 : i64, eps = 1.0e-5 : f64} : (tensor<2x5x8xf32>, tensor<5x8xf32>) -> tensor<2x5x8xf32>
  return
}

