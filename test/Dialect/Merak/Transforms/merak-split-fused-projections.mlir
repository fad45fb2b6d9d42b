// Tests --merak-split-fused-projections on Inputs/fused-qkv.mlir: fused
// projections sliced into sections that tensor parallelism splits (q, k, v
// reshaped into heads; a gate and an up projection read by silu and mul)
// get one linear per section on a [sections, N, K] view of their
// parameter, which keeps its PyTorch shape as merak.stored_shape; the
// training step is derived again from the changed forward.
// RUN: merak-opt %S/Inputs/fused-qkv.mlir --merak-train="optimizer=adamw lr=0.01" --merak-split-fused-projections="tp=2" | FileCheck %s
// RUN: merak-opt %S/Inputs/fused-qkv.mlir --merak-train="optimizer=adamw lr=0.01" --merak-split-fused-projections="tp=4" | FileCheck %s --check-prefix=TP4
// RUN: merak-opt %S/Inputs/fused-qkv.mlir --merak-train="optimizer=adamw lr=0.01" --merak-split-fused-projections="tp=1" | FileCheck %s --check-prefix=NONE
// RUN: merak-opt %S/Inputs/fused-qkv.mlir --merak-train="optimizer=adamw lr=0.01" --merak-parallelize="tp=2" | FileCheck %s --check-prefix=TP
// RUN: merak-opt %S/Inputs/fused-qkv.mlir --merak-train="optimizer=adamw lr=0.01" --merak-mesh="dp=2" --merak-data-parallel --merak-split-fused-projections="tp=2" 2>&1 >/dev/null | FileCheck %s --check-prefix=CHANGED
// RUN: merak-opt %S/Inputs/fused-qkv.mlir --merak-autodiff --merak-optimizer --merak-split-fused-projections="tp=2" 2>&1 >/dev/null | FileCheck %s --check-prefix=UNRECORDED

// CHECK: module attributes {merak.train_options = "{{.*}}optimizer=adamw{{.*}}"}
// CHECK-LABEL: func.func @forward
// CHECK-SAME: %[[W:[[:alnum:]]+]]: tensor<3x8x8xf32> {merak.param = "attn.qkv.weight", merak.stored_shape = array<i64: 24, 8>}
// CHECK-SAME: %[[B:[[:alnum:]]+]]: tensor<3x8xf32> {merak.param = "attn.qkv.bias", merak.stored_shape = array<i64: 24>}
// CHECK-SAME: %[[GU:[[:alnum:]]+]]: tensor<2x16x8xf32> {merak.param = "mlp.gate_up.weight", merak.stored_shape = array<i64: 32, 8>}
// The weight read by two linears keeps its shape, and its linear stays
// fused.
// CHECK-SAME: %{{.*}}: tensor<16x8xf32> {merak.param = "tied.weight"}
// CHECK: %[[W0:.*]] = merak.select %[[W]] {dim = 0 : i64, index = 0 : i64} : (tensor<3x8x8xf32>) -> tensor<8x8xf32>
// CHECK: %[[B0:.*]] = merak.select %[[B]] {dim = 0 : i64, index = 0 : i64} : (tensor<3x8xf32>) -> tensor<8xf32>
// CHECK: %[[Q:.*]] = merak.linear %{{.*}}, %[[W0]], %[[B0]] : (tensor<2x4x8xf32>, tensor<8x8xf32>, tensor<8xf32>) -> tensor<2x4x8xf32>
// CHECK: merak.select %[[W]] {dim = 0 : i64, index = 1 : i64}
// CHECK: merak.select %[[W]] {dim = 0 : i64, index = 2 : i64}
// CHECK: merak.reshape %[[Q]] {shape = array<i64: 2, 4, 2, 4>}
// CHECK: merak.select %[[GU]] {dim = 0 : i64, index = 0 : i64} : (tensor<2x16x8xf32>) -> tensor<16x8xf32>
// CHECK: merak.select %[[GU]] {dim = 0 : i64, index = 1 : i64}
// CHECK: merak.slice %{{.*}} {dim = 2 : i64, end = 8 : i64, start = 0 : i64}
// CHECK: return
// The step derived again: parameters and their AdamW state in the view.
// CHECK-LABEL: func.func @train_step
// CHECK-SAME: tensor<3x8x8xf32> {merak.param = "attn.qkv.weight", merak.stored_shape = array<i64: 24, 8>}
// CHECK-SAME: tensor<3x8x8xf32> {merak.opt_state = "attn.qkv.weight/exp_avg", merak.stored_shape = array<i64: 24, 8>}
// CHECK-SAME: tensor<3x8x8xf32> {merak.opt_state = "attn.qkv.weight/exp_avg_sq", merak.stored_shape = array<i64: 24, 8>}
// CHECK: merak.adamw_update {{.*}} : (tensor<3x8x8xf32>, tensor<3x8x8xf32>

// tp=4 does not divide the 2 heads: q, k and v stay fused; the gate and up
// sections (16 features) are split.
// TP4-LABEL: func.func @forward
// TP4-SAME: tensor<24x8xf32> {merak.param = "attn.qkv.weight"}
// TP4-SAME: tensor<2x16x8xf32> {merak.param = "mlp.gate_up.weight", merak.stored_shape = array<i64: 32, 8>}

// NONE-NOT: merak.stored_shape

// Under --merak-parallelize="tp=2" every rank holds its heads of q, k and
// v and its features of gate and up.
// TP-LABEL: func.func @train_step
// TP-SAME: tensor<3x4x8xf32> {merak.param = "attn.qkv.weight", merak.sharding = #mesh.shard<@mesh, {{\[\[}}], [0]]>, merak.stored_shape = array<i64: 24, 8>}
// TP-SAME: tensor<3x4xf32> {merak.param = "attn.qkv.bias", merak.sharding = #mesh.shard<@mesh, {{\[\[}}], [0]]>, merak.stored_shape = array<i64: 24>}
// TP-SAME: tensor<2x8x8xf32> {merak.param = "mlp.gate_up.weight", merak.sharding = #mesh.shard<@mesh, {{\[\[}}], [0]]>, merak.stored_shape = array<i64: 32, 8>}
// TP-SAME: tensor<8x8xf32> {merak.param = "mlp.down.weight", merak.sharding = #mesh.shard<@mesh, {{\[\[}}], [0]]>}

// A step changed after --merak-train (here by data parallelism) is not
// derived again; nor is one whose options are not recorded.
// CHANGED: warning: fused projection left whole (its parameter is replicated under tp): @train_step is not what --merak-train derives from @forward (run --merak-parallelize right after --merak-train)
// UNRECORDED: warning: fused projection left whole (its parameter is replicated under tp): the module does not record the options --merak-train derived @train_step with (merak.train_options)
