// Tests --merak-fuse-attention: the chain a masked attention imports to
// (a boolean mask through where, an additive one through add) becomes one
// merak.masked_attention; chains it cannot replace exactly stay as they are.
// RUN: merak-opt %s -split-input-file --merak-fuse-attention | FileCheck %s
// RUN: merak-opt %s -split-input-file --merak-fuse-attention="flash=true" | FileCheck %s --check-prefix=FLASH

// With flash=true the fused op keeps each row's log-sum-exp (f32) instead
// of the probabilities.
// FLASH-LABEL: func.func @gpt2
// FLASH-NEXT: %[[R:.*]], %{{.*}} = merak.masked_attention %arg0, %arg1, %arg2, %arg3 {scale = 2.500000e-01 : f64} : (tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32>, tensor<1x1x8x8xi1>) -> (tensor<2x4x8x16xf32>, tensor<2x4x8xf32>)
// FLASH-LABEL: func.func @unscaled
// FLASH: merak.masked_attention {{.*}} -> (tensor<8x4xf32>, tensor<8xf32>)

// GPT-2's attention: q @ k^T, scaled, masked_fill(~mask, -inf), softmax,
// an inactive dropout, @ v. The fused op reads k itself (not its
// transpose), the mask and the scale; the chain is gone.
// CHECK-LABEL: func.func @gpt2
// CHECK-SAME: (%[[Q:.*]]: tensor<2x4x8x16xf32>, %[[K:.*]]: tensor<2x4x8x16xf32>, %[[V:.*]]: tensor<2x4x8x16xf32>, %[[M:.*]]: tensor<1x1x8x8xi1>)
// CHECK-NEXT: %[[R:.*]], %{{.*}} = merak.masked_attention %[[Q]], %[[K]], %[[V]], %[[M]] {scale = 2.500000e-01 : f64} : (tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32>, tensor<1x1x8x8xi1>) -> (tensor<2x4x8x16xf32>, tensor<2x4x8x8xf32>)
// CHECK-NEXT: return %[[R]]
func.func @gpt2(%q: tensor<2x4x8x16xf32>, %k: tensor<2x4x8x16xf32>, %v: tensor<2x4x8x16xf32>, %mask: tensor<1x1x8x8xi1>) -> tensor<2x4x8x16xf32> {
  %kt = merak.permute %k {permutation = array<i64: 0, 1, 3, 2>} : (tensor<2x4x8x16xf32>) -> tensor<2x4x16x8xf32>
  %s = merak.matmul %q, %kt : (tensor<2x4x8x16xf32>, tensor<2x4x16x8xf32>) -> tensor<2x4x8x8xf32>
  %c = merak.constant dense<2.500000e-01> : tensor<f32>
  %scaled = merak.mul %s, %c : (tensor<2x4x8x8xf32>, tensor<f32>) -> tensor<2x4x8x8xf32>
  %not = merak.not %mask : tensor<1x1x8x8xi1>
  %inf = merak.constant dense<0xFF800000> : tensor<f32>
  %masked = merak.where %not, %inf, %scaled : (tensor<1x1x8x8xi1>, tensor<f32>, tensor<2x4x8x8xf32>) -> tensor<2x4x8x8xf32>
  %p = merak.softmax %masked {dim = 3 : i64} : tensor<2x4x8x8xf32>
  %d = merak.dropout %p {p = 0.000000e+00 : f64, training = true} : tensor<2x4x8x8xf32>
  %o = merak.matmul %d, %v : (tensor<2x4x8x8xf32>, tensor<2x4x8x16xf32>) -> tensor<2x4x8x16xf32>
  return %o : tensor<2x4x8x16xf32>
}

// -----

