//===- Pipelines.cpp - pass pipelines built from Merak's passes -----------===//

#include "merak/Dialect/Merak/IR/AttrNames.h"
#include "merak/Dialect/Merak/Transforms/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Mesh/Transforms/Passes.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Pass/PassOptions.h"
#include "mlir/Pass/PassRegistry.h"
#include "mlir/Transforms/Passes.h"
#include "llvm/Support/ErrorHandling.h"

#include <cmath>

using namespace mlir;

namespace {

struct TrainPipelineOptions : public PassPipelineOptions<TrainPipelineOptions> {
  Option<std::string> optimizer{*this, "optimizer",
                                llvm::cl::desc("sgd or adamw"),
                                llvm::cl::init("sgd")};
  Option<double> lr{*this, "lr", llvm::cl::desc("learning rate"),
                    llvm::cl::init(1e-3)};
  Option<double> momentum{*this, "momentum", llvm::cl::desc("SGD momentum"),
                          llvm::cl::init(0.0)};
  Option<double> dampening{*this, "dampening", llvm::cl::desc("SGD dampening"),
                           llvm::cl::init(0.0)};
  Option<bool> nesterov{*this, "nesterov",
                        llvm::cl::desc("SGD Nesterov momentum"),
                        llvm::cl::init(false)};
  Option<double> weightDecay{
      *this, "weight-decay",
      llvm::cl::desc("weight decay (default 0 for SGD, 0.01 for AdamW)"),
      llvm::cl::init(-1.0)};
  Option<double> beta1{*this, "beta1", llvm::cl::desc("AdamW beta1"),
                       llvm::cl::init(0.9)};
  Option<double> beta2{*this, "beta2", llvm::cl::desc("AdamW beta2"),
                       llvm::cl::init(0.999)};
  Option<double> eps{*this, "eps", llvm::cl::desc("AdamW epsilon"),
                     llvm::cl::init(1e-8)};
  Option<double> clipGradNorm{
      *this, "clip-grad-norm",
      llvm::cl::desc("clip the global gradient norm (0: off)"),
      llvm::cl::init(0.0)};
  Option<int> microbatches{
      *this, "microbatches",
      llvm::cl::desc("accumulate gradients over this many micro-batches "
                     "(the model is imported at the micro-batch shape)"),
      llvm::cl::init(1)};
  Option<int> lossResult{
      *this, "loss-result",
      llvm::cl::desc("index of the loss among the forward's results"),
      llvm::cl::init(-1)};
  Option<std::string> precision{
      *this, "precision",
      llvm::cl::desc("compute type of the forward's matrix products: fp32, "
                     "or bf16 / fp16 with float32 master weights "
                     "(--merak-mixed-precision)"),
      llvm::cl::init("fp32")};
  Option<std::string> lossScale{
      *this, "loss-scale",
      llvm::cl::desc("dynamic, none or a static scale (default: dynamic "
                     "with precision=fp16, none otherwise; "
                     "--merak-mixed-precision)"),
      llvm::cl::init("")};
  Option<double> lossScaleInit{
      *this, "loss-scale-init",
      llvm::cl::desc("the first scale of a dynamic loss scale"),
      llvm::cl::init(65536.0)};
  Option<int64_t> lossScaleWindow{
      *this, "loss-scale-window",
      llvm::cl::desc("steps without an overflow after which a dynamic "
                     "loss scale doubles"),
      llvm::cl::init(2000)};
  Option<bool> fuseAttention{
      *this, "fuse-attention",
      llvm::cl::desc("fuse masked attention into "
                     "merak.masked_attention (--merak-fuse-attention)"),
      llvm::cl::init(true)};
  Option<bool> flashAttention{
      *this, "flash-attention",
      llvm::cl::desc("fused attention keeps the rows' log-sum-exp, not the "
                     "probabilities: memory linear in the sequence "
                     "(--merak-fuse-attention=\"flash=true\")"),
      llvm::cl::init(false)};
};

/// Reports a bad pipeline option as an error at the module when the
/// pipeline runs: a located diagnostic and a failed run, like any pass's.
struct OptionErrorPass
    : public PassWrapper<OptionErrorPass, OperationPass<ModuleOp>> {
  MLIR_DEFINE_EXPLICIT_INTERNAL_INLINE_TYPE_ID(OptionErrorPass)
  explicit OptionErrorPass(std::string message) : message(std::move(message)) {}
  StringRef getName() const final { return "OptionError"; }
  void runOnOperation() final {
    emitError(getOperation().getLoc()) << message;
    signalPassFailure();
  }
  std::string message;
};

/// Replaces the pipeline by the error: nothing else runs.
LogicalResult fail(OpPassManager &pm, const llvm::Twine &message) {
  pm.clear();
  pm.addPass(std::make_unique<OptionErrorPass>(
      ("--merak-parallelize: " + message).str()));
  return success();
}

/// Records the options @train_step was derived with on the module.
struct RecordTrainOptionsPass
    : public PassWrapper<RecordTrainOptionsPass, OperationPass<ModuleOp>> {
  MLIR_DEFINE_EXPLICIT_INTERNAL_INLINE_TYPE_ID(RecordTrainOptionsPass)
  explicit RecordTrainOptionsPass(std::string options)
      : options(std::move(options)) {}
  StringRef getName() const final { return "RecordTrainOptions"; }
  void runOnOperation() final {
    getOperation()->setAttr(merak::kTrainOptionsAttr,
                            StringAttr::get(&getContext(), options));
  }
  std::string options;
};

void buildTrainPipelineFromOptions(OpPassManager &pm,
                                   const TrainPipelineOptions &o) {
  pm.addPass(createCanonicalizerPass());
  pm.addPass(createCSEPass());
  if (o.fuseAttention) {
    merak::FuseAttentionOptions fa;
    fa.flash = o.flashAttention;
    pm.addPass(merak::createFuseAttention(fa));
  }
  if (o.precision != "fp32" && o.precision != "bf16" && o.precision != "fp16") {
    pm.clear();
    pm.addPass(std::make_unique<OptionErrorPass>(
        "--merak-train: precision must be fp32, bf16 or fp16, got '" +
        o.precision + "'"));
    return;
  }
  bool scales = o.precision == "fp16"
                    ? o.lossScale != "none"
                    : !o.lossScale.empty() && o.lossScale != "none";
  if (o.precision != "fp32" || scales) {
    merak::MixedPrecisionOptions mp;
    mp.compute = o.precision;
    mp.lossScale = o.lossScale;
    mp.lossScaleInit = o.lossScaleInit;
    mp.lossScaleWindow = o.lossScaleWindow;
    pm.addPass(merak::createMixedPrecision(mp));
    pm.addPass(createCanonicalizerPass());
  }
  merak::AutodiffOptions ad;
  ad.lossResult = o.lossResult;
  pm.addPass(merak::createAutodiff(ad));
  merak::GradAccumulationOptions acc;
  acc.microbatches = o.microbatches;
  pm.addPass(merak::createGradAccumulation(acc));
  merak::OptimizerOptions opt;
  opt.optimizer = o.optimizer;
  opt.lr = o.lr;
  opt.momentum = o.momentum;
  opt.dampening = o.dampening;
  opt.nesterov = o.nesterov;
  opt.weightDecay = o.weightDecay;
  opt.beta1 = o.beta1;
  opt.beta2 = o.beta2;
  opt.eps = o.eps;
  opt.clipGradNorm = o.clipGradNorm;
  pm.addPass(merak::createOptimizer(opt));
  pm.addPass(createCanonicalizerPass());
  pm.addPass(createCSEPass());
  std::string recorded;
  llvm::raw_string_ostream os(recorded);
  const_cast<TrainPipelineOptions &>(o).print(os);
  pm.addPass(std::make_unique<RecordTrainOptionsPass>(os.str()));
}

struct ParallelizeOptions : public PassPipelineOptions<ParallelizeOptions> {
  Option<int> dp{*this, "dp", llvm::cl::desc("data-parallel degree"),
                 llvm::cl::init(1)};
  Option<int> tp{*this, "tp", llvm::cl::desc("tensor-parallel degree"),
                 llvm::cl::init(1)};
  Option<int> ep{*this, "ep",
                 llvm::cl::desc("expert-parallel degree (mixture-of-experts "
                                "weights split over it; its ranks also "
                                "split the batch)"),
                 llvm::cl::init(1)};
  Option<std::string> sp{
      *this, "sp",
      llvm::cl::desc("sequence parallelism: none, megatron (over tp) or "
                     "ulysses (over its own axis of size sp-size)"),
      llvm::cl::init("none")};
  Option<int> spSize{*this, "sp-size",
                     llvm::cl::desc("Ulysses sequence-parallel degree"),
                     llvm::cl::init(2)};
  Option<int> zero{*this, "zero", llvm::cl::desc("ZeRO stage 0..3"),
                   llvm::cl::init(0)};
  Option<bool> vocabParallel{
      *this, "vocab-parallel",
      llvm::cl::desc("split the embedding and the head by vocabulary"),
      llvm::cl::init(true)};
  Option<double> bucketMb{
      *this, "bucket-mb",
      llvm::cl::desc("data-parallel gradient bucket size in megabytes"),
      llvm::cl::init(25.0)};
  Option<double> zeroBucketMb{
      *this, "zero-bucket-mb",
      llvm::cl::desc("bucket size in megabytes of ZeRO's reduce-scatters "
                     "and gathers"),
      llvm::cl::init(2.0)};
  Option<int> pp{*this, "pp", llvm::cl::desc("pipeline-parallel degree"),
                 llvm::cl::init(1)};
  Option<int> virtualStages{
      *this, "virtual",
      llvm::cl::desc("model chunks per pipeline rank (interleaved schedules)"),
      llvm::cl::init(1)};
  ListOption<int64_t> stages{
      *this, "stages",
      llvm::cl::desc("manual cut: first layer of each stage after the first")};
  Option<int> microbatches{*this, "microbatches",
                           llvm::cl::desc("pipeline micro-batches per step"),
                           llvm::cl::init(1)};
  Option<std::string> schedule{
      *this, "schedule",
      llvm::cl::desc("pipeline schedule: gpipe, 1f1b, interleaved-1f1b, "
                     "merak-last-no-recompute, merak-shifted-critical-path, "
                     "zb-h1, dynamic"),
      llvm::cl::init("1f1b")};
  Option<std::string> recompute{
      *this, "recompute",
      llvm::cl::desc("activation recomputation: none, full or selective"),
      llvm::cl::init("none")};
  Option<double> recomputeRatio{
      *this, "recompute-ratio",
      llvm::cl::desc("Merak's stage-aware recompute ratio (with full)"),
      llvm::cl::init(-1.0)};
  Option<bool> autoPlan{
      *this, "auto",
      llvm::cl::desc("choose the plan: --merak-auto-parallel with devices, "
                     "memory, hardware, report, max-tp and quiet"),
      llvm::cl::init(false)};
  Option<int> devices{*this, "devices",
                      llvm::cl::desc("with auto: devices to plan for"),
                      llvm::cl::init(1)};
  Option<int64_t> batch{
      *this, "batch",
      llvm::cl::desc("with auto: samples per step (0: the traced batch)"),
      llvm::cl::init(0)};
  Option<double> memory{
      *this, "memory",
      llvm::cl::desc("with auto: GiB per device (0: the profile's)"),
      llvm::cl::init(0.0)};
  Option<std::string> hardware{
      *this, "hardware",
      llvm::cl::desc("with auto or comm-algorithm: hardware profile (JSON "
                     "or Galvatron dir)"),
      llvm::cl::init("")};
  Option<std::string> report{
      *this, "report",
      llvm::cl::desc("with auto: write the plan report as JSON here"),
      llvm::cl::init("")};
  Option<int> maxTp{*this, "max-tp",
                    llvm::cl::desc("with auto: largest tensor-parallel degree"),
                    llvm::cl::init(0)};
  Option<std::string> calibration{
      *this, "calibration",
      llvm::cl::desc("with auto: a one-device merak-exec --profile-json run "
                     "of this step that calibrates op times (after a comma, "
                     "a pipelined run's, for the forward share)"),
      llvm::cl::init("")};
  Option<std::string> compare{
      *this, "compare",
      llvm::cl::desc("with auto: also price these plans (';'-separated)"),
      llvm::cl::init("")};
  Option<bool> quiet{*this, "quiet",
                     llvm::cl::desc("with auto: no plan summary on stderr"),
                     llvm::cl::init(false)};
  Option<std::string> commAlgorithm{
      *this, "comm-algorithm",
      llvm::cl::desc("the all-reduce algorithm: ring, tree or auto (priced "
                     "with the hardware profile; --merak-comm-algorithm); "
                     "unset: the libraries' default, the ring"),
      llvm::cl::init("")};

