// Tests --merak-pipeline-partition: stages balanced over the layers found in
// the graph, backward ops on their forward op's stage, updates on their
// parameter's, a tied parameter, manual cuts, interleaved chunks, the
// report, and the errors.
// RUN: merak-opt %S/Inputs/mlp8.mlir --merak-train="optimizer=sgd lr=0.1" --merak-pipeline-partition="pp=4 report" 2>%t.report | FileCheck %s
// RUN: FileCheck %s --check-prefix=REPORT < %t.report
// RUN: merak-opt %S/Inputs/mlp8.mlir --merak-train --merak-pipeline-partition="pp=2 virtual=2" | FileCheck %s --check-prefix=VIRTUAL
// RUN: merak-opt %S/Inputs/mlp8.mlir --merak-train --merak-pipeline-partition="pp=2 stages=6" | FileCheck %s --check-prefix=MANUAL
// RUN: merak-opt %fixtures/gpt2.pt --merak-train="optimizer=adamw" --merak-pipeline-partition="pp=4 report" 2>&1 >/dev/null | FileCheck %s --check-prefix=GPT2
// RUN: not merak-opt %S/Inputs/mlp8.mlir --merak-train --merak-pipeline-partition="pp=9" 2>&1 | FileCheck %s --check-prefix=TOO-MANY
// RUN: not merak-opt %S/Inputs/mlp8.mlir --merak-train --merak-pipeline-partition="pp=2 virtual=3" 2>&1 | FileCheck %s --check-prefix=UNEVEN
// RUN: not merak-opt %S/Inputs/mlp8.mlir --merak-train --merak-pipeline-partition="pp=3 stages=2" 2>&1 | FileCheck %s --check-prefix=COUNT
// RUN: not merak-opt %S/Inputs/mlp8.mlir --merak-train --merak-pipeline-partition="pp=3 stages=4,2" 2>&1 | FileCheck %s --check-prefix=ORDER
// RUN: not merak-opt %S/Inputs/mlp8.mlir --merak-train="microbatches=2" --merak-pipeline-partition="pp=2" 2>&1 | FileCheck %s --check-prefix=ACCUMULATE
// RUN: not merak-opt %S/Inputs/mlp8.mlir --merak-train="clip-grad-norm=1.0" --merak-pipeline-partition="pp=2" 2>&1 | FileCheck %s --check-prefix=CLIP
// RUN: not merak-opt %S/Inputs/mlp8.mlir --merak-pipeline-partition="pp=2" 2>&1 | FileCheck %s --check-prefix=NO-STEP

// Eight equal layers (a linear and its relu each) on four stages.
// CHECK: module attributes {merak.pipeline = {layers = 8 : i64, pp = 4 : i64, stage_layers = array<i64: 0, 2, 4, 6>, stages = 4 : i64, virtual = 1 : i64}
// The first and last linears share w0: it is tied between stages 0 and 3.
// CHECK-LABEL: func.func @train_step(%arg0: tensor<16x16xf32> {merak.param = "w0", merak.tied = array<i64: 0, 3>}, %arg1: tensor<16x16xf32> {merak.param = "w1"},
// Constants go to the first stage that uses them (and are rematerialized).
// CHECK: merak.constant {merak.stage = 3 : i64} dense<1.000000e+00>
// CHECK: merak.linear %arg14, %arg0, %arg7 {merak.id = 0 : i64, merak.stage = 0 : i64}
// CHECK: merak.relu %{{.*}} {merak.id = 1 : i64, merak.stage = 0 : i64}
// CHECK: merak.linear %{{.*}}, %arg1, %arg8 {merak.id = 2 : i64, merak.stage = 0 : i64}
// CHECK: merak.linear %{{.*}}, %arg2, %arg9 {merak.id = 4 : i64, merak.stage = 1 : i64}
// CHECK: merak.linear %{{.*}}, %arg4, %arg11 {merak.id = 8 : i64, merak.stage = 2 : i64}
// CHECK: merak.linear %{{.*}}, %arg0 {merak.id = 14 : i64, merak.stage = 3 : i64}
// CHECK: merak.cross_entropy %{{.*}}, %arg15 {merak.id = 15 : i64, merak.stage = 3 : i64}
// Backward ops follow the forward op they differentiate.
// CHECK: merak.cross_entropy_backward {{.*}} {merak.grad_of = 15 : i64, merak.stage = 3 : i64}
// CHECK: %[[HEAD:.*]] = merak.matmul %{{.*}}, %{{.*}} {merak.grad_of = 14 : i64, merak.stage = 3 : i64} : (tensor<16x4xf32>, tensor<4x16xf32>) -> tensor<16x16xf32>
// CHECK: merak.matmul %{{.*}}, %arg4 {merak.grad_of = 8 : i64, merak.stage = 2 : i64}
// CHECK: merak.matmul %{{.*}}, %arg1 {merak.grad_of = 2 : i64, merak.stage = 0 : i64}
// CHECK: %[[EMBED:.*]] = merak.matmul %{{.*}}, %arg14 {merak.grad_of = 0 : i64, merak.stage = 0 : i64}
// The sum of the tied weight's gradients over its two stages.
// CHECK: %[[SUM:.*]] = merak.add %[[HEAD]], %[[EMBED]] {merak.grad_of = 0 : i64, merak.stage = 0 : i64, merak.tied_sum}
// Updates run on their parameter's stage; the tied one on its first.
// CHECK: merak.sgd_update %arg0, %[[SUM]], {{.*}}merak.stage = 0 : i64, merak.tied = array<i64: 0, 3>
// CHECK: merak.sgd_update %arg2, {{.*}}merak.stage = 1 : i64
// CHECK: merak.sgd_update %arg6, {{.*}}merak.stage = 3 : i64

