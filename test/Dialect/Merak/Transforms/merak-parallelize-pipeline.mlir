// Tests --merak-parallelize with pipeline options on the one-layer
// transformer: the spmdized step of a dp=2 x tp=2 mesh cut into two stages.
// Every stage function is a program of one rank of its stage's mesh:
// tensor-parallel collectives stay in forward and backward, the gradient
// reductions over dp run in the optimizer functions (once per step, on the
// gradients accumulated over micro-batches), and the refused combinations.
// RUN: merak-opt %S/Inputs/tiny-transformer.mlir --merak-train="optimizer=adamw lr=0.01" --merak-parallelize="dp=2 tp=2 pp=2 microbatches=2" | FileCheck %s
// RUN: merak-opt %S/Inputs/tiny-transformer.mlir --merak-train="optimizer=adamw lr=0.01" --merak-parallelize="dp=2 zero=1 pp=2 microbatches=2 schedule=gpipe" | FileCheck %s --check-prefix=ZERO1
// RUN: not merak-opt %S/Inputs/tiny-transformer.mlir --merak-train="optimizer=adamw lr=0.01" --merak-parallelize="dp=2 zero=3 pp=2 microbatches=2" 2>&1 | FileCheck %s --check-prefix=ZERO3
// RUN: not merak-opt %S/Inputs/tiny-transformer.mlir --merak-train="optimizer=adamw lr=0.01" --merak-parallelize="dp=2 zero=3" --merak-pipeline-partition="pp=2" 2>&1 | FileCheck %s --check-prefix=ZERO3-PARTITION
// RUN: not merak-opt %S/Inputs/tiny-transformer.mlir --merak-train="optimizer=adamw lr=0.01" --merak-parallelize="dp=2 tp=2 pp=2" 2>&1 | FileCheck %s --check-prefix=MICROBATCHES

// The module keeps the stage's mesh, the partition and the schedule.
// CHECK: module attributes {merak.pipeline = {layers = 3 : i64, pp = 2 : i64, stage_layers = array<i64: 0, 2>, stages = 2 : i64, virtual = 1 : i64}, merak.pipeline_schedule = {kind = "1f1b", microbatches = 2 : i64, pp = 2 : i64
// CHECK: mesh.mesh @mesh(shape = 2x2) {merak.axes = ["dp", "tp"]}

// @pipeline_step runs one micro-batch through the stages, then the
// optimizers (merak-exec runs it inlined on the mesh's ranks).
// CHECK-LABEL: func.func @pipeline_step
// CHECK: call @stage0_forward
// CHECK: call @stage1_forward
// CHECK: call @stage1_backward_input
// CHECK: call @stage0_backward_weight
// CHECK: call @stage0_optimizer
// CHECK: call @stage1_optimizer

// Stage 0's forward: its arguments keep @train_step's shardings and local
// shapes; the embedding, attention and MLP sum their partial results over
// tp (added to the residual first: a sum of partial sums stays partial);
// nothing is reduced over dp.
// CHECK-LABEL: func.func @stage0_forward
// CHECK-SAME: %arg0: tensor<1x6xi64> {merak.input = "tokens", merak.sharding = #mesh.shard<@mesh, {{\[\[}}0]]>}
// CHECK-SAME: %arg1: tensor<4x4xf32> {merak.param = "wte", merak.sharding = #mesh.shard<@mesh, {{\[\[}}1]]>}
// CHECK-SAME: attributes {merak.phase = "forward", merak.rank = 0 : i64, merak.stage = 0 : i64}
// CHECK-NOT: mesh_axes = [0]
// CHECK: merak.embedding
// CHECK: mesh.all_reduce %{{.*}} on @mesh mesh_axes = [1] {{.*}}: tensor<1x6x4xf32>
// CHECK: %[[O:.*]] = merak.linear %{{.*}}, %{{.*}} {merak.id = 16 : i64, merak.stage = 0 : i64} : (tensor<1x6x2xf32>, tensor<4x2xf32>) -> tensor<1x6x4xf32>
// CHECK-NEXT: %[[R:.*]] = merak.add %{{.*}}, %[[O]]
// CHECK-NEXT: mesh.all_reduce %[[R]] on @mesh mesh_axes = [1]
// CHECK: %[[F2:.*]] = merak.linear %{{.*}} {merak.id = 20 : i64, merak.stage = 0 : i64} : (tensor<1x6x8xf32>, tensor<4x8xf32>, tensor<4xf32>) -> tensor<1x6x4xf32>
// CHECK-NEXT: %[[R2:.*]] = merak.add %{{.*}}, %[[F2]]
// CHECK-NEXT: mesh.all_reduce %[[R2]] on @mesh mesh_axes = [1]
// CHECK-NOT: mesh_axes = [0]
// CHECK: return

