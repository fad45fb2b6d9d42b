//===- GlooCollectives.cpp - the mesh collectives on Gloo -----------------===//
//
// A communicator that runs the mesh collectives on the CPU backend's
// tensors with ProcessGroupGloo, in the background on one Gloo worker
// thread per process group. Gloo in c10d 1.13 has no reduce-scatter and no
// average: reduce_scatter is an all-to-all of the blocks followed by a
// local reduction (the bytes a ring moves), and average is a sum divided by
// the group size.
//
//===----------------------------------------------------------------------===//

#include "../AtenDTypes.h"
#include "../CPU/CpuTensor.h"
#include "GlooInternal.h"
#include "merak/Runtime/Comm/HostGloo.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

#include <gloo/allreduce_halving_doubling.h>

#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>

#include <functional>
#include <optional>

namespace merak::runtime::gloo {

namespace {

/// A collective started on a Gloo worker thread: its c10d work and what
/// remains to do on this thread once the data has moved.
class GlooPending final : public PendingCollective {
public:
  GlooPending(Job &job, std::vector<int64_t> ranks, int64_t step,
              int64_t instruction)
      : job(job), ranks(std::move(ranks)), step(step),
        instruction(instruction) {}

  absl::Status wait() override {
    if (transfer)
      return *transfer;
    try {
      if (future.valid())
        future.get();
      else
        work->wait();
      transfer = absl::OkStatus();
    } catch (const std::exception &e) {
      transfer = failed(e);
    }
    return *transfer;
  }

  absl::StatusOr<std::vector<TensorHandle>> finish() override {
    if (absl::Status s = wait(); !s.ok())
      return s;
    c10::InferenceMode guard;
    try {
      return std::vector<TensorHandle>{wrap(complete())};
    } catch (const std::exception &e) {
      return absl::InternalError(describe(e));
    }
  }

  /// A failure of this collective, with what the heartbeat knows of the
  /// group's other ranks (compared with this collective's position, not
  /// with the later ones this rank may have started since).
  absl::Status failed(const std::exception &e) {
    std::string why = job.diagnose(ranks, step, instruction);
    return absl::UnavailableError(absl::StrCat(
        "communication among ranks ", absl::StrJoin(ranks, ", "), " failed",
        why.empty() ? "" : absl::StrCat(": ", why), " (", describe(e), ")"));
  }

  c10::intrusive_ptr<c10d::Work> work;
  /// Instead of `work`: a halving-doubling all-reduce on the group's worker.
  std::future<void> future;
  /// Runs under InferenceMode after the transfer; returns the result.
  std::function<at::Tensor()> complete;

private:
  Job &job;
  std::vector<int64_t> ranks;
  int64_t step, instruction;
  std::optional<absl::Status> transfer;
};

class GlooCommunicator final : public Communicator {
public:
  GlooCommunicator(Job &job, std::vector<Group> groups)
      : job(job), groups(std::move(groups)) {}

  int64_t rank() const override { return job.rank(); }
  int64_t worldSize() const override { return job.worldSize(); }

  absl::StatusOr<std::unique_ptr<PendingCollective>>
  start(KernelCall &call) override {
    const Instruction &inst = *call.instruction;
    const OpAttrs &a = inst.attrs;
    if (a.group < 0 || size_t(a.group) >= groups.size())
      return absl::InternalError("a collective without a process group");
    Group &group = groups[a.group];
    int64_t step = call.step ? call.step->globalStep : 0;
    int64_t index = &inst - call.program->instructions.data();
    job.setProgress(step, index);
    auto pending = std::make_unique<GlooPending>(job, group.spec.members.ranks,
                                                 step, index);
    c10::InferenceMode guard;
    try {
      launch(inst, group, call, *pending);
    } catch (const std::exception &e) {
      return pending->failed(e);
    }
    return std::unique_ptr<PendingCollective>(std::move(pending));
  }

private:
  /// The target of a collective that works in place: the planned operand,
  /// else a contiguous copy of the input.
  static at::Tensor writable(const at::Tensor &in, KernelCall &call) {
    if (call.inPlace[0]) {
      const at::Tensor &target = unwrap(*call.inPlace[0]);
      if (target.is_contiguous())
        return target;
    }
    return in.clone(at::MemoryFormat::Contiguous);
  }

  /// Gloo moves float, double, half and 8-, 32- and 64-bit integers. A
  /// bfloat16 or boolean tensor travels as the type of its width, its bytes
  /// unchanged; reductions of them run in float32 and uint8.
  static at::ScalarType wireType(at::ScalarType t) {
    switch (t) {
    case at::kBFloat16:
      return at::kHalf;
    case at::kBool:
      return at::kByte;
    default:
      return t;
    }
  }
  static at::ScalarType reduceType(at::ScalarType t) {
    return t == at::kBFloat16 ? at::kFloat : wireType(t);
  }

