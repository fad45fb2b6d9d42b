// Tests --merak-recompute: forward ops cloned just before the backward ops
// that read them (merak.recompute_of names the original), whole layers
// from their inputs, attention cores only, Merak's stage-aware ratio, and
// the errors.
// RUN: merak-opt %S/Inputs/mlp8.mlir --merak-train --merak-recompute="recompute=full" | FileCheck %s --check-prefix=FULL
// RUN: merak-opt %S/Inputs/attention.mlir --merak-train --merak-recompute="recompute=selective" | FileCheck %s --check-prefix=SELECTIVE
// RUN: sed 's/dense<-1.0e9>/dense<0xFF800000>/' %S/Inputs/attention.mlir | merak-opt --merak-train --merak-recompute="recompute=selective" | FileCheck %s --check-prefix=FUSED
// RUN: merak-opt %S/Inputs/mlp8.mlir --merak-train --merak-pipeline-partition="pp=4" --merak-recompute="recompute=full recompute-ratio=0.5" | FileCheck %s --check-prefix=RATIO
// RUN: merak-opt %S/Inputs/mlp8.mlir --merak-train --merak-pipeline-partition="pp=4" --merak-recompute="recompute=full recompute-ratio=1" | FileCheck %s --check-prefix=RATIO1
// RUN: merak-opt %S/Inputs/mlp8.mlir --merak-train --merak-recompute="recompute=none" | FileCheck %s --check-prefix=NONE
// RUN: not merak-opt %S/Inputs/mlp8.mlir --merak-train --merak-recompute="recompute=some" 2>&1 | FileCheck %s --check-prefix=BAD-POLICY
// RUN: not merak-opt %S/Inputs/mlp8.mlir --merak-train --merak-recompute="recompute=selective recompute-ratio=0.5" 2>&1 | FileCheck %s --check-prefix=BAD-RATIO
// RUN: not merak-opt %S/Inputs/mlp8.mlir --merak-train --merak-recompute --merak-recompute 2>&1 | FileCheck %s --check-prefix=TWICE

// Each layer is recomputed from its input, right before its backward: the
// head from the last relu, which itself is only a checkpoint.
// FULL-LABEL: func.func @train_step
// FULL: %[[R6:.*]] = merak.relu %{{.*}} {merak.id = 13 : i64}
// FULL: %[[LOGITS:.*]] = merak.linear %[[R6]], %arg0 {merak.recompute_of = 14 : i64}
// FULL-NEXT: merak.cross_entropy_backward %{{.*}}, %[[LOGITS]], %arg15 {merak.grad_of = 15 : i64}
// FULL: %[[L6:.*]] = merak.linear %{{.*}}, %arg6, %arg13 {merak.recompute_of = 12 : i64}
// FULL-NEXT: %[[H6:.*]] = merak.relu %[[L6]] {merak.recompute_of = 13 : i64}
// FULL-NEXT: merak.matmul %{{.*}}, %[[H6]] {merak.grad_of = 14 : i64}
// FULL: merak.linear %arg14, %arg0, %arg7 {merak.recompute_of = 0 : i64}

// Only the attention core: the scores matmul, scale, mask, softmax,
// dropout and the matmul with V; the causal mask comes from a buffer and
// is not recomputed (every stage computes it anyway).
// SELECTIVE-LABEL: func.func @train_step
// SELECTIVE: %[[Q:.*]] = merak.linear %arg6, %arg0 {merak.id = 2 : i64}
// SELECTIVE: %[[KT:.*]] = merak.permute %{{.*}} {merak.id = 5 : i64
// SELECTIVE: %[[MASK:.*]] = merak.not %arg5 {merak.id = 8 : i64}
// SELECTIVE: %[[S:.*]] = merak.matmul %[[Q]], %[[KT]] {merak.recompute_of = 6 : i64}
// SELECTIVE-NEXT: %[[SS:.*]] = merak.mul %[[S]], %{{.*}} {merak.recompute_of = 7 : i64}
// SELECTIVE-NEXT: %[[W:.*]] = merak.where %[[MASK]], %{{.*}}, %[[SS]] {merak.recompute_of = 9 : i64}
// SELECTIVE-NEXT: %[[P:.*]] = merak.softmax %[[W]] {dim = 1 : i64, merak.recompute_of = 10 : i64}
// SELECTIVE-NEXT: %[[PD:.*]] = merak.dropout %[[P]] {merak.recompute_of = 11 : i64
// SELECTIVE-NEXT: merak.matmul %[[PD]], %{{.*}} {merak.recompute_of = 12 : i64}
// SELECTIVE-NOT: merak.linear {{.*}}recompute_of

// With a -inf fill --merak-train fuses the core into one
// merak.masked_attention: selective recomputation clones that op, and the
// backward reads the recomputed probabilities.
// FUSED-LABEL: func.func @train_step
// FUSED: merak.masked_attention {{.*}}merak.id = [[ID:[0-9]+]] : i64
// FUSED: %{{.*}}, %[[P:.*]] = merak.masked_attention {{.*}}merak.recompute_of = [[ID]] : i64
// FUSED: merak.masked_attention_backward {{.*}}, %[[P]] {merak.grad_of = [[ID]] : i64
// FUSED-NOT: merak.linear {{.*}}recompute_of

// Pipeline rank s of 4 recomputes 1 - (1 - 0.5) * 3 / (4 - s) of its two
// layers: 0.625 and 0.5 (one layer) on ranks 0 and 1, 0.25 (one of two,
// rounded) on rank 2, none on the last.
// RATIO: merak.pipeline = {{{.*}}recompute = array<i1: true, true, true, false>
// RATIO-NOT: merak.linear {{.*}}merak.recompute_of = 2 : i64
// RATIO: merak.linear {{.*}}{merak.recompute_of = 8 : i64, merak.stage = 2 : i64}
// RATIO: merak.linear {{.*}}{merak.recompute_of = 4 : i64, merak.stage = 1 : i64}
// RATIO: merak.linear {{.*}}{merak.recompute_of = 0 : i64, merak.stage = 0 : i64}
// RATIO-NOT: recompute_of = 12
// With r = 1 every rank but the last recomputes all its layers.
// RATIO1: merak.pipeline = {{{.*}}recompute = array<i1: true, true, true, false>
// RATIO1: merak.recompute_of = 10 : i64, merak.stage = 2 : i64
// RATIO1: merak.recompute_of = 2 : i64, merak.stage = 0 : i64

// NONE-NOT: recompute_of

// BAD-POLICY: error: recompute must be none, full or selective, got 'some'
// BAD-RATIO: error: recompute-ratio applies to recompute=full
// TWICE: error: @train_step recomputes already
