// Tests the --merak-parallelize pipeline on a one-layer transformer: the
// per-rank program of a dp=2 x tp=2 plan, where its collectives land, and
// the option errors.
// RUN: merak-opt %S/Inputs/tiny-transformer.mlir --merak-train="optimizer=adamw lr=0.01" --merak-parallelize="dp=2 tp=2" | FileCheck %s
// RUN: merak-opt %S/Inputs/tiny-transformer.mlir --merak-train="optimizer=adamw lr=0.01" --merak-parallelize="dp=2 zero=2 bucket-mb=0 zero-bucket-mb=0" | FileCheck %s --check-prefix=ZERO2
// RUN: merak-opt %S/Inputs/tiny-transformer.mlir --merak-train="optimizer=adamw lr=0.01" --merak-parallelize="tp=2" | FileCheck %s --check-prefix=TP
// RUN: not merak-opt %S/Inputs/tiny-transformer.mlir --merak-train="optimizer=adamw lr=0.01" --merak-parallelize="sp=context" 2>&1 | FileCheck %s --check-prefix=SP

// CHECK: mesh.mesh @mesh(shape = 2x2) {merak.axes = ["dp", "tp"]}
// Local shapes: the batch of 2 split over dp, the q projection's 4 output
// features over tp, the MLP's second weight by its 16 input features.
// CHECK-LABEL: func.func @train_step
// CHECK-SAME: %arg3: tensor<2x4xf32> {merak.param = "attn.q.weight", merak.sharding = #mesh.shard<@mesh, {{\[\[}}1]]>}
// CHECK-SAME: %arg9: tensor<4x8xf32> {merak.param = "mlp.fc2.weight", merak.sharding = #mesh.shard<@mesh, {{\[\[}}], [1]]>}
// CHECK-SAME: %arg12: tensor<1x6xi64> {merak.input = "tokens", merak.sharding = #mesh.shard<@mesh, {{\[\[}}0]]>}
// Forward: the vocabulary-parallel embedding is summed over tp ...
// CHECK: %[[E:.*]] = merak.embedding
// CHECK: mesh.all_reduce %{{.*}} on @mesh mesh_axes = [1] : tensor<1x6x4xf32>
// ... attention runs on this rank's head; the output projection's partial
// sums are added to the embedding's (a sum of partial sums stays partial)
// and all-reduced over tp once ...
// CHECK: merak.softmax %{{.*}} : tensor<1x1x6x6xf32>
// CHECK: %[[O:.*]] = merak.linear %{{.*}} {merak.id = 16 : i64} : (tensor<1x6x2xf32>, tensor<4x2xf32>) -> tensor<1x6x4xf32>
// CHECK: %[[R:.*]] = merak.add %{{.*}}, %[[O]] {merak.id = 17 : i64}
// CHECK: mesh.all_reduce %[[R]] on @mesh mesh_axes = [1] : tensor<1x6x4xf32>
// ... and so are the MLP's.
// CHECK: merak.gelu %{{.*}} : tensor<1x6x8xf32>
// CHECK: %[[F2:.*]] = merak.linear %{{.*}} {merak.id = 20 : i64} : (tensor<1x6x8xf32>, tensor<4x8xf32>, tensor<4xf32>) -> tensor<1x6x4xf32>
// CHECK: %[[R2:.*]] = merak.add %{{.*}}, %[[F2]] {merak.id = 21 : i64}
// CHECK: mesh.all_reduce %[[R2]] on @mesh mesh_axes = [1]
// The parallel cross-entropy never gathers the logits: a max and two sums
// over tp of one value per token.
// CHECK: mesh.all_reduce %{{.*}} on @mesh mesh_axes = [1] reduction = <max> : tensor<6x1xf32>
// CHECK-NOT: mesh.all_gather %{{.*}} : tensor<6x4xf32>
// Backward: gradients are summed over dp in one bucket.
// CHECK: %[[B:.*]] = merak.concat
// CHECK: mesh.all_reduce %[[B]] on @mesh mesh_axes = [0] : tensor<{{[0-9]+}}xf32>
// CHECK: merak.adamw_update
// The loss is the mean over the data-parallel ranks.
// CHECK: mesh.all_reduce %{{.*}} on @mesh mesh_axes = [0] reduction = <average> : tensor<f32>

// ZeRO-2: each gradient is reduce-scattered into the rank's shard of the
// optimizer state, and the updated shards are gathered.
// ZERO2: %[[G:.*]] = mesh.reduce_scatter %{{.*}} on @mesh mesh_axes = [0] scatter_axis = 0 : tensor<8x4xf32> -> tensor<4x4xf32>
// ZERO2: %[[P:.*]], %{{.*}}, %{{.*}} = merak.adamw_update %{{.*}}, %[[G]], %{{.*}} : (tensor<4x4xf32>, tensor<4x4xf32>, tensor<4x4xf32>, tensor<4x4xf32>
// ZERO2: mesh.all_gather %[[P]] on @mesh mesh_axes = [0] gather_axis = 0 : tensor<4x4xf32> -> tensor<8x4xf32>

// SP: tiny-transformer.mlir:{{[0-9]+}}:{{[0-9]+}}: error: --merak-parallelize: sp must be none, megatron or ulysses, got 'context'
// SP-NOT: LLVM ERROR

// tp=2: the vocabulary-parallel embedding's table gradient is scattered
// into the rank's 4 rows only (tokens outside them masked, the others
// shifted into the block), not into the whole 8-row table then sliced.
// TP-LABEL: func.func @train_step
// TP: merak.layer_norm_backward
// TP: %[[IN:.*]] = merak.and
// TP: %[[IDS:.*]] = merak.where %[[IN]], {{.*}} : (tensor<2x6xi1>, tensor<2x6xi64>, tensor<i64>) -> tensor<2x6xi64>
// TP: merak.index_backward %{{.*}}, %[[IDS]] {dim = 0 : i64, dim_size = 4 : i64, merak.grad_of = {{[0-9]+}} : i64} : (tensor<2x6x4xf32>, tensor<2x6xi64>) -> tensor<4x4xf32>
// TP-NOT: mesh.all_slice {{.*}} : tensor<8x4xf32> -> tensor<4x4xf32>
