//===- AutoParallelTest.cpp - the plan model and search -------------------===//
//
// A synthetic model of identical layers on a profile with round figures, so
// that times and bytes can be worked out by hand: one GEMM of 1 GFLOP per
// layer forward (two of 1 GFLOP backward) on a 1 GFLOP/s device, 4 MB of
// parameters that tensor parallelism splits and 8 MB of kept activations
// per layer at the global batch.
//
//===----------------------------------------------------------------------===//

#include "merak/Analysis/AutoParallel.h"
#include "merak/Analysis/PipelineSchedule.h"

#include "ScratchDir.h"

#include "gtest/gtest.h"

#include <fstream>

using namespace merak;
using namespace merak::autoparallel;
using merak::testing::ScratchDir;

namespace {

ModelProfile model(int layers = 4, int64_t batch = 4) {
  ModelProfile m;
  m.batch = batch;
  m.optimizerStates = 2;
  for (int l = 0; l < layers; ++l) {
    LayerProfile lp;
    lp.firstId = l * 10;
    lp.lastId = l * 10 + 9;
    lp.forward = {{1e9, 0, true, true}};
    lp.backward = {{1e9, 0, true, true}, {1e9, 0, true, true}};
    lp.paramBytes = lp.splitParamBytes = 4e6;
    lp.savedBytes = 8e6;
    lp.outBytes = 1e6;
    m.layers.push_back(lp);
  }
  return m;
}

HardwareProfile hardware() {
  HardwareProfile hw;
  hw.peakFlops = 1e9;
  hw.memoryBandwidth = 1e15;
  hw.memoryCapacity = 1e12;
  hw.opOverhead = 0;
  hw.linkBandwidth = 1e18;
  hw.linkLatency = 0;
  hw.collectiveBandwidth = 1e9;
  hw.collectiveLatency = 0;
  hw.devicesPerNode = 8;
  return hw;
}

Estimate price(const std::string &options, const ModelProfile &m = model(),
               double limit = 0) {
  Plan plan;
  std::string error = parsePlan(options, plan);
  EXPECT_EQ(error, "");
  Estimate e = evaluatePlan(m, hardware(), plan, limit);
  EXPECT_EQ(e.infeasible, "") << options;
  return e;
}

/// The synthetic model calibrated by the profiles `paths` lists.
ModelProfile calibratedBy(const std::string &paths) {
  ModelProfile m = model();
  EXPECT_EQ(calibrate(m, hardware(), paths), "");
  return m;
}

/// What a pipelined profile set: the forward and backward scales and the
/// overhead of a task.
void expectSplit(const ModelProfile &m, double forward, double backward,
                 double overhead) {
  EXPECT_NEAR(m.forwardScale, forward, 1e-6);
  EXPECT_NEAR(m.backwardScale, backward, 1e-6);
  EXPECT_NEAR(m.taskOverhead, overhead, 1e-6);
}

/// Expects `m`'s unpartitioned step to take `step` seconds, and each stage
/// of its 1F1B pipeline of two stages of two layers and two micro-batches
/// `forward` and `backward` seconds a micro-batch.
void expectStepAndPipeline(const ModelProfile &m, double step, double forward,
                           double backward) {
  Plan plan;
  EXPECT_EQ(parsePlan("dp=1", plan), "");
  EXPECT_NEAR(evaluatePlan(m, hardware(), plan, 0).pipelineTime, step, 1e-9);
  EXPECT_EQ(parsePlan("pp=2 microbatches=2 schedule=1f1b stages=2", plan), "");
  Estimate e = evaluatePlan(m, hardware(), plan, 0);
  ASSERT_EQ(e.stages.size(), 2u);
  for (const Estimate::StageTimes &s : e.stages) {
    EXPECT_NEAR(s.forward, forward, 1e-6);
    EXPECT_NEAR(s.backward, backward, 1e-6);
  }
}

TEST(AutoParallel, OneDeviceIsForwardPlusBackward) {
  Estimate e = price("dp=1");
  // 4 layers x (1 s forward + 2 s backward).
  EXPECT_NEAR(e.pipelineTime, 12.0, 1e-9);
  EXPECT_NEAR(e.dataParallelTime, 0.0, 1e-12);
  EXPECT_DOUBLE_EQ(e.parameters, 16e6);
  EXPECT_DOUBLE_EQ(e.gradients, 16e6);
  EXPECT_DOUBLE_EQ(e.optimizerState, 32e6);
  EXPECT_DOUBLE_EQ(e.activations, 32e6);
  EXPECT_DOUBLE_EQ(e.memory, 96e6);
  EXPECT_EQ(e.bound, "compute");
}

TEST(AutoParallel, ZeroStagesShardStateGradientsParameters) {
  // dp=2: half the batch each, so half the compute and activations.
  Estimate z0 = price("dp=2");
  EXPECT_NEAR(z0.pipelineTime, 6.0, 1e-9);
  EXPECT_DOUBLE_EQ(z0.activations, 16e6);
  EXPECT_DOUBLE_EQ(z0.optimizerState, 32e6);
  Estimate z1 = price("dp=2 zero=1");
  EXPECT_DOUBLE_EQ(z1.optimizerState, 16e6);
  EXPECT_DOUBLE_EQ(z1.gradients, 16e6);
  Estimate z2 = price("dp=2 zero=2");
  EXPECT_DOUBLE_EQ(z2.gradients, 8e6);
  EXPECT_DOUBLE_EQ(z2.parameters, 16e6);
  // ZeRO-1 and -2 gather the updated shards into whole parameters beside
  // the old ones; ZeRO-3 counts its stage's parameters gathered (here all
  // 16 MB: one stage).
  EXPECT_DOUBLE_EQ(z0.buffers, z1.buffers - 16e6);
  EXPECT_DOUBLE_EQ(z2.buffers, z1.buffers);
  Estimate z3 = price("dp=2 zero=3");
  EXPECT_DOUBLE_EQ(z3.parameters, 8e6);
  EXPECT_DOUBLE_EQ(z3.buffers, z0.buffers + 16e6);
  // The all-reduce of 16 MB over 2 ranks sends 16 MB per rank: 16 ms at
  // 1 GB/s, hidden behind 4 s of backward but for the last bucket's share.
  EXPECT_GT(z0.dataParallelTime, 0);
  EXPECT_LT(z0.dataParallelTime, 0.016 + 1e-9);
  EXPECT_GT(z3.dataParallelTime, z0.dataParallelTime);
}

TEST(AutoParallel, ZeroThreeGathersBeforeEveryReaderTwice) {
  // Each reader of a parameter waits for its gather, in forward and in
  // backward: 2 x (readers - 1) latencies beyond the two whole gathers.
  HardwareProfile hw = hardware();
  hw.collectiveLatency = 1e-3;
  ModelProfile one = model(), three = model();
  for (LayerProfile &l : one.layers)
    l.paramReaders = 1;
  for (LayerProfile &l : three.layers)
    l.paramReaders = 3;
  auto dpTime = [&](const ModelProfile &m, const char *options) {
    Plan plan;
    EXPECT_EQ(parsePlan(options, plan), "");
    return evaluatePlan(m, hw, plan, 0).dataParallelTime;
  };
  EXPECT_NEAR(dpTime(three, "dp=2 zero=3") - dpTime(one, "dp=2 zero=3"),
              2 * (11 - 3) * 1e-3, 1e-9);
  // The gathers are not hidden behind backward: 16 MB of parameters
  // gathered twice (8 MB received a rank, 8 ms each at 1 GB/s, plus one
  // latency) beyond ZeRO-2's exposed reduction.
  EXPECT_GT(dpTime(one, "dp=2 zero=3"), 2 * 0.008);
  // ZeRO-1 and -2 do not depend on readers.
  EXPECT_DOUBLE_EQ(dpTime(three, "dp=2 zero=2"), dpTime(one, "dp=2 zero=2"));
}

TEST(AutoParallel, ZeroThreeReductionIsExposedAndTiedParametersGatherTwice) {
  // 16 MB of parameters over 2 ranks: the reduce-scatter sends 8 MB a
  // rank, 8 ms at 1 GB/s. Under ZeRO-2 backward (8 s) hides all but the
  // last 2 MB bucket's share; under ZeRO-3 the gathers wait behind it on
  // the group's one worker, so all of it is exposed, and the parameters
  // are gathered twice (8 ms each way).
  auto dpTime = [&](const ModelProfile &m, const char *options) {
    Plan plan;
    EXPECT_EQ(parsePlan(options, plan), "");
    return evaluatePlan(m, hardware(), plan, 0).dataParallelTime;
  };
  ModelProfile m = model();
  EXPECT_NEAR(dpTime(m, "dp=2 zero=3"), 0.008 + 2 * 0.008, 1e-9);
  EXPECT_LT(dpTime(m, "dp=2 zero=2"), 0.008 + 0.008);
  // A layer whose readers read its 4 MB twice (a tied embedding read by
  // the embedding and the head) gathers them twice in forward: 2 MB more
  // received a rank, 2 ms.
  m.layers[0].gatheredBytes = 8e6;
  EXPECT_NEAR(dpTime(m, "dp=2 zero=3"), 0.008 + 2 * 0.008 + 0.002, 1e-9);
}

TEST(AutoParallel, EveryBlockingCollectivePaysTheStall) {
  // A stall of 1 ms per collective the step waits for at once.
  HardwareProfile hw = hardware();
  ModelProfile m = model();
  for (LayerProfile &l : m.layers) {
    l.paramReaders = 2;
    l.tpForwardBytes = l.tpBackwardBytes = 1e6;
    l.tpForwardCollectives = l.tpBackwardCollectives = 1;
  }
  auto estimate = [&](const HardwareProfile &h, const char *options) {
    Plan plan;
    EXPECT_EQ(parsePlan(options, plan), "");
    return evaluatePlan(m, h, plan, 0);
  };
  for (const char *op : {"allreduce", "reducescatter", "allgather"})
    hw.collectives.push_back({op, 2, false, 1e9, 0, 0});
  HardwareProfile stalled = hw;
  for (CollectivePoint &c : stalled.collectives)
    c.stall = 1e-3;
  auto extra = [&](const char *options) {
    Estimate a = estimate(stalled, options), b = estimate(hw, options);
    EXPECT_EQ(a.infeasible, "") << options;
    return a.stepTime - b.stepTime;
  };
  // dp: the end of the reduction; ZeRO-1: and the gather after the update.
  EXPECT_NEAR(extra("dp=2"), 1e-3, 1e-9);
  EXPECT_NEAR(extra("dp=2 zero=1"), 2e-3, 1e-9);
  // ZeRO-3: every reader's gather, forward and backward (4 layers x 2
  // readers x 2), and the reduction's end.
  EXPECT_NEAR(extra("dp=2 zero=3"), (16 + 1) * 1e-3, 1e-9);
  // Tensor parallelism: each layer's all-reduce forward and backward.
  EXPECT_NEAR(extra("dp=1 tp=2"), 8e-3, 1e-9);
  // One device waits for nothing.
  EXPECT_NEAR(extra("dp=1"), 0, 1e-12);
}

TEST(AutoParallel, TiedParametersOnTwoRanksSumTheirGradients) {
  // A 4 MB parameter read by layers 0 and 3 (an embedding tied to the
  // head): a pipeline that puts them on two ranks exchanges its gradient
  // after the last backward (4 ms at 1 GB/s) and sums it (zeros and two
  // accumulations: 7 x 4 MB at the memory bandwidth).
  HardwareProfile hw = hardware();
  hw.linkBandwidth = 1e9;
  ModelProfile tied = model();
  tied.tied.push_back({4e6, false, {0, 3}});
  auto pipeline = [&](const ModelProfile &m, const char *options) {
    Plan plan;
    EXPECT_EQ(parsePlan(options, plan), "");
    Estimate e = evaluatePlan(m, hw, plan, 0);
    EXPECT_EQ(e.infeasible, "") << options;
    return e.pipelineTime;
  };
  const char *onePerRank = "pp=2 microbatches=2 schedule=1f1b stages=2";
  EXPECT_NEAR(pipeline(tied, onePerRank) - pipeline(model(), onePerRank),
              4e-3 + 7 * 4e6 / hw.memoryBandwidth, 1e-9);
  // Interleaved, one layer a chunk: layers 0 and 2 are both rank 0's.
  const char *interleaved =
      "pp=2 microbatches=2 schedule=interleaved-1f1b virtual=2 stages=1,2,3";
  tied.tied[0].layers = {0, 2};
  EXPECT_NEAR(pipeline(tied, interleaved), pipeline(model(), interleaved),
              1e-12);
  // Without a pipeline nothing is exchanged.
  EXPECT_NEAR(pipeline(tied, "dp=2"), pipeline(model(), "dp=2"), 1e-12);
}

TEST(AutoParallel, SplitBackwardDefersWeightsFirstStageAll) {
  // 1 s of each layer's 2 s backward computes weight gradients: the W of
  // a zero-bubble schedule. The first stage sends no input gradient, so
  // all of its backward runs as W.
  ModelProfile m = model();
  for (LayerProfile &l : m.layers)
    l.weight = {{1e9, 0, true, true}};
  Plan plan;
  ASSERT_EQ(parsePlan("dp=1 pp=2 microbatches=4 schedule=zb-h1 stages=2", plan),
            "");
  Estimate e = evaluatePlan(m, hardware(), plan, 0);
  ASSERT_EQ(e.stages.size(), 2u);
  // (Backward also sums the micro-batch's gradients: 24 ns here.)
  EXPECT_NEAR(e.stages[0].backward, 4.0, 1e-6);
  EXPECT_DOUBLE_EQ(e.stages[0].weight, e.stages[0].backward);
  EXPECT_NEAR(e.stages[1].backward, 4.0, 1e-6);
  EXPECT_DOUBLE_EQ(e.stages[1].weight, 2.0);
  EXPECT_DOUBLE_EQ(e.stages[1].forward, 2.0);
}

TEST(AutoParallel, TensorParallelSplitsParametersAndWork) {
  Estimate e = price("dp=1 tp=2");
  EXPECT_NEAR(e.pipelineTime, 6.0, 1e-9);
  EXPECT_DOUBLE_EQ(e.parameters, 8e6);
  // The activations here are not split by tensor parallelism.
  EXPECT_DOUBLE_EQ(e.activations, 32e6);
}

TEST(AutoParallel, OneFOneBHoldsPipelineDepthGPipeEveryMicrobatch) {
  // pp=2, 4 micro-batches of the traced batch: a stage (2 layers) takes 2 s
  // forward and 4 s backward per micro-batch; 1F1B's makespan is
  // (m + pp - 1) x 6 s, and a step trains on 4 x 4 samples.
  Estimate e = price("dp=1 pp=2 microbatches=4 schedule=1f1b stages=2");
  EXPECT_NEAR(e.pipelineTime, 30.0, 1e-6);
  EXPECT_DOUBLE_EQ(e.samples, 16);
  EXPECT_NEAR(e.bubble, 1.0 - 48.0 / (2 * 30.0), 1e-6);
  // Rank 0 holds two micro-batches of 2 layers x 8 MB.
  EXPECT_DOUBLE_EQ(e.activations, 2 * 16e6);
  EXPECT_DOUBLE_EQ(e.parameters, 8e6);
  Estimate g = price("dp=1 pp=2 microbatches=4 schedule=gpipe stages=2");
  EXPECT_DOUBLE_EQ(g.activations, 4 * 16e6);
  EXPECT_NEAR(g.pipelineTime, 30.0, 1e-6);
}

TEST(AutoParallel, RecomputationKeepsLayerInputs) {
  Estimate e =
      price("dp=1 pp=2 microbatches=4 schedule=1f1b recompute=full stages=2");
  // Rank 0 keeps the input of its second layer (1 MB) for each of two
  // micro-batches, and one micro-batch's activations while it recomputes.
  EXPECT_DOUBLE_EQ(e.activations, 2 * 1e6 + 16e6);
  Estimate kept = price("dp=1 pp=2 microbatches=4 schedule=1f1b stages=2");
  EXPECT_GT(e.pipelineTime, kept.pipelineTime);
}

TEST(AutoParallel, LongPipelinesExtrapolateExactly) {
  // 64 micro-batches are simulated at 4 and 6 and extrapolated; 1F1B's
  // makespan is linear in them: (64 + 1) x 6 s.
  // (Each backward also sums its 8 MB of gradients into the step's: 3 x
  // 8 MB at 10^15 B/s.)
  Estimate e = price("dp=1 pp=2 microbatches=64 schedule=1f1b stages=2");
  EXPECT_NEAR(e.pipelineTime, 65.0 * (6.0 + 3 * 8e6 / 1e15), 1e-9);
  EXPECT_DOUBLE_EQ(e.activations, 2 * 16e6);
  // Gradient accumulation: one stage, 3 micro-batches, 12 s each.
  Estimate acc = price("dp=1 pp=1 microbatches=3 schedule=1f1b");
  EXPECT_NEAR(acc.pipelineTime, 3 * (12.0 + 3 * 16e6 / 1e15), 1e-9);
}

TEST(AutoParallel, MicroBatchesSumTheirGradients) {
  // At 10^7 B/s, summing 16 MB of gradients into the step's (read both,
  // write one) takes 4.8 s after each micro-batch's backward; one batch
  // needs none.
  HardwareProfile hw = hardware();
  hw.memoryBandwidth = 1e7;
  Plan whole, three;
  ASSERT_EQ(parsePlan("dp=1", whole), "");
  ASSERT_EQ(parsePlan("dp=1 pp=1 microbatches=3 schedule=1f1b", three), "");
  Estimate one = evaluatePlan(model(), hw, whole, 0);
  Estimate summed = evaluatePlan(model(), hw, three, 0);
  EXPECT_NEAR(one.pipelineTime, 12.0, 1e-9);
  EXPECT_NEAR(summed.pipelineTime, 3 * (12.0 + 4.8), 1e-9);
  // The step's sum and the last micro-batch's own gradients, both whole;
  // the optimizer state stays two tensors per parameter.
  EXPECT_DOUBLE_EQ(one.gradients, 16e6);
  EXPECT_DOUBLE_EQ(summed.gradients, 2 * 16e6);
  EXPECT_DOUBLE_EQ(summed.optimizerState, 2 * 16e6);
}

TEST(AutoParallel, InfeasiblePlansSayWhy) {
  Plan plan;
  ASSERT_EQ(parsePlan("dp=3", plan), "");
  EXPECT_EQ(evaluatePlan(model(), hardware(), plan, 0).infeasible,
            "dp=3 does not divide the batch of 4");
  ASSERT_EQ(parsePlan("pp=8 microbatches=8", plan), "");
  EXPECT_EQ(evaluatePlan(model(), hardware(), plan, 0).infeasible,
            "8 stages but only 4 layers");
  ASSERT_EQ(parsePlan("dp=1", plan), "");
  Estimate e = evaluatePlan(model(), hardware(), plan, 50e6);
  EXPECT_EQ(e.bound, "memory");
  EXPECT_NE(e.infeasible.find("over the"), std::string::npos);
  ModelProfile m = model();
  m.tpDims = {6};
  ASSERT_EQ(parsePlan("tp=4", plan), "");
  EXPECT_NE(evaluatePlan(m, hardware(), plan, 0).infeasible.find("tp=4"),
            std::string::npos);
}

TEST(AutoParallel, SearchPicksTheFastestPlanThatFits) {
  SearchOptions options;
  options.devices = 4;
  SearchResult r = searchPlans(model(), hardware(), options);
  ASSERT_FALSE(r.ranked.empty()) << r.error;
  // Compute dominates and divides evenly: four-way data or tensor
  // parallelism, 3 s of compute per rank.
  const Estimate &best = r.ranked.front().estimate;
  EXPECT_NEAR(best.computeTime, 3.0, 0.01);
  for (size_t i = 1; i < r.ranked.size(); ++i)
    EXPECT_GE(r.ranked[i].estimate.stepTime, best.stepTime * 0.999);

  // 40 MB per device: 4-way sharding of state is needed (64 MB of
  // parameters, gradients and state is 96 MB on one device).
  options.memory = 40e6;
  r = searchPlans(model(), hardware(), options);
  ASSERT_FALSE(r.ranked.empty()) << r.error;
  for (const ScoredPlan &s : r.ranked)
    EXPECT_LE(s.estimate.memory, 40e6) << s.plan.options();

  // 8 samples per step: two micro-batches of the traced 4, so plans
  // accumulate or pipeline; every one trains on 8 samples.
  options.memory = 0;
  options.globalBatch = 8;
  r = searchPlans(model(), hardware(), options);
  ASSERT_FALSE(r.ranked.empty()) << r.error;
  for (const ScoredPlan &s : r.ranked) {
    EXPECT_EQ(s.plan.microbatches, 2) << s.plan.options();
    EXPECT_DOUBLE_EQ(s.estimate.samples, 8);
  }
  options.globalBatch = 6;
  EXPECT_EQ(searchPlans(model(), hardware(), options).error,
            "batch=6 is not a multiple of the traced batch of 4 samples (a "
            "micro-batch)");
  options.globalBatch = 0;

  // Nothing fits in 1 MB: the error names the least memory.
  options.memory = 1e6;
  r = searchPlans(model(), hardware(), options);
  EXPECT_TRUE(r.ranked.empty());
  EXPECT_NE(r.error.find("the plan that needs least needs"), std::string::npos)
      << r.error;
  EXPECT_GT(r.leastMemory, 1e6);
}

TEST(AutoParallel, CalibrationScalesGemmsAndTheRest) {
  // One device predicts 12 s of GEMMs (4 layers x 3 GFLOP at 1 GFLOP/s);
  // a run measured 24 s of them: GEMMs take twice as long.
  ScratchDir scratch;
  std::string path = scratch.file("calibration.json");
  {
    std::ofstream out(path);
    out << R"({"ops": {"merak.linear": {"ms_per_step": 20000},
                       "merak.linear_weight_backward": {"ms_per_step": 4000},
                       "mesh.all_reduce": {"ms_per_step": 99999},
                       "merak.adamw_update": {"ms_per_step": 99999}}})";
  }
  ModelProfile m = model();
  ASSERT_EQ(calibrate(m, hardware(), path), "");
  EXPECT_DOUBLE_EQ(m.gemmScale, 2.0);
  EXPECT_DOUBLE_EQ(m.otherScale, 1.0);
  Plan plan;
  ASSERT_EQ(parsePlan("dp=1", plan), "");
  EXPECT_NEAR(evaluatePlan(m, hardware(), plan, 0).pipelineTime, 24.0, 1e-9);
  {
    std::ofstream out(path);
    out << R"({"ops": {"merak.linear": {"ms_per_step": -1}}})";
  }
  EXPECT_EQ(calibrate(m, hardware(), path),
            path + ": ops.merak.linear.ms_per_step: expected a non-negative "
                   "number");
  EXPECT_EQ(calibrate(m, hardware(), path + ".missing"),
            path + ".missing: cannot open");
}

