// Tests --merak-pipeline-schedule: every kind's task order for p=4 ranks
// and m=8 micro-batches against its published pattern, the schedule as
// IR (per-rank programs with explicit sends and receives), the pipeline
// and recomputation taken from a partitioned module, and the diagnostics.
// RUN: merak-opt %s --merak-pipeline-schedule="kind=gpipe microbatches=8 pp=4 report" 2>&1 >/dev/null | FileCheck %s --check-prefix=GPIPE
// RUN: merak-opt %s --merak-pipeline-schedule="kind=1f1b microbatches=8 pp=4 report" 2>&1 >/dev/null | FileCheck %s --check-prefix=1F1B
// RUN: merak-opt %s --merak-pipeline-schedule="kind=zb-h1 microbatches=8 pp=4 report" 2>&1 >/dev/null | FileCheck %s --check-prefix=ZBH1
// RUN: merak-opt %s --merak-pipeline-schedule="kind=dynamic microbatches=8 pp=4 report" 2>&1 >/dev/null | FileCheck %s --check-prefix=DYNAMIC
// RUN: merak-opt %s --merak-pipeline-schedule="kind=merak-last-no-recompute microbatches=8 pp=4 recompute report" 2>&1 >/dev/null | FileCheck %s --check-prefix=LNR
// RUN: merak-opt %s --merak-pipeline-schedule="kind=merak-shifted-critical-path microbatches=8 pp=4 recompute report" 2>&1 >/dev/null | FileCheck %s --check-prefix=SCP
// RUN: merak-opt %s --merak-pipeline-schedule="kind=interleaved-1f1b microbatches=8 pp=4 virtual=2 report" 2>&1 >/dev/null | FileCheck %s --check-prefix=INTERLEAVED
// RUN: merak-opt %s --merak-pipeline-schedule="kind=dynamic microbatches=8 pp=4 virtual=2 report" 2>&1 >/dev/null | FileCheck %s --check-prefix=DYNAMIC-V2
// RUN: merak-opt %s --merak-pipeline-schedule="kind=1f1b microbatches=3 pp=2" | FileCheck %s --check-prefix=IR
// RUN: merak-opt %s --merak-pipeline-schedule="kind=dynamic microbatches=4 pp=2" | FileCheck %s --check-prefix=DYNAMIC-IR
// RUN: merak-opt %S/Inputs/mlp8.mlir --merak-train --merak-pipeline-partition="pp=4" --merak-recompute="recompute=full recompute-ratio=0.5" --merak-pipeline-schedule="kind=merak-shifted-critical-path microbatches=4 report" 2>&1 | FileCheck %s --check-prefix=PARTITIONED
// RUN: not merak-opt %s --merak-pipeline-schedule="kind=1f1b microbatches=2 pp=4" 2>&1 | FileCheck %s --check-prefix=FEW
// RUN: not merak-opt %s --merak-pipeline-schedule="kind=merak-shifted-critical-path microbatches=3 pp=2" 2>&1 | FileCheck %s --check-prefix=SCP-FEW
// RUN: not merak-opt %s --merak-pipeline-schedule="kind=1f1b microbatches=8 pp=4 virtual=2" 2>&1 | FileCheck %s --check-prefix=NO-VIRTUAL
// RUN: not merak-opt %s --merak-pipeline-schedule="kind=interleaved-1f1b microbatches=6 pp=4 virtual=2" 2>&1 | FileCheck %s --check-prefix=GROUPS
// RUN: not merak-opt %s --merak-pipeline-schedule="kind=pipedream microbatches=8 pp=4" 2>&1 | FileCheck %s --check-prefix=KIND
// RUN: not merak-opt %s --merak-pipeline-schedule="kind=1f1b microbatches=8" 2>&1 | FileCheck %s --check-prefix=NO-PP
// RUN: not merak-opt %S/Inputs/mlp8.mlir --merak-train --merak-pipeline-partition="pp=2" --merak-pipeline-schedule="kind=1f1b microbatches=8 pp=4" 2>&1 | FileCheck %s --check-prefix=MISMATCH

module {}

// Tasks: F(s,m) forward of stage s on micro-batch m, B backward (input
// gradients only when W is split off), W weight gradients, R recompute,
// FK a forward that keeps every activation (no R later). Stage s runs on
// rank s % pp. The last line is a unit-time simulation (F = R = W = 1,
// B = 2, or 1 when W is split).