  /// Starts the exchange of `in`'s blocks along `dim` (block j to member
  /// j) and returns the blocks sent, moved to the front, and the buffer the
  /// received ones arrive in (both in the wire type, kept alive by the
  /// caller until the work completes).
  static std::pair<at::Tensor, at::Tensor>
  exchangeBlocks(const at::Tensor &in, int64_t dim, c10d::ProcessGroupGloo &pg,
                 GlooPending &pending) {
    at::Tensor blocks =
        in.movedim(dim, 0).contiguous().view(wireType(in.scalar_type()));
    at::Tensor received = at::empty_like(blocks);
    std::vector<int64_t> counts;
    pending.work = pg.alltoall_base(received, blocks, counts, counts);
    return {blocks, received};
  }

  /// Reduces `blocks` ([n, ...]) over its first dimension.
  static at::Tensor reduceBlocks(const at::Tensor &blocks,
                                 CollectiveReduction r, int64_t n) {
    switch (r) {
    case CollectiveReduction::Sum:
      return blocks.sum(0);
    case CollectiveReduction::Average:
      return divide(blocks.sum(0), n);
    case CollectiveReduction::Max:
      return std::get<0>(blocks.max(0));
    case CollectiveReduction::Min:
      return std::get<0>(blocks.min(0));
    case CollectiveReduction::Product:
      return blocks.prod(0);
    }
    return blocks.sum(0);
  }

  static at::Tensor divide(const at::Tensor &t, int64_t n) {
    if (at::isFloatingType(t.scalar_type()))
      return t.div_(double(n));
    return t.div_(n, "trunc");
  }

  /// Queues the all-reduce of `t` (in place) as Gloo's halving-doubling on
  /// `group`'s context; false (nothing queued) for an element type it does
  /// not reduce here, which c10d's ring then takes.
  static bool halvingDoubling(const at::Tensor &t, const OpAttrs &a,
                              Group &group, GlooPending &pending) {
    switch (t.scalar_type()) {
    case at::kFloat:
      return queueHalvingDoubling<float>(t, a, group, pending);
    case at::kDouble:
      return queueHalvingDoubling<double>(t, a, group, pending);
    case at::kInt:
      return queueHalvingDoubling<int32_t>(t, a, group, pending);
    case at::kLong:
      return queueHalvingDoubling<int64_t>(t, a, group, pending);
    default:
      return false;
    }
  }

  template <typename T>
  static bool queueHalvingDoubling(const at::Tensor &t, const OpAttrs &a,
                                   Group &group, GlooPending &pending) {
    const ::gloo::ReductionFunction<T> *fn = ::gloo::ReductionFunction<T>::sum;
    switch (a.collectiveReduction) {
    case CollectiveReduction::Sum:
    case CollectiveReduction::Average:
      break;
    case CollectiveReduction::Max:
      fn = ::gloo::ReductionFunction<T>::max;
      break;
    case CollectiveReduction::Min:
      fn = ::gloo::ReductionFunction<T>::min;
      break;
    case CollectiveReduction::Product:
      fn = ::gloo::ReductionFunction<T>::product;
      break;
    }
    // The algorithm takes its slot where it is made: on the worker, in the
    // order the collectives started, the same on every member.
    pending.future =
        group.worker->post([t, fn, context = group.halvingDoubling] {
          if (t.numel() == 0)
            return;
          ::gloo::AllreduceHalvingDoubling<T> algorithm(
              context, {t.data_ptr<T>()}, int(t.numel()), fn);
          algorithm.run();
        });
    return true;
  }

