//===- DeviceCollectives.cpp - collectives of a device's tensors ----------===//
//
// See DeviceCollectives.h. Each collective allocates what it needs first,
// then queues, on the communication queue: a wait for the compute queue,
// the copies that move the blocks of the scattered or gathered dimension
// to the front, the library's call, and the copies back; its pending
// handle keeps every buffer alive until the compute queue has been told to
// wait for it.
//
//===----------------------------------------------------------------------===//

#include "merak/Runtime/Comm/DeviceCollectives.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

#include <algorithm>
#include <optional>
#include <thread>

namespace merak::runtime {

CollectiveStream::~CollectiveStream() = default;

std::vector<int64_t> DeviceBuffer::stridesOrDense() const {
  if (!strides.empty())
    return strides;
  std::vector<int64_t> dense(type.shape.size());
  int64_t s = 1;
  for (size_t d = type.shape.size(); d-- > 0;) {
    dense[d] = s;
    s *= type.shape[d];
  }
  return dense;
}

bool DeviceBuffer::isDense() const {
  if (strides.empty())
    return true;
  int64_t expected = 1;
  for (size_t d = type.shape.size(); d-- > 0;) {
    if (type.shape[d] != 1 && strides[d] != expected)
      return false;
    expected *= type.shape[d];
  }
  return true;
}

namespace {

using Clock = std::chrono::steady_clock;

#define MERAK_TRY(status)                                                      \
  do {                                                                         \
    if (absl::Status s_ = (status); !s_.ok())                                  \
      return s_;                                                               \
  } while (false)

std::string seconds(std::chrono::milliseconds t) { return secondsText(t); }

/// `buffer` seen as [n, its shape with `dim` divided by n]: the n blocks
/// of `dim` first, each in `buffer`'s own layout.
DeviceBuffer blocksFirst(const DeviceBuffer &buffer, int64_t dim, int64_t n) {
  std::vector<int64_t> strides = buffer.stridesOrDense();
  DeviceBuffer view = buffer;
  view.type.shape.insert(view.type.shape.begin(), n);
  view.type.shape[dim + 1] /= n;
  view.strides = strides;
  view.strides.insert(view.strides.begin(),
                      view.type.shape[dim + 1] * strides[dim]);
  return view;
}

/// `type` with `n` blocks in front: [n, shape...].
TensorType withBlocks(const TensorType &type, int64_t n) {
  TensorType blocks = type;
  blocks.shape.insert(blocks.shape.begin(), n);
  return blocks;
}

DeviceReduction reductionOf(CollectiveReduction r) {
  switch (r) {
  case CollectiveReduction::Sum:
    return DeviceReduction::Sum;
  case CollectiveReduction::Max:
    return DeviceReduction::Max;
  case CollectiveReduction::Min:
    return DeviceReduction::Min;
  case CollectiveReduction::Product:
    return DeviceReduction::Product;
  case CollectiveReduction::Average:
    return DeviceReduction::Average;
  }
  return DeviceReduction::Sum;
}

class DeviceCommunicator;

/// A collective queued on the communication queue.
class DevicePending final : public PendingCollective {
public:
  DevicePending(DeviceCommunicator &comm, std::string op,
                std::vector<int64_t> ranks)
      : comm(comm), op(std::move(op)), ranks(std::move(ranks)) {}
  ~DevicePending() override;

  bool ready() override;
  absl::Status wait() override;
  absl::StatusOr<std::vector<TensorHandle>> finish() override;

  /// A failure of this collective: `detail`, with what the run knows of
  /// the group's ranks.
  absl::Status failed(const absl::Status &detail);

  /// Buffers the queued work reads or writes.
  std::vector<DeviceBuffer> keep;
  std::vector<TensorHandle> temporaries;
  TensorHandle result;
  std::optional<int64_t> marker;

private:
  DeviceCommunicator &comm;
  std::string op;
  std::vector<int64_t> ranks;
  std::optional<absl::Status> status;
  bool joined = false;
};

class DeviceCommunicator final : public Communicator {
public:
  DeviceCommunicator(std::unique_ptr<CollectiveStream> stream,
                     DeviceCommunicatorOptions options)
      : stream(std::move(stream)), options(std::move(options)) {}

  int64_t rank() const override { return options.rank; }
  int64_t worldSize() const override { return options.worldSize; }