// Unscaled scores, softmax along dim -1, no dropout, a mask of rank 2 and
// a value of another width; the key is a computed transpose, so the fused
// op reads a permute of it back.
// CHECK-LABEL: func.func @unscaled
// CHECK-NEXT: %[[K:.*]] = merak.permute %arg1 {permutation = array<i64: 1, 0>}
// CHECK-NEXT: %[[R:.*]], %{{.*}} = merak.masked_attention %arg0, %[[K]], %arg2, %arg3 {scale = 1.000000e+00 : f64} : (tensor<8x16xf32>, tensor<8x16xf32>, tensor<8x4xf32>, tensor<8x8xi1>) -> (tensor<8x4xf32>, tensor<8x8xf32>)
// CHECK-NEXT: return %[[R]]
func.func @unscaled(%q: tensor<8x16xf32>, %kt: tensor<16x8xf32>, %v: tensor<8x4xf32>, %mask: tensor<8x8xi1>) -> tensor<8x4xf32> {
  %s = merak.matmul %q, %kt : (tensor<8x16xf32>, tensor<16x8xf32>) -> tensor<8x8xf32>
  %not = merak.not %mask : tensor<8x8xi1>
  %inf = merak.constant dense<0xFF800000> : tensor<f32>
  %masked = merak.where %not, %inf, %s : (tensor<8x8xi1>, tensor<f32>, tensor<8x8xf32>) -> tensor<8x8xf32>
  %p = merak.softmax %masked {dim = -1 : i64} : tensor<8x8xf32>
  %o = merak.matmul %p, %v : (tensor<8x8xf32>, tensor<8x4xf32>) -> tensor<8x4xf32>
  return %o : tensor<8x4xf32>
}

// -----

// torch.where(mask, scores, -inf): the condition is the mask itself.
// CHECK-LABEL: func.func @where_keep
// CHECK-NEXT: %[[R:.*]], %{{.*}} = merak.masked_attention %arg0, %arg1, %arg2, %arg3 {scale = 1.250000e-01 : f64}
// CHECK-NEXT: return %[[R]]
func.func @where_keep(%q: tensor<4x8x16xf32>, %k: tensor<4x8x16xf32>, %v: tensor<4x8x16xf32>, %mask: tensor<8x8xi1>) -> tensor<4x8x16xf32> {
  %kt = merak.permute %k {permutation = array<i64: 0, 2, 1>} : (tensor<4x8x16xf32>) -> tensor<4x16x8xf32>
  %s = merak.matmul %q, %kt : (tensor<4x8x16xf32>, tensor<4x16x8xf32>) -> tensor<4x8x8xf32>
  %c = merak.constant dense<1.250000e-01> : tensor<f32>
  %scaled = merak.mul %c, %s : (tensor<f32>, tensor<4x8x8xf32>) -> tensor<4x8x8xf32>
  %inf = merak.constant dense<0xFF800000> : tensor<f32>
  %masked = merak.where %mask, %scaled, %inf : (tensor<8x8xi1>, tensor<4x8x8xf32>, tensor<f32>) -> tensor<4x8x8xf32>
  %p = merak.softmax %masked {dim = 2 : i64} : tensor<4x8x8xf32>
  %o = merak.matmul %p, %v : (tensor<4x8x8xf32>, tensor<4x8x16xf32>) -> tensor<4x8x16xf32>
  return %o : tensor<4x8x16xf32>
}

// -----

// LLaMA's attention: the scores divided by sqrt(d), plus a constant
// additive causal mask (zeros and -inf). The fused op divides and adds.
// CHECK-LABEL: func.func @llama
// CHECK-NEXT: %[[M:.*]] = merak.constant
// CHECK-NEXT: %[[R:.*]], %{{.*}} = merak.masked_attention %arg0, %arg1, %arg2, %[[M]] {divide, scale = 2.000000e+00 : f64} : (tensor<2x4x3x4xf32>, tensor<2x4x3x4xf32>, tensor<2x4x3x4xf32>, tensor<3x3xf32>) -> (tensor<2x4x3x4xf32>, tensor<2x4x3x3xf32>)
// CHECK-NEXT: return %[[R]]
func.func @llama(%q: tensor<2x4x3x4xf32>, %k: tensor<2x4x3x4xf32>, %v: tensor<2x4x3x4xf32>) -> tensor<2x4x3x4xf32> {
  %mask = merak.constant dense<[[0.0, 0xFF800000, 0xFF800000], [0.0, 0.0, 0xFF800000], [0.0, 0.0, 0.0]]> : tensor<3x3xf32>
  %kt = merak.permute %k {permutation = array<i64: 0, 1, 3, 2>} : (tensor<2x4x3x4xf32>) -> tensor<2x4x4x3xf32>
  %s = merak.matmul %q, %kt : (tensor<2x4x3x4xf32>, tensor<2x4x4x3xf32>) -> tensor<2x4x3x3xf32>
  %c = merak.constant dense<2.000000e+00> : tensor<f32>
  %scaled = merak.div %s, %c : (tensor<2x4x3x3xf32>, tensor<f32>) -> tensor<2x4x3x3xf32>
  %masked = merak.add %scaled, %mask : (tensor<2x4x3x3xf32>, tensor<3x3xf32>) -> tensor<2x4x3x3xf32>
  %p = merak.softmax %masked {dim = 3 : i64} : tensor<2x4x3x3xf32>
  %o = merak.matmul %p, %v : (tensor<2x4x3x3xf32>, tensor<2x4x3x4xf32>) -> tensor<2x4x3x4xf32>
  return %o : tensor<2x4x3x4xf32>
}

