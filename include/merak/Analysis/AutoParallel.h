//===- AutoParallel.h - plans priced and searched ---------------*- C++ -*-===//
//
// The cost and memory model of a parallel plan, and the search over plans.
// A ModelProfile holds what the plan does not change: per layer of the
// training step, the ops' FLOPs and bytes at the global batch, which of them
// tensor parallelism splits, the activations they keep, the parameters they
// read and the tensors tensor parallelism reduces. A Plan is the degrees
// (dp, tp, pp), the ZeRO stage, the pipeline schedule, micro-batches,
// virtual stages, recomputation and stage cuts. evaluatePlan prices one
// plan on a HardwareProfile: per-op times (GEMMs at the rate their size
// runs at), collectives at the bandwidth of their group, the pipeline's
// makespan from its schedule simulated with those task times, and memory
// per rank (parameters, gradients, optimizer state by ZeRO stage,
// activations the schedule holds, transfer buffers). searchPlans enumerates
// plans, cuts stages by dynamic programming over layers, and keeps the
// fastest that fits. docs/auto-parallel.md describes the model.
//
//===----------------------------------------------------------------------===//
#ifndef MERAK_ANALYSIS_AUTOPARALLEL_H
#define MERAK_ANALYSIS_AUTOPARALLEL_H

#include "merak/Hardware/HardwareProfile.h"

#include <cstdint>
#include <string>
#include <vector>