  /// Whether any pipeline option is set: then the step is also cut into
  /// stages, outlined and scheduled.
  bool pipelined() const {
    return pp != 1 || virtualStages != 1 || microbatches != 1 ||
           !stages.empty() || recompute != "none" || recomputeRatio >= 0 ||
           schedule != "1f1b";
  }
};

/// With comm-algorithm: the all-reduce algorithm, priced with the plan's
/// hardware profile.
void addCommAlgorithm(OpPassManager &pm, const ParallelizeOptions &o) {
  if (o.commAlgorithm.empty())
    return;
  merak::CommAlgorithmOptions comm;
  comm.algorithm = o.commAlgorithm;
  comm.hardware = o.hardware;
  comm.report = o.autoPlan ? std::string(o.report) : std::string();
  pm.addPass(merak::createCommAlgorithm(comm));
}

LogicalResult buildParallelizePipeline(OpPassManager &pm,
                                       const ParallelizeOptions &o) {
  if (o.autoPlan) {
    if (o.dp != 1 || o.tp != 1 || o.ep != 1 || o.pp != 1 || o.zero != 0 ||
        o.sp != "none" || o.pipelined())
      return fail(pm, "auto chooses dp, tp, pp, zero, sp, micro-batches, "
                      "schedule and recomputation itself (and plans no ep); "
                      "give only devices, "
                      "batch, memory, hardware, report, calibration, max-tp, "
                      "compare, comm-algorithm and quiet "
                      "with it");
    if (o.devices < 1)
      return fail(pm, "devices must be at least 1");
    if (!(o.memory >= 0) || !std::isfinite(o.memory))
      return fail(pm, "memory must be a non-negative number of GiB");
    merak::AutoParallelOptions a;
    a.devices = o.devices;
    a.batch = o.batch;
    a.memory = o.memory;
    a.hardware = o.hardware;
    a.report = o.report;
    a.maxTp = o.maxTp;
    a.quiet = o.quiet;
    a.compare = o.compare;
    a.calibration = o.calibration;
    pm.addPass(merak::createAutoParallel(a));
    addCommAlgorithm(pm, o);
    return success();
  }
  if (o.sp != "none" && o.sp != "megatron" && o.sp != "ulysses")
    return fail(pm, "sp must be none, megatron or ulysses, got '" + o.sp + "'");
  bool pipelined = o.pipelined();
  if (pipelined && o.zero == 3)
    return fail(
        pm, "zero=3 cannot be combined with pipeline parallelism: every stage "
            "would gather its parameters before every use in every "
            "micro-batch (DeepSpeed refuses ZeRO-3 with pipelines too); use "
            "zero=1 or zero=2");
  if (o.tp > 1) {
    merak::SplitFusedProjectionsOptions split;
    split.tp = o.tp;
    pm.addPass(merak::createSplitFusedProjections(split));
  }
  merak::MeshOptions mesh;
  mesh.dp = o.dp;
  mesh.ep = o.ep;
  mesh.tp = o.tp;
  mesh.sp = o.sp == "ulysses" ? int(o.spSize) : 1;
  pm.addPass(merak::createMesh(mesh));
  merak::TensorParallelOptions tensor;
  tensor.vocabParallel = o.vocabParallel;
  pm.addPass(merak::createTensorParallel(tensor));
  if (o.ep > 1) {
    merak::ExpertParallelOptions experts;
    experts.ep = o.ep;
    pm.addPass(merak::createExpertParallel(experts));
  }
  merak::DataParallelOptions data;
  data.zero = o.zero;
  pm.addPass(merak::createDataParallel(data));
  merak::SequenceParallelOptions seq;
  seq.megatron = o.sp == "megatron";
  seq.ulysses = o.sp == "ulysses";
  pm.addPass(merak::createSequenceParallel(seq));
  pm.addPass(merak::createShardingPropagation());
  merak::SpmdizeOptions spmdize;
  // Pipelines place every op by its role in the step.
  spmdize.keepRoles = pipelined;
  pm.addPass(merak::createSpmdize(spmdize));
  merak::GradBucketsOptions buckets;
  buckets.bucketMb = o.bucketMb;
  buckets.zeroBucketMb = o.zeroBucketMb;
  if (pipelined) {
    // Pipelines: the spmdized step cut into stages, each stage on its own
    // copy of the mesh. Gradient reductions move to the updates first, so
    // that they land in the optimizer functions and run once per step on
    // the gradients accumulated over micro-batches; buckets are then packed
    // inside each optimizer function.
    pm.addPass(merak::createDeferGradReductions());
    pm.addPass(createCanonicalizerPass());
    merak::PipelinePartitionOptions partition;
    partition.pp = o.pp;
    partition.virtualStages = o.virtualStages;
    SmallVector<int64_t> cuts(o.stages.begin(), o.stages.end());
    partition.stages = cuts;
    pm.addPass(merak::createPipelinePartition(partition));
    merak::RecomputeOptions recompute;
    recompute.recompute = o.recompute;
    recompute.ratio = o.recomputeRatio;
    pm.addPass(merak::createRecompute(recompute));
    pm.addPass(merak::createPipelineOutline());
    merak::PipelineScheduleOptions schedule;
    schedule.kind = o.schedule;
    schedule.microbatches = o.microbatches;
    pm.addPass(merak::createPipelineSchedule(schedule));
  } else {
    // Without pipelines, an embedding's gradient is reduced by gathering
    // the rows its tokens touch; other reductions stay where backward
    // produces them (so buckets overlap the rest of backward), except that
    // a tied parameter's two contributions reduced alike are summed first
    // and reduced once. Collectives of the batch alone (the count of
    // targets, the gathered ids) are issued first, once.
    pm.addPass(merak::createSparseEmbeddingGrads());
    merak::DeferGradReductionsOptions defer;
    defer.mergeOnly = true;
    pm.addPass(merak::createDeferGradReductions(defer));
    pm.addPass(merak::createHoistBatchCollectives());
  }
  pm.addPass(merak::createGradBuckets(buckets));
  // No CSE here: it would merge ZeRO-3's per-use parameter gathers into one
  // that stays alive for the whole step.
  pm.addPass(createCanonicalizerPass());
  addCommAlgorithm(pm, o);
  return success();
}

} // namespace

