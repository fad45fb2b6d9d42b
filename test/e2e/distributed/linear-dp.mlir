// Data parallelism by hand: the linear-regression step of
// test/Runtime/linear-regression.mlir with its batch of 8 split over a mesh
// of 2 (4 rows per rank), the loss averaged and the weight gradients summed
// over dp with mesh.all_reduce. Two ranks (--nproc 2) train exactly as the
// one-process step does, and only rank 0 prints and logs.
//
// RUN: rm -rf %t && mkdir -p %t
// RUN: %python %merak_src/test/Runtime/Inputs/make_linreg.py %t/data --steps 6
// RUN: merak-exec %merak_src/test/Runtime/linear-regression.mlir --init %t/data/model.pt --data %t/data/batches.safetensors --steps 6 --lr 0.1 --threads 1 --log-jsonl %t/one.jsonl > /dev/null
// RUN: merak-exec %s --nproc 2 --init %t/data/model.pt --data %t/data/batches.safetensors --steps 6 --lr 0.1 --log-jsonl %t/two.jsonl > %t/two.out 2> %t/two.err
// RUN: FileCheck %s < %t/two.out
// RUN: count 0 < %t/two.err
// RUN: count 6 < %t/two.jsonl
// RUN: %python %merak_src/test/e2e/compare_losses.py %t/two.jsonl %t/one.jsonl --rtol 1e-5
// The ranks executed anew instead of forked from the launcher: the same
// losses, bit for bit.
// RUN: env MERAK_LAUNCH=exec merak-exec %s --nproc 2 --init %t/data/model.pt --data %t/data/batches.safetensors --steps 6 --lr 0.1 --log-jsonl %t/exec.jsonl > %t/exec.out
// RUN: FileCheck %s < %t/exec.out
// RUN: %python %merak_src/test/e2e/compare_losses.py %t/exec.jsonl %t/two.jsonl --rtol 0 --atol 0
//
// CHECK: step 1/6  loss {{[0-9.]+}}  {{[0-9.]+}} samples/s
// CHECK-NEXT: step 2/6
// CHECK-NEXT: step 3/6
// CHECK-NEXT: step 4/6
// CHECK-NEXT: step 5/6
// CHECK-NEXT: step 6/6
// CHECK-NOT: step
//
// The listing shows each collective's group, for rank 0.
// RUN: merak-exec %s --print-program | FileCheck %s --check-prefix=PLAN
// PLAN: %12 = all_reduce %11 : f32 {average over mesh axes [0] (dp): group 0 = ranks 0, 1} {%12 in-place %11}
// PLAN: %17 = all_reduce %16 : 1x4xf32 {sum over mesh axes [0] (dp): group 0 = ranks 0, 1}

mesh.mesh @mesh(shape = 2) {merak.axes = ["dp"]}
func.func @train_step(%w: tensor<1x4xf32> {merak.param = "fc.weight"},
                      %b: tensor<1xf32> {merak.param = "fc.bias"},
                      %mw: tensor<1x4xf32> {merak.opt_state = "fc.weight/momentum_buffer"},
                      %mb: tensor<1xf32> {merak.opt_state = "fc.bias/momentum_buffer"},
                      %x: tensor<4x4xf32> {merak.input = "x", merak.sharding = #mesh.shard<@mesh, [[0]]>},
                      %y: tensor<4x1xf32> {merak.input = "y", merak.sharding = #mesh.shard<@mesh, [[0]]>},
                      %lr: tensor<f32> {merak.lr},
                      %step: tensor<i64> {merak.step})
    -> (tensor<f32> {merak.loss}, tensor<1x4xf32> {merak.update_arg = 0 : i64},
        tensor<1xf32> {merak.update_arg = 1 : i64},
        tensor<1x4xf32> {merak.update_arg = 2 : i64},
        tensor<1xf32> {merak.update_arg = 3 : i64}) {
  %pred = merak.linear %x, %w, %b : (tensor<4x4xf32>, tensor<1x4xf32>, tensor<1xf32>) -> tensor<4x1xf32>
  %diff = merak.sub %pred, %y : (tensor<4x1xf32>, tensor<4x1xf32>) -> tensor<4x1xf32>
  %sq = merak.mul %diff, %diff : (tensor<4x1xf32>, tensor<4x1xf32>) -> tensor<4x1xf32>
  %local = merak.reduce_mean %sq {dims = array<i64>} : (tensor<4x1xf32>) -> tensor<f32>
  %loss = mesh.all_reduce %local on @mesh mesh_axes = [0] reduction = <average> : tensor<f32> -> tensor<f32>
  // d loss / d pred = 2 (pred - y) / 8, with the global batch size.
  %c = merak.constant dense<2.500000e-01> : tensor<f32>
  %g = merak.mul %diff, %c : (tensor<4x1xf32>, tensor<f32>) -> tensor<4x1xf32>
  %gt = merak.permute %g {permutation = array<i64: 1, 0>} : (tensor<4x1xf32>) -> tensor<1x4xf32>
  %dw_local = merak.matmul %gt, %x : (tensor<1x4xf32>, tensor<4x4xf32>) -> tensor<1x4xf32>
  %dw = mesh.all_reduce %dw_local on @mesh mesh_axes = [0] : tensor<1x4xf32> -> tensor<1x4xf32>
  %db_local = merak.reduce_sum %g {dims = array<i64: 0>} : (tensor<4x1xf32>) -> tensor<1xf32>
  %db = mesh.all_reduce %db_local on @mesh mesh_axes = [0] : tensor<1xf32> -> tensor<1xf32>
  %nw, %nmw = merak.sgd_update %w, %dw, %mw, %lr, %step {dampening = 0.0 : f64, momentum = 0.9 : f64, nesterov = false, weight_decay = 0.0 : f64} : (tensor<1x4xf32>, tensor<1x4xf32>, tensor<1x4xf32>, tensor<f32>, tensor<i64>) -> (tensor<1x4xf32>, tensor<1x4xf32>)
  %nb, %nmb = merak.sgd_update %b, %db, %mb, %lr, %step {dampening = 0.0 : f64, momentum = 0.9 : f64, nesterov = false, weight_decay = 0.0 : f64} : (tensor<1xf32>, tensor<1xf32>, tensor<1xf32>, tensor<f32>, tensor<i64>) -> (tensor<1xf32>, tensor<1xf32>)
  return %loss, %nw, %nb, %nmw, %nmb : tensor<f32>, tensor<1x4xf32>, tensor<1xf32>, tensor<1x4xf32>, tensor<1xf32>
}
