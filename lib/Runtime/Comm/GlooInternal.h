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

#include "merak/Runtime/Comm/Distributed.h"

#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>

#include <chrono>
#include <exception>
#include <map>
#include <memory>
#include <optional>
#include <string>
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

/// A process group of the program and the Gloo group that runs it.
struct Group {
  c10::intrusive_ptr<c10d::ProcessGroupGloo> pg;
  ProcessGroupSpec spec;
};

/// The communicator of a program's `groups` (GlooCollectives.cpp).
std::unique_ptr<Communicator> makeCommunicator(Job &job,
                                               std::vector<Group> groups);
/// Transfers between any two ranks over `pg`, a group of every rank
/// (GlooPointToPoint.cpp).
std::unique_ptr<PeerLink>
makePeerLink(Job &job, c10::intrusive_ptr<c10d::ProcessGroupGloo> pg);
/// Transfers through /dev/shm between this rank and the ranks of
/// `localPids` (rank -> process id, on this machine), through `fallback`
/// with any other; file names carry `run`, the same on every rank of the
/// run (SharedMemoryLink.cpp). Removes the files of dead senders first.
/// Collective: every rank calls it.
absl::StatusOr<std::unique_ptr<PeerLink>>
makeSharedMemoryLink(Job &job, std::unique_ptr<PeerLink> fallback,
                     std::map<int64_t, int64_t> localPids,
                     const std::string &run, std::chrono::milliseconds timeout);

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
