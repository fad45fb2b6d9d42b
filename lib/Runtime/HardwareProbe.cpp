//===- HardwareProbe.cpp - measures a hardware profile --------------------===//
//
// Every figure is the median of a few timed batches after a warm-up call,
// a batch being as many calls as last about a millisecond (so the clock's
// resolution and the loop do not count). A wall-clock budget shared among
// the parts decides how many sizes each part measures. Ranks that talk to
// each other must make the same calls in the same order: rank 0 decides
// how many, from its own clock, and shares the decision through the run's
// store before the others start.
//
//===----------------------------------------------------------------------===//

#include "merak/Runtime/HardwareProbe.h"

// Header-only and plain C++: the one formula of the bytes a collective
// sends, which the cost model prices collectives with.
#include "merak/Hardware/CollectiveCost.h"
#include "merak/Runtime/Pipeline.h"
#include "merak/Runtime/Program.h"

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <fstream>
#include <sstream>
#include <unistd.h>

namespace merak::runtime {
namespace {

using Clock = std::chrono::steady_clock;

double secondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

/// A batch lasts at least this long.
constexpr double kBatchSeconds = 1e-3;
/// Timed batches per figure: at least, and at most.
constexpr int kFewestSamples = 3, kMostSamples = 7;

/// A part of the probe with its share of the budget.
class Deadline {
public:
  explicit Deadline(double seconds) : start(Clock::now()), seconds(seconds) {}
  double elapsed() const { return secondsSince(start); }
  double left() const { return std::max(0.0, seconds - elapsed()); }

private:
  Clock::time_point start;
  double seconds;
};

/// How often to call an op that took `perCall` seconds in its warm-up:
/// `inner` calls per batch, `samples` batches, as many as fit `target`
/// seconds (at least kFewestSamples).
struct Repetitions {
  int64_t inner = 1;
  int samples = kFewestSamples;
};

Repetitions repetitionsFor(double perCall, double target) {
  Repetitions r;
  perCall = std::max(perCall, 1e-9);
  r.inner = std::max<int64_t>(1, int64_t(std::ceil(kBatchSeconds / perCall)));
  double batch = double(r.inner) * perCall;
  r.samples = int(
      std::clamp(target / batch, double(kFewestSamples), double(kMostSamples)));
  return r;
}

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  size_t n = values.size();
  return n % 2 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2;
}

/// Seconds per call of `op` over `reps`, the backend synchronized at the
/// end of each batch.
absl::StatusOr<double> timeBatches(Backend &backend,
                                   const std::function<absl::Status()> &op,
                                   const Repetitions &reps) {
  std::vector<double> perCall;
  for (int s = 0; s < reps.samples; ++s) {
    Clock::time_point start = Clock::now();
    for (int64_t i = 0; i < reps.inner; ++i)
      if (absl::Status status = op(); !status.ok())
        return status;
    if (absl::Status status = backend.synchronize(); !status.ok())
      return status;
    perCall.push_back(secondsSince(start) / double(reps.inner));
  }
  return median(std::move(perCall));
}

/// The seconds of one call of `op`, synchronized: a warm-up.
absl::StatusOr<double> timeOnce(Backend &backend,
                                const std::function<absl::Status()> &op) {
  return timeBatches(backend, op, Repetitions{1, 1});
}

/// Seconds per call of a backend op: a warm-up call (first touches of
/// memory, the library's own set-up), a second call to size the batches,
/// then as many batches as fit `target` seconds.
absl::StatusOr<double> timeKernel(Backend &backend,
                                  const std::function<absl::Status()> &op,
                                  double target) {
  absl::StatusOr<double> first = timeOnce(backend, op);
  if (!first.ok())
    return first.status();
  absl::StatusOr<double> second = timeOnce(backend, op);
  if (!second.ok())
    return second.status();
  return timeBatches(backend, op, repetitionsFor(*second, target - *first));
}

/// Pseudo-random values in [-1, 1) (no zeros and no denormals, which some
/// kernels treat apart).
HostTensor filled(const TensorType &type) {
  HostTensor host = HostTensor::allocate(type);
  int64_t n = type.numElements();
  uint32_t state = 12345;
  for (int64_t i = 0; i < n; ++i) {
    state = state * 1664525u + 1013904223u;
    float v = float((state >> 8) & 0xffff) / 32768.0f - 1.0f + 1.0f / 65536;
    switch (type.dtype) {
    case DType::F32:
      reinterpret_cast<float *>(host.mutableBytes())[i] = v;
      break;
    case DType::BF16:
      reinterpret_cast<uint16_t *>(host.mutableBytes())[i] =
          floatToBFloat16Bits(v);
      break;
    case DType::F16:
      reinterpret_cast<uint16_t *>(host.mutableBytes())[i] = floatToHalfBits(v);
      break;
    default:
      break;
    }
  }
  return host;
}

/// One instruction over operands placed in the backend once, run again and
/// again as the executor runs it: its result in an arena, as a step's
/// temporaries are.
class KernelRun {
public:
  /// `operands` uploaded as pseudo-random values, or as zeros with `zeros`
  /// (large tensors, whose values do not matter to the time).
  static absl::StatusOr<std::unique_ptr<KernelRun>>
  create(Backend &backend, OpKind kind, std::vector<TensorType> operands,
         TensorType result, bool zeros = false) {
    std::unique_ptr<KernelRun> run(new KernelRun(backend));
    Program &p = run->program;
    p.function = absl::StrCat("probe_", opKindName(kind));
    Instruction inst;
    inst.kind = kind;
    for (size_t k = 0; k < operands.size(); ++k) {
      ValueInfo value{operands[k]};
      value.lastUse = 0;
      p.values.push_back(value);
      inst.operands.push_back(ValueId(k));
      absl::StatusOr<TensorHandle> handle =
          zeros ? backend.zeros(operands[k])
                : backend.upload(filled(operands[k]));
      if (!handle.ok())
        return handle.status();
      run->operands.push_back(*std::move(handle));
    }
    ValueInfo out{result};
    out.definedBy = 0;
    out.lastUse = kKeepAlive;
    p.values.push_back(out);
    inst.results = {ValueId(operands.size())};
    ResultStorage storage;
    storage.arenaOffset = 0;
    inst.storage = {storage};
    p.instructions = {inst};
    p.arenaBytes = result.byteSize();
    absl::StatusOr<TensorHandle> arena = backend.allocateArena(p.arenaBytes);
    if (!arena.ok())
      return arena.status();
    run->arena = *std::move(arena);

    KernelCall &call = run->call;
    call.instruction = &p.instructions[0];
    call.program = &p;
    call.step = &run->step;
    call.arena = run->arena.get();
    for (const TensorHandle &h : run->operands)
      call.operands.push_back(h.get());
    call.hostScalars.assign(operands.size(), std::nullopt);
    call.inPlace = {nullptr};
    return run;
  }

