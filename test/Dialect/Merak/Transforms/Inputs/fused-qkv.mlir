// One attention input block with GPT-2's fused q/k/v projection (a [24, 8]
// linear whose result is sliced into three sections of 8 features, each
// reshaped into 2 heads), a fused gate/up projection of a SwiGLU MLP (two
// sections of 16 read by silu and mul), and a projection whose weight is
// also read elsewhere. Shared by the --merak-split-fused-projections tests.
func.func @forward(%x: tensor<2x4x8xf32> {merak.input = "x"},
                   %wqkv: tensor<24x8xf32> {merak.param = "attn.qkv.weight"},
                   %bqkv: tensor<24xf32> {merak.param = "attn.qkv.bias"},
                   %wgu: tensor<32x8xf32> {merak.param = "mlp.gate_up.weight"},
                   %wd: tensor<8x16xf32> {merak.param = "mlp.down.weight"},
                   %wt: tensor<16x8xf32> {merak.param = "tied.weight"})
    -> tensor<f32> {
  %y = merak.linear %x, %wqkv, %bqkv : (tensor<2x4x8xf32>, tensor<24x8xf32>, tensor<24xf32>) -> tensor<2x4x24xf32>
  %q = merak.slice %y {dim = 2 : i64, start = 0 : i64, end = 8 : i64} : (tensor<2x4x24xf32>) -> tensor<2x4x8xf32>
  %k = merak.slice %y {dim = 2 : i64, start = 8 : i64, end = 16 : i64} : (tensor<2x4x24xf32>) -> tensor<2x4x8xf32>
  %v = merak.slice %y {dim = 2 : i64, start = 16 : i64, end = 24 : i64} : (tensor<2x4x24xf32>) -> tensor<2x4x8xf32>
  %q4 = merak.reshape %q {shape = array<i64: 2, 4, 2, 4>} : (tensor<2x4x8xf32>) -> tensor<2x4x2x4xf32>
  %k4 = merak.reshape %k {shape = array<i64: 2, 4, 2, 4>} : (tensor<2x4x8xf32>) -> tensor<2x4x2x4xf32>
  %v4 = merak.reshape %v {shape = array<i64: 2, 4, 2, 4>} : (tensor<2x4x8xf32>) -> tensor<2x4x2x4xf32>
  %qk = merak.mul %q4, %k4 : (tensor<2x4x2x4xf32>, tensor<2x4x2x4xf32>) -> tensor<2x4x2x4xf32>
  %a4 = merak.mul %qk, %v4 : (tensor<2x4x2x4xf32>, tensor<2x4x2x4xf32>) -> tensor<2x4x2x4xf32>
  %a = merak.reshape %a4 {shape = array<i64: 2, 4, 8>} : (tensor<2x4x2x4xf32>) -> tensor<2x4x8xf32>
  %gu = merak.linear %a, %wgu : (tensor<2x4x8xf32>, tensor<32x8xf32>) -> tensor<2x4x32xf32>
  %g = merak.slice %gu {dim = 2 : i64, start = 0 : i64, end = 16 : i64} : (tensor<2x4x32xf32>) -> tensor<2x4x16xf32>
  %u = merak.slice %gu {dim = 2 : i64, start = 16 : i64, end = 32 : i64} : (tensor<2x4x32xf32>) -> tensor<2x4x16xf32>
  %gs = merak.silu %g : tensor<2x4x16xf32>
  %h = merak.mul %gs, %u : (tensor<2x4x16xf32>, tensor<2x4x16xf32>) -> tensor<2x4x16xf32>
  %d = merak.linear %h, %wd : (tensor<2x4x16xf32>, tensor<8x16xf32>) -> tensor<2x4x8xf32>
  %t = merak.linear %d, %wt : (tensor<2x4x8xf32>, tensor<16x8xf32>) -> tensor<2x4x16xf32>
  %t1 = merak.slice %t {dim = 2 : i64, start = 0 : i64, end = 8 : i64} : (tensor<2x4x16xf32>) -> tensor<2x4x8xf32>
  %t2 = merak.slice %t {dim = 2 : i64, start = 8 : i64, end = 16 : i64} : (tensor<2x4x16xf32>) -> tensor<2x4x8xf32>
  %tg = merak.silu %t1 : tensor<2x4x8xf32>
  %tm = merak.mul %tg, %t2 : (tensor<2x4x8xf32>, tensor<2x4x8xf32>) -> tensor<2x4x8xf32>
  %e = merak.linear %tm, %wt : (tensor<2x4x8xf32>, tensor<16x8xf32>) -> tensor<2x4x16xf32>
  %s = merak.reduce_sum %e {dims = array<i64: 0, 1, 2>} : (tensor<2x4x16xf32>) -> tensor<f32>
  return %s : tensor<f32>
}