TEST(AutoParallel, APipelinedProfileSetsTheForwardShare) {
  // Each layer: 1 s forward, 2 s backward. A pipelined run on one rank
  // spent as long in forward tasks as in backward ones: forward counts
  // 1.5 times and backward 0.75 times, the total unchanged; the kernel
  // scales come from the step's profile listed beside it (here after it).
  ScratchDir scratch;
  std::string dir = scratch.path;
  {
    std::ofstream out(dir + "/split.json");
    out << R"({"ops": {"merak.linear": {"ms_per_step": 600}},
               "tasks": {"microbatches": 2, "steps": 5, "forward_ms": 300,
                         "backward_ms": 200, "weight_ms": 100,
                         "recompute_ms": 0}})";
  }
  {
    std::ofstream out(dir + "/step.json");
    out << R"({"ops": {"merak.linear": {"ms_per_step": 24000}}})";
  }
  ModelProfile m = calibratedBy(dir + "/split.json," + dir + "/step.json");
  EXPECT_DOUBLE_EQ(m.gemmScale, 2.0);
  // (Less the gradient sums' 48 ns in the backward tasks.)
  expectSplit(m, 1.5, 0.75, 0);
  // Two stages of two layers, each micro-batch the traced batch: 2 x 2 s
  // of forward, 1.5 times; 2 x 4 s of backward, 0.75 times.
  expectStepAndPipeline(m, 24.0, 6.0, 6.0);

  {
    std::ofstream out(dir + "/split.json");
    out << R"({"tasks": {"forward_ms": 3, "backward_ms": "slow"}})";
  }
  EXPECT_EQ(calibrate(m, hardware(), dir + "/split.json"),
            dir + "/split.json: tasks.backward_ms: expected a non-negative "
                  "number");
  {
    std::ofstream out(dir + "/split.json");
    out << R"({"tasks": {"forward_ms": 0, "backward_ms": 0, "weight_ms": 0}})";
  }
  EXPECT_NE(calibrate(m, hardware(), dir + "/split.json")
                .find("no forward or backward task time"),
            std::string::npos);
}