  absl::Status run() {
    call.results.clear();
    return backend.execute(call);
  }

private:
  explicit KernelRun(Backend &backend) : backend(backend) {}

  Backend &backend;
  Program program;
  std::vector<TensorHandle> operands;
  TensorHandle arena;
  StepContext step;
  KernelCall call;
};

absl::Status named(const absl::Status &status, const std::string &what) {
  return absl::Status(status.code(),
                      absl::StrCat(what, ": ", status.message()));
}

//===----------------------------------------------------------------------===//
// Kernels
//===----------------------------------------------------------------------===//

/// GEMM rates of `dtype` for square problems from 32 up to `largest`, as
/// far as `seconds` allows (the three smallest always).
absl::StatusOr<std::vector<GemmPoint>>
measureGemms(Backend &backend, DType dtype, int64_t largest, double seconds) {
  Deadline deadline(seconds);
  std::vector<int64_t> sides;
  for (int64_t n = 32; n <= std::max<int64_t>(largest, 32); n *= 2)
    sides.push_back(n);
  std::vector<GemmPoint> points;
  double lastPerCall = 0;
  for (size_t i = 0; i < sides.size(); ++i) {
    int64_t n = sides[i];
    double flops = 2.0 * double(n) * double(n) * double(n);
    // A call of twice the side takes up to eight times as long; a warm-up,
    // a sizing call and the fewest batches must fit.
    double predicted = lastPerCall * 8 * (2 + kFewestSamples);
    if (points.size() >= 3 && predicted > deadline.left())
      break;
    TensorType square{dtype, {n, n}};
    absl::StatusOr<std::unique_ptr<KernelRun>> run =
        KernelRun::create(backend, OpKind::Matmul, {square, square}, square);
    if (!run.ok())
      return named(run.status(), absl::StrCat("a ", n, "x", n, " matmul"));
    double target = deadline.left() / double(sides.size() - i);
    absl::StatusOr<double> perCall = timeKernel(
        backend, [&] { return (*run)->run(); }, target);
    if (!perCall.ok())
      return named(perCall.status(), absl::StrCat("a ", n, "x", n, "x", n, " ",
                                                  dtypeName(dtype), " matmul"));
    lastPerCall = *perCall;
    points.push_back({flops, flops / *perCall});
  }
  return points;
}

/// Bytes per second of an elementwise add of two f32 tensors of
/// `bytes` each into a third (three streams, as STREAM's add counts them).
absl::StatusOr<double> measureMemoryBandwidth(Backend &backend, int64_t bytes,
                                              double seconds) {
  TensorType big{DType::F32, {bytes / 4}};
  absl::StatusOr<std::unique_ptr<KernelRun>> run =
      KernelRun::create(backend, OpKind::Add, {big, big}, big, /*zeros=*/true);
  if (!run.ok())
    return named(run.status(), absl::StrCat("an add of ", bytes, " bytes"));
  absl::StatusOr<double> perCall = timeKernel(
      backend, [&] { return (*run)->run(); }, seconds);
  if (!perCall.ok())
    return named(perCall.status(), "the memory-bandwidth add");
  return 3.0 * double(big.byteSize()) / *perCall;
}

/// Seconds of an add of two one-element tensors: what launching a kernel
/// costs beyond its work.
absl::StatusOr<double> measureKernelOverhead(Backend &backend, double seconds) {
  TensorType one{DType::F32, {1}};
  absl::StatusOr<std::unique_ptr<KernelRun>> run =
      KernelRun::create(backend, OpKind::Add, {one, one}, one);
  if (!run.ok())
    return named(run.status(), "a one-element add");
  absl::StatusOr<double> perCall = timeKernel(
      backend, [&] { return (*run)->run(); }, seconds);
  if (!perCall.ok())
    return named(perCall.status(), "the kernel-overhead add");
  return *perCall;
}

//===----------------------------------------------------------------------===//
// Communication
//===----------------------------------------------------------------------===//

/// Message sizes, in bytes of the whole tensor (the all-reduced tensor, the
/// gathered result, the scattered or exchanged input): the smallest gives
/// the latency, the largest the bandwidth.
constexpr int64_t kMessageBytes[] = {8 << 10, 128 << 10, 2 << 20, 32 << 20};

struct CollectiveOp {
  const char *name; // as HardwareProfile spells it
  OpKind kind;
  CollectiveKind cost;
};
constexpr CollectiveOp kCollectiveOps[] = {
    {"allreduce", OpKind::AllReduce, CollectiveKind::AllReduce},
    {"allgather", OpKind::AllGather, CollectiveKind::AllGather},
    {"reducescatter", OpKind::ReduceScatter, CollectiveKind::ReduceScatter},
    {"alltoall", OpKind::AllToAll, CollectiveKind::AllToAll}};

/// The operand and result of `op` over `group` ranks for a message of
/// `bytes` (rounded down to whole f32 blocks of the group).
std::pair<TensorType, TensorType>
collectiveTypes(const CollectiveOp &op, int64_t group, int64_t bytes) {
  int64_t whole = std::max<int64_t>(1, bytes / 4 / group) * group;
  TensorType full{DType::F32, {whole}}, block{DType::F32, {whole / group}};
  switch (op.kind) {
  case OpKind::AllGather:
    return {block, full};
  case OpKind::ReduceScatter:
    return {full, block};
  default:
    return {full, full};
  }
}

/// Group sizes the world allows: the powers of two that divide it, and
/// itself.
std::vector<int64_t> groupSizes(int64_t world) {
  std::vector<int64_t> sizes;
  for (int64_t g = 2; g < world; g *= 2)
    if (world % g == 0)
      sizes.push_back(g);
  if (world >= 2)
    sizes.push_back(world);
  return sizes;
}

/// Every collective over groups of `group` consecutive ranks at every
/// message size: a mesh `world/group x group`, collectives over its last
/// axis, one instruction per (op, size) in kCollectiveOps x kMessageBytes
/// order, each reading an argument of its own.
absl::StatusOr<Program> collectiveProgram(int64_t world, int64_t group,
                                          int64_t rank) {
  Program p;
  p.function = absl::StrCat("probe_collectives_", group);
  p.mesh = MeshLayout{"probe", {world / group, group}, {"rest", "group"}};
  for (const CollectiveOp &op : kCollectiveOps)
    for (int64_t bytes : kMessageBytes) {
      auto [in, out] = collectiveTypes(op, group, bytes);
      ValueId operand = ValueId(p.values.size());
      p.values.push_back(ValueInfo{in});
      p.values.push_back(ValueInfo{out});
      Argument arg;
      arg.value = operand;
      arg.name = absl::StrCat(op.name, "_", bytes);
      p.arguments.push_back(arg);
      Instruction inst;
      inst.kind = op.kind;
      inst.attrs.meshAxes = {1};
      inst.operands = {operand};
      inst.results = {operand + 1};
      p.instructions.push_back(inst);
      ResultInfo result;
      result.value = operand + 1;
      p.results.push_back(result);
    }
  if (absl::Status s = bindToRank(p, rank, CollectiveMode::Blocking); !s.ok())
    return s;
  return p;
}

/// A call of the collective `inst` of `program` on one operand.
KernelCall collectiveCall(const Program &program, const Instruction &inst,
                          StepContext &step, DeviceTensor *operand) {
  KernelCall call;
  call.instruction = &inst;
  call.program = &program;
  call.step = &step;
  call.operands = {operand};
  call.hostScalars = {std::nullopt};
  call.inPlace = {nullptr};
  return call;
}

/// Rank 0's decision, shared with every rank that asks: the repetitions of
/// the next measurement, or none (samples 0) to skip it.
absl::StatusOr<Repetitions> shareRepetitions(DistributedJob &job,
                                             const std::string &key,
                                             const Repetitions &mine) {
  absl::StatusOr<std::string> text =
      job.shareFromRank0(key, absl::StrCat(mine.inner, " ", mine.samples));
  if (!text.ok())
    return text.status();
  std::vector<std::string> parts = absl::StrSplit(*text, ' ');
  Repetitions r;
  if (parts.size() != 2 || !absl::SimpleAtoi(parts[0], &r.inner) ||
      !absl::SimpleAtoi(parts[1], &r.samples))
    return absl::InternalError(
        absl::StrCat("rank 0 shared '", *text, "' under ", key));
  return r;
}

/// What rank 0 decides after a warm-up call of `perCall` seconds, with
/// `left` seconds of the measurement's share: stop (samples 0) when the
/// fewest batches do not fit and `required` is false.
Repetitions decide(double perCall, double left, bool required) {
  Repetitions r = repetitionsFor(perCall, left);
  if (!required && double(r.inner) * perCall * kFewestSamples > left)
    r.samples = 0;
  return r;
}

/// Times the message sizes in lockstep with the other ranks involved:
/// `once(size)` sends one message of size index `size` (every rank
/// involved calls it with the same index). The smallest and the largest
/// come first and are always measured, so that a small budget still spans
/// latency and bandwidth; the sizes between follow while the budget lasts,
/// and the smallest is timed again between and after them.
/// Returns `{size index, seconds per message}` per size measured.
absl::StatusOr<std::vector<std::pair<size_t, double>>>
timeMessages(DistributedJob &job, Backend &backend, const std::string &key,
             double seconds, const std::function<absl::Status(size_t)> &once) {
  Deadline deadline(seconds);
  const size_t count = std::size(kMessageBytes);
  std::vector<size_t> order = {0, count - 1, 0};
  for (size_t s = 1; s + 1 < count; ++s)
    order.push_back(s);
  order.push_back(0);
  std::vector<std::pair<size_t, double>> timed;
  for (size_t i = 0; i < order.size(); ++i) {
    size_t s = order[i];
    auto op = [&] { return once(s); };
    absl::StatusOr<double> warm = timeOnce(backend, op);
    if (!warm.ok())
      return warm.status();
    double left = deadline.left() / double(order.size() - i);
    absl::StatusOr<Repetitions> reps = shareRepetitions(
        job, absl::StrCat(key, "/", i), decide(*warm, left, i < 2));
    if (!reps.ok())
      return reps.status();
    if (reps->samples == 0) // and the larger sizes between would not fit
      break;
    absl::StatusOr<double> perCall = timeBatches(backend, op, *reps);
    if (!perCall.ok())
      return perCall.status();
    timed.push_back({s, *perCall});
  }
  // The smallest message, timed three times apart, counts its fastest
  // median: a small message now and then takes milliseconds on busy cores
  // (Gloo's all-reduce), which is the machine's noise, not its latency.
  std::sort(timed.begin(), timed.end());
  timed.erase(std::unique(timed.begin(), timed.end(),
                          [](const auto &a, const auto &b) {
                            return a.first == b.first;
                          }),
              timed.end());
  return timed;
}

/// Compute between a step's collectives: 256^3 float32 GEMMs, as many as
/// take about kStallSegment seconds (a layer's op on a CPU), the count
/// rank 0 decides.
constexpr double kStallSegment = 1.5e-3;
constexpr int64_t kFewestStallRounds = 20, kMostStallRounds = 400;

/// Stall rounds that fit in `seconds` (a round is about the compute).
int64_t stallRounds(double seconds) {
  return std::clamp<int64_t>(int64_t(seconds / kStallSegment),
                             kFewestStallRounds, kMostStallRounds);
}

struct StallCompute {
  std::unique_ptr<KernelRun> gemm;
  int64_t count = 1;

