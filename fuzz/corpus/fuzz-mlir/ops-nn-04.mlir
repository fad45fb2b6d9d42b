
// CHECK-LABEL: func.func @rms_norm
// CHECK-SAME: (%[[X:[a-z0-9]+]]: tensor<2x5x8xbf16>, %[[W:[a-z0-9]+]]: tensor<8xbf16>)
func.func @rms_norm(%x: tensor<2x5x8xbf16>, %w: tensor<8xbf16>) {
  // CHECK: merak.rms_norm %[[X]] weight %[[W]] {eps = 1.000000e-05 : f64, normalized_rank = 1 : i64} : (tensor<2x5x8xbf16>, tensor<8xbf16>) -> tensor<2x5x8xbf16>
  %0 = merak.rms_norm %x weight %w {normalized_rank = 1 : i64, eps = 1.0e-5 : f64} : (tensor<2x5x8xbf16>, tensor<8xbf16>) -> tensor<2x5x8xbf16>
  // CHECK: merak.rms_norm %[[X]] {eps = 1.000000e-05 : f64, normalized_rank = 2 : i64} : (tensor<2x5x8xbf16>) -> tensor<2x5x8xbf16>
  %1 = merak.rms_norm %x {normalized_rank = 2 : i64, eps = 1.0e-5 : f64} : (tensor<2x5x8xbf16>) -> tensor<2x5x8xbf16>
  return
}