// GPipe: all forwards, then all backwards.
// One-forward-one-backward: p - r - 1 warm-up forwards on rank r, then one forward and one
// backward, then the cool-down backwards.
// ZB-H1: 1F1B with B and W split; rank r defers its W by r steady steps,
// and the deferred W fill the tail: a third of 1F1B's bubble.
// Dynamic: each rank runs its ready task, backward first, with at most
// p - r micro-batches in flight; without W the fallback order is 1F1B.
// Merak's last-no-recompute (every stage recomputes here): the last stage
// keeps everything, the others recompute before each backward except the
// micro-batches whose backward falls in the cool-down (FK).
// Merak's shifted critical path: the second-to-last stage runs its third
// forward before its first backward, stage S-3 keeps its first micro-batch,
// and recomputation does not wait for the gradient.
// Interleaved 1F1B (Megatron): chunks of p micro-batches per model chunk,
// rank r warms up with (p - r - 1) * 2 + (v - 1) * p forwards.
// gpipe
// GPIPE: rank 0: F(0,0) F(0,1) F(0,2) F(0,3) F(0,4) F(0,5) F(0,6) F(0,7) B(0,0) B(0,1) B(0,2) B(0,3) B(0,4) B(0,5) B(0,6) B(0,7)
// GPIPE-NEXT: rank 1: F(1,0) F(1,1) F(1,2) F(1,3) F(1,4) F(1,5) F(1,6) F(1,7) B(1,0) B(1,1) B(1,2) B(1,3) B(1,4) B(1,5) B(1,6) B(1,7)
// GPIPE-NEXT: rank 2: F(2,0) F(2,1) F(2,2) F(2,3) F(2,4) F(2,5) F(2,6) F(2,7) B(2,0) B(2,1) B(2,2) B(2,3) B(2,4) B(2,5) B(2,6) B(2,7)
// GPIPE-NEXT: rank 3: F(3,0) F(3,1) F(3,2) F(3,3) F(3,4) F(3,5) F(3,6) F(3,7) B(3,0) B(3,1) B(3,2) B(3,3) B(3,4) B(3,5) B(3,6) B(3,7)
// GPIPE-NEXT: unit-time makespan 33.00 (F=1 R=1 B=2 W=1), bubble 27.3%
// 1f1b
// 1F1B: rank 0: F(0,0) F(0,1) F(0,2) F(0,3) B(0,0) F(0,4) B(0,1) F(0,5) B(0,2) F(0,6) B(0,3) F(0,7) B(0,4) B(0,5) B(0,6) B(0,7)
// 1F1B-NEXT: rank 1: F(1,0) F(1,1) F(1,2) B(1,0) F(1,3) B(1,1) F(1,4) B(1,2) F(1,5) B(1,3) F(1,6) B(1,4) F(1,7) B(1,5) B(1,6) B(1,7)
// 1F1B-NEXT: rank 2: F(2,0) F(2,1) B(2,0) F(2,2) B(2,1) F(2,3) B(2,2) F(2,4) B(2,3) F(2,5) B(2,4) F(2,6) B(2,5) F(2,7) B(2,6) B(2,7)
// 1F1B-NEXT: rank 3: F(3,0) B(3,0) F(3,1) B(3,1) F(3,2) B(3,2) F(3,3) B(3,3) F(3,4) B(3,4) F(3,5) B(3,5) F(3,6) B(3,6) F(3,7) B(3,7)
// 1F1B-NEXT: unit-time makespan 33.00 (F=1 R=1 B=2 W=1), bubble 27.3%
// zb-h1
// ZBH1: rank 0: F(0,0) F(0,1) F(0,2) F(0,3) B(0,0) W(0,0) F(0,4) B(0,1) W(0,1) F(0,5) B(0,2) W(0,2) F(0,6) B(0,3) W(0,3) F(0,7) B(0,4) W(0,4) B(0,5) W(0,5) B(0,6) W(0,6) B(0,7) W(0,7)
// ZBH1-NEXT: rank 1: F(1,0) F(1,1) F(1,2) B(1,0) F(1,3) B(1,1) W(1,0) F(1,4) B(1,2) W(1,1) F(1,5) B(1,3) W(1,2) F(1,6) B(1,4) W(1,3) F(1,7) B(1,5) W(1,4) B(1,6) W(1,5) B(1,7) W(1,6) W(1,7)
// ZBH1-NEXT: rank 2: F(2,0) F(2,1) B(2,0) F(2,2) B(2,1) F(2,3) B(2,2) W(2,0) F(2,4) B(2,3) W(2,1) F(2,5) B(2,4) W(2,2) F(2,6) B(2,5) W(2,3) F(2,7) B(2,6) W(2,4) B(2,7) W(2,5) W(2,6) W(2,7)
// ZBH1-NEXT: rank 3: F(3,0) B(3,0) F(3,1) B(3,1) F(3,2) B(3,2) F(3,3) B(3,3) W(3,0) F(3,4) B(3,4) W(3,1) F(3,5) B(3,5) W(3,2) F(3,6) B(3,6) W(3,3) F(3,7) B(3,7) W(3,4) W(3,5) W(3,6) W(3,7)
// ZBH1-NEXT: unit-time makespan 27.00 (F=1 R=1 B=1 W=1), bubble 11.1%
// dynamic
// DYNAMIC: rank 0: F(0,0) F(0,1) F(0,2) F(0,3) B(0,0) F(0,4) B(0,1) F(0,5) B(0,2) F(0,6) B(0,3) F(0,7) B(0,4) B(0,5) B(0,6) B(0,7)
// DYNAMIC-NEXT: rank 1: F(1,0) F(1,1) F(1,2) B(1,0) F(1,3) B(1,1) F(1,4) B(1,2) F(1,5) B(1,3) F(1,6) B(1,4) F(1,7) B(1,5) B(1,6) B(1,7)
// DYNAMIC-NEXT: rank 2: F(2,0) F(2,1) B(2,0) F(2,2) B(2,1) F(2,3) B(2,2) F(2,4) B(2,3) F(2,5) B(2,4) F(2,6) B(2,5) F(2,7) B(2,6) B(2,7)
// DYNAMIC-NEXT: rank 3: F(3,0) B(3,0) F(3,1) B(3,1) F(3,2) B(3,2) F(3,3) B(3,3) F(3,4) B(3,4) F(3,5) B(3,5) F(3,6) B(3,6) F(3,7) B(3,7)
// DYNAMIC-NEXT: unit-time makespan 33.00 (F=1 R=1 B=2 W=1), bubble 27.3%
// merak-last-no-recompute
// LNR: rank 0: F(0,0) F(0,1) F(0,2) F(0,3) R(0,0) B(0,0) F(0,4) R(0,1) B(0,1) FK(0,5) R(0,2) B(0,2) FK(0,6) R(0,3) B(0,3) FK(0,7) R(0,4) B(0,4) B(0,5) B(0,6) B(0,7)
// LNR-NEXT: rank 1: F(1,0) F(1,1) F(1,2) R(1,0) B(1,0) F(1,3) R(1,1) B(1,1) F(1,4) R(1,2) B(1,2) F(1,5) R(1,3) B(1,3) FK(1,6) R(1,4) B(1,4) FK(1,7) R(1,5) B(1,5) B(1,6) B(1,7)
// LNR-NEXT: rank 2: FK(2,0) F(2,1) B(2,0) F(2,2) R(2,1) B(2,1) F(2,3) R(2,2) B(2,2) F(2,4) R(2,3) B(2,3) F(2,5) R(2,4) B(2,4) F(2,6) R(2,5) B(2,5) F(2,7) R(2,6) B(2,6) R(2,7) B(2,7)
// LNR-NEXT: rank 3: FK(3,0) B(3,0) FK(3,1) B(3,1) FK(3,2) B(3,2) FK(3,3) B(3,3) FK(3,4) B(3,4) FK(3,5) B(3,5) FK(3,6) B(3,6) FK(3,7) B(3,7)
// LNR-NEXT: unit-time makespan 39.00 (F=1 R=1 B=2 W=1), bubble 26.9%
// merak-shifted-critical-path
// SCP: rank 0: F(0,0) F(0,1) F(0,2) F(0,3) R(0,0) B(0,0) F(0,4) R(0,1) B(0,1) FK(0,5) R(0,2) B(0,2) FK(0,6) R(0,3) B(0,3) FK(0,7) R(0,4) B(0,4) B(0,5) B(0,6) B(0,7)
// SCP-NEXT: rank 1: FK(1,0) F(1,1) F(1,2) B(1,0) F(1,3) R(1,1) B(1,1) F(1,4) R(1,2) B(1,2) F(1,5) R(1,3) B(1,3) FK(1,6) R(1,4) B(1,4) FK(1,7) R(1,5) B(1,5) B(1,6) B(1,7)
// SCP-NEXT: rank 2: FK(2,0) FK(2,1) F(2,2) B(2,0) B(2,1) F(2,3) R(2,2) B(2,2) F(2,4) R(2,3) B(2,3) F(2,5) R(2,4) B(2,4) F(2,6) R(2,5) B(2,5) F(2,7) R(2,6) B(2,6) R(2,7) B(2,7)
// SCP-NEXT: rank 3: FK(3,0) B(3,0) FK(3,1) B(3,1) FK(3,2) B(3,2) FK(3,3) B(3,3) FK(3,4) B(3,4) FK(3,5) B(3,5) FK(3,6) B(3,6) FK(3,7) B(3,7)
// SCP-NEXT: unit-time makespan 38.00 (F=1 R=1 B=2 W=1), bubble 26.3%
// interleaved-1f1b v2
// INTERLEAVED: rank 0: F(0,0) F(0,1) F(0,2) F(0,3) F(4,0) F(4,1) F(4,2) F(4,3) F(0,4) F(0,5) F(0,6) B(4,0) F(0,7) B(4,1) F(4,4) B(4,2) F(4,5) B(4,3) F(4,6) B(0,0) F(4,7) B(0,1) B(0,2) B(0,3) B(4,4) B(4,5) B(4,6) B(4,7) B(0,4) B(0,5) B(0,6) B(0,7)
// INTERLEAVED-NEXT: rank 1: F(1,0) F(1,1) F(1,2) F(1,3) F(5,0) F(5,1) F(5,2) F(5,3) F(1,4) B(5,0) F(1,5) B(5,1) F(1,6) B(5,2) F(1,7) B(5,3) F(5,4) B(1,0) F(5,5) B(1,1) F(5,6) B(1,2) F(5,7) B(1,3) B(5,4) B(5,5) B(5,6) B(5,7) B(1,4) B(1,5) B(1,6) B(1,7)
// INTERLEAVED-NEXT: rank 2: F(2,0) F(2,1) F(2,2) F(2,3) F(6,0) F(6,1) F(6,2) B(6,0) F(6,3) B(6,1) F(2,4) B(6,2) F(2,5) B(6,3) F(2,6) B(2,0) F(2,7) B(2,1) F(6,4) B(2,2) F(6,5) B(2,3) F(6,6) B(6,4) F(6,7) B(6,5) B(6,6) B(6,7) B(2,4) B(2,5) B(2,6) B(2,7)
// INTERLEAVED-NEXT: rank 3: F(3,0) F(3,1) F(3,2) F(3,3) F(7,0) B(7,0) F(7,1) B(7,1) F(7,2) B(7,2) F(7,3) B(7,3) F(3,4) B(3,0) F(3,5) B(3,1) F(3,6) B(3,2) F(3,7) B(3,3) F(7,4) B(7,4) F(7,5) B(7,5) F(7,6) B(7,6) F(7,7) B(7,7) B(3,4) B(3,5) B(3,6) B(3,7)
// INTERLEAVED-NEXT: unit-time makespan 57.00 (F=1 R=1 B=2 W=1), bubble 15.8%
// dynamic v2
// DYNAMIC-V2: rank 0: F(0,0) F(0,1) F(0,2) F(0,3) F(4,0) F(4,1) F(4,2) F(4,3) F(0,4) F(0,5) F(0,6) B(4,0) F(0,7) B(4,1) B(4,2) B(0,0) B(0,1) B(4,3) B(0,2) F(4,4) F(4,5) F(4,6) F(4,7) B(0,3) B(4,4) B(4,5) B(4,6) B(0,4) B(0,5) B(4,7) B(0,6) B(0,7)
// DYNAMIC-V2-NEXT: rank 1: F(1,0) F(1,1) F(1,2) F(1,3) F(5,0) F(5,1) F(5,2) F(5,3) F(1,4) B(5,0) F(1,5) B(5,1) F(1,6) B(5,2) B(1,0) F(1,7) B(1,1) B(5,3) B(1,2) F(5,4) B(1,3) F(5,5) F(5,6) F(5,7) B(5,4) B(5,5) B(5,6) B(1,4) B(1,5) B(5,7) B(1,6) B(1,7)
// DYNAMIC-V2-NEXT: rank 2: F(2,0) F(2,1) F(2,2) F(2,3) F(6,0) F(6,1) F(6,2) B(6,0) F(6,3) B(6,1) F(2,4) B(6,2) B(2,0) F(2,5) B(2,1) B(6,3) B(2,2) F(2,6) F(2,7) B(2,3) F(6,4) F(6,5) B(6,4) F(6,6) B(6,5) F(6,7) B(6,6) B(2,4) B(2,5) B(6,7) B(2,6) B(2,7)
// DYNAMIC-V2-NEXT: rank 3: F(3,0) F(3,1) F(3,2) F(3,3) F(7,0) B(7,0) F(7,1) B(7,1) F(7,2) B(7,2) B(3,0) F(7,3) B(3,1) B(7,3) B(3,2) F(3,4) F(3,5) F(3,6) B(3,3) F(3,7) F(7,4) B(7,4) F(7,5) B(7,5) F(7,6) B(7,6) B(3,4) F(7,7) B(3,5) B(7,7) B(3,6) B(3,7)
// DYNAMIC-V2-NEXT: unit-time makespan 64.00 (F=1 R=1 B=2 W=1), bubble 25.0%

