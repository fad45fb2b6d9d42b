// Tests --merak-pipeline-verify on hand-written schedules: a correct one,
// then each mistake the verifier catches (a missing task, a task on the
// wrong rank, a receive after its reader, a deadlock of blocking
// transfers, an unreadable task, no schedule).
// RUN: merak-opt %s -split-input-file --merak-pipeline-verify -verify-diagnostics | FileCheck %s

// A correct 1F1B on two ranks with two micro-batches: rank 0 receives the
// first gradient before sending the second activation, which rank 1
// receives after sending that gradient.
// CHECK: module attributes {merak.pipeline_schedule
module attributes {merak.pipeline_schedule = {kind = "1f1b", microbatches = 2 : i64, pp = 2 : i64, virtual = 1 : i64, ranks = [
    ["F(0,0)", "send F(0,0) -> 1", "F(0,1)", "recv B(1,0) <- 1", "send F(0,1) -> 1", "B(0,0)", "recv B(1,1) <- 1", "B(0,1)"],
    ["recv F(0,0) <- 0", "F(1,0)", "B(1,0)", "send B(1,0) -> 0", "recv F(0,1) <- 0", "F(1,1)", "B(1,1)", "send B(1,1) -> 0"]]}} {
}

// -----

// expected-error @+1 {{merak.pipeline_schedule: B(1,1) never runs}}
module attributes {merak.pipeline_schedule = {kind = "1f1b", microbatches = 2 : i64, pp = 2 : i64, virtual = 1 : i64, ranks = [
    ["F(0,0)", "send F(0,0) -> 1", "F(0,1)", "recv B(1,0) <- 1", "send F(0,1) -> 1", "B(0,0)", "recv B(1,1) <- 1", "B(0,1)"],
    ["recv F(0,0) <- 0", "F(1,0)", "B(1,0)", "send B(1,0) -> 0", "recv F(0,1) <- 0", "F(1,1)", "send B(1,1) -> 0"]]}} {
}

// -----

// expected-error @+1 {{merak.pipeline_schedule: F(1,0) is on rank 0 but stage 1 runs on rank 1}}
module attributes {merak.pipeline_schedule = {kind = "gpipe", microbatches = 1 : i64, pp = 2 : i64, virtual = 1 : i64, ranks = [
    ["F(0,0)", "F(1,0)", "B(1,0)", "B(0,0)"], []]}} {
}

// -----

// expected-error @+1 {{merak.pipeline_schedule: rank 1 receives the outputs of F(0,0) after F(1,0), which reads them}}
module attributes {merak.pipeline_schedule = {kind = "gpipe", microbatches = 1 : i64, pp = 2 : i64, virtual = 1 : i64, ranks = [
    ["F(0,0)", "send F(0,0) -> 1", "recv B(1,0) <- 1", "B(0,0)"],
    ["F(1,0)", "recv F(0,0) <- 0", "B(1,0)", "send B(1,0) -> 0"]]}} {
}

// -----

// Each transfer right after (before) its task: rank 0 blocks sending the
// second activation while rank 1 blocks sending the first gradient.
// expected-error @+1 {{merak.pipeline_schedule: deadlock with blocking sends and receives: rank 0 blocks in 'send F(0,1) -> 1', rank 1 blocks in 'send B(1,0) -> 0'}}
module attributes {merak.pipeline_schedule = {kind = "1f1b", microbatches = 2 : i64, pp = 2 : i64, virtual = 1 : i64, ranks = [
    ["F(0,0)", "send F(0,0) -> 1", "F(0,1)", "send F(0,1) -> 1", "recv B(1,0) <- 1", "B(0,0)", "recv B(1,1) <- 1", "B(0,1)"],
    ["recv F(0,0) <- 0", "F(1,0)", "B(1,0)", "send B(1,0) -> 0", "recv F(0,1) <- 0", "F(1,1)", "B(1,1)", "send B(1,1) -> 0"]]}} {
}

// -----

// A recomputing stage needs R before each backward unless its forward kept
// everything.
// expected-error @+1 {{merak.pipeline_schedule: R(0,0) never runs, but stage 0 recomputes and F(0,0) kept only its checkpoints}}
module attributes {merak.pipeline_schedule = {kind = "gpipe", microbatches = 1 : i64, pp = 1 : i64, virtual = 1 : i64, recompute = array<i1: true>, ranks = [
    ["F(0,0)", "B(0,0)"]]}} {
}

// -----

// expected-error @+1 {{merak.pipeline_schedule: rank 0: cannot read task "F0,0"}}
module attributes {merak.pipeline_schedule = {kind = "gpipe", microbatches = 1 : i64, pp = 1 : i64, virtual = 1 : i64, ranks = [["F0,0"]]}} {
}

// -----

// expected-error @+1 {{no merak.pipeline_schedule; run --merak-pipeline-schedule first}}
module {
}