// -----

// An additive term computed from a parameter (T5's relative position
// bias) needs its gradient: the chain stays. So does a constant divisor
// on the left (c / s is not a scaling of the scores).
// CHECK-LABEL: func.func @position_bias
// CHECK-NOT: merak.masked_attention
// CHECK: merak.softmax
func.func @position_bias(%q: tensor<8x16xf32>, %kt: tensor<16x8xf32>, %v: tensor<8x16xf32>, %table: tensor<8x8xf32> {merak.param = "bias"}) -> tensor<8x16xf32> {
  %s = merak.matmul %q, %kt : (tensor<8x16xf32>, tensor<16x8xf32>) -> tensor<8x8xf32>
  %bias = merak.neg %table : tensor<8x8xf32>
  %masked = merak.add %s, %bias : (tensor<8x8xf32>, tensor<8x8xf32>) -> tensor<8x8xf32>
  %p = merak.softmax %masked {dim = 1 : i64} : tensor<8x8xf32>
  %o = merak.matmul %p, %v : (tensor<8x8xf32>, tensor<8x16xf32>) -> tensor<8x16xf32>
  return %o : tensor<8x16xf32>
}

// CHECK-LABEL: func.func @divisor_on_the_left
// CHECK-NOT: merak.masked_attention
// CHECK: merak.softmax
func.func @divisor_on_the_left(%q: tensor<8x16xf32>, %kt: tensor<16x8xf32>, %v: tensor<8x16xf32>, %mask: tensor<8x8xf32>) -> tensor<8x16xf32> {
  %s = merak.matmul %q, %kt : (tensor<8x16xf32>, tensor<16x8xf32>) -> tensor<8x8xf32>
  %c = merak.constant dense<2.000000e+00> : tensor<f32>
  %scaled = merak.div %c, %s : (tensor<f32>, tensor<8x8xf32>) -> tensor<8x8xf32>
  %masked = merak.add %scaled, %mask : (tensor<8x8xf32>, tensor<8x8xf32>) -> tensor<8x8xf32>
  %p = merak.softmax %masked {dim = 1 : i64} : tensor<8x8xf32>
  %o = merak.matmul %p, %v : (tensor<8x8xf32>, tensor<8x16xf32>) -> tensor<8x16xf32>
  return %o : tensor<8x16xf32>
}

// -----

// What stays: an active dropout (its mask is drawn between softmax and the
// product), probabilities the function also returns, a fill other than
// -inf, and a softmax over another dimension.
// CHECK-LABEL: func.func @active_dropout
// CHECK-NOT: merak.masked_attention
// CHECK: merak.dropout
func.func @active_dropout(%q: tensor<8x16xf32>, %kt: tensor<16x8xf32>, %v: tensor<8x16xf32>, %mask: tensor<8x8xi1>) -> tensor<8x16xf32> {
  %s = merak.matmul %q, %kt : (tensor<8x16xf32>, tensor<16x8xf32>) -> tensor<8x8xf32>
  %not = merak.not %mask : tensor<8x8xi1>
  %inf = merak.constant dense<0xFF800000> : tensor<f32>
  %masked = merak.where %not, %inf, %s : (tensor<8x8xi1>, tensor<f32>, tensor<8x8xf32>) -> tensor<8x8xf32>
  %p = merak.softmax %masked {dim = 1 : i64} : tensor<8x8xf32>
  %d = merak.dropout %p {p = 1.000000e-01 : f64, training = true} : tensor<8x8xf32>
  %o = merak.matmul %d, %v : (tensor<8x8xf32>, tensor<8x16xf32>) -> tensor<8x16xf32>
  return %o : tensor<8x16xf32>
}

