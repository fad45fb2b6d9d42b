//===- Nccl.cpp - the mesh collectives on NCCL ----------------------------===//
//
// See Nccl.h. `NcclStream` is the `CollectiveStream` of one rank: its
// communication stream (created beside the CUDA backend's compute stream),
// one non-blocking NCCL communicator per process group, and an event per
// queued collective that the compute stream waits on at the collective's
// first use.
//
//===----------------------------------------------------------------------===//

#include "merak/Runtime/CUDA/Nccl.h"
#include "Collectives.h"
#include "Copy.h"
#include "CudaKernels.h"
#include "merak/Runtime/Comm/DeviceCollectives.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

#include <nccl.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <map>
#include <thread>

namespace merak::runtime {
namespace {

using cuda::CudaTensor;
using cuda::DeviceState;
using Clock = std::chrono::steady_clock;

std::string cudaText(cudaError_t s) {
  return absl::StrCat(cudaGetErrorString(s), " (", cudaGetErrorName(s), ")");
}

absl::Status cudaStatus(cudaError_t s, const char *what) {
  if (s == cudaSuccess)
    return absl::OkStatus();
  return absl::InternalError(absl::StrCat(what, ": ", cudaText(s)));
}

/// NCCL's result as a status; `ncclInProgress` (a non-blocking call
/// queued) is success.
absl::Status ncclStatus(ncclResult_t r, const char *what,
                        ncclComm_t comm = nullptr) {
  if (r == ncclSuccess || r == ncclInProgress)
    return absl::OkStatus();
  const char *last = ncclGetLastError(comm);
  return absl::InternalError(absl::StrCat(
      what, ": ", ncclGetErrorString(r),
      last && *last ? absl::StrCat(" (", last, ")") : std::string()));
}

ncclDataType_t ncclTypeOf(DType dtype) {
  switch (dtype) {
  case DType::F16:
    return ncclFloat16;
  case DType::BF16:
    return ncclBfloat16;
  case DType::F32:
    return ncclFloat32;
  case DType::F64:
    return ncclFloat64;
  case DType::Bool:
    return ncclUint8;
  case DType::I32:
    return ncclInt32;
  case DType::I64:
    return ncclInt64;
  }
  return ncclUint8;
}

ncclRedOp_t ncclOpOf(DeviceReduction r) {
  switch (r) {
  case DeviceReduction::Sum:
    return ncclSum;
  case DeviceReduction::Product:
    return ncclProd;
  case DeviceReduction::Max:
    return ncclMax;
  case DeviceReduction::Min:
    return ncclMin;
  case DeviceReduction::Average:
    return ncclAvg;
  }
  return ncclSum;
}

cuda::View viewOf(const DeviceBuffer &b) {
  if (b.type.shape.size() > size_t(cuda::kMaxDims))
    throw cuda::CudaError(absl::StrCat("a collective's buffer of rank ",
                                       b.type.shape.size(), " (at most ",
                                       cuda::kMaxDims, ")"));
  cuda::View v;
  v.data = b.data;
  v.type = cuda::elemTypeOf(b.type.dtype);
  v.rank = int(b.type.shape.size());
  std::vector<int64_t> strides = b.stridesOrDense();
  for (int d = 0; d < v.rank; ++d) {
    v.sizes[d] = b.type.shape[d];
    v.strides[d] = strides[d];
  }
  return v;
}

/// Waits for a non-blocking communicator to leave `ncclInProgress`.
absl::Status settle(ncclComm_t comm, Clock::time_point deadline,
                    const std::string &what) {
  while (true) {
    ncclResult_t state = ncclSuccess;
    if (ncclResult_t r = ncclCommGetAsyncError(comm, &state); r != ncclSuccess)
      return ncclStatus(r, what.c_str(), comm);
    if (state == ncclSuccess)
      return absl::OkStatus();
    if (state != ncclInProgress)
      return ncclStatus(state, what.c_str(), comm);
    if (Clock::now() > deadline)
      return absl::DeadlineExceededError(absl::StrCat(what, ": timed out"));
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
}

class NcclStream final : public CollectiveStream {
public:
  NcclStream(DeviceState &dev, std::vector<ncclComm_t> comms,
             cudaStream_t stream, std::chrono::milliseconds timeout)
      : dev(dev), comms(std::move(comms)), stream(stream), timeout(timeout) {
    cudaEventCreateWithFlags(&computeDone, cudaEventDisableTiming);
  }

  ~NcclStream() override {
    cudaStreamSynchronize(stream);
    for (auto &[marker, event] : events)
      cudaEventDestroy(event);
    cudaEventDestroy(computeDone);
    if (!aborted) {
      // Finalize flushes what the communicators still hold; a peer that is
      // gone makes it time out, and the communicators are aborted instead.
      const Clock::time_point deadline = Clock::now() + timeout;
      bool clean = true;
      for (ncclComm_t c : comms) {
        ncclResult_t r = ncclCommFinalize(c);
        clean = clean && (r == ncclSuccess || r == ncclInProgress) &&
                settle(c, deadline, "finalize").ok();
      }
      for (ncclComm_t c : comms) {
        if (clean)
          ncclCommDestroy(c);
        else
          ncclCommAbort(c);
      }
    }
    cudaStreamDestroy(stream);
  }

  absl::StatusOr<DeviceBuffer> describe(DeviceTensor &tensor) override {
    CudaTensor &t = cuda::unwrap(tensor);
    return DeviceBuffer{t.data(), t.type, t.strides, t.storage};
  }
  absl::StatusOr<TensorHandle> alias(DeviceTensor &tensor) override {
    return TensorHandle(std::make_shared<CudaTensor>(cuda::unwrap(tensor)));
  }
  absl::StatusOr<TensorHandle> allocate(const TensorType &type) override {
    try {
      return TensorHandle(std::make_shared<CudaTensor>(
          dev.allocate(std::max<int64_t>(type.byteSize(), 1)), 0, type));
    } catch (const cuda::CudaError &e) {
      return absl::ResourceExhaustedError(
          absl::StrCat("a collective's buffer: ", e.what()));
    }
  }

  absl::Status enqueueWaitForCompute() override {
    if (absl::Status s = cudaStatus(cudaEventRecord(computeDone, dev.stream),
                                    "recording the compute stream");
        !s.ok())
      return s;
    return cudaStatus(cudaStreamWaitEvent(stream, computeDone, 0),
                      "ordering the communication stream");
  }
  absl::Status enqueueCopy(const DeviceBuffer &from,
                           const DeviceBuffer &to) override {
    try {
      cuda::copyStrided(viewOf(from), viewOf(to), stream);
    } catch (const std::exception &e) {
      return absl::InternalError(e.what());
    }
    return cudaStatus(cudaGetLastError(), "a collective's copy");
  }
  absl::Status enqueueDivide(const DeviceBuffer &buffer, int64_t n) override {
    try {
      cuda::divideIntegers(viewOf(buffer), n, stream);
    } catch (const std::exception &e) {
      return absl::InternalError(e.what());
    }
    return cudaStatus(cudaGetLastError(), "an integer average");
  }
  absl::Status enqueueAllReduce(int64_t group, const void *send, void *recv,
                                int64_t count, DType dtype,
                                DeviceReduction r) override {
    return ncclStatus(ncclAllReduce(send, recv, size_t(count),
                                    ncclTypeOf(dtype), ncclOpOf(r),
                                    comms[group], stream),
                      "ncclAllReduce", comms[group]);
  }
  absl::Status enqueueAllGather(int64_t group, const void *send, void *recv,
                                int64_t count, DType dtype) override {
    return ncclStatus(ncclAllGather(send, recv, size_t(count),
                                    ncclTypeOf(dtype), comms[group], stream),
                      "ncclAllGather", comms[group]);
  }
  absl::Status enqueueReduceScatter(int64_t group, const void *send, void *recv,
                                    int64_t count, DType dtype,
                                    DeviceReduction r) override {
    return ncclStatus(ncclReduceScatter(send, recv, size_t(count),
                                        ncclTypeOf(dtype), ncclOpOf(r),
                                        comms[group], stream),
                      "ncclReduceScatter", comms[group]);
  }
  absl::Status enqueueBroadcast(int64_t group, const void *send, void *recv,
                                int64_t count, DType dtype,
                                int64_t root) override {
    return ncclStatus(ncclBroadcast(send, recv, size_t(count),
                                    ncclTypeOf(dtype), int(root), comms[group],
                                    stream),
                      "ncclBroadcast", comms[group]);
  }
  absl::Status
  enqueueExchange(int64_t group, DType dtype,
                  const std::vector<DeviceTransfer> &sends,
                  const std::vector<DeviceTransfer> &receives) override {
    ncclComm_t c = comms[group];
    if (absl::Status s = ncclStatus(ncclGroupStart(), "ncclGroupStart", c);
        !s.ok())
      return s;
    absl::Status status;
    for (const DeviceTransfer &t : sends)
      if (status.ok())
        status = ncclStatus(ncclSend(t.data, size_t(t.count), ncclTypeOf(dtype),
                                     int(t.peer), c, stream),
                            "ncclSend", c);
    for (const DeviceTransfer &t : receives)
      if (status.ok())
        status = ncclStatus(ncclRecv(t.data, size_t(t.count), ncclTypeOf(dtype),
                                     int(t.peer), c, stream),
                            "ncclRecv", c);
    absl::Status end = ncclStatus(ncclGroupEnd(), "ncclGroupEnd", c);
    return status.ok() ? end : status;
  }

  absl::StatusOr<int64_t> mark() override {
    cudaEvent_t event;
    if (absl::Status s =
            cudaStatus(cudaEventCreateWithFlags(&event, cudaEventDisableTiming),
                       "creating an event");
        !s.ok())
      return s;
    if (absl::Status s =
            cudaStatus(cudaEventRecord(event, stream), "recording an event");
        !s.ok()) {
      cudaEventDestroy(event);
      return s;
    }
    events[next] = event;
    return next++;
  }
  absl::StatusOr<bool> reached(int64_t marker) override {
    auto it = events.find(marker);
    if (it == events.end())
      return true;
    cudaError_t s = cudaEventQuery(it->second);
    if (s == cudaErrorNotReady)
      return false;
    if (absl::Status failed = cudaStatus(s, "a collective on the GPU");
        !failed.ok())
      return failed;
    return true;
  }
  absl::Status joinCompute(int64_t marker) override {
    auto it = events.find(marker);
    if (it == events.end())
      return absl::OkStatus();
    absl::Status s =
        cudaStatus(cudaStreamWaitEvent(dev.stream, it->second, 0),
                   "ordering the compute stream after a collective");
    cudaEventDestroy(it->second);
    events.erase(it);
    return s;
  }
  absl::Status asyncError() override {
    for (ncclComm_t c : comms) {
      ncclResult_t state = ncclSuccess;
      if (ncclResult_t r = ncclCommGetAsyncError(c, &state); r != ncclSuccess)
        return ncclStatus(r, "ncclCommGetAsyncError", c);
      if (state != ncclSuccess && state != ncclInProgress)
        return ncclStatus(state, "NCCL reported", c);
    }
    return absl::OkStatus();
  }
  void abort() override {
    if (aborted)
      return;
    aborted = true;
    for (ncclComm_t c : comms)
      ncclCommAbort(c);
  }

private:
  DeviceState &dev;
  std::vector<ncclComm_t> comms;
  cudaStream_t stream;
  std::chrono::milliseconds timeout;
  cudaEvent_t computeDone = nullptr;
  std::map<int64_t, cudaEvent_t> events;
  int64_t next = 0;
  bool aborted = false;
};

/// The key of group `spec`'s id in communicator `generation`: groups over
/// the same axes are disjoint, so their first member names one.
std::string idKey(const ProcessGroupSpec &spec, int64_t generation) {
  return absl::StrCat("nccl/", generation, "/",
                      absl::StrJoin(spec.meshAxes, ","), "/",
                      spec.members.ranks.front());
}

std::atomic<int64_t> generations{0};

} // namespace

absl::StatusOr<std::vector<std::string>>
shareNcclIds(DistributedJob &job, const Program &program, int64_t generation) {
  std::vector<std::string> ids;
  for (const ProcessGroupSpec &spec : program.groups) {
    std::string mine;
    if (spec.members.ranks.front() == job.rank()) {
      ncclUniqueId id;
      if (absl::Status s = ncclStatus(ncclGetUniqueId(&id), "ncclGetUniqueId");
          !s.ok())
        return s;
      mine.assign(id.internal, sizeof(id.internal));
    }
    absl::StatusOr<std::string> shared =
        job.shareInGroup(idKey(spec, generation), spec.members.ranks, mine);
    if (!shared.ok())
      return shared.status();
    if (shared->size() != sizeof(ncclUniqueId::internal))
      return absl::DataLossError(absl::StrCat(
          "the NCCL id of ranks ", absl::StrJoin(spec.members.ranks, ", "),
          " has ", shared->size(), " bytes, not ",
          sizeof(ncclUniqueId::internal)));
    ids.push_back(*std::move(shared));
  }
  return ids;
}

absl::StatusOr<std::unique_ptr<Communicator>>
createNcclCommunicator(DistributedJob &job, const Program &program,
                       Backend &backend, std::chrono::milliseconds timeout) {
  DeviceState *dev = cuda::deviceStateOf(backend);
  if (!dev)
    return absl::InvalidArgumentError(
        absl::StrCat("--comm=nccl moves the CUDA backend's tensors, not the ",
                     backend.name(), " backend's: run with --device=cuda"));
  if (absl::Status s = cudaStatus(cudaSetDevice(dev->device), "cudaSetDevice");
      !s.ok())
    return s;
  // The plan's all-reduce algorithm (--merak-comm-algorithm), unless
  // NCCL_ALGO says otherwise; NCCL reads it as its first communicator
  // starts.
  if (program.mesh && !program.mesh->allReduceAlgorithm.empty() &&
      !std::getenv("NCCL_ALGO"))
    setenv("NCCL_ALGO",
           ("allreduce:" + program.mesh->allReduceAlgorithm).c_str(), 0);
  absl::StatusOr<std::vector<std::string>> ids =
      shareNcclIds(job, program, generations++);
  if (!ids.ok())
    return ids.status();

  // Every group's communicator starts at once (non-blocking), so ranks that
  // reach their groups in different orders cannot wait on each other.
  std::vector<ncclComm_t> comms(program.groups.size(), nullptr);
  auto abortAll = [&] {
    for (ncclComm_t c : comms)
      if (c)
        ncclCommAbort(c);
  };
  for (size_t g = 0; g < program.groups.size(); ++g) {
    const ProcessGroupSpec &spec = program.groups[g];
    ncclUniqueId id;
    std::memcpy(id.internal, (*ids)[g].data(), sizeof(id.internal));
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    if (absl::Status s = ncclStatus(
            ncclCommInitRankConfig(&comms[g], int(spec.members.ranks.size()),
                                   id, int(spec.members.index), &config),
            "ncclCommInitRankConfig");
        !s.ok()) {
      abortAll();
      return s;
    }
  }
  const Clock::time_point deadline = Clock::now() + timeout;
  for (size_t g = 0; g < program.groups.size(); ++g) {
    const std::vector<int64_t> &ranks = program.groups[g].members.ranks;
    if (absl::Status s =
            settle(comms[g], deadline, "creating the communicator");
        !s.ok()) {
      abortAll();
      std::string why = job.diagnose(ranks);
      return absl::UnavailableError(absl::StrCat(
          "NCCL among ranks ", absl::StrJoin(ranks, ", "),
          " did not start within ", double(timeout.count()) / 1000, " s",
          why.empty() ? "" : absl::StrCat(": ", why), " (", s.message(), ")"));
    }
  }

  cudaStream_t stream = nullptr;
  if (absl::Status s =
          cudaStatus(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking),
                     "creating the communication stream");
      !s.ok()) {
    abortAll();
    return s;
  }
  DeviceCommunicatorOptions options;
  options.rank = job.rank();
  options.worldSize = job.worldSize();
  options.groups = program.groups;
  options.timeout = timeout;
  options.diagnose = [&job](const std::vector<int64_t> &ranks) {
    return job.diagnose(ranks);
  };
  options.progress = [&job](int64_t step, int64_t instruction) {
    job.setProgress(step, instruction);
  };
  return makeDeviceCommunicator(
      std::make_unique<NcclStream>(*dev, std::move(comms), stream, timeout),
      std::move(options));
}

std::string ncclDescription() {
  int version = 0;
  ncclGetVersion(&version);
  return absl::StrCat("NCCL ", version / 10000, ".", (version / 100) % 100, ".",
                      version % 100);
}

bool ncclUsable(int64_t localRanks, std::string *why) {
  int count = 0;
  cudaError_t s = cudaGetDeviceCount(&count);
  if (s != cudaSuccess || count == 0) {
    if (why)
      *why = absl::StrCat("no CUDA device can be used on this machine",
                          s != cudaSuccess ? ": " + cudaText(s) : "");
    return false;
  }
  if (localRanks > count) {
    if (why)
      *why =
          absl::StrCat(localRanks, " ranks on this machine and ", count, " GPU",
                       count == 1 ? "" : "s", ": NCCL needs a GPU per rank");
    return false;
  }
  return true;
}

} // namespace merak::runtime
