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
#include "StreamChannel.h"
#include "merak/Runtime/Comm/DeviceCollectives.h"
#include "merak/Runtime/Comm/DevicePeerLink.h"

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

using cuda::cudaStatus;
using cuda::CudaTensor;
using cuda::cudaText;
using cuda::DeviceState;
using cuda::recordMarker;
using cuda::stridedCopy;
using cuda::viewOf;
using cuda::waitForCompute;
using Clock = std::chrono::steady_clock;

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

/// The error NCCL reported for `comm` (asynchronously), else ok.
absl::Status communicatorError(ncclComm_t comm) {
  ncclResult_t state = ncclSuccess;
  if (ncclResult_t r = ncclCommGetAsyncError(comm, &state); r != ncclSuccess)
    return ncclStatus(r, "ncclCommGetAsyncError", comm);
  if (state != ncclSuccess && state != ncclInProgress)
    return ncclStatus(state, "NCCL reported", comm);
  return absl::OkStatus();
}

/// Ends `comms` at the end of a run: finalized (flushing what they hold)
/// and destroyed, or, where a peer is gone and finalizing times out,
/// aborted.
void release(const std::vector<ncclComm_t> &comms,
             std::chrono::milliseconds timeout) {
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

#define MERAK_NCCL_TRY(status)                                                 \
  do {                                                                         \
    if (absl::Status s_ = (status); !s_.ok())                                  \
      return s_;                                                               \
  } while (false)

/// A call's result on a non-blocking communicator: `ncclInProgress` means
/// the work is still being queued (the first transfer between two ranks
/// connects them), so the stream holds it only once the communicator
/// settles; events recorded before would pass at once.
absl::Status issued(ncclResult_t r, const char *what, ncclComm_t comm,
                    std::chrono::milliseconds timeout) {
  if (r != ncclInProgress)
    return ncclStatus(r, what, comm);
  return settle(comm, Clock::now() + timeout, what);
}

class NcclStream final : public cuda::CudaCollectiveStream {
public:
  NcclStream(DeviceState &dev, std::vector<ncclComm_t> comms,
             cudaStream_t stream, std::chrono::milliseconds timeout)
      : CudaCollectiveStream(dev, stream), comms(std::move(comms)),
        timeout(timeout) {}

  ~NcclStream() override {
    cudaStreamSynchronize(stream);
    if (!aborted)
      release(comms, timeout);
  }

  absl::Status enqueueAllReduce(int64_t group, const void *send, void *recv,
                                int64_t count, DType dtype,
                                DeviceReduction r) override {
    return issued(ncclAllReduce(send, recv, size_t(count), ncclTypeOf(dtype),
                                ncclOpOf(r), comms[group], stream),
                  "ncclAllReduce", comms[group], timeout);
  }
  absl::Status enqueueAllGather(int64_t group, const void *send, void *recv,
                                int64_t count, DType dtype) override {
    return issued(ncclAllGather(send, recv, size_t(count), ncclTypeOf(dtype),
                                comms[group], stream),
                  "ncclAllGather", comms[group], timeout);
  }
  absl::Status enqueueReduceScatter(int64_t group, const void *send, void *recv,
                                    int64_t count, DType dtype,
                                    DeviceReduction r) override {
    return issued(ncclReduceScatter(send, recv, size_t(count),
                                    ncclTypeOf(dtype), ncclOpOf(r),
                                    comms[group], stream),
                  "ncclReduceScatter", comms[group], timeout);
  }
  absl::Status enqueueBroadcast(int64_t group, const void *send, void *recv,
                                int64_t count, DType dtype,
                                int64_t root) override {
    return issued(ncclBroadcast(send, recv, size_t(count), ncclTypeOf(dtype),
                                int(root), comms[group], stream),
                  "ncclBroadcast", comms[group], timeout);
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
    absl::Status end = issued(ncclGroupEnd(), "ncclGroupEnd", c, timeout);
    return status.ok() ? end : status;
  }

  absl::Status asyncError() override {
    for (ncclComm_t c : comms)
      if (absl::Status s = communicatorError(c); !s.ok())
        return s;
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
  std::vector<ncclComm_t> comms;
  std::chrono::milliseconds timeout;
  bool aborted = false;
};

/// One direction of pipeline transfers: a communicator of two ranks
/// (non-blocking) and a stream of its own; the header travels through a
/// device word block written by a kernel (sending) or copied to pinned
/// host memory (receiving).
class NcclChannel final : public cuda::StreamChannel {
public:
  NcclChannel(DeviceState &dev, ncclComm_t comm, cudaStream_t stream, int peer,
              std::chrono::milliseconds timeout)
      : StreamChannel(dev, stream), comm(comm), peer(peer), timeout(timeout) {}

  /// The device and host header blocks and the ordering event.
  absl::Status init() {
    MERAK_NCCL_TRY(StreamChannel::init());
    MERAK_NCCL_TRY(cudaStatus(cudaMalloc(&deviceHeader, sizeof(PeerHeader)),
                              "a transfer header's device memory"));
    return cudaStatus(cudaMallocHost(&hostHeader, sizeof(PeerHeader)),
                      "a transfer header's host memory");
  }

  ~NcclChannel() override {
    cudaStreamSynchronize(stream);
    if (!aborted)
      release({comm}, timeout);
    cudaFree(deviceHeader);
    cudaFreeHost(hostHeader);
  }

  absl::Status enqueueSendHeader(const PeerHeader &h) override {
    try {
      cuda::writeWords(static_cast<int64_t *>(deviceHeader),
                       {h.magic, h.tag, h.bytes, h.sequence}, stream);
    } catch (const std::exception &e) {
      return absl::InternalError(e.what());
    }
    return enqueueSend(deviceHeader, sizeof(PeerHeader));
  }
  absl::Status enqueueSend(const void *data, int64_t bytes) override {
    return issued(ncclSend(data, size_t(bytes), ncclUint8, peer, comm, stream),
                  "ncclSend", comm, timeout);
  }
  absl::Status enqueueRecvHeader() override {
    MERAK_NCCL_TRY(enqueueRecv(deviceHeader, sizeof(PeerHeader)));
    return cudaStatus(cudaMemcpyAsync(hostHeader, deviceHeader,
                                      sizeof(PeerHeader),
                                      cudaMemcpyDeviceToHost, stream),
                      "reading a transfer header");
  }
  PeerHeader receivedHeader() override {
    return *static_cast<const PeerHeader *>(hostHeader);
  }
  absl::Status enqueueRecv(void *data, int64_t bytes) override {
    return issued(ncclRecv(data, size_t(bytes), ncclUint8, peer, comm, stream),
                  "ncclRecv", comm, timeout);
  }
  absl::Status asyncError() override { return communicatorError(comm); }
  void abort() override {
    if (aborted)
      return;
    aborted = true;
    ncclCommAbort(comm);
  }

private:
  ncclComm_t comm;
  int peer;
  std::chrono::milliseconds timeout;
  void *deviceHeader = nullptr;
  void *hostHeader = nullptr;
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
  return makeDeviceCommunicator(
      std::make_unique<NcclStream>(*dev, std::move(comms), stream, timeout),
      deviceCommunicatorOptions(job, program, timeout, "NCCL"));
}

absl::StatusOr<std::map<std::pair<int64_t, int64_t>, std::string>>
shareNcclChannelIds(DistributedJob &job,
                    const std::vector<std::pair<int64_t, int64_t>> &directions,
                    int64_t generation) {
  std::map<std::pair<int64_t, int64_t>, std::string> ids;
  for (const auto &[from, to] : directions) {
    if (from != job.rank() && to != job.rank())
      continue;
    std::string mine;
    if (from == job.rank()) {
      ncclUniqueId id;
      if (absl::Status s = ncclStatus(ncclGetUniqueId(&id), "ncclGetUniqueId");
          !s.ok())
        return s;
      mine.assign(id.internal, sizeof(id.internal));
    }
    absl::StatusOr<std::string> shared = job.shareInGroup(
        absl::StrCat("nccl-p2p/", generation, "/", from, "-", to), {from, to},
        mine);
    if (!shared.ok())
      return shared.status();
    if (shared->size() != sizeof(ncclUniqueId::internal))
      return absl::DataLossError(absl::StrCat(
          "the NCCL id of transfers from rank ", from, " to rank ", to, " has ",
          shared->size(), " bytes, not ", sizeof(ncclUniqueId::internal)));
    ids[{from, to}] = *std::move(shared);
  }
  return ids;
}

absl::StatusOr<std::unique_ptr<PeerLink>>
createNcclPeerLink(DistributedJob &job,
                   const std::vector<std::pair<int64_t, int64_t>> &directions,
                   Backend &backend, std::chrono::milliseconds timeout) {
  DeviceState *dev = cuda::deviceStateOf(backend);
  if (!dev)
    return absl::InvalidArgumentError(
        absl::StrCat("--p2p=nccl moves the CUDA backend's tensors, not the ",
                     backend.name(), " backend's: run with --device=cuda"));
  if (absl::Status s = cudaStatus(cudaSetDevice(dev->device), "cudaSetDevice");
      !s.ok())
    return s;
  absl::StatusOr<std::map<std::pair<int64_t, int64_t>, std::string>> ids =
      shareNcclChannelIds(job, directions, generations++);
  if (!ids.ok())
    return ids.status();

  // Every channel's communicator starts at once (non-blocking), as the
  // collectives' do.
  const int64_t me = job.rank();
  std::vector<std::pair<std::pair<int64_t, int64_t>, ncclComm_t>> comms;
  auto abortFrom = [&](size_t first) {
    for (size_t k = first; k < comms.size(); ++k)
      if (comms[k].second)
        ncclCommAbort(comms[k].second);
  };
  for (const auto &[direction, bytes] : *ids) {
    ncclUniqueId id;
    std::memcpy(id.internal, bytes.data(), sizeof(id.internal));
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    comms.push_back({direction, nullptr});
    if (absl::Status s = ncclStatus(
            ncclCommInitRankConfig(&comms.back().second, 2, id,
                                   direction.first == me ? 0 : 1, &config),
            "ncclCommInitRankConfig");
        !s.ok()) {
      abortFrom(0);
      return s;
    }
  }
  const Clock::time_point deadline = Clock::now() + timeout;
  for (const auto &[direction, comm] : comms) {
    const int64_t peer =
        direction.first == me ? direction.second : direction.first;
    if (absl::Status s = settle(comm, deadline, "creating the communicator");
        !s.ok()) {
      abortFrom(0);
      std::string why = job.diagnose({peer});
      return absl::UnavailableError(absl::StrCat(
          "NCCL transfers from rank ", direction.first, " to rank ",
          direction.second, " did not start within ",
          double(timeout.count()) / 1000, " s",
          why.empty() ? "" : absl::StrCat(": ", why), " (", s.message(), ")"));
    }
  }

  std::map<int64_t, std::unique_ptr<PeerChannel>> outgoing, incoming;
  for (size_t k = 0; k < comms.size(); ++k) {
    const auto &[direction, comm] = comms[k];
    const bool sending = direction.first == me;
    cudaStream_t stream = nullptr;
    if (absl::Status s = cudaStatus(
            cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking),
            "creating a transfer stream");
        !s.ok()) {
      abortFrom(k);
      return s;
    }
    // In the two-rank communicator the sender is rank 0.
    auto channel = std::make_unique<NcclChannel>(*dev, comm, stream,
                                                 sending ? 1 : 0, timeout);
    comms[k].second = nullptr; // the channel owns it now
    if (absl::Status s = channel->init(); !s.ok()) {
      abortFrom(k + 1);
      return s;
    }
    (sending ? outgoing[direction.second] : incoming[direction.first]) =
        std::move(channel);
  }
  return cuda::makeCudaPeerLink(job, *dev, std::move(outgoing),
                                std::move(incoming), timeout, "NCCL");
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
      *why = absl::StrCat(localRanks, " ranks on this machine and ", count,
                          " GPU", count == 1 ? "" : "s",
                          ": NCCL needs a GPU per rank it connects");
    return false;
  }
  return true;
}

} // namespace merak::runtime
