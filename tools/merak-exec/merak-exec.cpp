//===- merak-exec.cpp - runs a merak training step ------------------------===//
//
// Flags and wiring around the runtime's libraries: which rank this process
// is (--nproc, torchrun, srun, mpirun), the programs (a rank-program file,
// or a module lowered in process where the compiler is built), the backend
// and communicator by name, the rendezvous, the data, and the training loop
// of lib/Runtime/Train, which loads the state, runs the steps, reports them
// and writes checkpoints. Rank 0 reports; every rank keeps its shard.
//
//===----------------------------------------------------------------------===//

#include "merak/Runtime/Checkpoint.h"
#include "merak/Runtime/Comm/DevicePeerLink.h"
#include "merak/Runtime/Comm/Distributed.h"
#include "merak/Runtime/Comm/Launch.h"
#include "merak/Runtime/Comm/Staged.h"
#include "merak/Runtime/Executor.h"
#include "merak/Runtime/FlagNames.h"
#include "merak/Runtime/Fusion.h"
#include "merak/Runtime/HardwareProbe.h"
#include "merak/Runtime/Pipeline.h"
#include "merak/Runtime/RankProgramFile.h"
#include "merak/Runtime/Registry.h"
#include "merak/Runtime/Safetensors.h"
#include "merak/Runtime/Train/Generate.h"
#include "merak/Runtime/Train/RunOptions.h"
#include "merak/Runtime/Train/RunState.h"
#include "merak/Runtime/Train/StepRunner.h"
#include "merak/Runtime/Train/Trainer.h"
#if MERAK_HAVE_COMPILER
#include "merak/Target/RankProgram/RankProgramLowering.h"
#endif

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sys/stat.h>
#include <sys/sysinfo.h>
#include <thread>
#include <unistd.h>

using namespace merak::runtime;

// Flags (absl): the runtime builds without LLVM. Those whose absence means
// something of its own are optional.
ABSL_FLAG(std::string, entry, "",
          "Function to run (default: train_step, else forward)");
ABSL_FLAG(std::string, init, "",
          "Initial weights: a TorchScript archive (.pt) or a safetensors "
          "checkpoint");
ABSL_FLAG(std::string, resume, "",
          "Continue a run from a checkpoint written by --save or --save-dir "
          "(weights, optimizer state, step, seed), or from the newest "
          "checkpoint in a --save-dir directory");
ABSL_FLAG(std::string, data, "",
          "Inputs per step (batches.safetensors): one tensor per model "
          "input, first dimension indexing steps");
ABSL_FLAG(std::string, tokens, "", "Flat token file to sample windows from");
ABSL_FLAG(std::string, token_dtype, "uint16", "Token width: uint16 or int32");
ABSL_FLAG(int64_t, seq_len, 0,
          "Window length for --tokens (must match the program)");
ABSL_FLAG(int64_t, batch, 0,
          "Windows per step for --tokens (must match the program)");
ABSL_FLAG(int64_t, steps, 1,
          "Last step to run (counted from the start of training, so a "
          "resumed run continues up to it)");
ABSL_FLAG(std::optional<uint64_t>, seed, std::nullopt,
          "Seed of data sampling and dropout (< 2^31; default 0, or the "
          "checkpoint's)");
ABSL_FLAG(std::optional<double>, lr, std::nullopt,
          "Peak learning rate (required for a training step unless the IR "
          "records one)");
ABSL_FLAG(std::string, lr_schedule, "constant", "constant or cosine");
ABSL_FLAG(int64_t, warmup_steps, 0,
          "Linear learning-rate warm-up over this many steps");
ABSL_FLAG(double, min_lr, 0.0, "Learning rate at the end of the cosine decay");
ABSL_FLAG(int64_t, decay_steps, 0,
          "Steps over which cosine decays (default: --steps)");
ABSL_FLAG(std::string, save, "",
          "Write a checkpoint here at the end (ckpt.safetensors)");
ABSL_FLAG(std::string, save_dir, "",
          "Write checkpoints to this directory (step-<N>.safetensors) every "
          "--save-every steps and after the last; a run started again with "
          "the same flags resumes from the newest one there");
ABSL_FLAG(int64_t, save_every, 0,
          "With --save-dir: a checkpoint after every N steps (0: only after "
          "the last)");
ABSL_FLAG(int64_t, keep_last, 0,
          "With --save-dir: keep the newest K checkpoints, removing older "
          "ones once a save is complete (0: keep all)");
ABSL_FLAG(std::string, eval_tokens, "",
          "Validation token file (merak-tokenize's OUT.val.bin): evaluations "
          "take its windows in order, the same ones each time");
ABSL_FLAG(std::string, eval_data, "",
          "Validation batches (batches.safetensors, as --data): evaluation "
          "batch k reads slice k - 1");
ABSL_FLAG(int64_t, eval_every, 0,
          "Evaluate on the validation data after every N steps and after the "
          "last (0: after the last only)");
ABSL_FLAG(int64_t, eval_batches, 8,
          "Batches per evaluation (the step's batch shape)");
ABSL_FLAG(std::string, log_jsonl, "",
          "Append one JSON object per step to this file");
ABSL_FLAG(bool, skip_nonfinite, false,
          "Skip the updates of a step whose loss is NaN or infinite instead "
          "of stopping");
ABSL_FLAG(bool, check_numerics, false,
          "Stop at the first op that produces a NaN or infinity, naming it, "
          "its source line, the step and the rank (slow: reads every result "
          "back)");
ABSL_FLAG(bool, profile, false,
          "Print kernel time per op kind at the end (steps after the first)");
ABSL_FLAG(std::string, profile_json, "",
          "Also write the kernel time per op kind and step as JSON to this "
          "file (implies --profile; calibrates --merak-auto-parallel)");
ABSL_FLAG(std::optional<int>, nproc, std::nullopt,
          "Start this many local ranks of an SPMD program (the mesh size) "
          "and wait for them");
ABSL_FLAG(double, comm_timeout, 60.0,
          "Seconds after which a rank that stopped answering (or a "
          "collective, the rendezvous, a barrier) ends the run on every "
          "rank");
ABSL_FLAG(bool, sync_collectives, false,
          "Run each collective to completion where it stands instead of "
          "overlapping it with the kernels up to the first use of its result "
          "(for debugging and for measuring the overlap)");
ABSL_FLAG(std::string, trace, "",
          "Pipeline plans: write a Chrome / Perfetto trace of every task, "
          "one track per rank (chrome://tracing, ui.perfetto.dev)");
ABSL_FLAG(std::string, pipeline_delay, "",
          "Pipeline plans (benchmarks), S:F[:P]: make stage S slower by a "
          "fraction F of each of its tasks, at a random share P of the steps "
          "(default 1)");
ABSL_FLAG(bool, no_arena, false,
          "Allocate every result from the allocator instead of placing the "
          "step's temporaries in the planned arena");
ABSL_FLAG(std::string, device, "cpu",
          "Backend that runs the kernels (this build's: see --help); auto: "
          "cuda where this build has it and a GPU can be used, else cpu");
ABSL_FLAG(std::string, fuse_elementwise, "auto",
          "Run chains of elementwise ops as one kernel each: on, off, or "
          "auto (on for a backend with fused kernels: cuda); a backend "
          "without them runs a chain's ops one by one");
ABSL_FLAG(bool, print_fused_kernels, false,
          "Print the CUDA source of rank 0's fused elementwise kernels, then "
          "exit");
ABSL_FLAG(std::vector<std::string>, compile_fused_kernels, {},
          "Compile rank 0's fused elementwise kernels for these GPU "
          "architectures (sm_80,sm_90) without a GPU, print their sizes, then "
          "exit");
ABSL_FLAG(bool, tf32, false,
          "--device=cuda: float32 GEMMs on TF32 tensor cores (off: full "
          "float32, as PyTorch's default)");
ABSL_FLAG(bool, gemm_staging, true,
          "--device=cuda: a large GEMM matrix whose rows are not 16 bytes "
          "apart (an odd vocabulary's logits) is copied to one whose rows "
          "are, for cuBLASLt's fast kernels");
ABSL_FLAG(std::string, flash_kernels, "registers",
          "--device=cuda: the FlashAttention form's bf16 and f16 kernels: "
          "registers (each tile's products kept in registers) or wmma "
          "(WMMA fragments through shared memory)");
ABSL_FLAG(std::string, comm, "auto",
          "Communicator for collectives: gloo, nccl, or auto (nccl for "
          "--device=cuda where the build has it and every rank of a stage's "
          "mesh has a GPU, else gloo; in the runtime built alone gloo moves "
          "host copies of the GPU's tensors); gloo-device runs the path "
          "NCCL's collectives take on CPU ranks with Gloo's own calls (a "
          "test of it)");
ABSL_FLAG(std::string, comm_staging, "auto",
          "Collectives and pipeline transfers of a device's tensors (several "
          "ranks with --device=cuda): host copies them to the CPU, runs them "
          "on --comm and copies the results back (what runs several ranks "
          "on one GPU); off refuses such runs; auto is host for a device "
          "other than the CPU and off for the CPU (host on the CPU runs the "
          "same copies between two CPU backends, a test of the path)");