namespace merak::autoparallel {

/// One op's work at the global batch (tensor parallelism off).
struct OpWork {
  double flops = 0;
  double bytes = 0;
  /// A GEMM (linear, matmul, convolution): priced at the rate its size
  /// runs at, not by the roofline.
  bool contraction = false;
  /// Tensor parallelism divides it (a split weight or activation).
  bool split = false;
  /// The ops of the step this work stands for, as indices into
  /// ModelProfile::signatures, each with its share of the work's predicted
  /// time (a forward op: itself; its backward: its gradient ops).
  std::vector<std::pair<int, double>> parts = {};
  /// Measured over predicted time of those ops (calibrate()); 0: the scale
  /// of its class (gemmScale or otherScale).
  double scale = 0;
};

struct LayerProfile {
  /// `merak.id` of the layer's first and last forward op.
  int64_t firstId = -1, lastId = -1;
  std::vector<OpWork> forward, backward;
  /// The weight-gradient part of `backward` (a split backward's W).
  std::vector<OpWork> weight;
  /// Parameter bytes, and the part tensor parallelism splits.
  double paramBytes = 0, splitParamBytes = 0;
  /// Forward ops reading a parameter: under ZeRO-3 each gathers its
  /// parameters right before it, in forward and again in backward.
  int paramReaders = 0;
  /// The bytes those readers read, a parameter once per reader (a tied
  /// embedding's is gathered twice under ZeRO-3's forward).
  double gatheredBytes = 0;
  /// Bytes kept from forward to backward at the global batch, and the part
  /// tensor parallelism splits.
  double savedBytes = 0, splitSavedBytes = 0;
  /// Bytes live across the cut after the layer at the global batch.
  double outBytes = 0;
  /// Bytes of the tensors tensor parallelism all-reduces in forward and in
  /// backward at the global batch, and how many collectives that is.
  double tpForwardBytes = 0, tpBackwardBytes = 0;
  int tpForwardCollectives = 0, tpBackwardCollectives = 0;
};

/// A parameter that layers share (a tied embedding and head): a pipeline
/// that puts its readers on several ranks sums its gradient among them
/// after the last backward.
struct TiedParam {
  double bytes = 0;
  /// Whether tensor parallelism splits it (its bytes over tp a rank).
  bool split = false;
  /// The layers that read it, ascending.
  std::vector<int> layers;
};

struct ModelProfile {
  std::vector<LayerProfile> layers;
  std::vector<TiedParam> tied;
  /// Samples of the traced batch (dimension 0 of the inputs): one
  /// micro-batch of a step, split over the data-parallel ranks.
  int64_t batch = 1;
  /// Global sizes of the dimensions tensor parallelism splits: a degree
  /// must divide each.
  std::vector<int64_t> tpDims;
  /// Why no tensor-parallel degree applies (empty when one does).
  std::string tpRefusal;
  /// Whether the embedding and the head split by vocabulary.
  bool vocabParallel = true;
  /// Optimizer state tensors per parameter (AdamW 2, SGD with momentum 1).
  int optimizerStates = 2;
  /// Element type of the GEMMs ("f32", "bf16", ...).
  std::string computeType = "f32";
  /// Whether the step clips the gradient norm (then no pipelines).
  bool clipsGradients = false;
  /// Measured over predicted kernel time of GEMMs and of the other ops
  /// (calibrate()); 1 uncalibrated.
  double gemmScale = 1, otherScale = 1;
  /// The step's ops by name and result types, as a profile of a run names
  /// them (`merak.linear -> 4x128x256xf32`): what OpWork::parts index.
  std::vector<std::string> signatures;
  /// Per signature, measured over predicted time where a profile timed it
  /// (its `top_shapes`), else 0 (calibrate()).
  std::vector<double> signatureScales;
  /// Measured over predicted forward and backward (and weight-gradient)
  /// task time of a pipelined run, at an unchanged total (calibrate());
  /// 1 uncalibrated.
  double forwardScale = 1, backwardScale = 1;
  /// Seconds each task of a pipelined step costs beyond its ops (calling
  /// the stage's function, its results allocated outside the arena): what
  /// a pipelined run's tasks took over the model's figures for them, per
  /// task (calibrate()); 0 uncalibrated.
  double taskOverhead = 0;
  /// Measured over predicted time of a pipelined backward's sum of its
  /// gradients into the step's (calibrate(), from a pipelined run's
  /// `tasks.gradient_sum_ms`); 1 uncalibrated.
  double gradientSumScale = 1;
  /// Measured over predicted memory above the kept activations' bytes: the
  /// kernels' temporaries and workspaces (calibrate(), from the run's peak);
  /// 1 uncalibrated. Scales the activations of every plan.
  double activationScale = 1;
};

/// The model's time for `work` on one device, uncalibrated: a GEMM at the
/// rate its size runs at, another op by the roofline, plus the profile's
/// per-kernel overhead.
double workTime(const HardwareProfile &hw, const std::string &computeType,
                const OpWork &work);

/// Calibrates `model` by a run of its unpartitioned step on one device
/// (`merak-exec step.mlir --profile-json calib.json`, the same traced
/// batch): the measured kernel time per step of GEMMs (linear, matmul,
/// convolution and their gradients) and of the other ops (collectives,
/// waits and optimizer updates left out) over what the model predicts for
/// that run sets gemmScale and otherScale. Within each class, ops are
/// scaled by their own measured time: an op and result shape the file's
/// `top_shapes` lists by its own, the rest of an op name's time by the
/// name (`ops`), the class's total unchanged (OpWork::scale); where the file
/// has the run's `peak_bytes`, the peak less the parameters, gradients and
/// optimizer state over the activations the model keeps sets activationScale.
/// `paths` may list several files, comma-separated: a profile of a
/// pipelined plan run on one rank (its `tasks`: forward and backward task
/// time per step) sets forwardScale and backwardScale instead, so that the
/// model's forward share of each micro-batch's compute is the measured one
/// (the staged functions do in their forward tasks some work the
/// unpartitioned step's profile counts as backward), and what its tasks
/// took beyond the model's figures for them (gradient sums included) sets
/// taskOverhead; the kernel scales of the other files price it.
/// Returns an error naming the file and the key, or "".
std::string calibrate(ModelProfile &model, const HardwareProfile &hw,
                      const std::string &paths);

struct Plan {
  int dp = 1, tp = 1, pp = 1;
  int virtualStages = 1;
  int microbatches = 1;
  int zero = 0;
  /// gpipe, 1f1b, interleaved-1f1b, zb-h1; "" without pipeline options.
  std::string schedule;
  /// none or full; with full, Merak's stage-aware ratio (-1: every layer).
  std::string recompute = "none";
  double recomputeRatio = -1;
  bool vocabParallel = true;
  /// First layer of every stage after the first (empty: balanced by the
  /// pass itself).
  std::vector<unsigned> stageStarts;