// REPORT: merak-pipeline-partition: 8 layers, pp=4 virtual=1, 4 stages
// REPORT-NEXT: layer ids fwd(us) bwd(us) params(B) saved(B) out(B)
// REPORT-NEXT: 0 0-1 {{[0-9.]+}} {{[0-9.]+}} 1088 256 256
// REPORT-NEXT: 1 2-3 {{[0-9.]+}} {{[0-9.]+}} 1088 256 256
// REPORT: 7 14-15 {{[0-9.]+}} {{[0-9.]+}} 1024 256 0
// REPORT-NEXT: stage rank layers time(us) params(B) activations(B) send(B)
// REPORT-NEXT: 0 0 0-1 {{[0-9.]+}} 2176 512 256
// REPORT-NEXT: 1 1 2-3 {{[0-9.]+}} 2176 768 256
// REPORT-NEXT: 2 2 4-5 {{[0-9.]+}} 2176 768 256
// REPORT-NEXT: 3 3 6-7 {{[0-9.]+}} 2112 768 0

// Interleaving: four equal chunks of two layers; chunk c on rank c % 2.
// VIRTUAL: merak.pipeline = {layers = 8 : i64, pp = 2 : i64, stage_layers = array<i64: 0, 2, 4, 6>, stages = 4 : i64, virtual = 2 : i64}
// VIRTUAL: merak.linear %{{.*}}, %arg6, %arg13 {merak.id = 12 : i64, merak.stage = 3 : i64}

// Manual cut: stage 1 starts at layer 6.
// MANUAL: merak.pipeline = {layers = 8 : i64, pp = 2 : i64, stage_layers = array<i64: 0, 6>, stages = 2 : i64, virtual = 1 : i64}
// MANUAL: merak.linear %{{.*}}, %arg5, %arg12 {merak.id = 10 : i64, merak.stage = 0 : i64}
// MANUAL: merak.linear %{{.*}}, %arg6, %arg13 {merak.id = 12 : i64, merak.stage = 1 : i64}

// GPT-2: an attention and an MLP layer per block, the embeddings with the
// first attention, the final norm with the last MLP, the head.
// GPT2: merak-pipeline-partition: 5 layers, pp=4 virtual=1, 4 stages
// GPT2: 0 1-21
// GPT2-NEXT: 1 22-27
// GPT2-NEXT: 2 28-44
// GPT2-NEXT: 3 45-51
// GPT2-NEXT: 4 52-55
// GPT2: stage rank layers
// GPT2-NEXT: 0 0 0-0
// GPT2-NEXT: 1 1 1-1
// GPT2-NEXT: 2 2 2-2
// GPT2-NEXT: 3 3 3-4

// TOO-MANY: error: pp=9 is larger than the number of layers (8): every stage needs at least one layer
// UNEVEN: error: virtual=3 does not divide the 8 layers into pp x virtual = 6 equal model chunks
// COUNT: error: stages= gives 1 boundaries; pp=3 x virtual=1 needs 2 (the first layer of every stage but the first)
// ORDER: error: stages= must be increasing layer indices between 1 and 7, got 2
// ACCUMULATE: error: the step accumulates gradients over micro-batches inside @train_step; pipeline schedules run micro-batches themselves: build the step with microbatches=1
// CLIP: error: clip-grad-norm needs the gradient norm over every stage
// NO-STEP: error: no @train_step; build the training step with --merak-train first