  absl::StatusOr<std::unique_ptr<PendingCollective>>
  start(KernelCall &call) override {
    if (aborted)
      return *aborted;
    const Instruction &inst = *call.instruction;
    const OpAttrs &a = inst.attrs;
    if (a.group < 0 || size_t(a.group) >= options.groups.size())
      return absl::InternalError("a collective without a process group");
    const ProcessGroupSpec &group = options.groups[a.group];
    if (options.progress)
      options.progress(call.step ? call.step->globalStep : 0,
                       &inst - call.program->instructions.data());
    auto pending = std::make_unique<DevicePending>(*this, opFullName(inst.kind),
                                                   group.members.ranks);
    // A collective queued in part leaves the communicators unusable.
    if (absl::Status s = launch(call, a.group, *pending); !s.ok()) {
      absl::Status failure = pending->failed(s);
      abortAll(failure);
      return failure;
    }
    absl::StatusOr<int64_t> marker = stream->mark();
    if (!marker.ok()) {
      absl::Status failure = pending->failed(marker.status());
      abortAll(failure);
      return failure;
    }
    pending->marker = *marker;
    return std::unique_ptr<PendingCollective>(std::move(pending));
  }

  CollectiveStream &queue() { return *stream; }
  const DeviceCommunicatorOptions &settings() const { return options; }

  /// Stops every communicator after a failure; later collectives fail at
  /// once with `why`.
  void abortAll(const absl::Status &why) {
    if (aborted)
      return;
    aborted = why;
    stream->abort();
  }

private:
  /// Queues the work of `call`'s collective over group `g`.
  absl::Status launch(KernelCall &call, int64_t g, DevicePending &p) {
    const Instruction &inst = *call.instruction;
    const OpAttrs &a = inst.attrs;
    const int64_t n = int64_t(options.groups[g].members.ranks.size());
    if (call.operands.empty() || !call.operands[0])
      return absl::InternalError("a collective without an operand");
    absl::StatusOr<DeviceBuffer> described =
        stream->describe(*call.operands[0]);
    if (!described.ok())
      return described.status();
    const DeviceBuffer in = *described;
    p.keep.push_back(in);
    const TensorType &resultType = call.program->values[inst.results[0]].type;
    const DType dtype = in.type.dtype;
    const bool integerAverage =
        a.collectiveReduction == CollectiveReduction::Average &&
        !isFloat(dtype);
    const DeviceReduction reduction = integerAverage
                                          ? DeviceReduction::Sum
                                          : reductionOf(a.collectiveReduction);

    switch (inst.kind) {
    case OpKind::AllReduce: {
      absl::StatusOr<DeviceBuffer> out = target(call, resultType, p);
      if (!out.ok())
        return out.status();
      absl::StatusOr<const void *> send = beginInPlace(in, *out);
      if (!send.ok())
        return send.status();
      MERAK_TRY(stream->enqueueAllReduce(
          g, *send, out->data, in.type.numElements(), dtype, reduction));
      if (integerAverage)
        MERAK_TRY(stream->enqueueDivide(*out, n));
      return absl::OkStatus();
    }
    case OpKind::AllGather: {
      // Member j's block lands at block j of `dim` in the result.
      absl::StatusOr<DeviceBuffer> out = fresh(resultType, p);
      if (!out.ok())
        return out.status();
      absl::StatusOr<DeviceBuffer> send = in.isDense() ? in : fresh(in.type, p);
      if (!send.ok())
        return send.status();
      DeviceBuffer placed = blocksFirst(*out, a.dim, n);
      absl::StatusOr<DeviceBuffer> gathered =
          placed.isDense() ? *out : fresh(withBlocks(in.type, n), p);
      if (!gathered.ok())
        return gathered.status();
      MERAK_TRY(stream->enqueueWaitForCompute());
      if (send->data != in.data)
        MERAK_TRY(stream->enqueueCopy(in, *send));
      MERAK_TRY(stream->enqueueAllGather(g, send->data, gathered->data,
                                         in.type.numElements(), dtype));
      if (gathered->data != out->data)
        MERAK_TRY(enqueuePlace(*gathered, placed));
      return absl::OkStatus();
    }
    case OpKind::ReduceScatter: {
      // Block j of `dim` goes to member j, which reduces what it gets.
      DeviceBuffer blocks = blocksFirst(in, a.dim, n);
      absl::StatusOr<DeviceBuffer> out = fresh(resultType, p);
      if (!out.ok())
        return out.status();
      absl::StatusOr<DeviceBuffer> send =
          blocks.isDense() ? in : fresh(withBlocks(resultType, n), p);
      if (!send.ok())
        return send.status();
      MERAK_TRY(stream->enqueueWaitForCompute());
      if (send->data != in.data)
        MERAK_TRY(enqueuePack(blocks, *send));
      MERAK_TRY(stream->enqueueReduceScatter(g, send->data, out->data,
                                             resultType.numElements(), dtype,
                                             reduction));
      if (integerAverage)
        MERAK_TRY(stream->enqueueDivide(*out, n));
      return absl::OkStatus();
    }
    case OpKind::AllToAll: {
      // Block j of the split dimension goes to member j; what member i
      // sends lands at block i of the concatenation dimension.
      DeviceBuffer blocks = blocksFirst(in, a.dim, n);
      absl::StatusOr<DeviceBuffer> out = fresh(resultType, p);
      if (!out.ok())
        return out.status();
      DeviceBuffer placed = blocksFirst(*out, a.concatDim, n);
      TensorType blockType = blocks.type;
      blockType.shape.erase(blockType.shape.begin());
      absl::StatusOr<DeviceBuffer> send =
          blocks.isDense() ? in : fresh(blocks.type, p);
      if (!send.ok())
        return send.status();
      absl::StatusOr<DeviceBuffer> received =
          placed.isDense() ? *out : fresh(placed.type, p);
      if (!received.ok())
        return received.status();
      MERAK_TRY(stream->enqueueWaitForCompute());
      if (send->data != in.data)
        MERAK_TRY(enqueuePack(blocks, *send));
      const int64_t count = blockType.numElements();
      const int64_t bytes = count * int64_t(dtypeSize(dtype));
      std::vector<DeviceTransfer> sends, receives;
      for (int64_t j = 0; j < n; ++j) {
        sends.push_back(
            {static_cast<char *>(send->data) + j * bytes, count, j});
        receives.push_back(
            {static_cast<char *>(received->data) + j * bytes, count, j});
      }
      MERAK_TRY(stream->enqueueExchange(g, dtype, sends, receives));
      if (received->data != out->data)
        MERAK_TRY(enqueuePlace(*received, placed));
      return absl::OkStatus();
    }
    case OpKind::Broadcast: {
      // The root is an in-group multi-index over the group's axes.
      int64_t root = 0;
      const std::vector<int64_t> &mesh = call.program->mesh->shape;
      for (size_t k = 0; k < a.meshAxes.size() && k < a.root.size(); ++k)
        root = root * mesh[a.meshAxes[k]] + a.root[k];
      absl::StatusOr<DeviceBuffer> out = target(call, resultType, p);
      if (!out.ok())
        return out.status();
      absl::StatusOr<const void *> send = beginInPlace(in, *out);
      if (!send.ok())
        return send.status();
      MERAK_TRY(stream->enqueueBroadcast(g, *send, out->data,
                                         in.type.numElements(), dtype, root));
      return absl::OkStatus();
    }
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("'", opFullName(inst.kind), "' is not a collective"));
    }
  }

