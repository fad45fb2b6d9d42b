// Tests --merak-autodiff: the backward pass appended in @train_step, the
// results (loss, gradients, buffer updates), the forward-op references and
// the dropout mask rewrite.
// RUN: merak-opt %s -split-input-file --merak-autodiff -verify-diagnostics | FileCheck %s
// RUN: not merak-opt %s -split-input-file --merak-autodiff="loss-result=99" 2>&1 | FileCheck %s --check-prefix=LOSSIDX
// LOSSIDX: error: loss-result=99 but @forward has {{[0-9]+}} results

// CHECK-LABEL: func.func @forward
// CHECK-LABEL: func.func @train_step
// CHECK-SAME: (%[[W:.*]]: tensor<4x8xf32> {merak.param = "fc.weight"}, %[[B:.*]]: tensor<4xf32> {merak.param = "fc.bias"}, %{{.*}}: tensor<3xf32> {merak.param = "unused"}, %[[X:.*]]: tensor<2x8xf32> {merak.input = "x"}, %[[T:.*]]: tensor<2xi64> {merak.input = "t"})
// The unused parameter gets no gradient, as in PyTorch.
// CHECK-SAME: -> (tensor<f32> {merak.loss}, tensor<4x8xf32> {merak.grad = "fc.weight"}, tensor<4xf32> {merak.grad = "fc.bias"})
// CHECK: %[[Y:.*]] = merak.linear %[[X]], %[[W]], %[[B]] {merak.id = 0 : i64}
// CHECK: %[[H:.*]] = merak.tanh %[[Y]] {merak.id = 1 : i64}
// CHECK: %[[M:.*]] = merak.dropout_mask %[[H]] {merak.id = 2 : i64, p = 5.000000e-01 : f64}
// CHECK: %[[D:.*]] = merak.mul %[[H]], %[[M]] {merak.id = 3 : i64}
// CHECK: %[[L:.*]] = merak.cross_entropy %[[D]], %[[T]] {merak.id = 4 : i64}
// CHECK: %[[ONE:.*]] = merak.constant dense<1.000000e+00> : tensor<f32>
// CHECK: %[[GD:.*]] = merak.cross_entropy_backward %[[ONE]], %[[D]], %[[T]] {merak.grad_of = 4 : i64}
// CHECK: %[[GH:.*]] = merak.mul %[[GD]], %[[M]] {merak.grad_of = 3 : i64}
// tanh: g * (1 - y^2)
// CHECK: %[[Y2:.*]] = merak.mul %[[H]], %[[H]] {merak.grad_of = 1 : i64}
// CHECK: %[[S:.*]] = merak.sub %{{.*}}, %[[Y2]] {merak.grad_of = 1 : i64}
// CHECK: %[[GY:.*]] = merak.mul %[[GH]], %[[S]] {merak.grad_of = 1 : i64}
// linear: dW = g^T x, db = sum(g)
// CHECK: %[[GT:.*]] = merak.permute %{{.*}} {merak.grad_of = 0 : i64, permutation = array<i64: 1, 0>}
// CHECK: %[[GW:.*]] = merak.matmul %[[GT]], %{{.*}} {merak.grad_of = 0 : i64}
// CHECK: %[[GB:.*]] = merak.reduce_sum %{{.*}} {dims = array<i64: 0>, merak.grad_of = 0 : i64}
// CHECK: return %[[L]], %[[GW]], %[[GB]]
func.func @forward(%w: tensor<4x8xf32> {merak.param = "fc.weight"},
                   %b: tensor<4xf32> {merak.param = "fc.bias"},
                   %u: tensor<3xf32> {merak.param = "unused"},
                   %x: tensor<2x8xf32> {merak.input = "x"},
                   %t: tensor<2xi64> {merak.input = "t"}) -> (tensor<2x4xf32>, tensor<f32>) {
  %0 = merak.linear %x, %w, %b : (tensor<2x8xf32>, tensor<4x8xf32>, tensor<4xf32>) -> tensor<2x4xf32>
  %1 = merak.tanh %0 : tensor<2x4xf32>
  %2 = merak.dropout %1 {p = 0.5 : f64, training = true} : tensor<2x4xf32>
  %3 = merak.cross_entropy %2, %t : (tensor<2x4xf32>, tensor<2xi64>) -> tensor<f32>
  return %1, %3 : tensor<2x4xf32>, tensor<f32>
}

// -----

