//===- HostGloo.h - Gloo's collectives on host memory, without LibTorch -*-===//
//
// The collective library calls of a `CollectiveStream` (DeviceCollectives.h)
// run by the Gloo library itself (libgloo, not c10d) on host buffers. It is
// what runs the collectives of ranks that share a GPU in the runtime built
// alone (no LibTorch, so no c10d and no CPU backend): NCCL refuses two ranks
// on one device, so the CUDA backend stages each operand through host memory
// and these calls move it (`--comm=gloo` there, CUDA/GlooStaged.cpp). Every
// partitioned plan can then be checked on GPU kernels on one GPU.
//
// Each process group is a Gloo context of its own, connected through the
// run's key-value store (the rendezvous directory of FileRendezvous.h, or any
// Gloo store); the calls are synchronous: they return once the data has moved,
// or fail after the time-out naming the group's ranks. Reductions run in the
// element type (float16 and bfloat16 through float, rounded to nearest even
// after each step, as NCCL's do); booleans move as bytes (a sum or maximum is
// a logical or, a product or minimum a logical and).
//
//===----------------------------------------------------------------------===//

#ifndef MERAK_RUNTIME_COMM_HOSTGLOO_H
#define MERAK_RUNTIME_COMM_HOSTGLOO_H

#include "merak/Runtime/Comm/DeviceCollectives.h"
#include "merak/Runtime/Comm/Distributed.h"

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace gloo {
class Context;
namespace rendezvous {
class Store;
} // namespace rendezvous
namespace transport {
class Device;
} // namespace transport
} // namespace gloo

namespace merak::runtime {

/// Where this rank's Gloo connections listen: the interface `interface`
/// names (GLOO_SOCKET_IFNAME) where set, else the loopback address when
/// `masterAddr` is one (every rank on this machine), else the address this
/// machine's host name resolves to.
absl::StatusOr<std::shared_ptr<::gloo::transport::Device>>
openHostGlooDevice(const std::string &masterAddr, const std::string &interface);

/// `job`'s key-value store (DistributedJob::storeSet / storeGet) as Gloo's,
/// every key under `prefix`; a key not set within `timeout` throws.
std::unique_ptr<::gloo::rendezvous::Store>
makeJobGlooStore(DistributedJob &job, std::string prefix,
                 std::chrono::milliseconds timeout);

class HostGlooCollectives;

/// Connects `job`'s rank to `groups` (bound to it) through the job's
/// key-value store, listening where `openHostGlooDevice` says for
/// MASTER_ADDR and GLOO_SOCKET_IFNAME. Every rank calls it with its
/// groups, in the same order relative to other communicators. Errors add
/// what the job knows of the other ranks.
absl::StatusOr<std::unique_ptr<HostGlooCollectives>>
connectHostGloo(DistributedJob &job,
                const std::vector<ProcessGroupSpec> &groups,
                std::chrono::milliseconds timeout);

/// One rank's Gloo contexts, one per process group it belongs to, and the
/// collective calls of `CollectiveStream` on host memory.
class HostGlooCollectives {
public:
  /// Connects this rank to every group of `groups` (bound to this rank:
  /// every group has it), in order, through `store`; every member calls it
  /// with its own groups in the same axis order. Errors name the group's
  /// ranks and the time-out.
  static absl::StatusOr<std::unique_ptr<HostGlooCollectives>>
  connect(::gloo::rendezvous::Store &store,
          std::shared_ptr<::gloo::transport::Device> device,
          const std::vector<ProcessGroupSpec> &groups,
          std::chrono::milliseconds timeout);
  ~HostGlooCollectives();

  /// The calls of `CollectiveStream` (their `enqueue*` without the queue):
  /// `count` elements of `dtype` per member, `send` may equal `recv`.
  absl::Status allReduce(int64_t group, const void *send, void *recv,
                         int64_t count, DType dtype, DeviceReduction r);
  absl::Status allGather(int64_t group, const void *send, void *recv,
                         int64_t count, DType dtype);
  absl::Status reduceScatter(int64_t group, const void *send, void *recv,
                             int64_t count, DType dtype, DeviceReduction r);
  absl::Status broadcast(int64_t group, const void *send, void *recv,
                         int64_t count, DType dtype, int64_t root);
  absl::Status exchange(int64_t group, DType dtype,
                        const std::vector<DeviceTransfer> &sends,
                        const std::vector<DeviceTransfer> &receives);

  /// The number of members of `group`.
  int64_t groupSize(int64_t group) const;

private:
  struct Group {
    ProcessGroupSpec spec;
    std::shared_ptr<::gloo::Context> context;
    /// Exchanges so far: each takes a slot of its own.
    uint32_t exchanges = 0;
  };
  HostGlooCollectives(std::vector<Group> groups,
                      std::chrono::milliseconds timeout);
  /// `what` among `group`'s ranks failed with `why`.
  absl::Status failure(int64_t group, const char *what,
                       const std::string &why) const;
  absl::Status checkGroup(int64_t group) const;

  std::vector<Group> groups;
  std::chrono::milliseconds timeout;
};

} // namespace merak::runtime

#endif // MERAK_RUNTIME_COMM_HOSTGLOO_H
