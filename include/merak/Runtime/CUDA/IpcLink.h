//===- IpcLink.h - pipeline transfers between GPUs through CUDA IPC -*- C++
//-*-//
//
// `--p2p=shm --device=cuda`: the ranks of one machine hand each other
// their activations and gradients GPU to GPU, without NCCL and without the
// host: each incoming direction is a ring in the receiver's device memory
// that the sender copies into (a CUDA IPC handle), ordered by counts in a
// control block of shared host memory that both ranks' streams wait on
// and write (`cuStreamWaitValue64`, `cuStreamWriteValue64`): the protocol
// of RingChannel.h, under the device link of DevicePeerLink.h.
//
//===----------------------------------------------------------------------===//

#ifndef MERAK_RUNTIME_CUDA_IPCLINK_H
#define MERAK_RUNTIME_CUDA_IPCLINK_H

#include "merak/Runtime/Comm/Distributed.h"

#include "absl/status/statusor.h"

#include <chrono>
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

namespace merak::runtime {

/// Bytes of each incoming direction's ring (device memory of the
/// receiver); a transfer larger than the ring streams through it.
constexpr int64_t kIpcRingBytes = int64_t(64) << 20;

/// The link of this rank over `directions` (global ranks (from, to), the
/// same list on every rank; those without this rank are skipped), every
/// peer on this machine; `backend` is the CUDA backend. Every rank of the
/// directions calls it.
absl::StatusOr<std::unique_ptr<PeerLink>>
createIpcPeerLink(DistributedJob &job,
                  const std::vector<std::pair<int64_t, int64_t>> &directions,
                  Backend &backend, std::chrono::milliseconds timeout);

} // namespace merak::runtime

#endif // MERAK_RUNTIME_CUDA_IPCLINK_H