TEST(AutoParallel, APipelinedProfileSetsTheTaskOverhead) {
  // The step's profile prices each layer as built (1 s forward, 2 s
  // backward: 12 s of GEMMs a step). A pipelined run on one rank of two
  // micro-batches took 4.5 s of forward and 8.5 s of backward tasks each,
  // 24 s of it in kernels (the optimizer's update runs outside the tasks):
  // 2 s beyond the kernels over 4 tasks, 0.5 s a task, the forward share
  // unchanged (the gradient sums cost nothing at this memory bandwidth).
  ScratchDir scratch;
  std::string dir = scratch.path;
  {
    std::ofstream out(dir + "/step.json");
    out << R"({"ops": {"merak.linear": {"ms_per_step": 12000}}})";
  }
  {
    std::ofstream out(dir + "/split.json");
    out << R"({"ops": {"merak.linear": {"ms_per_step": 24000},
                       "merak.adamw_update": {"ms_per_step": 700},
                       "mesh.all_reduce": {"ms_per_step": 300}},
               "tasks": {"microbatches": 2, "steps": 5, "forward_ms": 9000,
                         "backward_ms": 17000, "weight_ms": 0,
                         "recompute_ms": 0}})";
  }
  ModelProfile m = calibratedBy(dir + "/step.json," + dir + "/split.json");
  expectSplit(m, 1.0, 1.0, 0.5);
  // The unpartitioned step runs no tasks; a pipeline's tasks pay it each
  // (two stages of two layers: 2 s forward, 4 s backward), and a split
  // backward's B and W each.
  expectStepAndPipeline(m, 12.0, 2.5, 4.5);
  Plan plan;
  ModelProfile split = m;
  for (LayerProfile &l : split.layers)
    l.weight = {{1e9, 0, true, true}};
  ASSERT_EQ(parsePlan("pp=2 microbatches=2 schedule=zb-h1 stages=2", plan), "");
  Estimate e = evaluatePlan(split, hardware(), plan, 0);
  ASSERT_EQ(e.stages.size(), 2u);
  EXPECT_NEAR(e.stages[1].backward - e.stages[1].weight, 2.5, 1e-6);
  EXPECT_NEAR(e.stages[1].weight, 2.5, 1e-6);
  // The overhead is what the tasks took beyond their kernels in the same
  // run, not beyond the model: a run whose kernels ran slower than the
  // step's profile says (28 s where it predicts 24) still spent 0.5 s a
  // task outside them.
  {
    std::ofstream out(dir + "/split.json");
    out << R"({"ops": {"merak.linear": {"ms_per_step": 28000}},
               "tasks": {"microbatches": 2, "forward_ms": 11000,
                         "backward_ms": 19000, "weight_ms": 0}})";
  }
  m = calibratedBy(dir + "/step.json," + dir + "/split.json");
  EXPECT_NEAR(m.taskOverhead, 0.5, 1e-6);
  // A run that timed its gradient sums (0.5 s a backward, outside the
  // kernels): they are not task overhead, and they scale the model's
  // figure for a backward's sum (here a near-free 24 ns for a stage's
  // 8 MB) to what the run measured, 0.25 s for half the parameters.
  // Tasks: (2 x (4.5 + 8.5 - 0.5) - 24) / 4 = 0.25 s each; forward share
  // 4.25 of 12 s.
  {
    std::ofstream out(dir + "/split.json");
    out << R"({"ops": {"merak.linear": {"ms_per_step": 24000}},
               "tasks": {"microbatches": 2, "forward_ms": 9000,
                         "backward_ms": 17000, "weight_ms": 0,
                         "gradient_sum_ms": 1000}})";
  }
  m = calibratedBy(dir + "/step.json," + dir + "/split.json");
  expectSplit(m, 4.25 / 4, 7.75 / 8, 0.25);
  EXPECT_NEAR(m.gradientSumScale, 0.5 / (3 * 16e6 / 1e15), 1e-3);
  expectStepAndPipeline(m, 12.0, 2 * 4.25 / 4 + 0.25, 4 * 7.75 / 8 + 0.5);
  // Without kernel times, the gap to the model's figures: 1 s a
  // micro-batch, 0.5 s a task.
  {
    std::ofstream out(dir + "/split.json");
    out << R"({"tasks": {"microbatches": 2, "forward_ms": 9000,
                         "backward_ms": 17000, "weight_ms": 0}})";
  }
  m = calibratedBy(dir + "/step.json," + dir + "/split.json");
  EXPECT_NEAR(m.taskOverhead, 0.5, 1e-6);
  // A run no slower than the model leaves no overhead.
  {
    std::ofstream out(dir + "/split.json");
    out << R"({"tasks": {"microbatches": 2, "forward_ms": 7000,
                         "backward_ms": 16000, "weight_ms": 0}})";
  }
  m = calibratedBy(dir + "/step.json," + dir + "/split.json");
  EXPECT_DOUBLE_EQ(m.taskOverhead, 0);
}

