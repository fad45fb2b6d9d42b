//===- Nccl.h - the mesh collectives on NCCL --------------------*- C++ -*-===//
//
// Built where the CUDA backend and NCCL are (MERAK_HAVE_NCCL): the
// collectives of the CUDA backend's tensors on NCCL (`--comm=nccl`), one
// NCCL communicator per process group of the program, each bootstrapped
// from a unique id its first rank makes and shares through the run's
// rendezvous store (`DistributedJob::shareInGroup`); NCCL's own
// all-reduce, all-gather, reduce-scatter and broadcast, all-to-all as a
// group of sends and receives, on a communication stream of their own
// (DeviceCollectives.h). The communicators are non-blocking, so a rank
// that dies or hangs makes the others stop within the time-out, naming
// it, with `ncclCommAbort`. `NCCL_*` environment variables apply as NCCL
// reads them. See docs/runtime.md, "NCCL".
//
//===----------------------------------------------------------------------===//
#ifndef MERAK_RUNTIME_CUDA_NCCL_H
#define MERAK_RUNTIME_CUDA_NCCL_H

#include "merak/Runtime/Comm/Distributed.h"

#include "absl/status/statusor.h"

#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace merak::runtime {

/// The NCCL communicator of `program`'s groups (bound to this rank) for
/// `backend`'s tensors (the CUDA backend's). Every rank calls it with the
/// same program, in the same order relative to other communicators.
absl::StatusOr<std::unique_ptr<Communicator>>
createNcclCommunicator(DistributedJob &job, const Program &program,
                       Backend &backend, std::chrono::milliseconds timeout);

/// The bootstrap alone (no GPU needed): a fresh NCCL unique id per group of
/// `program`, made by the group's first rank and shared with its members
/// through `job`, as each group's bytes. `generation` keeps the keys of
/// one communicator's groups apart from another's.
absl::StatusOr<std::vector<std::string>>
shareNcclIds(DistributedJob &job, const Program &program, int64_t generation);

/// Pipeline transfers of `backend`'s tensors (the CUDA backend's) on NCCL
/// (DevicePeerLink.h): a channel for each direction of `directions` (the
/// same list on every rank, `pipelineDirections`) that has this rank, each
/// a non-blocking communicator of its two ranks and a stream of its own.
/// Every rank calls it, in the same order relative to other communicators.
absl::StatusOr<std::unique_ptr<PeerLink>>
createNcclPeerLink(DistributedJob &job,
                   const std::vector<std::pair<int64_t, int64_t>> &directions,
                   Backend &backend, std::chrono::milliseconds timeout);

/// The bootstrap of those channels alone (no GPU needed): for each
/// direction with this rank, the id its sender makes, shared through `job`
/// in `directions`' order.
absl::StatusOr<std::map<std::pair<int64_t, int64_t>, std::string>>
shareNcclChannelIds(DistributedJob &job,
                    const std::vector<std::pair<int64_t, int64_t>> &directions,
                    int64_t generation);

/// NCCL's version ("NCCL 2.28.9").
std::string ncclDescription();

/// Whether `localRanks` ranks can each have a GPU of this machine (NCCL
/// refuses two ranks on one device); `why` says why not.
bool ncclUsable(int64_t localRanks, std::string *why);

} // namespace merak::runtime

#endif // MERAK_RUNTIME_CUDA_NCCL_H
