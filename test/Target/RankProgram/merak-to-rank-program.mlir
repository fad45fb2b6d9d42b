// The translation to a rank-program file: merak-exec lists the same
// programs from the file as from the module, picks the entry the file was
// compiled for, and refuses a damaged, foreign or newer file by name.
//
// RUN: rm -rf %t && mkdir -p %t
// RUN: merak-translate %s --merak-to-rank-program -o %t/step.mrp
// RUN: merak-exec %s --print-program > %t/from-mlir.txt
// RUN: merak-exec %t/step.mrp --print-program > %t/from-mrp.txt
// RUN: diff %t/from-mlir.txt %t/from-mrp.txt
// RUN: FileCheck %s < %t/from-mrp.txt
//
// CHECK-LABEL: program @train_step: {{[0-9]+}} values, {{[0-9]+}} instructions, 1 constants
// CHECK: %0 = param "w" : 1x4xf32 (updated by result 1)
// CHECK: %2 = input "x" : 4x4xf32
// CHECK: all_reduce %{{[0-9]+}} : f32 {average over mesh axes [0] (dp): group 0 = ranks 0, 1}
// CHECK: sgd_update
// CHECK: return %{{[0-9]+}} (loss), %{{[0-9]+}} (updates %0), %{{[0-9]+}} (updates %1)

// Another entry: the file holds it alone.
// RUN: merak-translate %s --merak-to-rank-program --merak-rank-program-entry=forward -o %t/forward.mrp
// RUN: merak-exec %t/forward.mrp --print-program | FileCheck %s --check-prefix=FORWARD
// RUN: not merak-exec %t/forward.mrp --entry train_step 2>&1 | FileCheck %s --check-prefix=ENTRY
// FORWARD: program @forward: 2 values, 1 instructions
// ENTRY: merak-exec: error: {{.*}}forward.mrp holds @forward, not @train_step: compile it with merak-translate --merak-rank-program-entry=train_step
// RUN: not merak-translate %s --merak-to-rank-program --merak-rank-program-entry=nope -o %t/nope.mrp 2>&1 | FileCheck %s --check-prefix=NOFN
// NOFN: error: the module has no function @nope

// Damaged files: each error names the file and what is wrong.
// RUN: %python %S/Inputs/damage_mrp.py %t/step.mrp %t/bad
// RUN: not merak-exec %t/bad/truncated.mrp 2>&1 | FileCheck %s --check-prefix=TRUNC
// TRUNC: merak-exec: error: {{.*}}truncated.mrp: truncated rank-program file: the header announces {{[0-9]+}} bytes of payload at byte 32, the file has {{[0-9]+}}
// RUN: not merak-exec %t/bad/header.mrp 2>&1 | FileCheck %s --check-prefix=HEADER
// HEADER: merak-exec: error: {{.*}}header.mrp: corrupted rank-program header (its checksum, at byte 28, does not match bytes 0-27)
// RUN: not merak-exec %t/bad/payload.mrp 2>&1 | FileCheck %s --check-prefix=PAYLOAD
// PAYLOAD: merak-exec: error: {{.*}}payload.mrp: corrupted rank-program file: the payload's checksum is {{[0-9a-f]+}}, the header records {{[0-9a-f]+}}
// RUN: not merak-exec %t/bad/newer.mrp 2>&1 | FileCheck %s --check-prefix=NEWER
// NEWER: merak-exec: error: {{.*}}newer.mrp: rank-program format version 99 is newer than this runtime reads (1 to 1): run it with a newer merak-exec, or compile it again with this version's merak-translate
// RUN: not merak-exec %t/bad/padded.mrp 2>&1 | FileCheck %s --check-prefix=PADDED
// PADDED: merak-exec: error: {{.*}}padded.mrp: 4 unexpected bytes after the payload, at byte {{[0-9]+}}
// A file of another kind named .mrp, and a TorchScript archive.
// RUN: printf 'PK\003\004rest' > %t/model.mrp
// RUN: not merak-exec %t/model.mrp 2>&1 | FileCheck %s --check-prefix=FOREIGN
// FOREIGN: merak-exec: error: {{.*}}model.mrp: not a rank-program file (it starts with 50 4b 03 04 72 65 73 74; merak-translate --merak-to-rank-program writes one)
// RUN: printf 'PK\003\004rest' > %t/model.pt
// RUN: not merak-exec %t/model.pt 2>&1 | FileCheck %s --check-prefix=ARCHIVE
// ARCHIVE: merak-exec: error: {{.*}}model.pt is a TorchScript archive: import it and build its step with merak-opt first

mesh.mesh @mesh(shape = 2) {merak.axes = ["dp"]}
func.func @train_step(%w: tensor<1x4xf32> {merak.param = "w"},
                      %m: tensor<1x4xf32> {merak.opt_state = "w/momentum_buffer"},
                      %x: tensor<4x4xf32> {merak.input = "x", merak.sharding = #mesh.shard<@mesh, [[0]]>},
                      %lr: tensor<f32> {merak.lr}, %step: tensor<i64> {merak.step})
    -> (tensor<f32> {merak.loss}, tensor<1x4xf32> {merak.update_arg = 0 : i64},
        tensor<1x4xf32> {merak.update_arg = 1 : i64}) {
  %pred = merak.linear %x, %w : (tensor<4x4xf32>, tensor<1x4xf32>) -> tensor<4x1xf32>
  %local = merak.reduce_mean %pred {dims = array<i64>} : (tensor<4x1xf32>) -> tensor<f32>
  %loss = mesh.all_reduce %local on @mesh mesh_axes = [0] reduction = <average> : tensor<f32> -> tensor<f32>
  // d loss / d w = the column sums of x over the global batch of 8.
  %sum = merak.reduce_sum %x {dims = array<i64: 0>, keepdim = true} : (tensor<4x4xf32>) -> tensor<1x4xf32>
  %c = merak.constant dense<1.250000e-01> : tensor<f32>
  %dw_local = merak.mul %sum, %c : (tensor<1x4xf32>, tensor<f32>) -> tensor<1x4xf32>
  %dw = mesh.all_reduce %dw_local on @mesh mesh_axes = [0] : tensor<1x4xf32> -> tensor<1x4xf32>
  %nw, %nm = merak.sgd_update %w, %dw, %m, %lr, %step {dampening = 0.0 : f64, momentum = 0.9 : f64, nesterov = false, weight_decay = 0.0 : f64} : (tensor<1x4xf32>, tensor<1x4xf32>, tensor<1x4xf32>, tensor<f32>, tensor<i64>) -> (tensor<1x4xf32>, tensor<1x4xf32>)
  return %loss, %nw, %nm : tensor<f32>, tensor<1x4xf32>, tensor<1x4xf32>
}
func.func @forward(%x: tensor<2x4xf32> {merak.input = "x"}) -> tensor<2x4xf32> {
  %y = merak.tanh %x : tensor<2x4xf32>
  return %y : tensor<2x4xf32>
}