TEST(AutoParallel, CalibrationScalesEachOpShapeByItsOwnTime) {
  // Layers 0-2 run one linear of shape A forward, the head (layer 3) one
  // of shape B; each backward is a matmul and a weight gradient, half the
  // predicted time each: 3 s of A, 1 s of B, 4 s of each backward op.
  ModelProfile m = model();
  m.signatures = {"merak.linear -> 4x8xf32", "merak.linear -> 4x16xf32",
                  "merak.matmul -> 4x8xf32",
                  "merak.linear_weight_backward -> 8x8xf32"};
  for (int l = 0; l < 4; ++l) {
    m.layers[l].forward[0].parts = {{l == 3 ? 1 : 0, 1.0}};
    for (OpWork &w : m.layers[l].backward)
      w.parts = {{2, 0.5}, {3, 0.5}};
  }
  // The run timed the head's linear at twice the model's figure (its
  // shape listed by itself), the other linears at the figure (what is
  // left of the name's time), the backward ops at it.
  ScratchDir scratch;
  std::string path = scratch.file("calibration-shapes.json");
  {
    std::ofstream out(path);
    out << R"({"ops": {"merak.linear": {"ms_per_step": 5000},
                       "merak.matmul": {"ms_per_step": 4000},
                       "merak.linear_weight_backward": {"ms_per_step": 4000}},
               "top_shapes": [
                 {"op": "merak.linear -> 4x16xf32", "ms_per_step": 2000},
                 {"op": "merak.matmul -> 4x8xf32", "ms_per_step": 4000},
                 {"op": "merak.reshape -> 4x8xf32", "ms_per_step": 1}]})";
  }
  ASSERT_EQ(calibrate(m, hardware(), path), "");
  EXPECT_NEAR(m.gemmScale, 13.0 / 12.0, 1e-12);
  ASSERT_EQ(m.signatureScales.size(), 4u);
  for (auto [s, scale] :
       {std::pair<int, double>{0, 1.0}, {1, 2.0}, {2, 1.0}, {3, 1.0}})
    EXPECT_NEAR(m.signatureScales[s], scale, 1e-12) << m.signatures[s];
  EXPECT_NEAR(m.layers[3].forward[0].scale, 2.0, 1e-12);
  EXPECT_NEAR(m.layers[0].forward[0].scale, 1.0, 1e-12);
  // The step is the measured 13 s; the head's stage forwards 1 + 2 s.
  Plan plan;
  ASSERT_EQ(parsePlan("dp=1", plan), "");
  EXPECT_NEAR(evaluatePlan(m, hardware(), plan, 0).pipelineTime, 13.0, 1e-9);
  ASSERT_EQ(parsePlan("pp=2 microbatches=2 schedule=1f1b stages=2", plan), "");
  Estimate e = evaluatePlan(m, hardware(), plan, 0);
  ASSERT_EQ(e.stages.size(), 2u);
  EXPECT_NEAR(e.stages[0].forward, 2.0, 1e-9);
  EXPECT_NEAR(e.stages[1].forward, 3.0, 1e-9);

  // A shape timed far off its class counts at least a quarter of the
  // class's scale (and at most 4 times it), and the class's total stays
  // what the run measured: B's 0.2 s where 1 s is predicted counts as
  // 20/12 / 4, all scales then a little less so that the step is 20 s.
  {
    std::ofstream out(path);
    out << R"({"ops": {"merak.linear": {"ms_per_step": 12000},
                       "merak.matmul": {"ms_per_step": 4000},
                       "merak.linear_weight_backward": {"ms_per_step": 4000}},
               "top_shapes": [
                 {"op": "merak.linear -> 4x16xf32", "ms_per_step": 200}]})";
  }
  ASSERT_EQ(calibrate(m, hardware(), path), "");
  EXPECT_NEAR(m.gemmScale, 20.0 / 12.0, 1e-12);
  ASSERT_EQ(parsePlan("dp=1", plan), "");
  EXPECT_NEAR(evaluatePlan(m, hardware(), plan, 0).pipelineTime, 20.0, 1e-9);
  double kept = 20.0 / (3 * 11.8 / 3 + 20.0 / 48 + 8);
  EXPECT_NEAR(m.signatureScales[1], 20.0 / 48 * kept, 1e-9);
  EXPECT_NEAR(m.signatureScales[0], 11.8 / 3 * kept, 1e-9);

  {
    std::ofstream out(path);
    out << R"({"ops": {"merak.linear": {"ms_per_step": 5000}},
               "top_shapes": [{"op": "merak.linear -> 4x8xf32"}]})";
  }
  EXPECT_EQ(calibrate(m, hardware(), path),
            path + ": top_shapes[0]: expected an \"op\" string and a "
                   "non-negative \"ms_per_step\"");
}