// CHECK-LABEL: func.func @probs_returned
// CHECK-NOT: merak.masked_attention
// CHECK: merak.softmax
func.func @probs_returned(%q: tensor<8x16xf32>, %kt: tensor<16x8xf32>, %v: tensor<8x16xf32>, %mask: tensor<8x8xi1>) -> (tensor<8x16xf32>, tensor<8x8xf32>) {
  %s = merak.matmul %q, %kt : (tensor<8x16xf32>, tensor<16x8xf32>) -> tensor<8x8xf32>
  %not = merak.not %mask : tensor<8x8xi1>
  %inf = merak.constant dense<0xFF800000> : tensor<f32>
  %masked = merak.where %not, %inf, %s : (tensor<8x8xi1>, tensor<f32>, tensor<8x8xf32>) -> tensor<8x8xf32>
  %p = merak.softmax %masked {dim = 1 : i64} : tensor<8x8xf32>
  %o = merak.matmul %p, %v : (tensor<8x8xf32>, tensor<8x16xf32>) -> tensor<8x16xf32>
  return %o, %p : tensor<8x16xf32>, tensor<8x8xf32>
}

// CHECK-LABEL: func.func @finite_fill
// CHECK-NOT: merak.masked_attention
// CHECK: merak.where
func.func @finite_fill(%q: tensor<8x16xf32>, %kt: tensor<16x8xf32>, %v: tensor<8x16xf32>, %mask: tensor<8x8xi1>) -> tensor<8x16xf32> {
  %s = merak.matmul %q, %kt : (tensor<8x16xf32>, tensor<16x8xf32>) -> tensor<8x8xf32>
  %not = merak.not %mask : tensor<8x8xi1>
  %fill = merak.constant dense<-1.000000e+04> : tensor<f32>
  %masked = merak.where %not, %fill, %s : (tensor<8x8xi1>, tensor<f32>, tensor<8x8xf32>) -> tensor<8x8xf32>
  %p = merak.softmax %masked {dim = 1 : i64} : tensor<8x8xf32>
  %o = merak.matmul %p, %v : (tensor<8x8xf32>, tensor<8x16xf32>) -> tensor<8x16xf32>
  return %o : tensor<8x16xf32>
}

// CHECK-LABEL: func.func @softmax_over_queries
// CHECK-NOT: merak.masked_attention
// CHECK: merak.softmax
func.func @softmax_over_queries(%q: tensor<8x16xf32>, %kt: tensor<16x8xf32>, %v: tensor<8x16xf32>, %mask: tensor<8x8xi1>) -> tensor<8x16xf32> {
  %s = merak.matmul %q, %kt : (tensor<8x16xf32>, tensor<16x8xf32>) -> tensor<8x8xf32>
  %not = merak.not %mask : tensor<8x8xi1>
  %inf = merak.constant dense<0xFF800000> : tensor<f32>
  %masked = merak.where %not, %inf, %s : (tensor<8x8xi1>, tensor<f32>, tensor<8x8xf32>) -> tensor<8x8xf32>
  %p = merak.softmax %masked {dim = 0 : i64} : tensor<8x8xf32>
  %o = merak.matmul %p, %v : (tensor<8x8xf32>, tensor<8x16xf32>) -> tensor<8x16xf32>
  return %o : tensor<8x16xf32>
}

// Cross-attention (8 queries, 6 keys) is not self-attention: it stays, and
// no transpose of the keys is left behind.
// CHECK-LABEL: func.func @cross_attention
// CHECK-NOT: merak.masked_attention
// CHECK-NOT: merak.permute
// CHECK: merak.softmax
func.func @cross_attention(%q: tensor<8x16xf32>, %kt: tensor<16x6xf32>, %v: tensor<6x16xf32>, %mask: tensor<8x6xi1>) -> tensor<8x16xf32> {
  %s = merak.matmul %q, %kt : (tensor<8x16xf32>, tensor<16x6xf32>) -> tensor<8x6xf32>
  %not = merak.not %mask : tensor<8x6xi1>
  %inf = merak.constant dense<0xFF800000> : tensor<f32>
  %masked = merak.where %not, %inf, %s : (tensor<8x6xi1>, tensor<f32>, tensor<8x6xf32>) -> tensor<8x6xf32>
  %p = merak.softmax %masked {dim = 1 : i64} : tensor<8x6xf32>
  %o = merak.matmul %p, %v : (tensor<8x6xf32>, tensor<6x16xf32>) -> tensor<8x16xf32>
  return %o : tensor<8x16xf32>
}