// The schedule in the module: per rank, its program in order, with the
// transfers explicit.
// The sends and receives follow one global order, so blocking
// point-to-point calls cannot deadlock (the pass verifies it).
// IR: module attributes {merak.pipeline_schedule = {kind = "1f1b", microbatches = 3 : i64, pp = 2 : i64,
// IR-SAME: ranks = {{\[\[}}"F(0,0)", "send F(0,0) -> 1", "F(0,1)", "send F(0,1) -> 1", "recv B(1,0) <- 1", "B(0,0)", "F(0,2)", "send F(0,2) -> 1", "recv B(1,1) <- 1", "B(0,1)", "recv B(1,2) <- 1", "B(0,2)"],
// IR-SAME: ["recv F(0,0) <- 0", "F(1,0)", "recv F(0,1) <- 0", "B(1,0)", "send B(1,0) -> 0", "F(1,1)", "B(1,1)", "recv F(0,2) <- 0", "send B(1,1) -> 0", "F(1,2)", "B(1,2)", "send B(1,2) -> 0"]],
// IR-SAME: recompute = array<i1: false, false>, recompute_after_gradient = true, split_backward = false, stages = 2 : i64, virtual = 1 : i64}}

// Dynamic records its rule and limits beside the fallback order.
// DYNAMIC-IR: inflight_limit = array<i64: 2, 1>
// DYNAMIC-IR-SAME: priority = "backward before forward; among ready tasks the lowest micro-batch, then the highest stage; a forward only while the rank holds fewer than inflight_limit[rank] micro-batches between forward and backward"