// Broadcasting: the gradient of a broadcast operand is summed back to its
// shape. A value used twice accumulates both gradients. Buffer updates
// become results that replace their buffer argument.
// CHECK-LABEL: func.func @train_step
// CHECK-SAME: -> (tensor<f32> {merak.loss}, tensor<3xf32> {merak.grad = "scale"}, tensor<3xf32> {merak.update_arg = 1 : i64})
// CHECK: %[[P:.*]] = merak.mul %arg2, %arg0 {merak.id = 0 : i64}
// CHECK: %[[Q:.*]] = merak.mul %[[P]], %[[P]] {merak.id = 1 : i64}
// CHECK: %[[G1:.*]] = merak.mul %{{.*}}, %[[P]] {merak.grad_of = 1 : i64}
// CHECK: %[[G2:.*]] = merak.mul %{{.*}}, %[[P]] {merak.grad_of = 1 : i64}
// CHECK: %[[ACC:.*]] = merak.add %[[G2]], %[[G1]] {merak.grad_of = 1 : i64}
// CHECK: %[[GS:.*]] = merak.mul %[[ACC]], %arg2 {merak.grad_of = 0 : i64}
// CHECK: %[[RED:.*]] = merak.reduce_sum %[[GS]] {dims = array<i64: 0>, merak.grad_of = 0 : i64} : (tensor<2x3xf32>) -> tensor<3xf32>
// CHECK: return %{{.*}}, %[[RED]], %{{.*}}
func.func @forward(%s: tensor<3xf32> {merak.param = "scale"},
                   %r: tensor<3xf32> {merak.buffer = "running"},
                   %x: tensor<2x3xf32> {merak.input = "x"})
    -> (tensor<f32>, tensor<3xf32> {merak.buffer_update = "running"}) {
  %0 = merak.mul %x, %s : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xf32>
  %1 = merak.mul %0, %0 : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>
  %2 = merak.reduce_mean %1 {dims = array<i64>} : (tensor<2x3xf32>) -> tensor<f32>
  %3 = merak.add %r, %s : (tensor<3xf32>, tensor<3xf32>) -> tensor<3xf32>
  return %2, %3 : tensor<f32>, tensor<3xf32>
}

// -----

// softmax: one softmax_backward of the gradient and the softmax's result,
// as autograd's _softmax_backward_data, with the dimension normalized.
// CHECK-LABEL: func.func @train_step
// CHECK: %[[SM:.*]] = merak.softmax %{{.*}} {dim = -1 : i64, merak.id = 1 : i64}
// CHECK: merak.softmax_backward %{{.*}}, %[[SM]] {dim = 1 : i64, merak.grad_of = 1 : i64} : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>
func.func @forward(%w: tensor<2x3xf32> {merak.param = "w"}, %x: tensor<2x3xf32> {merak.input = "x"}) -> tensor<f32> {
  %0 = merak.mul %w, %x : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>
  %1 = merak.softmax %0 {dim = -1 : i64} : tensor<2x3xf32>
  %2 = merak.mul %1, %x : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>
  %3 = merak.reduce_sum %2 {dims = array<i64>} : (tensor<2x3xf32>) -> tensor<f32>
  return %3 : tensor<f32>
}

// -----

// masked_attention: one masked_attention_backward of the gradient, the
// operands and the forward's probs.
// CHECK-LABEL: func.func @train_step
// CHECK: %[[R:.*]], %[[P:.*]] = merak.masked_attention %arg0, %arg1, %arg2, %arg3 {merak.id = 0 : i64, scale = 5.000000e-01 : f64}
// CHECK: %{{.*}}, %{{.*}}, %{{.*}} = merak.masked_attention_backward %{{.*}}, %arg0, %arg1, %arg2, %arg3, %[[P]] {merak.grad_of = 0 : i64, scale = 5.000000e-01 : f64}
func.func @forward(%q: tensor<2x4x3xf32> {merak.param = "q"}, %k: tensor<2x4x3xf32> {merak.param = "k"}, %v: tensor<2x4x3xf32> {merak.param = "v"}, %m: tensor<4x4xi1> {merak.buffer = "mask"}) -> tensor<f32> {
  %0:2 = merak.masked_attention %q, %k, %v, %m {scale = 0.5 : f64} : (tensor<2x4x3xf32>, tensor<2x4x3xf32>, tensor<2x4x3xf32>, tensor<4x4xi1>) -> (tensor<2x4x3xf32>, tensor<2x4x4xf32>)
  %1 = merak.reduce_sum %0#0 {dims = array<i64>} : (tensor<2x4x3xf32>) -> tensor<f32>
  return %1 : tensor<f32>
}

// -----

// loss-result is needed when the loss is ambiguous.
// expected-error @+1 {{cannot tell the loss: 2 rank-0 floating results; pass loss-result=K}}
func.func @forward(%w: tensor<2xf32> {merak.param = "w"}) -> (tensor<f32>, tensor<f32>) {
  %0 = merak.reduce_sum %w {dims = array<i64>} : (tensor<2xf32>) -> tensor<f32>
  %1 = merak.reduce_mean %w {dims = array<i64>} : (tensor<2xf32>) -> tensor<f32>
  return %0, %1 : tensor<f32>, tensor<f32>
}

// -----

// An op without a gradient rule on the way from a parameter to the loss.
func.func @forward(%w: tensor<2xf32> {merak.param = "w"}, %x: tensor<2xf32> {merak.input = "x"}) -> tensor<f32> {
  // expected-error @+1 {{has no gradient rule, but the loss depends on it through a parameter}}
  %0 = merak.gelu_backward %x, %w : (tensor<2xf32>, tensor<2xf32>) -> tensor<2xf32>
  %1 = merak.reduce_sum %0 {dims = array<i64>} : (tensor<2xf32>) -> tensor<f32>
  return %1 : tensor<f32>
}