void merak::registerMerakPipelines() {
  PassPipelineRegistration<ParallelizeOptions>(
      "merak-parallelize",
      "Partition the training step: with tp > 1 "
      "--merak-split-fused-projections, then --merak-mesh, "
      "--merak-tensor-parallel, with ep > 1 --merak-expert-parallel, "
      "--merak-data-parallel, --merak-sequence-parallel, "
      "--merak-sharding-propagation, --merak-spmdize, --merak-grad-buckets; "
      "without pipelines also --merak-sparse-embedding-grads, "
      "--merak-defer-grad-reductions=merge-only and "
      "--merak-hoist-batch-collectives; "
      "with pipeline options also --merak-defer-grad-reductions, "
      "--merak-pipeline-partition, --merak-recompute, "
      "--merak-pipeline-outline and --merak-pipeline-schedule; with "
      "comm-algorithm, --merak-comm-algorithm last",
      [](OpPassManager &pm, const ParallelizeOptions &o) {
        return buildParallelizePipeline(pm, o);
      });
  PassPipelineRegistration<TrainPipelineOptions>(
      "merak-train",
      "Build the training step: clean-ups, --merak-fuse-attention, "
      "--merak-autodiff, --merak-grad-accumulation, --merak-optimizer, "
      "clean-ups",
      buildTrainPipelineFromOptions);
}

LogicalResult merak::buildParallelizePipeline(OpPassManager &pm,
                                              StringRef options) {
  std::unique_ptr<ParallelizeOptions> o =
      ParallelizeOptions::createFromString(options);
  if (!o)
    return failure();
  return buildParallelizePipeline(pm, *o);
}

LogicalResult merak::buildTrainPipeline(OpPassManager &pm, StringRef options) {
  StringRef body = options.trim();
  if (body.consume_front("{") && !body.consume_back("}"))
    return failure();
  std::unique_ptr<TrainPipelineOptions> o =
      TrainPipelineOptions::createFromString(body);
  if (!o)
    return failure();
  buildTrainPipelineFromOptions(pm, *o);
  return success();
}
