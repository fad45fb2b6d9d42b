// Tests --merak-lora on a two-layer MLP with a tied output head.
// RUN: merak-opt %s --merak-lora="rank=2 alpha=4 targets=fc1" | FileCheck %s
// RUN: merak-opt %s --merak-lora="rank=2 targets=all-linear" | FileCheck %s --check-prefix=ALL
// RUN: merak-opt %s --merak-lora="rank=2 targets=fc1 dropout=0.1" | FileCheck %s --check-prefix=DROP
// RUN: merak-opt %s --merak-lora="rank=2 targets=fc1" --merak-autodiff | FileCheck %s --check-prefix=GRAD
// RUN: not merak-opt %s --merak-lora="targets=attn" 2>&1 | FileCheck %s --check-prefix=NOMATCH
// RUN: not merak-opt %s --merak-lora="rank=0" 2>&1 | FileCheck %s --check-prefix=RANK
// RUN: not merak-opt %s --merak-lora="dropout=1" 2>&1 | FileCheck %s --check-prefix=DROPOUT
// RUN: not merak-opt %s --merak-autodiff --merak-lora 2>&1 | FileCheck %s --check-prefix=ORDER
// RUN: merak-opt %S/Inputs/lora-layers.mlir --merak-lora="targets=attention" | FileCheck %s --check-prefix=ATTN
// RUN: merak-opt %S/Inputs/lora-layers.mlir --merak-lora="targets=mlp" | FileCheck %s --check-prefix=MLP
// RUN: merak-opt %S/Inputs/lora-layers.mlir --merak-lora="targets=attention,mlp,proj" | FileCheck %s --check-prefix=BOTH
// RUN: merak-opt %fixtures/gpt2.pt --merak-fuse-attention --merak-lora="targets=attention" | FileCheck %s --check-prefix=FUSED
// RUN: not merak-opt %s --merak-lora="targets=attention" 2>&1 | FileCheck %s --check-prefix=NOATTN

// fc1 gets A [2, 8] (kaiming-uniform) and B [16, 2] (zeros); its result
// gains linear(linear(x, A), B) * alpha / rank; every other parameter is
// frozen.
// CHECK-LABEL: func.func @forward
// CHECK-SAME: %[[X:[a-z0-9]+]]: tensor<4x8xf32> {merak.input = "x"}
// CHECK-SAME: %[[W1:[a-z0-9]+]]: tensor<16x8xf32> {merak.frozen, merak.param = "fc1.weight"}
// CHECK-SAME: tensor<16xf32> {merak.frozen, merak.param = "fc1.bias"}
// CHECK-SAME: tensor<10x16xf32> {merak.frozen, merak.param = "fc2.weight"}
// CHECK-SAME: %[[A:[a-z0-9]+]]: tensor<2x8xf32> {merak.init = "kaiming_uniform", merak.param = "fc1.lora_A.weight"}
// CHECK-SAME: %[[B:[a-z0-9]+]]: tensor<16x2xf32> {merak.init = "zeros", merak.param = "fc1.lora_B.weight"}
// CHECK: %[[Y:.*]] = merak.linear %[[X]], %[[W1]], %{{.*}} :
// CHECK: %[[H:.*]] = merak.linear %[[X]], %[[A]] : (tensor<4x8xf32>, tensor<2x8xf32>) -> tensor<4x2xf32>
// CHECK: %[[D:.*]] = merak.linear %[[H]], %[[B]] : (tensor<4x2xf32>, tensor<16x2xf32>) -> tensor<4x16xf32>
// CHECK: %[[S:.*]] = merak.constant dense<2.000000e+00> : tensor<f32>
// CHECK: %[[DS:.*]] = merak.mul %[[D]], %[[S]]
// CHECK: %[[SUM:.*]] = merak.add %[[Y]], %[[DS]]
// CHECK: merak.gelu %[[SUM]]

// all-linear: fc1 and fc2, not the head (its result feeds the loss).
// ALL-LABEL: func.func @forward
// ALL-SAME: merak.param = "fc1.lora_A.weight"
// ALL-SAME: merak.param = "fc1.lora_B.weight"
// ALL-SAME: merak.param = "fc2.lora_A.weight"
// ALL-SAME: merak.param = "fc2.lora_B.weight"
// ALL-NOT: head.lora