ABSL_FLAG(std::string, p2p, "auto",
          "Pipeline transfers: gloo (TCP, between any ranks), shm (between "
          "ranks on one machine: POSIX shared memory on the CPU, Gloo "
          "between machines; with --device=cuda GPU to GPU through a ring "
          "in the receiver's memory, CUDA IPC, every pipeline peer on the "
          "machine), nccl (GPU to GPU, with --comm=nccl), or auto (nccl "
          "where the collectives run on NCCL, else gloo); gloo moves "
          "a GPU's tensors through the host. gloo-channels runs nccl's "
          "protocol (a channel per direction, headers, receives matched by "
          "tag) on Gloo, shm-channels the protocol shm runs between GPUs (a "
          "ring per direction in /dev/shm): tests of those paths on CPU "
          "ranks");
ABSL_FLAG(bool, blas_threads, false,
          "CPU: let the BLAS run GEMMs on its own threads beside the "
          "kernels' (by default GEMMs split over the kernels' threads and "
          "the BLAS runs serially, so that two pools do not compete for the "
          "cores)");
ABSL_FLAG(std::string, gemm, "onednn",
          "CPU: library for float32 matrix products: onednn (oneDNN's "
          "sgemm, kernels for the CPU's widest vector instructions; agrees "
          "with PyTorch to rounding) or blas (the BLAS PyTorch calls: bit for "
          "bit PyTorch's GEMMs)");
ABSL_FLAG(std::optional<int>, threads, std::nullopt,
          "CPU threads for kernels (default: the backend's choice, shared "
          "among local ranks)");
ABSL_FLAG(bool, print_program, false,
          "Print the rank program and its memory plan, then exit");
ABSL_FLAG(bool, profile_hardware, false,
          "Measure this machine instead of running a program (GEMM rates, "
          "memory bandwidth, kernel overhead; with --nproc N, collectives and "
          "transfers between the ranks) and write the hardware profile to -o");
ABSL_FLAG(std::string, o, "",
          "--profile-hardware: the JSON file the profile is written to");
ABSL_FLAG(double, profile_seconds, 60.0,
          "--profile-hardware: the most wall time the measurements aim to "
          "take, in seconds (a smaller budget measures fewer sizes; they "
          "stop sooner when every size has had its repetitions)");
ABSL_FLAG(std::string, profile_name, "local",
          "--profile-hardware: the profile's name");

ABSL_FLAG(bool, generate, false,
          "Generate text with a model compiled by --merak-kv-cache (@prefill "
          "and @decode) and the weights of --init (docs/generation.md)");
ABSL_FLAG(std::string, prompts, "",
          "--generate: a file of prompts, one per line, as token ids "
          "separated by spaces");
ABSL_FLAG(int64_t, max_new_tokens, 32,
          "--generate: the most tokens generated per prompt");
ABSL_FLAG(double, temperature, 0.0,
          "--generate: sampling temperature (0: greedy, the likeliest token)");
ABSL_FLAG(int64_t, top_k, 0,
          "--generate: sample among the K likeliest tokens (0: all)");
ABSL_FLAG(double, top_p, 1.0,
          "--generate: sample among the likeliest tokens whose probability "
          "reaches P (1: all)");
ABSL_FLAG(std::vector<std::string>, stop_tokens, {},
          "--generate: token ids (comma-separated) that end a prompt's "
          "generation (the stop token is kept)");

// The flags' values, read once after parsing.
static std::string inputFile, entry, initFile, resumeFile, dataFile, tokensFile,
    tokenDType, lrSchedule, saveFile, saveDir, logJsonl, traceFile,
    pipelineDelay;
static int64_t seqLen, batchSize, steps, warmupSteps, decaySteps, saveEvery,
    keepLast, evalEvery, evalBatches;
static std::string evalTokensFile, evalDataFile;
static std::optional<uint64_t> seedFlag;
static std::optional<double> learningRate;
static double minLr, commTimeout;
static std::string profileJsonFile;
static bool skipNonFinite, profileOps, syncCollectives, printProgramOnly,
    checkNumerics;
static std::optional<int> nprocFlag;

namespace {

/// --fuse-elementwise: whether programs are bound with their elementwise
/// chains fused (Fusion.h).
absl::StatusOr<bool> elementwiseFusion() {
  const std::string mode = absl::GetFlag(FLAGS_fuse_elementwise);
  if (mode == "on")
    return true;
  if (mode == "off")
    return false;
  if (mode != "auto")
    return absl::InvalidArgumentError(absl::StrCat(
        "--fuse-elementwise must be auto, on or off, not '", mode, "'"));
  absl::StatusOr<const BackendEntry *> device =
      findBackend(absl::GetFlag(FLAGS_device));
  return device.ok() && (*device)->fusesElementwise &&
         (*device)->fusesElementwise();
}

/// "rank K: " on every line a rank of a multi-process run writes to stderr.
std::string rankPrefix;
/// This rank's membership in a multi-process run, once joined.
DistributedJob *job = nullptr;

/// Prints an error; after the rendezvous, also tells the other ranks (so
/// they stop at once, naming this one) and leaves without running
/// destructors that could wait on peers.
/// Writes `merak-exec: <kind>: <message>` to stderr, after `rankPrefix`, in
/// one write: the ranks of a run share stderr, and a line written piece by
/// piece would interleave with theirs.
void writeDiagnostic(const char *kind, const std::string &message) {
  std::string line =
      absl::StrCat(rankPrefix, "merak-exec: ", kind, ": ", message, "\n");
  std::fwrite(line.data(), 1, line.size(), stderr);
  std::fflush(stderr);
}

int fail(const std::string &message) {
  std::fflush(stdout);
  writeDiagnostic("error", message);
  if (job) {
    job->abort(absl::StrCat("rank ", job->rank(), " failed: ", message));
    std::fflush(stderr);
    _exit(1);
  }
  return 1;
}

int fail(const absl::Status &status) {
  return fail(std::string(status.message()));
}

/// --compile-fused-kernels: every distinct fused kernel of rank 0's
/// programs compiled for each of `archs`; a line per kernel and
/// architecture, an error for the first that does not compile.
int compileFusedKernels(CompiledPlan &plan, const BindOptions &binding,
                        const std::vector<std::string> &archs) {
  absl::StatusOr<const BackendEntry *> cuda = findBackend("cuda");
  if (!cuda.ok() || !(*cuda)->compileFusedKernel)
    return fail("--compile-fused-kernels needs the CUDA backend, which this "
                "build does not have");
  std::vector<std::pair<std::string, std::string>> kernels; // ops, source
  absl::StatusOr<std::string> listed =
      listRankZero(plan, binding, [&](const Program &p) {
        for (const FusedKernel &k : p.fusedKernels) {
          bool seen = k.source.empty(); // an optimizer group: no source
          for (const auto &[ops, source] : kernels)
            seen = seen || source == k.source;
          if (!seen)
            kernels.emplace_back(k.source.substr(3, k.source.find('\n') - 3),
                                 k.source);
        }
        return std::string();
      });
  if (!listed.ok())
    return listed.status().message().empty() ? 1 : fail(listed.status());
  for (size_t i = 0; i < kernels.size(); ++i)
    for (const std::string &arch : archs) {
      absl::StatusOr<std::string> cubin =
          (*cuda)->compileFusedKernel(kernels[i].second, arch);
      if (!cubin.ok())
        return fail(cubin.status());
      std::printf("fused kernel %zu (%s): %s, %zu bytes of machine code\n", i,
                  kernels[i].first.c_str(), arch.c_str(), cubin->size());
    }
  std::printf("%zu fused kernels compiled for %s\n", kernels.size(),
              absl::StrJoin(archs, ", ").c_str());
  return 0;
}

void note(const std::string &message) { writeDiagnostic("note", message); }

/// MERAK_EXEC_FAULT=RANK:STEP:ACTION (tests only): at the start of step
/// STEP, rank RANK kills itself (`kill`, SIGKILL), exits silently (`exit`,
/// status 3), stops without dying (`hang`, SIGSTOP), keeps its process
/// alive but its main thread idle forever (`stall`), or fails with an error
/// message like any other (`error`).
struct Fault {
  int64_t rank = -1, step = -1;
  std::string action;

  static std::optional<Fault> fromEnvironment() {
    const char *text = std::getenv("MERAK_EXEC_FAULT");
    if (!text || !*text)
      return std::nullopt;
    Fault f;
    char action[16] = {};
    long long rank, step;
    if (std::sscanf(text, "%lld:%lld:%15s", &rank, &step, action) != 3)
      return std::nullopt;
    f.rank = rank, f.step = step, f.action = action;
    return f;
  }

  /// Acts at the fault's step; true when the caller should fail (`error`).
  bool trigger(int64_t myRank, int64_t atStep) const {
    if (myRank != rank || atStep != step)
      return false;
    if (action == "error")
      return true;
    std::fflush(stdout);
    std::fflush(stderr);
    if (action == "kill")
      std::raise(SIGKILL);
    else if (action == "hang")
      std::raise(SIGSTOP);
    else if (action == "stall")
      while (true)
        std::this_thread::sleep_for(std::chrono::hours(1));
    else
      _exit(3);
    return false;
  }
};

/// What this rank does around each step: tells its peers where it is,
/// acts on an injected fault, and (rank 0) reports the step.
class RankObserver final : public StepObserver {
public:
  RankObserver(int64_t rank, StepReporter *report,
               std::chrono::steady_clock::time_point processStart)
      : rank(rank), report(report), fault(Fault::fromEnvironment()),
        processStart(processStart) {}

