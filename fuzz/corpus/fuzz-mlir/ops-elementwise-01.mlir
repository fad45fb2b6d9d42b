
// CHECK-LABEL: func.func @unary
// CHECK-SAME: (%[[X:[a-z0-9]+]]: tensor<2x3xf32>, %[[I:[a-z0-9]+]]: tensor<4xi64>, %[[H:[a-z0-9]+]]: tensor<8xbf16>, %[[B:[a-z0-9]+]]: tensor<2x3xi1>, %[[S:[a-z0-9]+]]: tensor<f64>)
func.func @unary(%x: tensor<2x3xf32>, %i: tensor<4xi64>, %h: tensor<8xbf16>, %b: tensor<2x3xi1>, %s: tensor<f64>) {
  // CHECK: merak.neg %[[X]] : tensor<2x3xf32>
  %0 = merak.neg %x : tensor<2x3xf32>
  // CHECK: merak.neg %[[I]] : tensor<4xi64>
  %1 = merak.neg %i : tensor<4xi64>
  // CHECK: merak.abs %[[I]] : tensor<4xi64>
  %2 = merak.abs %i : tensor<4xi64>
  // CHECK: merak.exp %[[X]] : tensor<2x3xf32>
  %3 = merak.exp %x : tensor<2x3xf32>
  // CHECK: merak.log %[[H]] : tensor<8xbf16>
  %4 = merak.log %h : tensor<8xbf16>
  // CHECK: merak.sin %[[X]] : tensor<2x3xf32>
  %5 = merak.sin %x : tensor<2x3xf32>
  // CHECK: merak.cos %[[X]] : tensor<2x3xf32>
  %6 = merak.cos %x : tensor<2x3xf32>
  // CHECK: merak.sqrt %[[S]] : tensor<f64>
  %7 = merak.sqrt %s : tensor<f64>
  // CHECK: merak.rsqrt %[[X]] : tensor<2x3xf32>
  %8 = merak.rsqrt %x : tensor<2x3xf32>
  // CHECK: merak.reciprocal %[[X]] : tensor<2x3xf32>
  %9 = merak.reciprocal %x : tensor<2x3xf32>
  // CHECK: merak.erf %[[X]] : tensor<2x3xf32>
  %10 = merak.erf %x : tensor<2x3xf32>
  // CHECK: merak.tanh %[[H]] : tensor<8xbf16>
  %11 = merak.tanh %h : tensor<8xbf16>
  // CHECK: merak.sigmoid %[[X]] : tensor<2x3xf32>
  %12 = merak.sigmoid %x : tensor<2x3xf32>
  // CHECK: merak.silu %[[X]] : tensor<2x3xf32>
  %13 = merak.silu %x : tensor<2x3xf32>
  // CHECK: merak.relu %[[X]] : tensor<2x3xf32>
  %14 = merak.relu %x : tensor<2x3xf32>
  // CHECK: merak.relu %[[I]] : tensor<4xi64>
  %15 = merak.relu %i : tensor<4xi64>
  // CHECK: merak.not %[[B]] : tensor<2x3xi1>
  %16 = merak.not %b : tensor<2x3xi1>
  return
}

