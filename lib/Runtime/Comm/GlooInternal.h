//===- GlooInternal.h - what the Gloo translation units share ---*- C++ -*-===//
//
// Gloo through c10d is three translation units: GlooRendezvous.cpp (the
// TCPStore every rank joins, the heartbeat, barriers, and the process
// groups), GlooCollectives.cpp (the mesh collectives on the CPU backend's
// tensors) and GlooPointToPoint.cpp (the pipeline's transfers). This
// private header is what they share; it includes c10d.
//
//===----------------------------------------------------------------------===//

#ifndef MERAK_LIB_RUNTIME_COMM_GLOOINTERNAL_H
#define MERAK_LIB_RUNTIME_COMM_GLOOINTERNAL_H

#include "merak/Runtime/Comm/DeviceCollectives.h"
#include "merak/Runtime/Comm/Distributed.h"

#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>

#include <chrono>
#include <condition_variable>
#include <deque>
#include <exception>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace merak::runtime::gloo {

/// The job the collectives and the transfers belong to.
class Job : public DistributedJob {
public:
  using DistributedJob::diagnose;
  /// As `diagnose`, for a failure of the collective at (step,
  /// instruction): a live peer is late when it has not started that one.
  virtual std::string diagnose(const std::vector<int64_t> &ranks, int64_t step,
                               int64_t instruction) = 0;
};

/// Runs tasks one after the other on a thread of its own: the
/// halving-doubling all-reduces of one group, in the order they start
/// (the same on every member), each on a fresh slot of the group's
/// context.
class SerialWorker {
public:
  SerialWorker();
  ~SerialWorker();
  /// Queues `task`; the future holds its exception, if it throws.
  std::future<void> post(std::function<void()> task);

private:
  std::mutex mutex;
  std::condition_variable changed;
  std::deque<std::packaged_task<void()>> tasks;
  bool stopping = false;
  std::thread thread;
};

/// A process group of the program and the Gloo group that runs it; with
/// `halvingDoubling` (the plan's tree all-reduce), a Gloo context of the
/// same members that Gloo's halving-doubling all-reduce runs on.
struct Group {
  c10::intrusive_ptr<c10d::ProcessGroupGloo> pg;
  ProcessGroupSpec spec;
  std::shared_ptr<::gloo::Context> halvingDoubling;
  std::shared_ptr<SerialWorker> worker;
};

/// The communicator of a program's `groups` (GlooCollectives.cpp).
std::unique_ptr<Communicator> makeCommunicator(Job &job,
                                               std::vector<Group> groups);
/// Transfers between any two ranks over `pg`, a group of every rank
/// (GlooPointToPoint.cpp).
std::unique_ptr<PeerLink>
makePeerLink(Job &job, c10::intrusive_ptr<c10d::ProcessGroupGloo> pg);
/// The device link's protocol on CPU tensors over `pg`, a group of every
/// rank: a channel for each direction of `directions` with this rank
/// (GlooPointToPoint.cpp).
std::unique_ptr<PeerLink>
makeChannelLink(Job &job, c10::intrusive_ptr<c10d::ProcessGroupGloo> pg,
                const std::vector<std::pair<int64_t, int64_t>> &directions,
                std::chrono::milliseconds timeout);
/// The device link's protocol on CPU tensors through rings in /dev/shm, as
/// `--p2p=shm` runs it between GPUs (RingChannel.h): a channel for each
/// direction of `directions` with this rank (GlooPointToPoint.cpp).
absl::StatusOr<std::unique_ptr<PeerLink>>
makeRingChannelLink(Job &job,
                    const std::vector<std::pair<int64_t, int64_t>> &directions,
                    std::chrono::milliseconds timeout);
/// Bytes of each direction's ring there, unless MERAK_P2P_RING_BYTES says.
constexpr int64_t kHostRingBytes = int64_t(8) << 20;
/// Transfers through /dev/shm between this rank and the ranks of
/// `localPids` (rank -> process id, on this machine), through `fallback`
/// with any other; file names carry `run`, the same on every rank of the
/// run (SharedMemoryLink.cpp). Removes the files of dead senders first.
/// Collective: every rank calls it.
absl::StatusOr<std::unique_ptr<PeerLink>>
makeSharedMemoryLink(Job &job, std::unique_ptr<PeerLink> fallback,
                     std::map<int64_t, int64_t> localPids,
                     const std::string &run, std::chrono::milliseconds timeout);

/// A CPU backend tensor as the device protocols read it (DeviceBuffer);
/// an element type they cannot move is an error naming `what`
/// (GlooPointToPoint.cpp).
absl::StatusOr<DeviceBuffer> describeCpuTensor(DeviceTensor &tensor,
                                               const char *what);
/// `b` (host memory) as a tensor over the same memory.
at::Tensor cpuTensorOf(const DeviceBuffer &b);

/// A c10d or Gloo error in one line, without the C++ backtrace.
std::string describe(const std::exception &e);
/// The state letter (`R`, `S`, `T` stopped, `t` stopped by a debugger,
/// `Z` ...) and start time (clock ticks after boot) of local process `pid`,
/// from /proc; none if there is no such process.
std::optional<std::pair<char, uint64_t>> processState(int64_t pid);
/// `12 s`.
std::string seconds(std::chrono::milliseconds ms);

} // namespace merak::runtime::gloo

#endif // MERAK_LIB_RUNTIME_COMM_GLOOINTERNAL_H