TEST(AutoParallel, CalibrationScalesActivationsByTheMeasuredPeak) {
  // One device: 16 MB of parameters, as much gradient and twice that of
  // AdamW state, and 4 x 8 MB of activations kept. A run that peaked at
  // 112 MB had 48 MB where 32 were predicted: activations count 1.5 times.
  ScratchDir scratch;
  std::string path = scratch.file("calibration-memory.json");
  {
    std::ofstream out(path);
    out << R"({"ops": {"merak.linear": {"ms_per_step": 12000}},
               "peak_bytes": 112e6, "state_bytes": 90e6})";
  }
  ModelProfile m = model();
  ASSERT_EQ(calibrate(m, hardware(), path), "");
  EXPECT_DOUBLE_EQ(m.activationScale, 1.5);
  Plan plan;
  ASSERT_EQ(parsePlan("dp=1", plan), "");
  Estimate e = evaluatePlan(m, hardware(), plan, 0);
  EXPECT_DOUBLE_EQ(e.activations, 48e6);
  EXPECT_DOUBLE_EQ(e.memory, 112e6);
  {
    std::ofstream out(path);
    out << R"({"ops": {"merak.linear": {"ms_per_step": 12000}},
               "peak_bytes": "lots"})";
  }
  EXPECT_EQ(calibrate(m, hardware(), path),
            path + ": peak_bytes: expected a non-negative number");
}