  /// Starts the c10d operation of `inst` and says in `pending` what is
  /// left to do after it. The tensors the lambdas hold keep the buffers
  /// Gloo reads and writes alive until then.
  void launch(const Instruction &inst, Group &group, KernelCall &call,
              GlooPending &pending) {
    const OpAttrs &a = inst.attrs;
    const int64_t n = int64_t(group.spec.members.ranks.size());
    at::Tensor in = unwrap(*call.operands[0]).contiguous();
    c10d::ProcessGroupGloo &pg = *group.pg;
    switch (inst.kind) {
    case OpKind::AllReduce: {
      const at::ScalarType type = in.scalar_type();
      std::vector<at::Tensor> tensors{
          reduceType(type) == type ? writable(in, call)
                                   : in.to(reduceType(type)).contiguous()};
      c10d::AllreduceOptions options;
      switch (a.collectiveReduction) {
      case CollectiveReduction::Sum:
      case CollectiveReduction::Average:
        options.reduceOp = c10d::ReduceOp::SUM;
        break;
      case CollectiveReduction::Max:
        options.reduceOp = c10d::ReduceOp::MAX;
        break;
      case CollectiveReduction::Min:
        options.reduceOp = c10d::ReduceOp::MIN;
        break;
      case CollectiveReduction::Product:
        options.reduceOp = c10d::ReduceOp::PRODUCT;
        break;
      }
      if (!group.halvingDoubling ||
          !halvingDoubling(tensors[0], a, group, pending))
        pending.work = pg.allreduce(tensors, options);
      bool average = a.collectiveReduction == CollectiveReduction::Average;
      pending.complete = [t = tensors[0], average, n, type] {
        at::Tensor reduced = average ? divide(t, n) : t;
        return reduced.scalar_type() == type ? reduced : reduced.to(type);
      };
      return;
    }
    case OpKind::AllGather: {
      // Gloo copies into these on its own threads, outside InferenceMode,
      // which only normal tensors allow.
      const at::ScalarType type = in.scalar_type();
      at::Tensor sent = in.view(wireType(type));
      std::vector<std::vector<at::Tensor>> outputs(1);
      {
        c10::InferenceMode normal(false);
        for (int64_t i = 0; i < n; ++i)
          outputs[0].push_back(at::empty(sent.sizes(), sent.options()));
      }
      std::vector<at::Tensor> inputs{sent};
      pending.work = pg.allgather(outputs, inputs);
      pending.complete = [outputs, sent, dim = a.dim, type] {
        return at::cat(outputs[0], dim).view(type);
      };
      return;
    }
    case OpKind::ReduceScatter: {
      // Block j of the scatter dimension goes to member j; member i then
      // holds block i of every member and reduces them (at the wait).
      const at::ScalarType type = in.scalar_type();
      at::Tensor blocks, received;
      std::tie(blocks, received) = exchangeBlocks(in, a.dim, pg, pending);
      std::vector<int64_t> shape{n, blocks.size(0) / n};
      shape.insert(shape.end(), blocks.sizes().begin() + 1,
                   blocks.sizes().end());
      pending.complete = [blocks, received, shape, n, dim = a.dim,
                          r = a.collectiveReduction, type] {
        at::Tensor reduced =
            reduceBlocks(received.view(type).view(shape), r, n);
        return reduced.movedim(0, dim).contiguous();
      };
      return;
    }
    case OpKind::AllToAll: {
      // Block j along the split dimension goes to member j; what member i
      // sends is concatenated along the concat dimension in member order.
      const at::ScalarType type = in.scalar_type();
      at::Tensor blocks, received;
      std::tie(blocks, received) = exchangeBlocks(in, a.dim, pg, pending);
      pending.complete = [blocks, received, n, dim = a.dim,
                          concatDim = a.concatDim, type] {
        std::vector<at::Tensor> pieces;
        for (const at::Tensor &piece : received.view(type).chunk(n, 0))
          pieces.push_back(piece.movedim(0, dim));
        return at::cat(pieces, concatDim);
      };
      return;
    }
    case OpKind::Broadcast: {
      at::Tensor target = writable(in, call);
      std::vector<at::Tensor> tensors{
          target.view(wireType(target.scalar_type()))};
      c10d::BroadcastOptions options;
      // The root is an in-group multi-index over `meshAxes`.
      int64_t root = 0;
      const std::vector<int64_t> &mesh = call.program->mesh->shape;
      for (size_t k = 0; k < a.meshAxes.size(); ++k)
        root = root * mesh[a.meshAxes[k]] + a.root[k];
      options.rootRank = root;
      pending.work = pg.broadcast(tensors, options);
      pending.complete = [t = target, sent = tensors[0]] { return t; };
      return;
    }
    default:
      throw std::invalid_argument(
          absl::StrCat("'", opFullName(inst.kind), "' is not a collective"));
    }
  }