// DROP: %[[XD:.*]] = merak.dropout %{{.*}} {p = 1.000000e-01 : f64, training = true}
// DROP: merak.linear %[[XD]], %{{.*}} : (tensor<4x8xf32>, tensor<2x8xf32>)

// Frozen parameters get no gradient: the step returns the adapters' only.
// GRAD-LABEL: func.func @train_step
// GRAD-SAME: -> (tensor<f32> {merak.loss}, tensor<2x8xf32> {merak.grad = "fc1.lora_A.weight"}, tensor<16x2xf32> {merak.grad = "fc1.lora_B.weight"})

// Categories by structure: `attention` is the linears the query, key and
// value come from and the one reading the attention's result; `mlp` the
// two linears around the activation. proj (a linear, then tanh, then the
// head) is neither, and the head is never adapted.
// ATTN-LABEL: func.func @forward
// ATTN-SAME: merak.param = "q.lora_A.weight"
// ATTN-SAME: merak.param = "k.lora_A.weight"
// ATTN-SAME: merak.param = "v.lora_A.weight"
// ATTN-SAME: merak.param = "o.lora_A.weight"
// ATTN-NOT: up.lora
// ATTN-NOT: down.lora
// ATTN-NOT: proj.lora
// MLP-LABEL: func.func @forward
// MLP-NOT: {{(q|k|v|o|proj|head)}}.lora
// MLP-SAME: merak.param = "up.lora_A.weight"
// MLP-NOT: {{(q|k|v|o|proj|head)}}.lora
// MLP-SAME: merak.param = "down.lora_A.weight"
// MLP-NOT: {{(q|k|v|o|proj|head)}}.lora
// Categories and names together.
// BOTH-LABEL: func.func @forward
// BOTH-SAME: "q.lora_A.weight"
// BOTH-SAME: "v.lora_A.weight"
// BOTH-SAME: "up.lora_A.weight"
// BOTH-SAME: "proj.lora_A.weight"
// BOTH-NOT: head.lora
// A fused attention (merak.masked_attention) is found too: GPT-2's fused
// q/k/v projection and its output projection, in both layers.
// FUSED-LABEL: func.func @forward
// FUSED-SAME: "transformer.h.0.attn.c_attn.lora_A.weight"
// FUSED-SAME: "transformer.h.0.attn.c_proj.lora_A.weight"
// FUSED-SAME: "transformer.h.1.attn.c_attn.lora_A.weight"
// FUSED-SAME: "transformer.h.1.attn.c_proj.lora_A.weight"
// FUSED-NOT: mlp.c_fc.lora
// NOATTN: error: --merak-lora: target 'attention' matches no linear layer; the linear weights are: fc1.weight, fc2.weight, head.weight

// NOMATCH: error: --merak-lora: target 'attn' matches no linear layer; the linear weights are: fc1.weight, fc2.weight, head.weight
// RANK: error: --merak-lora: rank must be at least 1, got 0
// DROPOUT: error: --merak-lora: dropout must be in [0, 1), got 1
// ORDER: error: --merak-lora runs on @forward before --merak-train, but @train_step exists already

func.func @forward(%x: tensor<4x8xf32> {merak.input = "x"},
                   %w1: tensor<16x8xf32> {merak.param = "fc1.weight"},
                   %b1: tensor<16xf32> {merak.param = "fc1.bias"},
                   %w2: tensor<10x16xf32> {merak.param = "fc2.weight"},
                   %wh: tensor<10x10xf32> {merak.param = "head.weight"},
                   %t: tensor<4xi64> {merak.input = "t"}) -> tensor<f32> {
  %h = merak.linear %x, %w1, %b1 : (tensor<4x8xf32>, tensor<16x8xf32>, tensor<16xf32>) -> tensor<4x16xf32>
  %a = merak.gelu %h : tensor<4x16xf32>
  %o = merak.linear %a, %w2 : (tensor<4x16xf32>, tensor<10x16xf32>) -> tensor<4x10xf32>
  %l = merak.linear %o, %wh : (tensor<4x10xf32>, tensor<10x10xf32>) -> tensor<4x10xf32>
  %loss = merak.cross_entropy %l, %t : (tensor<4x10xf32>, tensor<4xi64>) -> tensor<f32>
  return %loss : tensor<f32>
}
