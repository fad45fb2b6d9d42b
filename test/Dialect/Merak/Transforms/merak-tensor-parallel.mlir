// Tests --merak-tensor-parallel: the Megatron layers of a one-layer
// transformer are found by structure. q/k/v projections (reshaped into
// heads) and the MLP's first linear are split by rows of the weight
// (column-parallel), the attention output and the MLP's second linear by
// columns (row-parallel), the token embedding and the LM head by vocabulary;
// optimizer state follows its parameter. Layer norms stay replicated.
// RUN: merak-opt %S/Inputs/tiny-transformer.mlir --merak-train="optimizer=adamw lr=0.01" --merak-tensor-parallel="tp=2" | FileCheck %s
// RUN: merak-opt %S/Inputs/tiny-transformer.mlir --merak-train="optimizer=adamw lr=0.01" --merak-mesh="dp=2 tp=2" --merak-tensor-parallel | FileCheck %s --check-prefix=MESH2D
// A part tp cannot split stays whole, with a remark: at tp=4 the two
// attention heads (and their output projection); the MLP and the
// vocabulary still split.
// RUN: merak-opt %S/Inputs/tiny-transformer.mlir --merak-train="optimizer=adamw lr=0.01" --merak-tensor-parallel="tp=4" 2>&1 | FileCheck %s --check-prefix=HEADS
// RUN: not merak-opt %S/Inputs/tiny-transformer.mlir --merak-train="optimizer=adamw lr=0.01" --merak-mesh="tp=2" --merak-tensor-parallel="tp=4" 2>&1 | FileCheck %s --check-prefix=SIZE
// The layers as GPT-J, OPT and BART write them: a query scaled before its
// heads split is still split by heads; an MLP whose GELU is written out
// (additions and a power of its own hidden activation and scalars) is
// still an MLP, beside attention on the same layer norm; the LM head
// splits by vocabulary through the causal shift of its logits. A linear
// pair joined by a residual addition stays whole.
// RUN: merak-opt %S/Inputs/tiny-parallel-block.mlir --merak-train="optimizer=adamw lr=0.01" --merak-tensor-parallel="tp=2" | FileCheck %s --check-prefix=BLOCK
// RUN: merak-opt %S/Inputs/tiny-parallel-block.mlir --merak-train="optimizer=adamw lr=0.01" --merak-tensor-parallel="tp=2" | FileCheck %s --check-prefix=WHOLE

// CHECK: mesh.mesh @mesh(shape = 2) {merak.axes = ["tp"]}
// CHECK-LABEL: func.func @train_step
// CHECK-DAG: mesh.shard %arg0 to <@mesh, {{\[\[}}0]]> : tensor<8x4xf32>
// CHECK-DAG: mesh.shard %arg3 to <@mesh, {{\[\[}}0]]> : tensor<4x4xf32>
// CHECK-DAG: mesh.shard %arg4 to <@mesh, {{\[\[}}0]]> : tensor<4x4xf32>
// CHECK-DAG: mesh.shard %arg5 to <@mesh, {{\[\[}}0]]> : tensor<4x4xf32>
// CHECK-DAG: mesh.shard %arg6 to <@mesh, {{\[\[}}], [0]]> : tensor<4x4xf32>
// CHECK-DAG: mesh.shard %arg7 to <@mesh, {{\[\[}}0]]> : tensor<16x4xf32>
// CHECK-DAG: mesh.shard %arg8 to <@mesh, {{\[\[}}0]]> : tensor<16xf32>
// CHECK-DAG: mesh.shard %arg9 to <@mesh, {{\[\[}}], [0]]> : tensor<4x16xf32>
// CHECK-DAG: mesh.shard %arg11 to <@mesh, {{\[\[}}0]]> : tensor<8x4xf32>
// The exp_avg/exp_avg_sq of fc2.weight (arguments 32 and 33).
// CHECK-DAG: mesh.shard %arg32 to <@mesh, {{\[\[}}], [0]]> : tensor<4x16xf32>
// CHECK-DAG: mesh.shard %arg33 to <@mesh, {{\[\[}}], [0]]> : tensor<4x16xf32>
// CHECK-NOT: mesh.shard %arg1 to
// CHECK-NOT: mesh.shard %arg10 to

// MESH2D: mesh.mesh @mesh(shape = 2x2) {merak.axes = ["dp", "tp"]}
// MESH2D-DAG: mesh.shard %arg7 to <@mesh, {{\[\[}}1]]> : tensor<16x4xf32>
// MESH2D-DAG: mesh.shard %arg9 to <@mesh, {{\[\[}}], [1]]> : tensor<4x16xf32>

// HEADS: remark: attention projection attn.q.weight stays whole: 2 heads are not divisible by tp=4
// HEADS: remark: attention projection attn.k.weight stays whole: 2 heads are not divisible by tp=4
// HEADS: remark: attention projection attn.v.weight stays whole: 2 heads are not divisible by tp=4
// HEADS-LABEL: func.func @train_step
// HEADS-DAG: mesh.shard %arg0 to <@mesh, {{\[\[}}0]]> : tensor<8x4xf32>
// HEADS-DAG: mesh.shard %arg7 to <@mesh, {{\[\[}}0]]> : tensor<16x4xf32>
// HEADS-DAG: mesh.shard %arg9 to <@mesh, {{\[\[}}], [0]]> : tensor<4x16xf32>
// HEADS-NOT: mesh.shard %arg3 to
// HEADS-NOT: mesh.shard %arg6 to
// SIZE: error: tp=4 but the mesh's tp axis has size 2

// BLOCK-LABEL: func.func @train_step
// BLOCK-DAG: mesh.shard %arg0 to <@mesh, {{\[\[}}0]]> : tensor<8x4xf32>
// BLOCK-DAG: mesh.shard %arg3 to <@mesh, {{\[\[}}0]]> : tensor<4x4xf32>
// BLOCK-DAG: mesh.shard %arg4 to <@mesh, {{\[\[}}0]]> : tensor<4x4xf32>
// BLOCK-DAG: mesh.shard %arg5 to <@mesh, {{\[\[}}0]]> : tensor<4x4xf32>
// BLOCK-DAG: mesh.shard %arg6 to <@mesh, {{\[\[}}], [0]]> : tensor<4x4xf32>
// BLOCK-DAG: mesh.shard %arg7 to <@mesh, {{\[\[}}0]]> : tensor<16x4xf32>
// BLOCK-DAG: mesh.shard %arg8 to <@mesh, {{\[\[}}], [0]]> : tensor<4x16xf32>
// BLOCK-DAG: mesh.shard %arg11 to <@mesh, {{\[\[}}0]]> : tensor<8x4xf32>
// WHOLE-NOT: mesh.shard %arg9 to
// WHOLE-NOT: mesh.shard %arg10 to