  /// When the first step began, in ms after the process started (0 when
  /// none ran).
  double firstStepMs() const {
    return firstStepAt ? std::chrono::duration<double, std::milli>(
                             *firstStepAt - processStart)
                             .count()
                       : 0.0;
  }

  absl::Status beforeStep(int64_t step) override {
    if (!firstStepAt)
      firstStepAt = std::chrono::steady_clock::now();
    if (job)
      job->setProgress(step, -1);
    if (fault && fault->trigger(rank, step))
      return absl::InternalError("injected failure at step " +
                                 std::to_string(step) + " (MERAK_EXEC_FAULT)");
    return absl::OkStatus();
  }
  void afterStep(const StepRecord &record) override {
    if (report)
      report->afterStep(record);
  }
  void afterEval(const EvalRecord &record) override {
    if (report)
      report->afterEval(record);
  }
  void onError() override {
    if (report)
      report->onError();
  }

private:
  int64_t rank;
  StepReporter *report;
  std::optional<Fault> fault;
  std::chrono::steady_clock::time_point processStart;
  std::optional<std::chrono::steady_clock::time_point> firstStepAt;
};

} // namespace

/// The machine's memory and swap in bytes, or 0 when unknown.
static int64_t machineMemoryBytes() {
  struct sysinfo info;
  if (sysinfo(&info) != 0)
    return 0;
  return int64_t(info.totalram + info.totalswap) * int64_t(info.mem_unit);
}

/// --save-dir, --save-every, --keep-last and --resume DIR: checks them,
/// creates the directory, and resumes from the newest checkpoint there
/// (of --resume's directory, or of --save-dir when neither --resume nor a
/// checkpoint to start from elsewhere was given: --init is then not read).
static absl::Status resolveCheckpointDirectory(bool reporter) {
  if (saveEvery < 0)
    return absl::InvalidArgumentError(
        absl::StrCat("--save-every must be at least 0, not ", saveEvery));
  if (keepLast < 0)
    return absl::InvalidArgumentError(
        absl::StrCat("--keep-last must be at least 0, not ", keepLast));
  if (saveDir.empty() && (saveEvery > 0 || keepLast > 0))
    return absl::InvalidArgumentError(absl::StrCat(
        saveEvery > 0 ? "--save-every" : "--keep-last",
        " needs --save-dir (the directory the checkpoints go to)"));
  struct stat st;
  if (!resumeFile.empty() && ::stat(resumeFile.c_str(), &st) == 0 &&
      S_ISDIR(st.st_mode)) {
    std::vector<StepCheckpoint> found = listStepCheckpoints(resumeFile);
    if (found.empty())
      return absl::NotFoundError(
          absl::StrCat("--resume ", resumeFile,
                       ": the directory holds no checkpoint "
                       "(step-<N>.safetensors written by --save-dir)"));
    resumeFile = found.back().path;
  }
  if (saveDir.empty())
    return absl::OkStatus();
  if (::stat(saveDir.c_str(), &st) == 0) {
    if (!S_ISDIR(st.st_mode))
      return absl::FailedPreconditionError(
          absl::StrCat("--save-dir ", saveDir, " is not a directory"));
  } else if (::mkdir(saveDir.c_str(), 0777) != 0 && errno != EEXIST) {
    return absl::PermissionDeniedError(absl::StrCat(
        "--save-dir: cannot create ", saveDir, ": ", std::strerror(errno)));
  }
  if (!resumeFile.empty())
    return absl::OkStatus();
  std::vector<StepCheckpoint> found = listStepCheckpoints(saveDir);
  if (found.empty())
    return absl::OkStatus();
  resumeFile = found.back().path;
  if (reporter)
    note("resuming from " + resumeFile + ", the newest checkpoint in " +
         saveDir + (initFile.empty() ? "" : " (--init is not read)"));
  initFile.clear();
  return absl::OkStatus();
}

/// Kernel threads of a rank: --threads, else the machine's cores shared
/// among the local ranks (0 leaves the choice to the backend).
static int kernelThreadsFor(const LaunchEnvironment &env) {
  if (std::optional<int> threads = absl::GetFlag(FLAGS_threads))
    return *threads;
  if (env.localWorldSize > 1)
    return std::max<int>(
        1, int(std::thread::hardware_concurrency() / env.localWorldSize));
  return 0;
}

/// Whether collectives and transfers of `device`'s tensors are staged
/// through the host (--comm-staging), or why the flag is wrong.
static absl::StatusOr<bool> stagesThroughHost(const BackendEntry &device) {
  std::string mode = absl::GetFlag(FLAGS_comm_staging);
  if (mode == "auto")
    return device.name != "cpu";
  if (mode == "host" || mode == "off")
    return mode == "host";
  return absl::InvalidArgumentError(
      "--comm-staging must be auto, host or off, got '" + mode + "'");
}

/// Several ranks on a backend other than the CPU's: the communicators move
/// host tensors (the CPU backend's), so a device's tensors go through the
/// host (`staged`, training runs) until NCCL moves them.
static absl::Status checkDeviceRanks(const BackendEntry &device, int64_t ranks,
                                     bool staged = false) {
  if (device.name == "cpu" || ranks <= 1 || staged)
    return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat(
      "--device=", device.name, " runs one rank here: ", ranks,
      " ranks need collectives and pipeline transfers on its memory, which "
      "this build runs only by staging them through the host in training "
      "(--comm-staging=host, not off); or run them with --device=cpu"));
}

/// The backend of --device, with the CPU flags.
static absl::StatusOr<std::unique_ptr<Backend>>
createBackend(const BackendEntry &entry, int threads) {
  DeviceOptions options{threads, !absl::GetFlag(FLAGS_no_arena), {}};
  if (entry.name == "cpu")
    options.settings = {
        {"gemm", absl::GetFlag(FLAGS_gemm)},
        {"blas-threads", absl::GetFlag(FLAGS_blas_threads) ? "1" : "0"}};
  else if (entry.name == "cuda")
    options.settings = {
        {"tf32", absl::GetFlag(FLAGS_tf32) ? "1" : "0"},
        {"gemm-staging", absl::GetFlag(FLAGS_gemm_staging) ? "1" : "0"},
        {"flash-kernels", absl::GetFlag(FLAGS_flash_kernels)}};
  return entry.create(options);
}

/// Joins the run `env` describes through `comm` (rank 0 hosts the store).
static absl::StatusOr<std::unique_ptr<DistributedJob>>
joinRun(const LaunchEnvironment &env, const CommunicatorEntry &comm,
        std::chrono::milliseconds timeout) {
  RendezvousOptions rendezvous;
  rendezvous.rank = env.rank;
  rendezvous.worldSize = env.worldSize;
  rendezvous.masterAddr = env.masterAddr;
  rendezvous.port = env.port;
  if (const char *ifname = std::getenv("GLOO_SOCKET_IFNAME"))
    rendezvous.interface = ifname;
  rendezvous.timeout = timeout;
  return comm.join(rendezvous, [](const std::string &message) {
    std::fflush(stdout);
    writeDiagnostic("error", message);
  });
}

/// The communicator `--comm` names when ranks talk to each other, null
/// when they do not. `auto` is a communicator of `device`'s own memory
/// (NCCL for CUDA) where the build has one that can run `localRanks` ranks
/// here and collectives are not staged through the host, else Gloo; a
/// device communicator named for another device, or one that cannot run
/// here, is an error saying why.
static absl::StatusOr<const CommunicatorEntry *>
communicatorIf(bool needed, const BackendEntry *device = nullptr,
               int64_t localRanks = 1) {
  if (!needed)
    return nullptr;
  std::string name = absl::GetFlag(FLAGS_comm);
  localRanks = std::max<int64_t>(localRanks, 1);
  if (name == "auto") {
    name = "gloo";
    std::string unusable; // why a device communicator cannot run here
    for (const std::string &candidate : communicatorNames()) {
      absl::StatusOr<const CommunicatorEntry *> entry =
          findCommunicator(candidate);
      if (!device || !entry.ok() || (*entry)->device != device->name ||
          (*entry)->stagedThroughHost ||
          absl::GetFlag(FLAGS_comm_staging) == "host")
        continue;
      std::string why;
      if (!(*entry)->available || (*entry)->available(localRanks, &why))
        return *entry;
      unusable = absl::StrCat(candidate, " cannot run here: ", why);
    }
    // The runtime built alone has no Gloo to fall back on.
    if (!unusable.empty() && !findCommunicator(name).ok())
      return absl::FailedPreconditionError(absl::StrCat(
          "--comm=auto: ", unusable, ", and this build has no gloo"));
  }
  absl::StatusOr<const CommunicatorEntry *> entry = findCommunicator(name);
  if (entry.ok() && (*entry)->create && (*entry)->device.empty() && device &&
      device->name != "cpu")
    return absl::FailedPreconditionError(absl::StrCat(
        "--comm=", name,
        " moves the cpu backend's tensors: run with --device=cpu"));
  if (!entry.ok() || (*entry)->device.empty())
    return entry;
  if (!device || device->name != (*entry)->device)
    return absl::FailedPreconditionError(
        absl::StrCat("--comm=", name, " moves the ", (*entry)->device,
                     " backend's tensors: run with --device=", (*entry)->device,
                     device ? "" : " (training runs only)"));
  if ((*entry)->stagedThroughHost && absl::GetFlag(FLAGS_comm_staging) == "off")
    return absl::FailedPreconditionError(absl::StrCat(
        "--comm=", name, " moves host copies of the ", (*entry)->device,
        " backend's tensors, which --comm-staging=off refuses"));
  std::string why;
  if ((*entry)->available && !(*entry)->available(localRanks, &why))
    return absl::FailedPreconditionError(
        absl::StrCat("--comm=", name, " cannot run here: ", why));
  return entry;
}

