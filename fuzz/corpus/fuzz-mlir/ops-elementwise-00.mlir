// Round trip of merak constants and elementwise ops (unary, binary, compare, where).
// RUN: merak-opt %s -split-input-file | merak-opt -split-input-file | FileCheck %s

// CHECK-LABEL: func.func @constant
func.func @constant() -> (tensor<2x2xf32>, tensor<3xi64>, tensor<i1>, tensor<2xbf16>, tensor<4xi32>, tensor<f16>, tensor<1xf64>) {
  // CHECK: merak.constant dense<{{\[}}[1.000000e+00, 2.000000e+00], [3.000000e+00, 4.000000e+00]]> : tensor<2x2xf32>
  %0 = merak.constant dense<[[1.0, 2.0], [3.0, 4.0]]> : tensor<2x2xf32>
  // CHECK: merak.constant dense<[0, 1, 2]> : tensor<3xi64>
  %1 = merak.constant dense<[0, 1, 2]> : tensor<3xi64>
  // CHECK: merak.constant dense<true> : tensor<i1>
  %2 = merak.constant dense<true> : tensor<i1>
  // CHECK: merak.constant dense<5.000000e-01> : tensor<2xbf16>
  %3 = merak.constant dense<0.5> : tensor<2xbf16>
  // CHECK: merak.constant dense<-7> : tensor<4xi32>
  %4 = merak.constant dense<-7> : tensor<4xi32>
  // CHECK: merak.constant dense<1.000000e+00> : tensor<f16>
  %5 = merak.constant dense<1.0> : tensor<f16>
  // CHECK: merak.constant dense<2.500000e+00> : tensor<1xf64>
  %6 = merak.constant dense<2.5> : tensor<1xf64>
  return %0, %1, %2, %3, %4, %5, %6 : tensor<2x2xf32>, tensor<3xi64>, tensor<i1>, tensor<2xbf16>, tensor<4xi32>, tensor<f16>, tensor<1xf64>
}

