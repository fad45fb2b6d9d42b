// Input of merak-lora.mlir's categories: an attention layer (q, k, v, o),
// an MLP (up, ReLU, down), a linear of neither kind (proj, then tanh) and
// the output head, as the importer makes them from a small PyTorch module.
module {
  func.func @forward(%arg0: tensor<8x8xf32> {merak.param = "q.weight"}, %arg1: tensor<8xf32> {merak.param = "q.bias"}, %arg2: tensor<8x8xf32> {merak.param = "k.weight"}, %arg3: tensor<8xf32> {merak.param = "k.bias"}, %arg4: tensor<8x8xf32> {merak.param = "v.weight"}, %arg5: tensor<8xf32> {merak.param = "v.bias"}, %arg6: tensor<8x8xf32> {merak.param = "o.weight"}, %arg7: tensor<8xf32> {merak.param = "o.bias"}, %arg8: tensor<16x8xf32> {merak.param = "up.weight"}, %arg9: tensor<16xf32> {merak.param = "up.bias"}, %arg10: tensor<8x16xf32> {merak.param = "down.weight"}, %arg11: tensor<8xf32> {merak.param = "down.bias"}, %arg12: tensor<8x8xf32> {merak.param = "proj.weight"}, %arg13: tensor<8xf32> {merak.param = "proj.bias"}, %arg14: tensor<5x8xf32> {merak.param = "head.weight"}, %arg15: tensor<5xf32> {merak.param = "head.bias"}, %arg16: tensor<2x3x8xf32> {merak.input = "x"}, %arg17: tensor<2x3xi64> {merak.input = "t"}) -> tensor<f32> {
    %0 = merak.linear %arg16, %arg0, %arg1 : (tensor<2x3x8xf32>, tensor<8x8xf32>, tensor<8xf32>) -> tensor<2x3x8xf32>
    %1 = merak.linear %arg16, %arg2, %arg3 : (tensor<2x3x8xf32>, tensor<8x8xf32>, tensor<8xf32>) -> tensor<2x3x8xf32>
    %2 = merak.linear %arg16, %arg4, %arg5 : (tensor<2x3x8xf32>, tensor<8x8xf32>, tensor<8xf32>) -> tensor<2x3x8xf32>
    %3 = merak.permute %1 {permutation = array<i64: 0, 2, 1>} : (tensor<2x3x8xf32>) -> tensor<2x8x3xf32>
    %4 = merak.matmul %0, %3 : (tensor<2x3x8xf32>, tensor<2x8x3xf32>) -> tensor<2x3x3xf32>
    %5 = merak.constant dense<3.500000e-01> : tensor<f32>
    %6 = merak.mul %4, %5 : (tensor<2x3x3xf32>, tensor<f32>) -> tensor<2x3x3xf32>
    %7 = merak.softmax %6 {dim = 2 : i64} : tensor<2x3x3xf32>
    %8 = merak.matmul %7, %2 : (tensor<2x3x3xf32>, tensor<2x3x8xf32>) -> tensor<2x3x8xf32>
    %9 = merak.linear %8, %arg6, %arg7 : (tensor<2x3x8xf32>, tensor<8x8xf32>, tensor<8xf32>) -> tensor<2x3x8xf32>
    %10 = merak.add %arg16, %9 : (tensor<2x3x8xf32>, tensor<2x3x8xf32>) -> tensor<2x3x8xf32>
    %11 = merak.linear %10, %arg8, %arg9 : (tensor<2x3x8xf32>, tensor<16x8xf32>, tensor<16xf32>) -> tensor<2x3x16xf32>
    %12 = merak.relu %11 : tensor<2x3x16xf32>
    %13 = merak.linear %12, %arg10, %arg11 : (tensor<2x3x16xf32>, tensor<8x16xf32>, tensor<8xf32>) -> tensor<2x3x8xf32>
    %14 = merak.add %10, %13 : (tensor<2x3x8xf32>, tensor<2x3x8xf32>) -> tensor<2x3x8xf32>
    %15 = merak.linear %14, %arg12, %arg13 : (tensor<2x3x8xf32>, tensor<8x8xf32>, tensor<8xf32>) -> tensor<2x3x8xf32>
    %16 = merak.tanh %15 : tensor<2x3x8xf32>
    %17 = merak.linear %16, %arg14, %arg15 : (tensor<2x3x8xf32>, tensor<5x8xf32>, tensor<5xf32>) -> tensor<2x3x5xf32>
    %18 = merak.reshape %17 {shape = array<i64: 6, 5>} : (tensor<2x3x5xf32>) -> tensor<6x5xf32>
    %19 = merak.reshape %arg17 {shape = array<i64: 6>} : (tensor<2x3xi64>) -> tensor<6xi64>
    %20 = merak.cross_entropy %18, %19 : (tensor<6x5xf32>, tensor<6xi64>) -> tensor<f32>
    return %20 : tensor<f32>
  }
}