static int runParsed(int argc, char **argv);
void readFlagValues();

/// Runs this command again as `nproc` local ranks (each a child that knows
/// it is one) and returns the launcher's exit status.
static int launchLocalRanks(int64_t nproc, int argc, char **argv,
                            std::chrono::milliseconds timeout) {
  LocalLaunch launch;
  launch.nproc = nproc;
  launch.argv.assign(argv, argv + argc);
  launch.env.push_back({"MERAK_NPROC_CHILD", "1"});
  launch.grace = std::min<std::chrono::milliseconds>(
      timeout, std::chrono::milliseconds(5000));
  launch.runRank = [argc, argv] {
    readFlagValues();
    return runParsed(argc, argv);
  };
  return runLocalRanks(launch);
}

/// The end of a run that succeeded: a multi-process one waits for every
/// rank (`job->finish`) and exits at once; Gloo's groups close their
/// connections as the process ends.
static int endRun() {
  if (job) {
    if (absl::Status s = job->finish(); !s.ok())
      return fail(s);
    std::fflush(stdout);
    std::fflush(stderr);
    _exit(0);
  }
  return 0;
}

/// `--profile-hardware -o FILE`: every rank measures (HardwareProbe.h);
/// rank 0 prints what it found and writes the profile atomically.
static int profileHardware(int argc, char **argv, const LaunchEnvironment &env,
                           bool launching, int nproc,
                           std::chrono::milliseconds timeout) {
  const std::string output = absl::GetFlag(FLAGS_o);
  if (output.empty())
    return fail("--profile-hardware needs -o FILE, the JSON file to write "
                "the profile to");
  const double seconds = absl::GetFlag(FLAGS_profile_seconds);
  if (!(std::isfinite(seconds) && seconds > 0 && seconds <= 86400))
    return fail(absl::StrCat("--profile-seconds must be a number of seconds "
                             "above 0 and at most 86400, not ",
                             seconds));
  const bool reporter = env.rank == 0;
  if (reporter)
    if (absl::Status s = checkWritable(output, false); !s.ok())
      return fail(absl::StrCat("-o: ", s.message()));
  absl::StatusOr<const BackendEntry *> device =
      findBackend(absl::GetFlag(FLAGS_device));
  if (!device.ok())
    return fail(device.status());
  // Several GPUs measure their own library's collectives and transfers
  // (NCCL), as training runs them.
  absl::StatusOr<const CommunicatorEntry *> comm =
      communicatorIf((launching && nproc > 1) || env.worldSize > 1, *device,
                     launching ? nproc : env.localWorldSize);
  if (!comm.ok())
    return fail(comm.status());
  const CommunicatorEntry *commEntry = *comm;
  const bool deviceComm = commEntry && commEntry->create;
  if (absl::Status s = checkDeviceRanks(
          **device, launching ? int64_t(nproc) : env.worldSize, deviceComm);
      !s.ok())
    return fail(s);
  if (launching) {
    return launchLocalRanks(nproc, argc, argv, timeout);
  }

  std::unique_ptr<DistributedJob> joined;
  if (env.worldSize > 1) {
    absl::StatusOr<std::unique_ptr<DistributedJob>> made =
        joinRun(env, *commEntry, timeout);
    if (!made.ok())
      return fail(made.status());
    joined = *std::move(made);
    job = joined.get();
  }
  const int threads = kernelThreadsFor(env);
  absl::StatusOr<std::unique_ptr<Backend>> backend =
      createBackend(**device, threads);
  if (!backend.ok())
    return fail(backend.status());

  HardwareProbeOptions options;
  if (deviceComm && job) {
    Backend &probed = **backend;
    options.communicator = [commEntry, &probed, timeout](const Program &p) {
      return commEntry->create(*job, p, probed, timeout);
    };
    if (commEntry->createLink)
      options.link = [commEntry, &probed, timeout](
                         const std::vector<std::pair<int64_t, int64_t>> &d) {
        return commEntry->createLink(*job, d, probed, timeout);
      };
  }
  options.seconds = seconds;
  options.name = absl::GetFlag(FLAGS_profile_name);
  options.p2p = absl::GetFlag(FLAGS_p2p) == "shm" ? PeerTransport::SharedMemory
                                                  : PeerTransport::Gloo;
  options.localWorldSize =
      env.localWorldSize > 0 ? env.localWorldSize : env.worldSize;
  if (reporter) {
    options.progress = [](const std::string &line) {
      std::printf("%s\n", line.c_str());
      std::fflush(stdout);
    };
    std::printf("measuring '%s' on %lld rank%s (kernel threads: %s each), "
                "within about %g s\n",
                (*backend)->name().c_str(), (long long)env.worldSize,
                env.worldSize == 1 ? "" : "s",
                threads > 0 ? std::to_string(threads).c_str() : "default",
                seconds);
    std::fflush(stdout);
  }
  absl::StatusOr<merak::HardwareProfile> profile =
      probeHardware(**backend, job, options);
  if (!profile.ok())
    return fail(profile.status());
  if (reporter) {
    // What ran the kernels, and how often each library did.
    if ((*device)->libraries)
      std::fputs((*device)->libraries().c_str(), stdout);
    std::fflush(stdout);
    std::string text = merak::printHardwareProfile(*profile);
    if (absl::Status s =
            writeFileAtomically(output, {{text.data(), text.size()}});
        !s.ok())
      return fail(absl::StrCat("-o: ", s.message()));
    if (env.worldSize == 1)
      note("one process: the collective and link figures are the defaults; "
           "--nproc N measures them");
    note("hardware profile written to " + output);
  }
  return endRun();
}

/// Parses the flags into the globals above; `positional` gets the other
/// arguments. Flag names may be spelt with dashes (`--log-jsonl`), as the
/// help shows them, or with underscores. Returns an exit status when the
/// process should end, else -1.
/// The compiled programs of `inputFile`: read from a rank-program file
/// (told by its content; a file named .mrp that is none gets the format's
/// error), else lowered from a module starting at `entry` (MLIR
/// diagnostics print as file:line:col: error, and the status then has an
/// empty message). `fromFile` says which.
static absl::StatusOr<std::unique_ptr<CompiledPlan>>
openCompiledPlan(const std::string &entry, bool &fromFile) {
  fromFile = false;
  std::ifstream probe(inputFile, std::ios::binary);
  char prefix[8] = {};
  probe.read(prefix, sizeof(prefix));
  if (isRankProgramFile(std::string_view(prefix, size_t(probe.gcount()))) ||
      absl::EndsWith(inputFile, ".mrp")) {
    fromFile = true;
    return openRankProgramFile(inputFile);
  }
#if MERAK_HAVE_COMPILER
  return compileModuleFile(inputFile, entry, rankPrefix);
#else
  (void)entry;
  return absl::InvalidArgumentError(
      inputFile + " is not a rank-program file, and this merak-exec was built "
                  "without the compiler (MERAK_COMPILER=OFF): compile it with "
                  "merak-translate --merak-to-rank-program");
#endif
}

/// The prompts of `path`: one per line, token ids separated by spaces;
/// blank lines are skipped.
static absl::StatusOr<std::vector<std::vector<int64_t>>>
readPrompts(const std::string &path) {
  std::ifstream in(path);
  if (!in)
    return absl::NotFoundError("--prompts: cannot open " + path);
  std::vector<std::vector<int64_t>> prompts;
  std::string line;
  for (int lineNo = 1; std::getline(in, line); ++lineNo) {
    std::vector<int64_t> ids;
    for (absl::string_view word :
         absl::StrSplit(line, absl::ByAnyChar(" \t\r"), absl::SkipEmpty())) {
      int64_t id;
      if (!absl::SimpleAtoi(word, &id))
        return absl::InvalidArgumentError(
            absl::StrCat(path, ":", lineNo, ": '", word,
                         "' is not a token id (an integer)"));
      ids.push_back(id);
    }
    if (!ids.empty())
      prompts.push_back(std::move(ids));
  }
  if (prompts.empty())
    return absl::InvalidArgumentError("--prompts: " + path + " has no prompt");
  return prompts;
}

