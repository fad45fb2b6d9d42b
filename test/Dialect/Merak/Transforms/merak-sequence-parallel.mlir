// Tests --merak-sequence-parallel on a one-layer transformer.
// RUN: merak-opt %S/Inputs/tiny-transformer.mlir --merak-train="optimizer=adamw lr=0.01" --merak-tensor-parallel="tp=2" --merak-sequence-parallel="megatron" | FileCheck %s
// RUN: merak-opt %S/Inputs/tiny-transformer.mlir --merak-train="optimizer=adamw lr=0.01" --merak-tensor-parallel="tp=2" --merak-sequence-parallel="megatron" --merak-sharding-propagation --merak-spmdize | FileCheck %s --check-prefix=SPMD
// RUN: merak-opt %S/Inputs/tiny-transformer.mlir --merak-train="optimizer=adamw lr=0.01" --merak-mesh="sp=2" --merak-sequence-parallel="ulysses" | FileCheck %s --check-prefix=ULYSSES
// RUN: merak-opt %S/Inputs/tiny-transformer.mlir --merak-train="optimizer=adamw lr=0.01" --merak-parallelize="sp=ulysses sp-size=2" | FileCheck %s --check-prefix=ULYSSES-SPMD
// RUN: not merak-opt %S/Inputs/tiny-transformer.mlir --merak-train="optimizer=adamw lr=0.01" --merak-sequence-parallel="megatron ulysses" 2>&1 | FileCheck %s --check-prefix=BOTH
// RUN: not merak-opt %S/Inputs/tiny-transformer.mlir --merak-train="optimizer=adamw lr=0.01" --merak-sequence-parallel="megatron" 2>&1 | FileCheck %s --check-prefix=NOTP
// RUN: not merak-opt %S/Inputs/tiny-transformer.mlir --merak-train="optimizer=adamw lr=0.01" --merak-mesh="sp=4" --merak-sequence-parallel="ulysses" 2>&1 | FileCheck %s --check-prefix=SEQ

// Megatron: the partial sums of the vocabulary-parallel embedding and of
// the row-parallel linears reach their users split along the sequence;
// column-parallel linears read their input whole.
// CHECK-LABEL: func.func @train_step
// CHECK: %[[E:.*]] = merak.embedding
// CHECK: mesh.shard %[[E]] to <@mesh, {{\[\[}}], [0]]> annotate_for_users
// CHECK: %[[Q:.*]] = mesh.shard %{{.*}} to <@mesh, {{\[\[}}]]> annotate_for_users
// CHECK-NEXT: merak.linear %[[Q]]
// CHECK: %[[O:.*]] = merak.linear %{{.*}} {merak.id = 16 : i64} : (tensor<2x6x4xf32>, tensor<4x4xf32>) -> tensor<2x6x4xf32>
// CHECK: mesh.shard %[[O]] to <@mesh, {{\[\[}}], [0]]> annotate_for_users

// After partitioning: reduce-scatter into sequence shards, all-gather
// before the column-parallel linears, the layer norm on a sequence shard.
// SPMD: mesh.reduce_scatter %{{.*}} on @mesh mesh_axes = [0] scatter_axis = 1 : tensor<2x6x4xf32> -> tensor<2x3x4xf32>
// SPMD: merak.layer_norm %{{.*}} : (tensor<2x3x4xf32>, tensor<4xf32>, tensor<4xf32>) -> tensor<2x3x4xf32>
// SPMD: mesh.all_gather %{{.*}} on @mesh mesh_axes = [0] gather_axis = 1 : tensor<2x3x4xf32> -> tensor<2x6x4xf32>
// The embedding's table gradient is computed from the whole sequence (its
// output gradient all-gathered), as under tp alone, and only for the
// rank's rows: the gradient of tokens outside them is masked, the others
// shifted into the rank's block. No whole table, no partial table
// reduce-scattered.
// SPMD: %[[SHIFT:.*]] = merak.sub %arg12, %{{.*}} : (tensor<2x6xi64>, tensor<i64>) -> tensor<2x6xi64>
// SPMD: %[[IN:.*]] = merak.and
// SPMD: %[[IDS:.*]] = merak.where %[[IN]], %[[SHIFT]], %{{.*}} : (tensor<2x6xi1>, tensor<2x6xi64>, tensor<i64>) -> tensor<2x6xi64>
// SPMD: %[[MASK:.*]] = merak.reshape %[[IN]] {shape = array<i64: 2, 6, 1>}
// SPMD: %[[G:.*]] = merak.where %[[MASK]], %all_gather{{.*}}, %{{.*}} : (tensor<2x6x1xi1>, tensor<2x6x4xf32>, tensor<f32>) -> tensor<2x6x4xf32>
// SPMD: merak.index_backward %[[G]], %[[IDS]] {dim = 0 : i64, dim_size = 4 : i64, merak.grad_of = 0 : i64} : (tensor<2x6x4xf32>, tensor<2x6xi64>) -> tensor<4x4xf32>
// SPMD-NOT: mesh.all_slice {{.*}}tensor<8x4xf32> -> tensor<4x4xf32>
// SPMD-NOT: mesh.reduce_scatter {{.*}}tensor<8x4xf32>

// Ulysses: inputs split along the sequence, q/k/v split by heads.
// ULYSSES: mesh.mesh @mesh(shape = 2) {merak.axes = ["sp"]}
// ULYSSES-DAG: mesh.shard %arg12 to <@mesh, {{\[\[}}], [0]]> : tensor<2x6xi64>
// ULYSSES-DAG: mesh.shard %{{.*}} to <@mesh, {{\[\[}}], [], [0]]> : tensor<2x6x2x2xf32>
// ULYSSES-SPMD: func.func @train_step
// ULYSSES-SPMD-SAME: tensor<2x3xi64> {merak.input = "tokens", merak.sharding = #mesh.shard<@mesh, {{\[\[}}], [0]]>}
// Each projection's sequence shard becomes a head shard (heads are the
// major part of the hidden dimension), attention runs on 1 of the 2 heads
// over the whole sequence, and the context goes back to sequence shards.
// ULYSSES-SPMD: mesh.all_to_all %{{.*}} on @mesh mesh_axes = [0] split_axis = 2 concat_axis = 1 : tensor<2x3x4xf32> -> tensor<2x6x2xf32>
// ULYSSES-SPMD: merak.softmax %{{.*}} : tensor<2x1x6x6xf32>
// ULYSSES-SPMD: mesh.all_to_all %{{.*}} on @mesh mesh_axes = [0] split_axis = 2 concat_axis = 1 : tensor<2x1x6x2xf32> -> tensor<2x2x3x2xf32>

// BOTH: error: choose one of megatron and ulysses
// NOTP: error: Megatron sequence parallelism needs a tp mesh axis
// SEQ: error: input "tokens": sequence dimension 1 of 'tensor<2x6xi64>' is not divisible by sp=4
// Errors about a whole function or module name it by its location; they do
// not print it.
// SEQ-NOT: see current operation
// BOTH-NOT: see current operation