TEST(AutoParallel, OptionsRoundTrip) {
  Plan plan;
  ASSERT_EQ(parsePlan("dp=2 tp=2 zero=1 pp=2 microbatches=8 schedule=zb-h1 "
                      "recompute=full stages=2",
                      plan),
            "");
  EXPECT_EQ(plan.options(), "dp=2 tp=2 zero=1 pp=2 microbatches=8 "
                            "schedule=zb-h1 recompute=full stages=2");
  Plan again;
  ASSERT_EQ(parsePlan(plan.options(), again), "");
  EXPECT_EQ(again.options(), plan.options());
  EXPECT_EQ(parsePlan("zero=4", plan), "zero=4: expected 0 to 3");
  EXPECT_EQ(parsePlan("schedule=fast", plan),
            "schedule=fast: unknown schedule");
  EXPECT_EQ(parsePlan("dp=0", plan), "dp=0: expected an integer of at least 1");
  EXPECT_EQ(parsePlan("sp=ulysses", plan),
            "'sp=ulysses': not an option the model prices");
}

TEST(PipelineTimes, OneFOneBWithTransfers) {
  pipeline::PipelineShape shape;
  shape.pp = 2;
  shape.microbatches = 2;
  shape.recompute.assign(2, false);
  llvm::Expected<pipeline::Schedule> s =
      pipeline::buildSchedule(pipeline::ScheduleKind::OneFOneB, shape);
  ASSERT_TRUE(bool(s)) << llvm::toString(s.takeError());
  EXPECT_EQ(pipeline::formatComputeOrder(*s, 0), "F(0,0) F(0,1) B(0,0) B(0,1)");
  EXPECT_EQ(pipeline::formatComputeOrder(*s, 1), "F(1,0) B(1,0) F(1,1) B(1,1)");
  pipeline::TaskTimes times;
  times.forward = {1, 1};
  times.backward = {2, 2};
  times.weight = {0, 0};
  times.recompute = {0, 0};
  times.transfer = {0.5, 0.5};
  llvm::Expected<pipeline::Simulation> sim = pipeline::simulate(*s, &times);
  ASSERT_TRUE(bool(sim)) << llvm::toString(sim.takeError());
  // Rank 1: F(1,0) at 1.5, B(1,0) at 2.5, F(1,1) at 4.5, B(1,1) 5.5-7.5;
  // rank 0: B(0,0) at 5 (4.5 + 0.5), B(0,1) at 8 (7.5 + 0.5) to 10.
  EXPECT_DOUBLE_EQ(sim->makespan, 10.0);
  EXPECT_DOUBLE_EQ(sim->busy[0], 6.0);
  EXPECT_DOUBLE_EQ(sim->busy[1], 6.0);
  EXPECT_EQ(pipeline::peakHeld(*s, {1.0, 1.0}), (std::vector<double>{2, 1}));
  // The compute order alone simulates the same.
  llvm::Expected<pipeline::Schedule> order =
      pipeline::buildComputeOrder(pipeline::ScheduleKind::OneFOneB, shape);
  ASSERT_TRUE(bool(order));
  llvm::Expected<pipeline::Simulation> same =
      pipeline::simulate(*order, &times);
  ASSERT_TRUE(bool(same));
  EXPECT_DOUBLE_EQ(same->makespan, 10.0);
}

} // namespace
