//===- Distributed.h - one rank of a multi-process run ---------*- C++ -*-===//
//
// A rank joins the run through a c10d TCPStore hosted by rank 0
// (MASTER_ADDR:MASTER_PORT), keeps a heartbeat in it, and creates one Gloo
// process group per group its program communicates in. A rank that fails
// says so in the store; a rank that dies or stops answering is found by its
// peers' heartbeat watch or by Gloo's time-out. Either way every other rank
// stops within the time-out with a message naming the rank, never hangs.
// The header does not include LibTorch.
//
//===----------------------------------------------------------------------===//

#ifndef MERAK_RUNTIME_COMM_DISTRIBUTED_H
#define MERAK_RUNTIME_COMM_DISTRIBUTED_H

#include "merak/Runtime/Communicator.h"
#include "merak/Runtime/Pipeline.h"
#include "merak/Runtime/Program.h"

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace merak::runtime {

struct RendezvousOptions {
  int64_t rank = 0;
  int64_t worldSize = 1;
  /// Where rank 0 hosts the store; Gloo listens on the loopback interface
  /// when this is a loopback address, else on `interface` or the host's
  /// default address.
  std::string masterAddr = "127.0.0.1";
  int port = 29500;
  /// GLOO_SOCKET_IFNAME: the network interface Gloo uses (optional).
  std::string interface;
  /// Every wait (rendezvous, collectives, barriers) ends after this long,
  /// and a peer whose heartbeat stops for this long is declared dead.
  std::chrono::milliseconds timeout{60000};
};

/// How pipeline transfers travel between ranks.
enum class PeerTransport {
  /// Gloo's point-to-point (TCP), between any two ranks.
  Gloo,
  /// POSIX shared memory between ranks on one machine, Gloo between
  /// machines (`--p2p=shm`).
  SharedMemory,
};

/// Whether `addr` names this machine's loopback interface (every rank of
/// the run on this machine).
bool isLoopbackAddress(const std::string &addr);
/// `t` as messages say it: "0.5 s".
std::string secondsText(std::chrono::milliseconds t);

class DistributedJob {
public:
  /// Called, on the heartbeat's thread, when another rank failed or
  /// stopped answering; it should print `message` and end the process (a
  /// collective may hold the main thread). If it returns, the process exits
  /// with status 1.
  using FailureHandler = std::function<void(const std::string &message)>;

  /// Connects to the store (rank 0 creates it and waits for every rank) and
  /// starts the heartbeat. Errors name the address and the time waited.
  static absl::StatusOr<std::unique_ptr<DistributedJob>>
  join(const RendezvousOptions &options, FailureHandler onPeerFailure);
  virtual ~DistributedJob();

  virtual int64_t rank() const = 0;
  virtual int64_t worldSize() const = 0;

  /// Creates the Gloo process groups of `program` (bound to this rank) and
  /// a communicator for the CPU backend's tensors. Every rank calls it with
  /// the same program, as the groups connect collectively.
  virtual absl::StatusOr<std::unique_ptr<Communicator>>
  createGlooCommunicator(const Program &program) = 0;

  /// A point-to-point link between every pair of ranks (pipeline
  /// transfers), by `transport`. Every rank calls it, with the same
  /// transport and in the same order relative to `createGlooCommunicator`.
  virtual absl::StatusOr<std::unique_ptr<PeerLink>>
  createPeerLink(PeerTransport transport) = 0;

  /// Pipeline transfers in the device link's protocol (DevicePeerLink.h:
  /// a channel per direction, headers, receives matched by tag) on the CPU
  /// backend's tensors, each channel Gloo's sends and receives under a tag
  /// of its own (`--p2p=gloo-channels`: the path `--p2p=nccl` takes on
  /// GPUs, run by CPU ranks); a channel for each direction (from, to) of
  /// `directions` that has this rank. Every rank calls it, with the same
  /// directions and in the same order relative to the other communicators.
  virtual absl::StatusOr<std::unique_ptr<PeerLink>> createChannelLink(
      const std::vector<std::pair<int64_t, int64_t>> &directions) = 0;

  /// The same protocol with each channel a ring in /dev/shm, as `--p2p=shm`
  /// runs it between GPUs through CUDA IPC (RingChannel.h), on the CPU
  /// backend's tensors (`--p2p=shm-channels`: that path run by CPU ranks of
  /// one machine). Every rank calls it, as `createChannelLink`.
  virtual absl::StatusOr<std::unique_ptr<PeerLink>> createRingChannelLink(
      const std::vector<std::pair<int64_t, int64_t>> &directions) {
    (void)directions;
    return absl::UnimplementedError(
        "--p2p=shm-channels runs on the CPU backend's tensors, which this "
        "build does not have");
  }

  /// Every rank's `value` under `key`, in rank order, on rank 0 (other
  /// ranks get an empty list). For end-of-run reports and traces.
  virtual absl::StatusOr<std::vector<std::string>>
  gatherToRank0(const std::string &key, const std::string &value) = 0;

  /// Returns once every rank has called `barrier(name)`; an error after the
  /// time-out.
  virtual absl::Status barrier(const std::string &name) = 0;

  /// Rank 0's `value` on every rank (under `key`). Collective: every rank
  /// calls it, in the same order, so one key can be shared again.
  virtual absl::StatusOr<std::string>
  shareFromRank0(const std::string &key, const std::string &value) = 0;

  /// The value `ranks.front()` gives (this rank among `ranks`) on every
  /// rank of `ranks`, under `key`, which names one group and use: what a
  /// process group's members share (an NCCL unique id). Only the members
  /// call it; an error after the time-out.
  virtual absl::StatusOr<std::string>
  shareInGroup(const std::string &key, const std::vector<int64_t> &ranks,
               const std::string &value) = 0;

  /// The rendezvous's key-value store, for a library that connects its
  /// ranks through one (Gloo's contexts in the runtime built alone): sets
  /// `value` under `key` for every rank to read. Keys are written once.
  virtual absl::Status storeSet(const std::string &key,
                                const std::string &value) {
    (void)key, (void)value;
    return absl::UnimplementedError("this rendezvous has no key-value store");
  }
  /// The value of `key` once some rank has set it; an error naming the key
  /// after `timeout`.
  virtual absl::StatusOr<std::string>
  storeGet(const std::string &key, std::chrono::milliseconds timeout) {
    (void)key, (void)timeout;
    return absl::UnimplementedError("this rendezvous has no key-value store");
  }

  /// Tells the other ranks that this rank stops with `message` (the first
  /// failure reported wins), so they exit at once naming it. Rank 0, which
  /// hosts the store, waits briefly for the others to read it.
  virtual void abort(const std::string &message) = 0;

  /// The clean end of a run: stops the heartbeat and waits (bounded) until
  /// every rank got here, so rank 0 keeps the store up for the others.
  virtual absl::Status finish() = 0;

  /// Where this rank is (its step, and the instruction of the last
  /// collective it started; -1 before the step's first): sent with the
  /// heartbeat, so a peer whose collective times out can tell which rank
  /// never came.
  virtual void setProgress(int64_t step, int64_t instruction) = 0;

  /// After a failed collective among `ranks`: the failure another rank
  /// reported, else the peers whose heartbeat stopped (watched for a few
  /// beats), else the live peers still before this rank's position, else
  /// an empty string.
  virtual std::string diagnose(const std::vector<int64_t> &ranks) = 0;
};

} // namespace merak::runtime

#endif // MERAK_RUNTIME_COMM_DISTRIBUTED_H
