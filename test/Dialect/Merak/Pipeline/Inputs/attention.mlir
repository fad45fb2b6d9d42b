// A one-head attention block with a residual and an MLP, for the
// recomputation tests: its core is the region from the Q K^T matmul
// through the scale, the causal mask, softmax and dropout to the matmul
// with V.
func.func @forward(%wq: tensor<8x8xf32> {merak.param = "wq"},
                   %wk: tensor<8x8xf32> {merak.param = "wk"},
                   %wv: tensor<8x8xf32> {merak.param = "wv"},
                   %wo: tensor<8x8xf32> {merak.param = "wo"},
                   %w1: tensor<8x8xf32> {merak.param = "w1"},
                   %mask: tensor<4x4xi1> {merak.buffer = "mask"},
                   %x: tensor<4x8xf32> {merak.input = "x"})
    -> tensor<f32> {
  %q = merak.linear %x, %wq : (tensor<4x8xf32>, tensor<8x8xf32>) -> tensor<4x8xf32>
  %k = merak.linear %x, %wk : (tensor<4x8xf32>, tensor<8x8xf32>) -> tensor<4x8xf32>
  %v = merak.linear %x, %wv : (tensor<4x8xf32>, tensor<8x8xf32>) -> tensor<4x8xf32>
  %kt = merak.permute %k {permutation = array<i64: 1, 0>} : (tensor<4x8xf32>) -> tensor<8x4xf32>
  %s = merak.matmul %q, %kt : (tensor<4x8xf32>, tensor<8x4xf32>) -> tensor<4x4xf32>
  %scale = merak.constant dense<0.35> : tensor<f32>
  %ss = merak.mul %s, %scale : (tensor<4x4xf32>, tensor<f32>) -> tensor<4x4xf32>
  %notmask = merak.not %mask : tensor<4x4xi1>
  %ninf = merak.constant dense<-1.0e9> : tensor<f32>
  %masked = merak.where %notmask, %ninf, %ss : (tensor<4x4xi1>, tensor<f32>, tensor<4x4xf32>) -> tensor<4x4xf32>
  %p = merak.softmax %masked {dim = 1 : i64} : tensor<4x4xf32>
  %pd = merak.dropout %p {p = 0.0 : f64, training = true} : tensor<4x4xf32>
  %c = merak.matmul %pd, %v : (tensor<4x4xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %o = merak.linear %c, %wo : (tensor<4x8xf32>, tensor<8x8xf32>) -> tensor<4x8xf32>
  %r = merak.add %x, %o : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %h = merak.linear %r, %w1 : (tensor<4x8xf32>, tensor<8x8xf32>) -> tensor<4x8xf32>
  %g = merak.gelu %h : tensor<4x8xf32>
  %r2 = merak.add %r, %g : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %loss = merak.reduce_mean %r2 {dims = array<i64>} : (tensor<4x8xf32>) -> tensor<f32>
  return %loss : tensor<f32>
}
