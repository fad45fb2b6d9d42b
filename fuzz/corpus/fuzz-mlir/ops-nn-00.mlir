// Round trip of merak linear algebra, softmax, normalization, embedding, convolution, pooling and loss ops.
// RUN: merak-opt %s -split-input-file | merak-opt -split-input-file | FileCheck %s

// CHECK-LABEL: func.func @linear
// CHECK-SAME: (%[[X:[a-z0-9]+]]: tensor<2x5x8xf32>, %[[W:[a-z0-9]+]]: tensor<16x8xf32>, %[[B:[a-z0-9]+]]: tensor<16xf32>, %[[V:[a-z0-9]+]]: tensor<8xf32>)
func.func @linear(%x: tensor<2x5x8xf32>, %w: tensor<16x8xf32>, %b: tensor<16xf32>, %v: tensor<8xf32>) {
  // CHECK: merak.linear %[[X]], %[[W]], %[[B]] : (tensor<2x5x8xf32>, tensor<16x8xf32>, tensor<16xf32>) -> tensor<2x5x16xf32>
  %0 = merak.linear %x, %w, %b : (tensor<2x5x8xf32>, tensor<16x8xf32>, tensor<16xf32>) -> tensor<2x5x16xf32>
  // CHECK: merak.linear %[[X]], %[[W]] : (tensor<2x5x8xf32>, tensor<16x8xf32>) -> tensor<2x5x16xf32>
  %1 = merak.linear %x, %w : (tensor<2x5x8xf32>, tensor<16x8xf32>) -> tensor<2x5x16xf32>
  // CHECK: merak.linear %[[V]], %[[W]], %[[B]] : (tensor<8xf32>, tensor<16x8xf32>, tensor<16xf32>) -> tensor<16xf32>
  %2 = merak.linear %v, %w, %b : (tensor<8xf32>, tensor<16x8xf32>, tensor<16xf32>) -> tensor<16xf32>
  return
}