// Stage 0's backward: the tensor-parallel all-reduces of activation
// gradients are here; the weight gradients leave unreduced over dp, one
// per parameter, in the parameter shard's local shape.
// CHECK-LABEL: func.func @stage0_backward_weight
// CHECK-SAME: -> (tensor<4x4xf32> {merak.grad = "wte"}, tensor<4xf32> {merak.grad = "ln.weight"}, tensor<4xf32> {merak.grad = "ln.bias"}, tensor<2x4xf32> {merak.grad = "attn.q.weight"}
// CHECK-NOT: mesh_axes = [0]
// CHECK: mesh.all_reduce %{{.*}} on @mesh mesh_axes = [1] {merak.grad_of = 16 : i64, merak.stage = 0 : i64} : tensor<1x6x4xf32>
// CHECK-NOT: mesh_axes = [0]
// CHECK: return

// Stage 0's optimizer takes the gradients (accumulated over micro-batches
// by the runtime) and all-reduces them over dp in one bucket, once per
// step; its results update the arguments in their shardings.
// CHECK-LABEL: func.func @stage0_optimizer
// CHECK-SAME: %arg0: tensor<4x4xf32> {merak.grad = "wte"}, %arg1: tensor<4x4xf32> {merak.param = "wte", merak.sharding = #mesh.shard<@mesh, {{\[\[}}1]]>}
// CHECK-SAME: -> (tensor<4x4xf32> {merak.sharding = #mesh.shard<@mesh, {{\[\[}}1]]>, merak.update_arg = 1 : i64}
// CHECK-SAME: merak.phase = "optimizer"
// CHECK: %[[BUCKET:.*]] = merak.concat
// CHECK: %[[R:.*]] = mesh.all_reduce %[[BUCKET]] on @mesh mesh_axes = [0] : tensor<132xf32>
// CHECK: merak.adamw_update %arg1,
// CHECK-NOT: mesh.all_reduce

// The last stage: the head, the parallel cross-entropy (a max and two sums
// over tp) and the loss averaged over dp, computed per micro-batch.
// CHECK-LABEL: func.func @stage1_forward
// CHECK-SAME: tensor<f32> {merak.loss}
// CHECK: mesh.all_reduce %{{.*}} on @mesh mesh_axes = [1] reduction = <max>
// CHECK: mesh.all_reduce %{{.*}} on @mesh mesh_axes = [0] reduction = <average> {{.*}}: tensor<f32>
// The head's input gradient leaves as a partial sum over tp, which stage 0
// reduces where it first needs the whole value (the same bytes cross the
// stage boundary either way).
// CHECK-LABEL: func.func @stage1_backward_input
// CHECK: %[[DX:.*]] = merak.matmul {{.*}} {merak.grad_of = 22 : i64, merak.stage = 1 : i64} : (tensor<1x6x4xf32>, tensor<4x4xf32>) -> tensor<1x6x4xf32>
// CHECK-NEXT: return %{{.*}}, %[[DX]]
// CHECK-LABEL: func.func @stage1_backward_weight
// CHECK-SAME: -> (tensor<4x4xf32> {merak.grad = "lm_head.weight"})
// CHECK-NOT: mesh.
// CHECK: return
// CHECK-LABEL: func.func @stage1_optimizer
// CHECK: %[[R1:.*]] = mesh.all_reduce %arg0 on @mesh mesh_axes = [0] {merak.stage = 1 : i64} : tensor<4x4xf32>
// CHECK: merak.adamw_update %arg1, %[[R1]]

// ZeRO-1: the gradient is accumulated whole and reduce-scattered into this
// rank's shard of the optimizer state once per step (issued first); the
// updated shard is gathered.
// ZERO1: merak.pipeline_schedule = {kind = "gpipe"
// ZERO1-LABEL: func.func @stage1_optimizer
// ZERO1-SAME: %arg0: tensor<8x4xf32> {merak.grad = "lm_head.weight"}, %arg1: tensor<8x4xf32> {merak.param = "lm_head.weight"}, %arg2: tensor<4x4xf32> {merak.opt_state = "lm_head.weight/exp_avg", merak.sharding = #mesh.shard<@mesh, {{\[\[}}0]]>}
// ZERO1-DAG: %[[G:.*]] = mesh.reduce_scatter %arg0 on @mesh mesh_axes = [0] scatter_axis = 0 {{.*}}: tensor<8x4xf32> -> tensor<4x4xf32>
// ZERO1-DAG: %[[P:.*]] = mesh.all_slice %arg1 on @mesh mesh_axes = [0] slice_axis = 0
// ZERO1: %[[NEW:.*]], %{{.*}}, %{{.*}} = merak.adamw_update %[[P]], %[[G]]
// ZERO1: mesh.all_gather %[[NEW]] on @mesh mesh_axes = [0] gather_axis = 0 {{.*}}: tensor<4x4xf32> -> tensor<8x4xf32>

// ZERO3: merak-parallelize: zero=3 cannot be combined with pipeline parallelism
// ZERO3-PARTITION: error: parameter 'wte' is split over the data-parallel mesh axis (ZeRO-3)
// MICROBATCHES: error: kind=1f1b needs at least as many micro-batches as pipeline ranks: microbatches=1 < pp=2