  absl::Status run(Backend &backend) {
    for (int64_t i = 0; i < count; ++i)
      if (absl::Status s = gemm->run(); !s.ok())
        return s;
    return backend.synchronize();
  }
};

absl::StatusOr<StallCompute> stallCompute(Backend &backend, DistributedJob &job,
                                          const std::string &key) {
  const int64_t n = 256;
  TensorType square{DType::F32, {n, n}};
  StallCompute compute;
  absl::StatusOr<std::unique_ptr<KernelRun>> gemm =
      KernelRun::create(backend, OpKind::Matmul, {square, square}, square);
  if (!gemm.ok())
    return gemm.status();
  compute.gemm = *std::move(gemm);
  absl::StatusOr<double> one = timeKernel(
      backend, [&] { return compute.gemm->run(); }, 0.05);
  if (!one.ok())
    return one.status();
  absl::StatusOr<Repetitions> count = shareRepetitions(
      job, key,
      Repetitions{std::max<int64_t>(1, int64_t(kStallSegment / *one)), 1});
  if (!count.ok())
    return count.status();
  compute.count = count->inner;
  return compute;
}

/// What `once` (a blocking collective, every rank calling it) costs above
/// its lockstep time `lockstep` when the ranks reach it from compute, as a
/// step reaches a collective it waits for at once: `rounds` rounds of the
/// compute then the collective, timed from the end of the compute; the
/// mean wait less `lockstep`. Some rounds wait about the lockstep time,
/// others several milliseconds (the ranks arrive apart, a communication
/// thread wakes late), so the mean is what a step pays.
absl::StatusOr<double> measureStall(Backend &backend, StallCompute &compute,
                                    int64_t rounds, double lockstep,
                                    const std::function<absl::Status()> &once) {
  std::vector<double> waits;
  for (int64_t round = 0; round < rounds; ++round) {
    if (absl::Status s = compute.run(backend); !s.ok())
      return s;
    Clock::time_point start = Clock::now();
    if (absl::Status s = once(); !s.ok())
      return s;
    if (round >= 2) // the first rounds wake the threads up
      waits.push_back(secondsSince(start));
  }
  double mean = 0;
  for (double w : waits)
    mean += w / double(waits.size());
  return std::max(0.0, mean - lockstep);
}

/// The collectives over every group size, into `profile.collectives`.
/// The communicator of `program` the options ask for (Gloo's by default).
absl::StatusOr<std::unique_ptr<Communicator>>
communicatorOf(DistributedJob &job, const HardwareProbeOptions &options,
               const Program &program) {
  return options.communicator ? options.communicator(program)
                              : job.createGlooCommunicator(program);
}

absl::Status measureCollectives(Backend &backend, DistributedJob &job,
                                const HardwareProbeOptions &options,
                                int64_t localRanks, double seconds,
                                HardwareProfile &profile) {
  const int64_t world = job.worldSize(), rank = job.rank();
  std::vector<int64_t> groups = groupSizes(world);
  const double share =
      seconds / double(groups.size() * std::size(kCollectiveOps));
  StepContext step;
  absl::StatusOr<StallCompute> compute =
      stallCompute(backend, job, "hardware-probe/collective-stall");
  if (!compute.ok())
    return compute.status();
  for (int64_t group : groups) {
    absl::StatusOr<Program> program = collectiveProgram(world, group, rank);
    if (!program.ok())
      return named(program.status(),
                   absl::StrCat("collectives over ", group, " ranks"));
    absl::StatusOr<std::unique_ptr<Communicator>> comm =
        communicatorOf(job, options, *program);
    if (!comm.ok())
      return comm.status();
    size_t index = 0;
    for (const CollectiveOp &op : kCollectiveOps) {
      size_t first = index;
      index += std::size(kMessageBytes);
      std::vector<TensorHandle> operands;
      for (size_t s = 0; s < std::size(kMessageBytes); ++s) {
        const Instruction &inst = program->instructions[first + s];
        absl::StatusOr<TensorHandle> operand =
            backend.zeros(program->values[inst.operands[0]].type);
        if (!operand.ok())
          return operand.status();
        operands.push_back(*std::move(operand));
      }
      std::string what = absl::StrCat(op.name, " over ", group, " ranks");
      auto once = [&](size_t s) -> absl::Status {
        KernelCall call =
            collectiveCall(*program, program->instructions[first + s], step,
                           operands[s].get());
        return (*comm)->execute(call);
      };
      absl::StatusOr<std::vector<std::pair<size_t, double>>> timed =
          timeMessages(job, backend,
                       absl::StrCat("hardware-probe/", op.name, "/", group),
                       share, once);
      if (!timed.ok())
        return named(timed.status(), what);
      std::vector<std::pair<double, double>> byBytes;
      for (auto [s, perCall] : *timed) {
        const Instruction &inst = program->instructions[first + s];
        double in = double(program->values[inst.operands[0]].type.byteSize());
        double out = double(program->values[inst.results[0]].type.byteSize());
        byBytes.push_back({collectiveBytes(op.cost, group, in, out), perCall});
      }
      LinkFigures fit = fitLatencyBandwidth(byBytes);
      if (fit.bandwidth <= 0)
        return absl::InternalError(
            absl::StrCat(what, ": no bandwidth could be measured"));
      absl::StatusOr<double> stall =
          measureStall(backend, *compute, stallRounds(share / 3),
                       timed->front().second, [&] { return once(0); });
      if (!stall.ok())
        return named(stall.status(), what + ", reached from compute");
      CollectivePoint point;
      point.op = op.name;
      point.group = int(group);
      point.interNode = group > localRanks;
      point.busBandwidth = fit.bandwidth;
      point.latency = fit.latency;
      point.stall = *stall;
      profile.collectives.push_back(point);
    }
  }
  return absl::OkStatus();
}

/// How much a collective and compute slow each other when they overlap, as
/// the cost model uses it: `max(c, m) + (k - 1) min(c, m)` for compute `c`
/// and a collective `m` run together, so 1 is perfect overlap and 2 none
/// (the collective's threads take the cores the compute needs). Timed with
/// a 2 MiB all-reduce over every rank and 256^3 float32 GEMMs about as long:
/// each alone, then the GEMMs while the all-reduce is in flight; the median
/// of kMostSamples rounds, clamped to [1, 2].
absl::StatusOr<double> measureOverlap(Backend &backend, DistributedJob &job,
                                      const HardwareProbeOptions &options) {
  const int64_t world = job.worldSize();
  absl::StatusOr<Program> program = collectiveProgram(world, world, job.rank());
  if (!program.ok())
    return program.status();
  absl::StatusOr<std::unique_ptr<Communicator>> comm =
      communicatorOf(job, options, *program);
  if (!comm.ok())
    return comm.status();
  // The all-reduce of the third message size (2 MiB).
  const size_t index = 2;
  const Instruction &inst = program->instructions[index];
  absl::StatusOr<TensorHandle> operand =
      backend.zeros(program->values[inst.operands[0]].type);
  if (!operand.ok())
    return operand.status();
  StepContext step;
  auto call = [&] {
    return collectiveCall(*program, inst, step, operand->get());
  };
  const int64_t n = 256;
  TensorType square{DType::F32, {n, n}};
  absl::StatusOr<std::unique_ptr<KernelRun>> gemm =
      KernelRun::create(backend, OpKind::Matmul, {square, square}, square);
  if (!gemm.ok())
    return gemm.status();
  auto reduce = [&]() -> absl::Status {
    KernelCall c = call();
    return (*comm)->execute(c);
  };
  absl::StatusOr<double> warm = timeBatches(backend, reduce, {1, 2});
  if (!warm.ok())
    return warm.status();
  absl::StatusOr<double> oneGemm = timeKernel(
      backend, [&] { return (*gemm)->run(); }, 0.05);
  if (!oneGemm.ok())
    return oneGemm.status();
  // Every rank runs as many GEMMs as rank 0 decides.
  absl::StatusOr<Repetitions> count = shareRepetitions(
      job, "hardware-probe/overlap",
      Repetitions{std::max<int64_t>(1, int64_t(*warm / *oneGemm)),
                  kMostSamples});
  if (!count.ok())
    return count.status();
  auto gemms = [&]() -> absl::Status {
    for (int64_t i = 0; i < count->inner; ++i)
      if (absl::Status s = (*gemm)->run(); !s.ok())
        return s;
    return backend.synchronize();
  };
  std::vector<double> ks;
  for (int round = 0; round < count->samples; ++round) {
    Clock::time_point start = Clock::now();
    if (absl::Status s = reduce(); !s.ok())
      return s;
    double m = secondsSince(start);
    start = Clock::now();
    if (absl::Status s = gemms(); !s.ok())
      return s;
    double c = secondsSince(start);
    start = Clock::now();
    KernelCall c2 = call();
    absl::StatusOr<std::unique_ptr<PendingCollective>> pending =
        (*comm)->start(c2);
    if (!pending.ok())
      return pending.status();
    if (absl::Status s = gemms(); !s.ok())
      return s;
    if (absl::StatusOr<std::vector<TensorHandle>> done = (*pending)->finish();
        !done.ok())
      return done.status();
    double both = secondsSince(start);
    double shorter = std::min(c, m);
    if (shorter > 0)
      ks.push_back(1 + (both - std::max(c, m)) / shorter);
  }
  if (ks.empty())
    return 1.0;
  return std::clamp(median(ks), 1.0, 2.0);
}

/// One-way transfers between ranks 0 and 1 through the run's peer link:
/// each message goes there and back, and counts half the round trip.
absl::StatusOr<LinkFigures>
measurePeerLink(Backend &backend, DistributedJob &job, double seconds,
                const HardwareProbeOptions &options) {
  absl::StatusOr<std::unique_ptr<PeerLink>> link =
      options.link ? options.link({{0, 1}, {1, 0}})
                   : job.createPeerLink(options.p2p);
  if (!link.ok())
    return link.status();
  const int64_t rank = job.rank();
  LinkFigures figures;
  if (rank <= 1) {
    std::vector<TensorType> types;
    std::vector<TensorHandle> tensors;
    for (int64_t bytes : kMessageBytes) {
      types.push_back(TensorType{DType::F32, {bytes / 4}});
      absl::StatusOr<TensorHandle> t = backend.zeros(types.back());
      if (!t.ok())
        return t.status();
      tensors.push_back(*std::move(t));
    }
    const int64_t peer = 1 - rank;
    int64_t tag = 0;
    auto send = [&](size_t s, DeviceTensor *tensor) -> absl::Status {
      absl::StatusOr<std::unique_ptr<PendingCollective>> sent =
          (*link)->send(peer, tag++, {tensor}, {types[s]});
      if (!sent.ok())
        return sent.status();
      return (*sent)->wait();
    };
    auto receive = [&](size_t s) -> absl::Status {
      absl::StatusOr<std::unique_ptr<PendingCollective>> got =
          (*link)->recv(peer, tag++, {types[s]});
      if (!got.ok())
        return got.status();
      return (*got)->finish().status();
    };
    auto roundTrip = [&](size_t s) -> absl::Status {
      if (rank == 0) {
        if (absl::Status st = send(s, tensors[s].get()); !st.ok())
          return st;
        return receive(s);
      }
      if (absl::Status st = receive(s); !st.ok())
        return st;
      return send(s, tensors[s].get());
    };
    absl::StatusOr<std::vector<std::pair<size_t, double>>> timed =
        timeMessages(job, backend, "hardware-probe/p2p", seconds, roundTrip);
    if (!timed.ok())
      return named(timed.status(), "transfers between ranks 0 and 1");
    std::vector<std::pair<double, double>> byBytes;
    for (auto [s, perRoundTrip] : *timed)
      byBytes.push_back({double(kMessageBytes[s]), perRoundTrip / 2});
    figures = fitLatencyBandwidth(byBytes);
    // The smallest round trip reached from compute: each way a receiver
    // waits for it, as a pipeline stage waits for its neighbour.
    absl::StatusOr<StallCompute> compute =
        stallCompute(backend, job, "hardware-probe/p2p-stall");
    if (!compute.ok())
      return compute.status();
    absl::StatusOr<double> stall =
        measureStall(backend, *compute, stallRounds(seconds / 3),
                     timed->front().second, [&] { return roundTrip(0); });
    if (!stall.ok())
      return named(stall.status(), "transfers reached from compute");
    figures.stall = *stall / 2;
  }
  if (absl::Status s = job.barrier("hardware-probe/p2p"); !s.ok())
    return s;
  return figures;
}

//===----------------------------------------------------------------------===//
// The machine
//===----------------------------------------------------------------------===//

std::string readText(const char *path) {
  std::ifstream in(path);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

int64_t hostMemoryBytes() {
  if (int64_t bytes = memTotalBytes(readText("/proc/meminfo")); bytes > 0)
    return bytes;
  long pages = sysconf(_SC_PHYS_PAGES), size = sysconf(_SC_PAGESIZE);
  return pages > 0 && size > 0 ? int64_t(pages) * int64_t(size) : 0;
}

/// The operands of the bandwidth add: together with the other local ranks'
/// (which measure at the same time), at least the last-level cache each
/// (so that the three streams are well beyond it); at least 64 MiB and at
/// most 512 MiB, and at most a sixteenth of this rank's share of the
/// memory.
int64_t bandwidthOperandBytes(int64_t localRanks, int64_t memoryShare) {
  long cache = 0;
#ifdef _SC_LEVEL3_CACHE_SIZE
  cache = sysconf(_SC_LEVEL3_CACHE_SIZE);
#endif
  int64_t bytes =
      std::clamp<int64_t>(int64_t(cache) / localRanks, 64 << 20, 512 << 20);
  if (memoryShare > 0)
    bytes = std::min(bytes, memoryShare / 16);
  return std::max<int64_t>(bytes / 4096 * 4096, 4096);
}

std::string gemmLine(const char *type, const std::vector<GemmPoint> &points) {
  if (points.empty())
    return absl::StrCat("gemm ", type, ": none");
  const GemmPoint *best = &points[0];
  for (const GemmPoint &p : points)
    if (p.rate > best->rate)
      best = &p;
  auto side = [](double flops) {
    return int64_t(std::llround(std::cbrt(flops / 2)));
  };
  return absl::StrFormat("gemm %s: %d^3 to %d^3, best %.1f GFLOP/s at %d^3",
                         type, side(points.front().flops),
                         side(points.back().flops), best->rate / 1e9,
                         side(best->flops));
}

} // namespace

LinkFigures fitLatencyBandwidth(std::vector<std::pair<double, double>> timed) {
  LinkFigures fit;
  if (timed.empty())
    return fit;
  std::sort(timed.begin(), timed.end());
  auto [smallBytes, smallSeconds] = timed.front();
  auto [bytes, time] = timed.back();
  (void)smallBytes;
  if (timed.size() == 1 || time <= smallSeconds) {
    fit.bandwidth = time > 0 ? bytes / time : 0;
    return fit;
  }
  fit.latency = smallSeconds;
  fit.bandwidth = bytes / (time - smallSeconds);
  return fit;
}

int64_t memTotalBytes(const std::string &meminfo) {
  for (absl::string_view line : absl::StrSplit(meminfo, '\n')) {
    if (!absl::ConsumePrefix(&line, "MemTotal:"))
      continue;
    std::vector<absl::string_view> words =
        absl::StrSplit(line, ' ', absl::SkipEmpty());
    int64_t value = 0;
    if (words.empty() || !absl::SimpleAtoi(words[0], &value) || value < 0)
      return 0;
    bool kb = words.size() > 1 && absl::AsciiStrToLower(words[1]) == "kb";
    return kb ? value * 1024 : value;
  }
  return 0;
}

std::string cpuModelName(const std::string &cpuinfo) {
  for (absl::string_view line : absl::StrSplit(cpuinfo, '\n')) {
    size_t colon = line.find(':');
    if (colon == absl::string_view::npos)
      continue;
    if (absl::StripAsciiWhitespace(line.substr(0, colon)) != "model name")
      continue;
    return std::string(absl::StripAsciiWhitespace(line.substr(colon + 1)));
  }
  return "";
}

absl::StatusOr<HardwareProfile>
probeHardware(Backend &backend, DistributedJob *job,
              const HardwareProbeOptions &options) {
  if (!(options.seconds > 0) || !std::isfinite(options.seconds))
    return absl::InvalidArgumentError(absl::StrCat(
        "the measurement budget must be a positive number of seconds, not ",
        options.seconds));
  if (!backend.supports(OpKind::Matmul) || !backend.supports(OpKind::Add))
    return absl::FailedPreconditionError(
        absl::StrCat("the '", backend.name(),
                     "' backend has no matmul or add kernel to time"));
  const int64_t world = job ? job->worldSize() : 1;
  const bool communicates = world > 1;
  const int64_t localRanks =
      options.localWorldSize > 0 ? options.localWorldSize : world;
  auto progress = [&](const std::string &line) {
    if (options.progress)
      options.progress(line);
  };
  auto barrier = [&](const char *name) {
    return job ? job->barrier(absl::StrCat("hardware-probe/", name))
               : absl::OkStatus();
  };
  // The shares of the budget: most to the kernels when nothing else is
  // measured.
  const double total = options.seconds;
  const double gemmSeconds = total * (communicates ? 0.45 : 0.8);
  const double memorySeconds = total * (communicates ? 0.1 : 0.2);
  const double commSeconds = total * 0.45;

  HardwareProfile profile;
  profile.name = options.name;
  profile.source = "measured";
  std::string model = cpuModelName(readText("/proc/cpuinfo"));
  profile.device = model.empty()
                       ? backend.name()
                       : absl::StrCat(backend.name(), " (", model, ")");
  profile.devicesPerNode = int(localRanks);
  const int64_t memory = hostMemoryBytes();
  if (memory > 0)
    profile.memoryCapacity = double(memory) / double(localRanks);

  // GEMMs: f32, then bf16 where the backend multiplies it.
  absl::StatusOr<std::vector<GemmPoint>> f32 =
      measureGemms(backend, DType::F32, options.largestGemm, gemmSeconds * 0.6);
  if (!f32.ok())
    return f32.status();
  progress(gemmLine("f32", *f32));
  profile.gemm["f32"] = *f32;
  if (absl::Status s = barrier("gemm-f32"); !s.ok())
    return s;
  absl::StatusOr<std::vector<GemmPoint>> bf16 = measureGemms(
      backend, DType::BF16, options.largestGemm, gemmSeconds * 0.4);
  if (bf16.ok()) {
    progress(gemmLine("bf16", *bf16));
    profile.gemm["bf16"] = *bf16;
  } else {
    progress(absl::StrCat("gemm bf16: not measured (", bf16.status().message(),
                          ")"));
  }
  if (absl::Status s = barrier("gemm-bf16"); !s.ok())
    return s;
  for (const auto &[type, points] : profile.gemm)
    for (const GemmPoint &p : points)
      profile.peakByType[type] = std::max(profile.peakByType[type], p.rate);
  profile.peakFlops = profile.peakByType["f32"];

  absl::StatusOr<double> overhead =
      measureKernelOverhead(backend, memorySeconds * 0.2);
  if (!overhead.ok())
    return overhead.status();
  profile.opOverhead = *overhead;
  const int64_t operandBytes =
      options.bandwidthBytes > 0
          ? options.bandwidthBytes
          : bandwidthOperandBytes(localRanks, memory / localRanks);
  absl::StatusOr<double> bandwidth =
      measureMemoryBandwidth(backend, operandBytes, memorySeconds * 0.8);
  if (!bandwidth.ok())
    return bandwidth.status();
  profile.memoryBandwidth = *bandwidth;
  progress(absl::StrFormat(
      "memory: %.2f GB/s (an add of two %d MiB tensors), kernel overhead "
      "%.2f us",
      *bandwidth / 1e9, operandBytes >> 20, *overhead * 1e6));
  if (absl::Status s = barrier("memory"); !s.ok())
    return s;
  if (!communicates)
    return profile;

  // Collectives, then the link between ranks 0 and 1.
  const double collectiveShare = 0.85;
  if (absl::Status s =
          measureCollectives(backend, *job, options, localRanks,
                             commSeconds * collectiveShare, profile);
      !s.ok())
    return s;
  for (const CollectivePoint &c : profile.collectives)
    if (c.op == "allreduce") {
      // Groups ascend: the last is the largest.
      profile.collectiveBandwidth = c.busBandwidth;
      profile.collectiveLatency = c.latency;
    }
  for (const CollectivePoint &c : profile.collectives)
    progress(absl::StrFormat(
        "%s over %d ranks: latency %.1f us, bus bandwidth %.2f GB/s, stall "
        "%.1f us",
        c.op, c.group, c.latency * 1e6, c.busBandwidth / 1e9, c.stall * 1e6));
  absl::StatusOr<double> overlap = measureOverlap(backend, *job, options);
  if (!overlap.ok())
    return named(overlap.status(), "overlap of compute and an all-reduce");
  profile.overlapCoefficient = *overlap;
  progress(absl::StrFormat(
      "overlap of GEMMs and a 2 MiB all-reduce over %d ranks: coefficient "
      "%.2f (1: hidden, 2: serialized)",
      job->worldSize(), *overlap));
  absl::StatusOr<LinkFigures> link = measurePeerLink(
      backend, *job, commSeconds * (1 - collectiveShare), options);
  if (!link.ok())
    return link.status();
  if (job->rank() <= 1) {
    // Ranks 0 and 1 share a machine unless it holds one rank only.
    (localRanks >= 2 ? profile.intraNode : profile.interNode) = *link;
    profile.linkBandwidth = link->bandwidth;
    profile.linkLatency = link->latency;
    progress(absl::StrFormat(
        "send/recv between ranks 0 and 1: latency %.1f us, %.2f GB/s, stall "
        "%.1f us",
        link->latency * 1e6, link->bandwidth / 1e9, link->stall * 1e6));
  }
  return profile;
}

} // namespace merak::runtime
