//===- FileRendezvous.h - a run's ranks meeting in a directory -*- C++ -*-===//
//
// The rendezvous of the runtime built alone (no LibTorch, so no c10d
// TCPStore): the ranks meet in a directory every one of them can reach (on
// one machine, a temporary directory; across machines, one on a shared
// file system), where each value is a file written whole and renamed into
// place. It gives NCCL what it needs (its unique ids, barriers, the
// heartbeat) and nothing Gloo does, so collectives and pipeline transfers
// run on NCCL. The semantics are the TCPStore job's (Distributed.h): a
// rank that fails says so in a file the others watch; a rank whose
// heartbeat stops for the time-out, or whose process on this machine is
// gone, is named by the others, which stop.
//
// Joining: rank 0 replaces whatever an earlier run left with a fresh
// directory under a new epoch; every rank registers a nonce of its own
// under that epoch and goes on once rank 0 has listed every rank's nonce,
// so no rank can join a stale run's directory. Rank 0 removes the
// directory at the clean end of the run.
//
//===----------------------------------------------------------------------===//

#ifndef MERAK_RUNTIME_COMM_FILERENDEZVOUS_H
#define MERAK_RUNTIME_COMM_FILERENDEZVOUS_H

#include "merak/Runtime/Comm/Distributed.h"

#include <memory>
#include <string>

namespace merak::runtime {

/// Joins the run of `options` through `directory` (created by rank 0;
/// its parent must exist). Errors name the directory and the ranks that
/// did not come within the time-out.
absl::StatusOr<std::unique_ptr<DistributedJob>>
joinFileRendezvous(const RendezvousOptions &options,
                   const std::string &directory,
                   DistributedJob::FailureHandler onPeerFailure);

/// The directory a run of `options` meets in: MERAK_RENDEZVOUS_DIR where
/// set (shared by every machine of the run), else
/// `$TMPDIR/merak-rendezvous-<MASTER_ADDR>-<MASTER_PORT>` (`/tmp` without
/// TMPDIR), which the ranks of one machine share.
std::string fileRendezvousDirectory(const RendezvousOptions &options);

/// `joinFileRendezvous` in `fileRendezvousDirectory(options)`: how the
/// communicators of the runtime built alone join a run.
absl::StatusOr<std::unique_ptr<DistributedJob>>
joinRunDirectory(const RendezvousOptions &options,
                 DistributedJob::FailureHandler onPeerFailure);

} // namespace merak::runtime

#endif // MERAK_RUNTIME_COMM_FILERENDEZVOUS_H
