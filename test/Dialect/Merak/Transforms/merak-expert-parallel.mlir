// Tests --merak-expert-parallel on the expert part of a mixture-of-experts
// layer (Inputs/tiny-experts.mlir): the batched expert weights [E, ...]
// and their optimizer state split along E over the mesh's ep axis, the
// tokens read by the experts split [E over ep, N over dp], an ordinary
// parameter left alone; --merak-data-parallel then splits the batch over
// dp and ep together. Partitioned, the dispatch and the combine are one
// all-to-all over ep each, the experts' gradients are reduced over dp
// alone and the other gradients over dp and ep.
// RUN: merak-opt %S/Inputs/tiny-experts.mlir --merak-train="optimizer=adamw lr=0.01" --merak-mesh="dp=2 ep=2" --merak-expert-parallel --merak-data-parallel | FileCheck %s
// RUN: merak-opt %S/Inputs/tiny-experts.mlir --merak-train="optimizer=adamw lr=0.01" --merak-parallelize="dp=2 ep=2" | FileCheck %s --check-prefix=SPMD
// RUN: not merak-opt %S/Inputs/tiny-experts.mlir --merak-train="optimizer=adamw lr=0.01" --merak-mesh="ep=3" --merak-expert-parallel 2>&1 | FileCheck %s --check-prefix=DIVIDE
// RUN: not merak-opt %S/Inputs/tiny-transformer.mlir --merak-train="optimizer=adamw lr=0.01" --merak-mesh="ep=2" --merak-expert-parallel 2>&1 | FileCheck %s --check-prefix=NONE
// RUN: not merak-opt %S/Inputs/tiny-experts.mlir --merak-train="optimizer=adamw lr=0.01" --merak-expert-parallel="ep=2" 2>&1 | FileCheck %s --check-prefix=MESH

// CHECK: mesh.mesh @mesh(shape = 2x2) {merak.axes = ["dp", "ep"]}
// CHECK-LABEL: func.func @train_step
// CHECK-DAG: mesh.shard %arg0 to <@mesh, {{\[\[}}1]]> : tensor<4x8x16xf32>
// CHECK-DAG: mesh.shard %arg1 to <@mesh, {{\[\[}}1]]> : tensor<4x16x8xf32>
// CHECK-DAG: mesh.shard %arg4 to <@mesh, {{\[\[}}1]]> : tensor<4x8x16xf32>
// CHECK-DAG: mesh.shard %arg7 to <@mesh, {{\[\[}}1]]> : tensor<4x16x8xf32>
// CHECK-DAG: mesh.shard %arg2 to <@mesh, {{\[\[}}]]> : tensor<8x8xf32>
// CHECK-DAG: mesh.shard %arg3 to <@mesh, {{\[\[}}0, 1]]> : tensor<4x4x3x8xf32>
// CHECK: %[[T:.*]] = merak.reshape
// CHECK-NEXT: mesh.shard %[[T]] to <@mesh, {{\[\[}}1], [0]]> : tensor<4x12x8xf32>

// SPMD-LABEL: func.func @train_step
// SPMD-SAME: merak.param = "experts.up", merak.sharding = #mesh.shard<@mesh, {{\[\[}}1]]>
// SPMD-SAME: merak.input = "x", merak.sharding = #mesh.shard<@mesh, {{\[\[}}0, 1]]>
// SPMD: mesh.all_to_all %{{.*}} on @mesh mesh_axes = [1] split_axis = 0 concat_axis = 1 : tensor<4x1x3x8xf32> -> tensor<2x2x3x8xf32>
// SPMD: merak.matmul %{{.*}}, %arg0 {{.*}} : (tensor<2x6x8xf32>, tensor<2x8x16xf32>) -> tensor<2x6x16xf32>
// SPMD-DAG: mesh.all_to_all %{{.*}} on @mesh mesh_axes = [1] split_axis = 0 concat_axis = 1 : tensor<2x2x3x8xf32> -> tensor<1x4x3x8xf32>
// The experts' two weight gradients, bucketed: over dp alone.
// SPMD-DAG: mesh.all_reduce %{{.*}} on @mesh mesh_axes = [0] : tensor<512xf32>
// SPMD-DAG: mesh.all_reduce %{{.*}} on @mesh mesh_axes = [0, 1] : tensor<8x8xf32>

// DIVIDE: error: expert weight "experts.up" of type 'tensor<4x8x16xf32>': 4 experts are not divisible by ep=3
// NONE: error: ep=2 but the step has no experts: no parameter [E, ...] is multiplied by dispatched tokens [E, N, D] in a batched matmul
// MESH: error: ep=2 but the mesh has no ep axis; run --merak-mesh="ep=2" first