// From a partition: Merak's stage-aware ratio makes ranks 0-2 recompute,
// and the last rank keeps its activations.
// PARTITIONED: kind=merak-shifted-critical-path pp=4 virtual=1 stages=4 microbatches=4
// PARTITIONED-NEXT: rank 0: F(0,0) FK(0,1) FK(0,2) FK(0,3) R(0,0) B(0,0) B(0,1) B(0,2) B(0,3)
// PARTITIONED: rank 3: F(3,0) B(3,0) F(3,1) B(3,1)
// PARTITIONED: merak.pipeline_schedule = {kind = "merak-shifted-critical-path"
// PARTITIONED-SAME: recompute = array<i1: true, true, true, false>

// FEW: error: kind=1f1b needs at least as many micro-batches as pipeline ranks: microbatches=2 < pp=4
// SCP-FEW: error: kind=merak-shifted-critical-path needs at least 4 micro-batches, got 3
// NO-VIRTUAL: error: kind=1f1b runs one model chunk per rank; virtual=2 needs kind=interleaved-1f1b or kind=dynamic
// GROUPS: error: kind=interleaved-1f1b takes micro-batches in groups of pp (Megatron's order): microbatches=6 is not a multiple of pp=4
// KIND: error: unknown schedule kind 'pipedream'; expected gpipe, 1f1b, interleaved-1f1b, merak-last-no-recompute, merak-shifted-critical-path, zb-h1 or dynamic
// NO-PP: error: the module has no merak.pipeline; run --merak-pipeline-partition first or give pp=N
// MISMATCH: error: pp=4 virtual=1 differ from the partition's pp=2 virtual=1