  /// For a collective that can work in place on `out`: queues the wait for
  /// the compute queue and, for a strided operand `in`, its copy into
  /// `out`; returns what the library sends from.
  absl::StatusOr<const void *> beginInPlace(const DeviceBuffer &in,
                                            const DeviceBuffer &out) {
    MERAK_TRY(stream->enqueueWaitForCompute());
    if (in.isDense())
      return static_cast<const void *>(in.data);
    MERAK_TRY(stream->enqueueCopy(in, out));
    return static_cast<const void *>(out.data);
  }

  /// Copies the dense buffer `packed` (blocks side by side) into
  /// `placed`, the blocks' view of the result.
  absl::Status enqueuePlace(const DeviceBuffer &packed,
                            const DeviceBuffer &placed) {
    DeviceBuffer from = packed;
    from.type = placed.type;
    from.strides.clear();
    return stream->enqueueCopy(from, placed);
  }

  /// Copies `blocks`, a view of the operand, into the dense buffer
  /// `packed`.
  absl::Status enqueuePack(const DeviceBuffer &blocks,
                           const DeviceBuffer &packed) {
    DeviceBuffer to = packed;
    to.type = blocks.type;
    to.strides.clear();
    return stream->enqueueCopy(blocks, to);
  }

  /// A fresh dense tensor of `type`, kept by `p`; the first is its result.
  absl::StatusOr<DeviceBuffer> fresh(const TensorType &type, DevicePending &p) {
    absl::StatusOr<TensorHandle> made = stream->allocate(type);
    if (!made.ok())
      return made.status();
    absl::StatusOr<DeviceBuffer> buffer = stream->describe(**made);
    if (!buffer.ok())
      return buffer.status();
    if (!p.result)
      p.result = *made;
    else
      p.temporaries.push_back(*made);
    p.keep.push_back(*buffer);
    return buffer;
  }