/// `merak-exec gen.mlir --generate --init weights --prompts FILE`: on one
/// process, or on the ranks of a tensor-parallel plan (`--nproc N`, or a
/// launcher's); rank 0 prints each prompt's tokens and the throughput.
static int generateText(const LaunchEnvironment &env, bool launching, int nproc,
                        int argc, char **argv,
                        std::chrono::milliseconds timeout) {
  if (isTorchScriptArchive(inputFile))
    return fail(inputFile + " is a TorchScript archive: compile it with "
                            "merak-opt --merak-kv-cache first");
  if (initFile.empty())
    return fail("--generate needs the weights: --init model.pt, weights or a "
                "checkpoint");
  std::string promptsFile = absl::GetFlag(FLAGS_prompts);
  if (promptsFile.empty())
    return fail("--generate needs --prompts FILE (token ids, one prompt per "
                "line)");
  absl::StatusOr<std::vector<std::vector<int64_t>>> prompts =
      readPrompts(promptsFile);
  if (!prompts.ok())
    return fail(prompts.status());
  GenerationRequest request;
  request.prompts = *std::move(prompts);
  request.maxNewTokens = absl::GetFlag(FLAGS_max_new_tokens);
  request.sampling.temperature = absl::GetFlag(FLAGS_temperature);
  request.sampling.topK = absl::GetFlag(FLAGS_top_k);
  request.sampling.topP = absl::GetFlag(FLAGS_top_p);
  request.seed = seedFlag.value_or(0);
  for (const std::string &word : absl::GetFlag(FLAGS_stop_tokens)) {
    int64_t id;
    if (!absl::SimpleAtoi(word, &id))
      return fail("--stop-tokens: '" + word + "' is not a token id");
    request.stopTokens.push_back(id);
  }
  if (absl::Status s = checkSampling(request.sampling); !s.ok())
    return fail(s);
  // @prefill and @decode: lowered from the module, or read from a
  // rank-program file written from it.
  bool fromFile = false;
  absl::StatusOr<std::unique_ptr<CompiledPlan>> opened =
      openCompiledPlan("", fromFile);
  if (!opened.ok())
    return opened.status().message().empty() ? 1 : fail(opened.status());
  std::unique_ptr<CompiledPlan> compiled = *std::move(opened);
  if (!compiled->decode())
    return fail(inputFile + " holds @" + compiled->step().function +
                ", not a text generator (@prefill and @decode): compile the "
                "model with merak-opt --merak-kv-cache");
  Program &prefill = compiled->step(), &decode = *compiled->decode();
  if (absl::Status s = checkProcessCount(*compiled, launching, nproc,
                                         env.worldSize, env.launcher);
      !s.ok())
    return fail(s);
  absl::StatusOr<const BackendEntry *> device =
      findBackend(absl::GetFlag(FLAGS_device));
  if (!device.ok())
    return fail(device.status());
  if (absl::Status s = checkDeviceRanks(**device, prefill.worldSize()); !s.ok())
    return fail(s);
  absl::StatusOr<const CommunicatorEntry *> comm =
      communicatorIf(prefill.worldSize() > 1);
  if (!comm.ok())
    return fail(comm.status());
  if (launching)
    return launchLocalRanks(nproc, argc, argv, timeout);

  const int64_t rank = env.rank;
  absl::StatusOr<bool> fuse = elementwiseFusion();
  if (!fuse.ok())
    return fail(fuse.status());
  for (Program *p : {&prefill, &decode})
    if (absl::Status s = bindToRank(
            *p, rank, BindOptions(CollectiveMode::Overlapped, *fuse));
        !s.ok())
      return fail(s);
  if (prefill.groups.size() != decode.groups.size())
    return fail("@prefill and @decode communicate over different groups");
  for (size_t g = 0; g < prefill.groups.size(); ++g)
    if (prefill.groups[g].meshAxes != decode.groups[g].meshAxes)
      return fail("@prefill and @decode communicate over different groups");
  std::unique_ptr<DistributedJob> joined;
  std::unique_ptr<Communicator> communicator;
  if (env.worldSize > 1) {
    absl::StatusOr<std::unique_ptr<DistributedJob>> made =
        joinRun(env, **comm, timeout);
    if (!made.ok())
      return fail(made.status());
    joined = *std::move(made);
    job = joined.get();
    absl::StatusOr<std::unique_ptr<Communicator>> c =
        job->createGlooCommunicator(prefill);
    if (!c.ok())
      return fail(c.status());
    communicator = *std::move(c);
  }
  absl::StatusOr<std::unique_ptr<Backend>> backend =
      createBackend(**device, kernelThreadsFor(env));
  if (!backend.ok())
    return fail(backend.status());
  for (const Program *p : {&prefill, &decode})
    if (absl::Status s = checkBackendSupports(*p, **backend); !s.ok())
      return fail(s);
  absl::StatusOr<std::unique_ptr<Generator>> generator =
      Generator::create(prefill, decode, **backend, communicator.get());
  if (!generator.ok())
    return fail(generator.status());
  absl::StatusOr<std::unique_ptr<GlobalState>> global =
      openStateSource(initFile, false);
  if (!global.ok())
    return fail(global.status());
  std::map<std::string, HostTensor> weights;
  for (const Program *p : {&prefill, &decode}) {
    absl::StatusOr<std::map<std::string, HostTensor>> shards =
        shardState(*p, **global);
    if (!shards.ok())
      return fail(shards.status());
    weights.merge(*shards);
  }
  if (absl::Status s = (*generator)->loadWeights(weights, (*global)->name());
      !s.ok())
    return fail(s);
  absl::StatusOr<GenerationResult> result = (*generator)->generate(request);
  if (!result.ok())
    return fail(result.status());
  if (rank == 0) {
    int64_t total = 0;
    for (size_t i = 0; i < result->tokens.size(); ++i) {
      std::printf("prompt %zu (%s):", i + 1, result->finish[i].c_str());
      for (int64_t t : result->tokens[i])
        std::printf(" %lld", (long long)t);
      std::printf("\n");
      total += int64_t(result->tokens[i].size());
    }
    double seconds = result->prefillSeconds + result->decodeSeconds;
    std::printf(
        "generated %lld tokens for %zu prompts in %.3f s: %.1f tokens/s "
        "(prefill of %lld positions %.1f ms, %lld decode steps of %.2f ms)\n",
        (long long)total, result->tokens.size(), seconds,
        seconds > 0 ? double(total) / seconds : 0.0,
        (long long)(*generator)->window(), result->prefillSeconds * 1e3,
        (long long)result->decodeSteps,
        result->decodeSteps
            ? result->decodeSeconds * 1e3 / double(result->decodeSteps)
            : 0.0);
  }
  return endRun();
}

int parseFlags(int argc, char **argv, std::vector<std::string> &positional) {
  std::vector<std::string> args = underscoreFlagNames(argc, argv);
  std::vector<char *> pointers;
  for (std::string &arg : args)
    pointers.push_back(arg.data());
  auto names = [](const std::vector<std::string> &list) {
    return list.empty() ? std::string("none") : absl::StrJoin(list, ", ");
  };
  absl::SetProgramUsageMessage(absl::StrCat(
      "runs a merak training step: merak-exec <step.mlir or plan.mrp> "
      "[flags]\n  backends in this build: ",
      names(backendNames()), "; communicators: ", names(communicatorNames()),
      "\n  compiler: ",
      MERAK_HAVE_COMPILER ? "yes (runs .mlir and .mrp)"
                          : "no (runs .mrp files only)"));
  std::vector<char *> rest =
      absl::ParseCommandLine(int(pointers.size()), pointers.data());
  for (size_t i = 1; i < rest.size(); ++i)
    positional.emplace_back(rest[i]);
  readFlagValues();
  return -1;
}

/// Sets the flags' values above from the parsed flags: after parsing, and
/// again in a rank forked from the launcher, whose run changed some of
/// them (--resume resolved to a directory's last checkpoint).
void readFlagValues() {
  entry = absl::GetFlag(FLAGS_entry);
  initFile = absl::GetFlag(FLAGS_init);
  resumeFile = absl::GetFlag(FLAGS_resume);
  dataFile = absl::GetFlag(FLAGS_data);
  tokensFile = absl::GetFlag(FLAGS_tokens);
  tokenDType = absl::GetFlag(FLAGS_token_dtype);
  seqLen = absl::GetFlag(FLAGS_seq_len);
  batchSize = absl::GetFlag(FLAGS_batch);
  steps = absl::GetFlag(FLAGS_steps);
  seedFlag = absl::GetFlag(FLAGS_seed);
  learningRate = absl::GetFlag(FLAGS_lr);
  lrSchedule = absl::GetFlag(FLAGS_lr_schedule);
  warmupSteps = absl::GetFlag(FLAGS_warmup_steps);
  minLr = absl::GetFlag(FLAGS_min_lr);
  decaySteps = absl::GetFlag(FLAGS_decay_steps);
  saveFile = absl::GetFlag(FLAGS_save);
  saveDir = absl::GetFlag(FLAGS_save_dir);
  saveEvery = absl::GetFlag(FLAGS_save_every);
  keepLast = absl::GetFlag(FLAGS_keep_last);
  evalTokensFile = absl::GetFlag(FLAGS_eval_tokens);
  evalDataFile = absl::GetFlag(FLAGS_eval_data);
  evalEvery = absl::GetFlag(FLAGS_eval_every);
  evalBatches = absl::GetFlag(FLAGS_eval_batches);
  logJsonl = absl::GetFlag(FLAGS_log_jsonl);
  skipNonFinite = absl::GetFlag(FLAGS_skip_nonfinite);
  checkNumerics = absl::GetFlag(FLAGS_check_numerics);
  profileJsonFile = absl::GetFlag(FLAGS_profile_json);
  profileOps = absl::GetFlag(FLAGS_profile) || !profileJsonFile.empty();
  nprocFlag = absl::GetFlag(FLAGS_nproc);
  commTimeout = absl::GetFlag(FLAGS_comm_timeout);
  syncCollectives = absl::GetFlag(FLAGS_sync_collectives);
  traceFile = absl::GetFlag(FLAGS_trace);
  pipelineDelay = absl::GetFlag(FLAGS_pipeline_delay);
  printProgramOnly = absl::GetFlag(FLAGS_print_program);
}