// -----

// Loss scaling (recorded on the forward by --merak-mixed-precision): the
// backward starts from a merak.loss_scale argument instead of 1, so the
// gradient comes out scaled by it.
// CHECK-LABEL: func.func @train_step
// CHECK-SAME: %[[W:.*]]: tensor<2xf32> {merak.param = "w"}, %[[S:.*]]: tensor<f32> {merak.loss_scale = {dynamic = true, init = 6.553600e+04 : f64, window = 2000 : i64}}
// CHECK-NOT: attributes {merak.loss_scale
// CHECK: %[[L:.*]] = merak.reduce_sum %[[W]]
// CHECK: %[[R:.*]] = merak.reshape %[[S]] {merak.grad_of = 0 : i64
// CHECK: %[[G:.*]] = merak.expand %[[R]]
// CHECK: return %[[L]], %[[G]]
func.func @forward(%w: tensor<2xf32> {merak.param = "w"}) -> tensor<f32>
    attributes {merak.loss_scale = {dynamic = true, init = 65536.0 : f64, window = 2000 : i64}} {
  %0 = merak.reduce_sum %w {dims = array<i64>} : (tensor<2xf32>) -> tensor<f32>
  return %0 : tensor<f32>
}

// -----

// A value sliced into parts that cover it (a fused q/k/v projection): the
// parts' gradients are concatenated, not zero-filled and added. A partial
// cover keeps slice_backward and add.
// CHECK-LABEL: func.func @train_step
// CHECK-SAME: %[[W:.*]]: tensor<6x4xf32> {merak.param = "qkv"}, %[[V:.*]]: tensor<4x4xf32> {merak.param = "part"}
// CHECK: merak.slice_backward %{{.*}} {dim = 1 : i64, dim_size = 4 : i64, end = 4 : i64
// CHECK: merak.slice_backward %{{.*}} {dim = 1 : i64, dim_size = 4 : i64, end = 1 : i64
// CHECK: merak.add
// CHECK-NOT: dim_size = 6
// The gradients of k (d(q*k)/dk = q) and of q, then the concatenation in
// the slices' order: q, k, u.
// CHECK: %[[KG:.*]] = merak.mul %{{.*}}, %{{.*}} {merak.grad_of = 4
// CHECK: %[[QG:.*]] = merak.mul %{{.*}}, %{{.*}} {merak.grad_of = 4
// CHECK: %[[CAT:.*]] = merak.concat %[[QG]], %[[KG]], %{{.*}} {dim = 1 : i64, merak.grad_of = {{[0-9]+}} : i64} : (tensor<2x2xf32>, tensor<2x2xf32>, tensor<2x2xf32>) -> tensor<2x6xf32>
// CHECK: merak.reshape %[[CAT]]
// CHECK-NOT: dim_size = 6
func.func @forward(%w: tensor<6x4xf32> {merak.param = "qkv"}, %v: tensor<4x4xf32> {merak.param = "part"}, %x: tensor<2x4xf32> {merak.input = "x"}) -> tensor<f32> {
  %y = merak.linear %x, %w : (tensor<2x4xf32>, tensor<6x4xf32>) -> tensor<2x6xf32>
  %q = merak.slice %y {dim = 1 : i64, start = 0 : i64, end = 2 : i64} : (tensor<2x6xf32>) -> tensor<2x2xf32>
  %k = merak.slice %y {dim = 1 : i64, start = 2 : i64, end = 4 : i64} : (tensor<2x6xf32>) -> tensor<2x2xf32>
  %u = merak.slice %y {dim = 1 : i64, start = 4 : i64, end = 6 : i64} : (tensor<2x6xf32>) -> tensor<2x2xf32>
  %qk = merak.mul %q, %k : (tensor<2x2xf32>, tensor<2x2xf32>) -> tensor<2x2xf32>
  %s = merak.mul %qk, %u : (tensor<2x2xf32>, tensor<2x2xf32>) -> tensor<2x2xf32>
  %z = merak.linear %x, %v : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32>
  %a = merak.slice %z {dim = 1 : i64, start = 0 : i64, end = 1 : i64} : (tensor<2x4xf32>) -> tensor<2x1xf32>
  %b = merak.slice %z {dim = 1 : i64, start = 3 : i64, end = 4 : i64} : (tensor<2x4xf32>) -> tensor<2x1xf32>
  %ab = merak.mul %a, %b : (tensor<2x1xf32>, tensor<2x1xf32>) -> tensor<2x1xf32>
  %0 = merak.reduce_sum %s {dims = array<i64>} : (tensor<2x2xf32>) -> tensor<f32>
  %1 = merak.reduce_sum %ab {dims = array<i64>} : (tensor<2x1xf32>) -> tensor<f32>
  %2 = merak.add %0, %1 : (tensor<f32>, tensor<f32>) -> tensor<f32>
  return %2 : tensor<f32>
}
