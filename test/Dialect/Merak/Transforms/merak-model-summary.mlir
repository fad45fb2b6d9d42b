// Tests --merak-model-summary: parameter and buffer counts, inputs, results
// and the op histogram; the IR passes through unchanged.
// RUN: merak-opt %s --merak-model-summary 2>&1 | FileCheck %s
// RUN: merak-opt %s --merak-model-summary="output=%t.txt" | FileCheck %s --check-prefix=IR
// RUN: FileCheck %s < %t.txt

// CHECK: model summary of @forward
// CHECK-NEXT: parameter elements: 36 (144.0 B)
// CHECK-NEXT: parameters: 2
// CHECK-NEXT: buffers: 1 (4 elements)
// CHECK-NEXT: inputs: x tensor<3x8xf32>, %arg4 tensor<3xi64>
// CHECK-NEXT: results: 2
// CHECK-NEXT: ops: 5
// CHECK-NEXT: merak.add 2
// CHECK-NEXT: func.return 1
// CHECK-NEXT: merak.cross_entropy 1
// CHECK-NEXT: merak.linear 1

// IR-LABEL: func.func @forward
// IR: merak.linear
// IR: merak.cross_entropy
func.func @forward(%w: tensor<4x8xf32> {merak.param = "fc.weight"},
                   %b: tensor<4xf32> {merak.param = "fc.bias"},
                   %s: tensor<4xf32> {merak.buffer = "scale"},
                   %x: tensor<3x8xf32> {merak.input = "x"},
                   %t: tensor<3xi64>) -> (tensor<f32>, tensor<4xf32>) {
  %0 = merak.linear %x, %w, %b : (tensor<3x8xf32>, tensor<4x8xf32>, tensor<4xf32>) -> tensor<3x4xf32>
  %1 = merak.add %0, %s : (tensor<3x4xf32>, tensor<4xf32>) -> tensor<3x4xf32>
  %2 = merak.cross_entropy %1, %t : (tensor<3x4xf32>, tensor<3xi64>) -> tensor<f32>
  %3 = merak.add %s, %s : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  return %2, %3 : tensor<f32>, tensor<4xf32>
}