/// The command line's positional arguments (parseFlags).
static std::vector<std::string> positionalArgs;

int main(int argc, char **argv) {
  registerBuiltinComponents();
  // A file-size limit makes a write fail with EFBIG, reported like a full
  // disk, instead of killing the process mid-save.
  std::signal(SIGXFSZ, SIG_IGN);
  // Gloo writes to its sockets with writev, which raises SIGPIPE when the
  // peer has died: ignored, the write fails and the error names the peer.
  std::signal(SIGPIPE, SIG_IGN);
  if (int status = parseFlags(argc, argv, positionalArgs); status >= 0)
    return status;
  return runParsed(argc, argv);
}

/// The run the flags ask for: in the launcher of `--nproc` ranks, and
/// again in each rank (executed anew, or forked from the launcher).
static int runParsed(int argc, char **argv) {
  const auto processStart = std::chrono::steady_clock::now();
  auto msSinceStart = [&] {
    return std::chrono::duration<double, std::milli>(
               std::chrono::steady_clock::now() - processStart)
        .count();
  };
  const std::vector<std::string> &positional = positionalArgs;
  const bool profilingHardware = absl::GetFlag(FLAGS_profile_hardware);
  if (profilingHardware && !positional.empty())
    return fail("--profile-hardware measures this machine and runs no "
                "program: drop '" +
                positional[0] + "'");
  if (!profilingHardware && positional.size() != 1)
    return fail(positional.empty()
                    ? "give the program to run: a module (step.mlir) or a "
                      "rank-program file (plan.mrp)"
                    : "give one program to run, not " +
                          std::to_string(positional.size()));
  if (!profilingHardware)
    inputFile = positional[0];

  // Which rank this process is: --nproc starts the ranks (this process
  // only launches); a launcher's variables make it one of them.
  bool launchedByNproc = std::getenv("MERAK_NPROC_CHILD") != nullptr;
  bool launching = nprocFlag.has_value() && !launchedByNproc;
  const int nproc = nprocFlag.value_or(0);
  if (nprocFlag && nproc < 1)
    return fail(absl::StrCat("--nproc must be at least 1, not ", nproc));
  if (std::optional<int> threads = absl::GetFlag(FLAGS_threads);
      threads && *threads < 1)
    return fail(absl::StrCat("--threads must be at least 1, not ", *threads));
  if (seqLen < 0)
    return fail(absl::StrCat(
        "--seq-len must be at least 0 (0: the program's), not ", seqLen));
  if (batchSize < 0)
    return fail(absl::StrCat(
        "--batch must be at least 0 (0: the program's), not ", batchSize));
  LaunchEnvironment env;
  if (!launching) {
    absl::StatusOr<std::optional<LaunchEnvironment>> found =
        readLaunchEnvironment(
            [](const char *name) { return std::getenv(name); });
    if (!found.ok())
      return fail(found.status());
    if (*found)
      env = **found;
  }
  if (env.worldSize > 1)
    rankPrefix = "rank " + std::to_string(env.rank) + ": ";
  const bool reporter = env.rank == 0; // prints steps, logs, notes
  // Converted to milliseconds below: finite, and at most about 30 years.
  if (!(std::isfinite(commTimeout) && commTimeout > 0 && commTimeout <= 1e9))
    return fail(absl::StrCat("--comm-timeout must be a number of seconds above "
                             "0 and at most 1e9, not ",
                             commTimeout));
  auto timeout = std::chrono::milliseconds(int64_t(commTimeout * 1000));
  const std::string p2p = absl::GetFlag(FLAGS_p2p);
  if (p2p != "auto" && p2p != "gloo" && p2p != "shm" && p2p != "nccl" &&
      p2p != "gloo-channels" && p2p != "shm-channels")
    return fail(
        absl::StrCat("--p2p must be auto, gloo, shm, nccl, gloo-channels or "
                     "shm-channels, not '",
                     p2p, "'"));
  if (profilingHardware)
    return profileHardware(argc, argv, env, launching, nproc, timeout);
  if (absl::GetFlag(FLAGS_generate))
    return generateText(env, launching, nproc, argc, argv, timeout);

  // The compiled programs: read from a rank-program file, or lowered here
  // from a module.
  if (!absl::EndsWith(inputFile, ".mrp") && isTorchScriptArchive(inputFile))
    return fail(inputFile + " is a TorchScript archive: import it and build "
                            "its step with merak-opt first");
  bool fromFile = false;
  absl::StatusOr<std::unique_ptr<CompiledPlan>> opened =
      openCompiledPlan(entry, fromFile);
  if (!opened.ok())
    return opened.status().message().empty() ? 1 : fail(opened.status());
  std::unique_ptr<CompiledPlan> compiled = *std::move(opened);
  if (fromFile && !entry.empty() && entry != compiled->step().function)
    return fail(inputFile + " holds @" + compiled->step().function + ", not @" +
                entry +
                ": compile it with merak-translate "
                "--merak-rank-program-entry=" +
                entry);
  const double programsReadyMs = msSinceStart();
  Program &program = compiled->step();
  const bool pipelined = compiled->pipelined();
  const int64_t pp = compiled->pipelineRanks();

  // The mesh (times the pipeline ranks) decides how many processes run the
  // program.
  const int64_t stageMeshSize = program.worldSize();
  const int64_t meshSize = stageMeshSize * pp;
  const CollectiveMode collectiveMode =
      syncCollectives ? CollectiveMode::Blocking : CollectiveMode::Overlapped;
  const bool printFused = absl::GetFlag(FLAGS_print_fused_kernels);
  const std::vector<std::string> compileArchs =
      absl::GetFlag(FLAGS_compile_fused_kernels);
  absl::StatusOr<bool> fuse = elementwiseFusion();
  if (!fuse.ok())
    return fail(fuse.status());
  const BindOptions binding(collectiveMode,
                            *fuse || printFused || !compileArchs.empty());
  if (!compileArchs.empty()) {
    if (env.worldSize == meshSize && env.rank != 0)
      return 0;
    return compileFusedKernels(*compiled, binding, compileArchs);
  }
  if (printProgramOnly || printFused) {
    // Without the ranks running, rank 0's programs.
    if (env.worldSize == meshSize && env.rank != 0)
      return 0;
    absl::StatusOr<std::string> listing = listRankZero(
        *compiled, binding, printFused ? listFusedKernels : printProgram);
    if (!listing.ok())
      return listing.status().message().empty() ? 1 : fail(listing.status());
    std::fputs(listing->c_str(), stdout);
    return 0;
  }
  if (absl::Status s = checkProcessCount(*compiled, launching, nproc,
                                         env.worldSize, env.launcher);
      !s.ok())
    return fail(s);
  const int64_t meshRank = env.rank % stageMeshSize;
  const int64_t pipelineRank = env.rank / stageMeshSize;
  if (absl::Status s = bindToRank(program, meshRank, binding); !s.ok())
    return fail(s);
  std::optional<PipelinePlan> plan;
  Program pipelineGroups;
  if (pipelined && !launching) {
    absl::StatusOr<PipelinePlan> mine = compiled->pipelinePlan(pipelineRank);
    if (!mine.ok())
      return mine.status().message().empty() ? 1 : fail(mine.status());
    plan = *std::move(mine);
    absl::StatusOr<Program> groups =
        bindPipelineToRank(*plan, meshRank, stageMeshSize, binding);
    if (!groups.ok())
      return fail(groups.status());
    pipelineGroups = *std::move(groups);
  }
  std::optional<InjectedDelay> delay;
  if (!pipelineDelay.empty()) {
    InjectedDelay d;
    long long stage;
    double fraction, probability = 1;
    int n = std::sscanf(pipelineDelay.c_str(), "%lld:%lf:%lf", &stage,
                        &fraction, &probability);
    if (n < 2 || stage < 0 || !std::isfinite(fraction) || fraction < 0 ||
        !(probability >= 0 && probability <= 1))
      return fail("--pipeline-delay must be STAGE:FRACTION[:PROBABILITY], "
                  "not '" +
                  pipelineDelay + "'");
    if (!pipelined)
      return fail("--pipeline-delay needs a pipeline plan");
    d.stage = stage, d.fraction = fraction, d.probability = probability;
    delay = d;
  }
  if (!traceFile.empty() && !pipelined)
    return fail("--trace needs a pipeline plan (--merak-pipeline-schedule)");

  // Options that depend on the program.
  if (steps < 1)
    return fail(absl::StrCat("--steps must be at least 1, not ", steps));
  const uint64_t seed = seedFlag.value_or(0);
  if (seed >= (uint64_t(1) << 31))
    return fail(absl::StrCat("--seed must be below 2^31, not ", seed));
  if (!initFile.empty() && !resumeFile.empty())
    return fail("give --init or --resume, not both (a checkpoint holds the "
                "weights)");
  if (absl::Status s = resolveCheckpointDirectory(reporter && !launching);
      !s.ok())
    return fail(s);
  if (!dataFile.empty() && !tokensFile.empty())
    return fail("give --data or --tokens, not both");
  if (!evalDataFile.empty() && !evalTokensFile.empty())
    return fail("give --eval-data or --eval-tokens, not both");
  if (evalEvery < 0)
    return fail(
        absl::StrCat("--eval-every must be at least 0, not ", evalEvery));
  if (evalBatches < 1)
    return fail(
        absl::StrCat("--eval-batches must be at least 1, not ", evalBatches));
  if (evalEvery > 0 && evalDataFile.empty() && evalTokensFile.empty())
    return fail("--eval-every needs validation data: --eval-tokens or "
                "--eval-data");
  absl::StatusOr<LearningRateSchedule> schedule = learningRateSchedule(
      {lrSchedule, learningRate, warmupSteps, minLr, decaySteps, steps},
      program);
  if (!schedule.ok())
    return fail(schedule.status());
  std::string stateSource = !resumeFile.empty() ? resumeFile : initFile;
  if (!stateSource.empty())
    if (absl::Status s = checkStateSource(stateSource); !s.ok())
      return fail(s);
  // Outputs: a path that cannot be written stops the run now, not after
  // its last step. Every rank writes its shard beside --save; rank 0 the
  // trace and the log.
  auto checkOutput = [&](const char *flag, const std::string &path,
                         bool appends) {
    absl::Status s = checkWritable(path, appends);
    return s.ok()
               ? s
               : absl::Status(s.code(), absl::StrCat(flag, ": ", s.message()));
  };
  if (!saveFile.empty())
    if (absl::Status s = checkOutput("--save", saveFile, false); !s.ok())
      return fail(s);
  if (!saveDir.empty())
    if (absl::Status s =
            checkOutput("--save-dir", stepCheckpointPath(saveDir, 0), false);
        !s.ok())
      return fail(s);
  if (!profileJsonFile.empty() && reporter)
    if (absl::Status s = checkOutput("--profile-json", profileJsonFile, false);
        !s.ok())
      return fail(s);
  if (!traceFile.empty() && reporter)
    if (absl::Status s = checkOutput("--trace", traceFile, false); !s.ok())
      return fail(s);
  if (!logJsonl.empty() && reporter)
    if (absl::Status s = checkOutput("--log-jsonl", logJsonl, true); !s.ok())
      return fail(s);
  if (absl::Status s = checkMemoryPlan(program, machineMemoryBytes()); !s.ok())
    return fail(s);

  absl::StatusOr<const BackendEntry *> device =
      findBackend(absl::GetFlag(FLAGS_device));
  if (!device.ok())
    return fail(device.status());
  const BackendEntry *deviceEntry = *device;
  absl::StatusOr<bool> staged = stagesThroughHost(*deviceEntry);
  if (!staged.ok())
    return fail(staged.status());
  // A device communicator's collectives run within a stage's mesh: only
  // the ranks of one mesh need a device each (a pipeline's stages may
  // share one, their transfers through --p2p=shm).
  absl::StatusOr<const CommunicatorEntry *> comm = communicatorIf(
      meshSize > 1, deviceEntry,
      std::min<int64_t>(launching ? nproc : env.localWorldSize, stageMeshSize));
  if (!comm.ok())
    return fail(comm.status());
  const CommunicatorEntry *commEntry = *comm;
  // A communicator of the device's memory (NCCL) runs the collectives, and
  // the pipeline transfers too unless --p2p names a host transport (they
  // are staged through the host then).
  const bool deviceComm = commEntry && commEntry->create;
  const bool deviceLink = pipelined && deviceComm && commEntry->createLink &&
                          (p2p == "auto" || p2p == "nccl");
  // --p2p=shm on a device with its own (CUDA IPC): the device's memory to
  // the peer's, whatever runs the collectives.
  const bool sharedDeviceLink =
      pipelined && p2p == "shm" && deviceEntry->createSharedMemoryLink;
  // Transfers on the device communicator pair ranks of different stages,
  // which then need a device each too.
  if (std::string why;
      deviceLink && commEntry->available &&
      !commEntry->available(launching ? nproc : env.localWorldSize, &why))
    return fail(absl::FailedPreconditionError(absl::StrCat(
        "pipeline transfers on ", commEntry->name, " (--p2p=", p2p, "): ", why,
        "; --p2p=shm moves them between ranks that share a ", deviceEntry->name,
        " device")));
  if (p2p == "nccl" && pipelined && meshSize > 1 && !deviceLink)
    return fail(absl::FailedPreconditionError(absl::StrCat(
        "--p2p=nccl moves pipeline transfers on NCCL, which runs with "
        "--device=cuda --comm=nccl; this run's collectives are on ",
        commEntry ? commEntry->name : std::string("none"))));
  if (absl::Status s = checkDeviceRanks(
          *deviceEntry, meshSize,
          *staged ||
              (deviceComm && (!pipelined || deviceLink || sharedDeviceLink)));
      !s.ok())
    return fail(s);

  if (launching) {
    return launchLocalRanks(nproc, argc, argv, timeout);
  }

  // Local ranks share the machine's cores unless told otherwise.
  const int kernelThreads = kernelThreadsFor(env);

  std::unique_ptr<DistributedJob> joined;
  // With --comm-staging: the host backend the collectives run on, and the
  // copies (declared first: the communicator and link refer to them).
  std::unique_ptr<Backend> hostBackend;
  std::unique_ptr<Staging> staging;
  std::unique_ptr<Communicator> communicator;
  std::unique_ptr<PeerLink> link;
  if (env.worldSize > 1) {
    absl::StatusOr<std::unique_ptr<DistributedJob>> made =
        joinRun(env, *commEntry, timeout);
    if (!made.ok())
      return fail(made.status());
    joined = *std::move(made);
    job = joined.get();
    if (pipelined && !deviceLink && !sharedDeviceLink) {
      absl::StatusOr<std::unique_ptr<PeerLink>> made =
          p2p == "gloo-channels"
              ? job->createChannelLink(pipelineDirections(*plan, stageMeshSize))
          : p2p == "shm-channels"
              ? job->createRingChannelLink(
                    pipelineDirections(*plan, stageMeshSize))
              : job->createPeerLink(p2p == "shm" ? PeerTransport::SharedMemory
                                                 : PeerTransport::Gloo);
      if (!made.ok())
        return fail(made.status());
      link = *std::move(made);
    }
    if (!deviceComm) {
      absl::StatusOr<std::unique_ptr<Communicator>> comm =
          job->createGlooCommunicator(pipelined ? pipelineGroups : program);
      if (!comm.ok())
        return fail(comm.status());
      communicator = *std::move(comm);
    }
  }

  absl::StatusOr<std::unique_ptr<Backend>> created =
      createBackend(*deviceEntry, kernelThreads);
  if (!created.ok())
    return fail(created.status());
  std::unique_ptr<Backend> backend = *std::move(created);
  if (deviceComm && env.worldSize > 1) {
    absl::StatusOr<std::unique_ptr<Communicator>> made = commEntry->create(
        *job, pipelined ? pipelineGroups : program, *backend, timeout);
    if (!made.ok())
      return fail(made.status());
    communicator = *std::move(made);
  }
  // Pipeline transfers on the device's library (declared after the
  // backend: its thread uses the device until it goes).
  std::unique_ptr<PeerLink> deviceLinkHolder;
  if ((deviceLink || sharedDeviceLink) && env.worldSize > 1) {
    const auto directions = pipelineDirections(*plan, stageMeshSize);
    absl::StatusOr<std::unique_ptr<PeerLink>> made =
        sharedDeviceLink
            ? deviceEntry->createSharedMemoryLink(*job, directions, *backend,
                                                  timeout)
            : commEntry->createLink(*job, directions, *backend, timeout);
    if (!made.ok())
      return fail(made.status());
    deviceLinkHolder = *std::move(made);
  }
  // The plan's all-reduce algorithm (--merak-comm-algorithm), as the
  // communicator runs it.
  const std::optional<MeshLayout> &mesh =
      (pipelined ? pipelineGroups : program).mesh;
  if (reporter && communicator && mesh && !mesh->allReduceAlgorithm.empty()) {
    bool tree = mesh->allReduceAlgorithm == "tree";
    const char *ncclAlgo = std::getenv("NCCL_ALGO");
    note(absl::StrCat(
        "all-reduces as ", tree ? "trees" : "rings",
        " (--merak-comm-algorithm): ",
        deviceComm ? absl::StrCat(commEntry->name,
                                  " with NCCL_ALGO=", ncclAlgo ? ncclAlgo : "")
        : tree     ? std::string("Gloo's halving-doubling")
                   : std::string("Gloo's ring")));
  }
  if (*staged && env.worldSize > 1 && (!deviceComm || link)) {
    absl::StatusOr<const BackendEntry *> cpu = findBackend("cpu");
    if (!cpu.ok())
      return fail(absl::FailedPreconditionError(absl::StrCat(
          "--comm-staging=host needs the CPU backend, which this build "
          "does not have: ",
          cpu.status().message())));
    absl::StatusOr<std::unique_ptr<Backend>> host =
        createBackend(**cpu, kernelThreads);
    if (!host.ok())
      return fail(host.status());
    hostBackend = *std::move(host);
    staging = std::make_unique<Staging>(Staging{*backend, *hostBackend});
    if (!deviceComm)
      communicator = makeStagedCommunicator(std::move(communicator), *staging);
    if (link)
      link = makeStagedPeerLink(std::move(link), *staging);
  }
  // Every op of every program this rank runs has a kernel, or the run
  // stops here, before the first step.
  if (plan) {
    for (const StageFunction &f : plan->functions)
      if (absl::Status s = checkBackendSupports(f.program, *backend); !s.ok())
        return fail(s);
  } else if (absl::Status s = checkBackendSupports(program, *backend);
             !s.ok()) {
    return fail(s);
  }

  absl::StatusOr<RunInputs> inputs =
      runInputs(program, plan ? plan->microbatches : 1);
  if (!inputs.ok())
    return fail(inputs.status());
  std::unique_ptr<StepRunner> runner;
  const PipelineExecutor *pipeline = nullptr;
  if (plan) {
    absl::StatusOr<std::unique_ptr<PipelineExecutor>> made =
        PipelineExecutor::create(*plan, *backend, communicator.get(),
                                 deviceLinkHolder ? deviceLinkHolder.get()
                                                  : link.get(),
                                 stageMeshSize, meshRank);
    if (!made.ok())
      return fail(made.status());
    if (delay) {
      delay->seed = seed;
      (*made)->setInjectedDelay(*delay);
    }
    pipeline = made->get();
    runner = pipelineRunner(*std::move(made), *inputs);
  } else {
    absl::StatusOr<std::unique_ptr<Executor>> made =
        Executor::create(program, *backend, communicator.get());
    if (!made.ok())
      return fail(made.status());
    runner = singleProgramRunner(*std::move(made), *inputs);
  }
  runner->setCheckNumerics(checkNumerics);

  // Initial state: every rank reads the global tensors and keeps its shard.
  absl::StatusOr<LoadedState> loaded =
      loadRunState(*runner, program, initFile, resumeFile);
  if (!loaded.ok())
    return fail(loaded.status());
  uint64_t runSeed = seed;
  if (loaded->seed) {
    if (!seedFlag)
      runSeed = *loaded->seed;
    else if (*loaded->seed != runSeed && reporter)
      note("--seed " + std::to_string(runSeed) +
           " differs from the checkpoint's seed " +
           std::to_string(*loaded->seed) + "; data and dropout follow --seed");
  }

  // Inputs: sources produce global batches; each rank keeps its shard.
  absl::StatusOr<std::unique_ptr<BatchSource>> global =
      openRunBatches(inputs->global, {dataFile, tokensFile, tokenDType, seqLen,
                                      batchSize, steps, runSeed});
  if (!global.ok())
    return fail(global.status());
  std::unique_ptr<BatchSource> source = runner->batchesFrom(*std::move(global));
  std::unique_ptr<BatchSource> evalSource;
  if (!evalDataFile.empty() || !evalTokensFile.empty()) {
    absl::StatusOr<std::unique_ptr<BatchSource>> opened = openRunBatches(
        inputs->global,
        {evalDataFile, evalTokensFile, tokenDType, seqLen, batchSize,
         evalBatches, runSeed, TokenWindows::Sequential});
    if (!opened.ok())
      return fail(
          absl::StrCat(evalDataFile.empty() ? "--eval-tokens" : "--eval-data",
                       ": ", opened.status().message()));
    evalSource = runner->batchesFrom(*std::move(opened));
  }

  std::unique_ptr<StepReporter> report;
  TrainOptions options;
  options.firstStep = loaded->doneSteps + 1;
  options.lastStep = steps;
  options.doneUpdates = loaded->doneUpdates;
  options.seed = runSeed;
  options.trains = program.trains();
  options.schedule = *schedule;
  options.skipNonFinite = skipNonFinite;
  // Loss scaling: from the checkpoint resumed, else the IR's first scale.
  std::optional<LossScaleState> lossScale;
  if (const Argument *scaleArg =
          program.findArgument(ArgumentRole::LossScale)) {
    lossScale.emplace();
    lossScale->scaling = scaleArg->lossScaling;
    lossScale->scale = scaleArg->lossScaling.init;
    if (loaded->lossScale && scaleArg->lossScaling.dynamic) {
      lossScale->scale = *loaded->lossScale;
      lossScale->goodSteps = loaded->lossScaleGoodSteps;
    }
    options.lossScale = &*lossScale;
  }
  auto lossScaleMetadata = [&]() {
    std::map<std::string, std::string> metadata;
    if (lossScale) {
      char text[32];
      std::snprintf(text, sizeof(text), "%.17g", lossScale->scale);
      metadata["loss_scale"] = text;
      metadata["loss_scale_good_steps"] = std::to_string(lossScale->goodSteps);
    }
    return metadata;
  };
  options.profile = profileOps;
  options.evalEvery = evalEvery;
  options.evalBatches = evalBatches;
  options.evalSource = evalSource.get();
  // Periodic checkpoints; rank 0 then removes the ones beyond --keep-last
  // and what killed saves left.
  auto saveToDirectory = [&](int64_t step, int64_t updates) -> absl::Status {
    std::string path = stepCheckpointPath(saveDir, step);
    if (absl::Status s = saveRunCheckpoint(
            *runner, program, plan ? &*plan : nullptr, job, path, step, updates,
            runSeed, lossScaleMetadata());
        !s.ok())
      return absl::Status(s.code(), absl::StrCat("--save-dir: ", s.message()));
    if (reporter) {
      pruneStepCheckpoints(saveDir, keepLast);
      if (report)
        report->clearProgress();
      std::printf("checkpoint of step %lld saved to %s\n", (long long)step,
                  path.c_str());
      std::fflush(stdout);
    }
    return absl::OkStatus();
  };
  if (!saveDir.empty()) {
    options.saveEvery = saveEvery;
    options.save = saveToDirectory;
  }
  if (options.firstStep > steps && reporter)
    note("the checkpoint is at step " + std::to_string(loaded->doneSteps) +
         "; nothing to run up to --steps " + std::to_string(steps));
  if (reporter) {
    absl::StatusOr<std::unique_ptr<StepReporter>> made = StepReporter::create(
        options.firstStep, steps, logJsonl, isatty(STDOUT_FILENO));
    if (!made.ok())
      return fail(made.status());
    report = *std::move(made);
  }
  RankObserver observer(env.rank, report.get(), processStart);
  // What the state holds before the first step: a pipeline reports the
  // peak above it (activations and transfers).
  const int64_t stateBytes = backend->memoryStats().liveBytes;
  absl::StatusOr<TrainResult> trained =
      train(*runner, *source, *backend, options, throughputOf(inputs->global),
            observer);
  if (!trained.ok())
    return fail(trained.status());
  if (profileOps && reporter)
    std::printf("start-up: programs ready after %.1f ms (%s %s), first step "
                "began after %.1f ms\n",
                programsReadyMs, fromFile ? "read from" : "lowered from",
                inputFile.c_str(), observer.firstStepMs());
  if (profileOps && reporter)
    std::fputs(
        profileReport(trained->profile, trained->profiledMs,
                      deviceEntry->libraries ? deviceEntry->libraries() : "")
            .c_str(),
        stdout);
  if (!profileJsonFile.empty() && reporter) {
    // A pipelined plan on one rank: its task times calibrate the plan
    // model's forward share (this rank's tasks are the whole model's).
    std::optional<TaskTimesPerStep> tasks;
    if (pipeline && env.worldSize == 1)
      tasks = taskTimesPerStep(pipeline->events(), options.firstStep + 1);
    std::string text = profileJson(trained->profile, trained->profiledMs,
                                   trained->profiledSteps, inputFile,
                                   backend->memoryStats().peakBytes, stateBytes,
                                   tasks ? &*tasks : nullptr);
    if (absl::Status s =
            writeFileAtomically(profileJsonFile, {{text.data(), text.size()}});
        !s.ok())
      return fail(absl::StrCat("--profile-json: ", s.message()));
  }
  if (pipeline) {
    absl::StatusOr<PipelineReport> made = reportPipeline(
        *plan, pipeline->events(), backend->memoryStats().peakBytes, stateBytes,
        options.firstStep, stageMeshSize, job, reporter, traceFile);
    if (!made.ok())
      return fail(made.status());
    std::fputs(made->text.c_str(), stdout);
    std::fflush(stdout);
    if (made->tracedRanks)
      note("trace of " + std::to_string(made->tracedRanks) +
           " ranks written to " + traceFile +
           " (open it in ui.perfetto.dev or chrome://tracing)");
  }

  if (staging && reporter)
    note(absl::StrFormat(
        "%s staged through the host (--comm-staging): "
        "rank 0 copied %d tensors (%.1f MB) to the CPU and %d (%.1f MB) "
        "back to --device=%s",
        deviceComm ? "pipeline transfers" : "collectives and transfers",
        staging->toHost, staging->bytesToHost / 1e6, staging->toDevice,
        staging->bytesToDevice / 1e6, deviceEntry->name));
  if (!saveDir.empty() && options.firstStep <= steps)
    if (absl::Status s = saveToDirectory(steps, trained->doneUpdates); !s.ok())
      return fail(s);
  if (!saveFile.empty())
    if (absl::Status s = saveRunCheckpoint(
            *runner, program, plan ? &*plan : nullptr, job, saveFile,
            std::max(loaded->doneSteps, steps), trained->doneUpdates, runSeed,
            lossScaleMetadata());
        !s.ok())
      return fail(s);
  return endRun();
}