  /// Whether the plan runs the step as a pipeline (stages, schedules).
  bool pipelined() const {
    return pp > 1 || microbatches > 1 || recompute != "none";
  }
  /// The --merak-parallelize options that apply the plan.
  std::string options() const;
};

/// Reads a plan written as --merak-parallelize options (`dp=8 tp=8 pp=16
/// microbatches=192 schedule=1f1b recompute=full`). Returns an error naming
/// the option, or "".
std::string parsePlan(const std::string &text, Plan &plan);

/// What a plan costs, per step and per rank.
struct Estimate {
  double stepTime = 0;
  /// Samples a step trains on: micro-batches x the traced batch.
  double samples = 0;
  /// Its parts: the pipeline (compute, tensor-parallel collectives and
  /// transfers, bubbles included), the exposed data-parallel reduction and
  /// the optimizer update.
  double pipelineTime = 0, dataParallelTime = 0, optimizerTime = 0;
  /// Time of all compute on the busiest rank, of its tensor-parallel
  /// collectives, and the idle fraction of the pipeline.
  double computeTime = 0, tensorParallelTime = 0, bubble = 0;
  /// The all-reduces tensor parallelism adds to one micro-batch's forward
  /// and backward, over all stages (recomputation not counted); 0 at tp=1.
  int tensorParallelCollectives = 0;
  /// Peak bytes of the fullest rank and its parts.
  double memory = 0, parameters = 0, gradients = 0, optimizerState = 0,
         activations = 0, buffers = 0;
  int fullestRank = 0;
  /// Per stage, the seconds of one micro-batch's tasks the pipeline is
  /// simulated with: forward, backward (weight gradients included),
  /// the weight-gradient part a split backward defers, recomputation, and
  /// the transfer of its outputs to the next stage.
  struct StageTimes {
    double forward = 0, backward = 0, weight = 0, recompute = 0, transfer = 0;
  };
  std::vector<StageTimes> stages;
  /// Why the plan cannot run ("" when it can): a degree that does not
  /// divide, memory over the limit, ...
  std::string infeasible;
  /// What bounds the step most: "compute", "tensor-parallel", "bubble",
  /// "data-parallel", "memory".
  std::string bound;
};

/// Prices `plan` (its stage cuts filled in when empty) on `hw`.
Estimate evaluatePlan(const ModelProfile &model, const HardwareProfile &hw,
                      Plan &plan, double memoryLimit);

struct SearchOptions {
  int devices = 1;
  /// Samples per step (0: the traced batch). A step runs it as
  /// `batch / traced batch` micro-batches, each split over dp.
  int64_t globalBatch = 0;
  /// Bytes per device (0: the profile's capacity).
  double memory = 0;
  /// Pipeline schedules to consider.
  std::vector<std::string> schedules = {"gpipe", "1f1b", "interleaved-1f1b",
                                        "zb-h1"};
  /// Largest tensor-parallel degree (0: the devices of one node).
  int maxTp = 0;
  /// Alternatives to keep beside the best.
  int alternatives = 5;
};

struct ScoredPlan {
  Plan plan;
  Estimate estimate;
};

struct SearchResult {
  /// Empty when no plan fits; then `error` says why and what would fit.
  std::vector<ScoredPlan> ranked;
  std::string error;
  /// Plans priced, and rejected by reason.
  int evaluated = 0;
  std::vector<std::pair<std::string, int>> rejected;
  /// The least memory per device any plan needs.
  double leastMemory = 0;
  double seconds = 0;
  /// Filled in by whoever applies the plan: the options applied, and the
  /// plans the passes refused before it with their errors.
  std::string applied;
  std::vector<std::pair<std::string, std::string>> refused;
  std::vector<std::string> warnings;
  /// Plans the user asked to price beside the search's.
  std::vector<ScoredPlan> compared;
};

SearchResult searchPlans(const ModelProfile &model, const HardwareProfile &hw,
                         const SearchOptions &options);

/// The plan report as JSON: the profile used, the chosen plan and its
/// estimate, the alternatives, what was rejected and why.
std::string reportJson(const ModelProfile &model, const HardwareProfile &hw,
                       const SearchOptions &options,
                       const SearchResult &result);
/// The same report as a few readable lines.
std::string reportText(const SearchResult &result, double memoryLimit);

/// "1.50 GiB", "320.0 MiB".
std::string formatBytes(double bytes);

} // namespace merak::autoparallel

#endif // MERAK_ANALYSIS_AUTOPARALLEL_H