  /// The result of a collective that can work in place: the planned
  /// target when it is dense and of the result's type, else a fresh tensor.
  absl::StatusOr<DeviceBuffer> target(KernelCall &call, const TensorType &type,
                                      DevicePending &p) {
    if (!call.inPlace.empty() && call.inPlace[0]) {
      absl::StatusOr<DeviceBuffer> planned = stream->describe(*call.inPlace[0]);
      if (!planned.ok())
        return planned.status();
      if (planned->type == type && planned->isDense()) {
        absl::StatusOr<TensorHandle> handle = stream->alias(*call.inPlace[0]);
        if (!handle.ok())
          return handle.status();
        p.result = *handle;
        p.keep.push_back(*planned);
        return planned;
      }
    }
    return fresh(type, p);
  }

  std::unique_ptr<CollectiveStream> stream;
  DeviceCommunicatorOptions options;
  std::optional<absl::Status> aborted;
};

DevicePending::~DevicePending() {
  // Abandoned before `finish`: the compute queue must not reuse the
  // buffers before the queued work is done with them.
  if (marker && !joined)
    (void)comm.queue().joinCompute(*marker);
}

bool DevicePending::ready() {
  if (status || !marker)
    return true;
  absl::StatusOr<bool> reached = comm.queue().reached(*marker);
  return !reached.ok() || *reached;
}

absl::Status DevicePending::wait() {
  if (status)
    return *status;
  const std::chrono::milliseconds timeout = comm.settings().timeout;
  const Clock::time_point deadline = Clock::now() + timeout;
  std::chrono::microseconds pause(10);
  while (true) {
    absl::StatusOr<bool> reached = comm.queue().reached(*marker);
    if (!reached.ok()) {
      status = failed(reached.status());
      break;
    }
    if (*reached) {
      status = absl::OkStatus();
      break;
    }
    if (absl::Status s = comm.queue().asyncError(); !s.ok()) {
      status = failed(s);
      break;
    }
    if (Clock::now() > deadline) {
      status = failed(absl::DeadlineExceededError(
          absl::StrCat(comm.settings().library, " ", op,
                       " did not finish within ", seconds(timeout))));
      break;
    }
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::microseconds(1000));
  }
  if (!status->ok())
    comm.abortAll(*status);
  return *status;
}

absl::StatusOr<std::vector<TensorHandle>> DevicePending::finish() {
  MERAK_TRY(wait());
  MERAK_TRY(comm.queue().joinCompute(*marker));
  joined = true;
  keep.clear();
  temporaries.clear();
  return std::vector<TensorHandle>{std::move(result)};
}

absl::Status DevicePending::failed(const absl::Status &detail) {
  std::string why;
  if (comm.settings().diagnose)
    why = comm.settings().diagnose(ranks);
  return absl::UnavailableError(absl::StrCat(
      "communication among ranks ", absl::StrJoin(ranks, ", "), " failed",
      why.empty() ? "" : absl::StrCat(": ", why), " (", detail.message(), ")"));
}

} // namespace

std::unique_ptr<Communicator>
makeDeviceCommunicator(std::unique_ptr<CollectiveStream> stream,
                       DeviceCommunicatorOptions options) {
  return std::make_unique<DeviceCommunicator>(std::move(stream),
                                              std::move(options));
}

DeviceCommunicatorOptions
deviceCommunicatorOptions(DistributedJob &job, const Program &program,
                          std::chrono::milliseconds timeout,
                          std::string library) {
  DeviceCommunicatorOptions options;
  options.rank = job.rank();
  options.worldSize = job.worldSize();
  options.groups = program.groups;
  options.timeout = timeout;
  options.library = std::move(library);
  options.diagnose = [&job](const std::vector<int64_t> &ranks) {
    return job.diagnose(ranks);
  };
  options.progress = [&job](int64_t step, int64_t instruction) {
    job.setProgress(step, instruction);
  };
  return options;
}

} // namespace merak::runtime