  Job &job;
  std::vector<Group> groups;
};

} // namespace

SerialWorker::SerialWorker()
    : thread([this] {
        std::unique_lock<std::mutex> lock(mutex);
        while (true) {
          changed.wait(lock, [&] { return stopping || !tasks.empty(); });
          if (tasks.empty())
            return;
          std::packaged_task<void()> task = std::move(tasks.front());
          tasks.pop_front();
          lock.unlock();
          task();
          lock.lock();
        }
      }) {}

SerialWorker::~SerialWorker() {
  {
    std::lock_guard<std::mutex> lock(mutex);
    stopping = true;
  }
  changed.notify_all();
  thread.join();
}

std::future<void> SerialWorker::post(std::function<void()> task) {
  std::packaged_task<void()> packaged(std::move(task));
  std::future<void> done = packaged.get_future();
  {
    std::lock_guard<std::mutex> lock(mutex);
    tasks.push_back(std::move(packaged));
  }
  changed.notify_all();
  return done;
}

std::unique_ptr<Communicator> makeCommunicator(Job &job,
                                               std::vector<Group> groups) {
  return std::make_unique<GlooCommunicator>(job, std::move(groups));
}

} // namespace merak::runtime::gloo

namespace merak::runtime {
namespace {

/// The device communicator's path (DeviceCollectives.h: what NCCL and the
/// runtime built alone's staged --comm=gloo run) on the CPU backend's
/// tensors, with the Gloo library's own calls on their memory as its
/// library (HostGloo.h). Everything runs when queued: the CPU backend
/// computes synchronously.
class CpuCollectiveStream final : public CollectiveStream {
public:
  explicit CpuCollectiveStream(std::unique_ptr<HostGlooCollectives> host)
      : host(std::move(host)) {}

  absl::StatusOr<DeviceBuffer> describe(DeviceTensor &tensor) override {
    return gloo::describeCpuTensor(tensor, "a collective");
  }
  absl::StatusOr<TensorHandle> alias(DeviceTensor &tensor) override {
    return wrap(unwrap(tensor));
  }
  absl::StatusOr<TensorHandle> allocate(const TensorType &type) override {
    c10::InferenceMode normal(false);
    return wrap(at::empty(type.shape, toAten(type.dtype)));
  }
  absl::Status enqueueWaitForCompute() override { return absl::OkStatus(); }
  absl::Status enqueueCopy(const DeviceBuffer &from,
                           const DeviceBuffer &to) override {
    gloo::cpuTensorOf(to).copy_(gloo::cpuTensorOf(from));
    return absl::OkStatus();
  }
  absl::Status enqueueDivide(const DeviceBuffer &buffer, int64_t n) override {
    gloo::cpuTensorOf(buffer).div_(n, "trunc");
    return absl::OkStatus();
  }
  absl::Status enqueueAllReduce(int64_t group, const void *send, void *recv,
                                int64_t count, DType dtype,
                                DeviceReduction r) override {
    return host->allReduce(group, send, recv, count, dtype, r);
  }
  absl::Status enqueueAllGather(int64_t group, const void *send, void *recv,
                                int64_t count, DType dtype) override {
    return host->allGather(group, send, recv, count, dtype);
  }
  absl::Status enqueueReduceScatter(int64_t group, const void *send, void *recv,
                                    int64_t count, DType dtype,
                                    DeviceReduction r) override {
    return host->reduceScatter(group, send, recv, count, dtype, r);
  }
  absl::Status enqueueBroadcast(int64_t group, const void *send, void *recv,
                                int64_t count, DType dtype,
                                int64_t root) override {
    return host->broadcast(group, send, recv, count, dtype, root);
  }
  absl::Status
  enqueueExchange(int64_t group, DType dtype,
                  const std::vector<DeviceTransfer> &sends,
                  const std::vector<DeviceTransfer> &receives) override {
    return host->exchange(group, dtype, sends, receives);
  }
  absl::StatusOr<int64_t> mark() override { return markers++; }
  absl::StatusOr<bool> reached(int64_t) override { return true; }
  absl::Status joinCompute(int64_t) override { return absl::OkStatus(); }
  absl::Status asyncError() override { return absl::OkStatus(); }
  void abort() override {}

private:
  std::unique_ptr<HostGlooCollectives> host;
  int64_t markers = 0;
};

} // namespace

absl::StatusOr<std::unique_ptr<Communicator>>
createGlooDeviceCommunicator(DistributedJob &job, const Program &program,
                             Backend &backend,
                             std::chrono::milliseconds timeout) {
  if (backend.name() != "cpu")
    return absl::InvalidArgumentError(absl::StrCat(
        "--comm=gloo-device moves the CPU backend's tensors, not the ",
        backend.name(), " backend's"));
  absl::StatusOr<std::unique_ptr<HostGlooCollectives>> host =
      connectHostGloo(job, program.groups, timeout);
  if (!host.ok())
    return host.status();
  return makeDeviceCommunicator(
      std::make_unique<CpuCollectiveStream>(*std::move(host)),
      deviceCommunicatorOptions(job, program, timeout, "Gloo"));
}

} // namespace merak::runtime
