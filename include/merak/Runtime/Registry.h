//===- Registry.h - backends and communicators chosen by name --*- C++ -*-===//
//
// A run picks its kernels (`--device=cpu`) and its collectives
// (`--comm=gloo`) by name. Each component of the runtime that a build
// includes registers itself here (`registerBuiltinComponents`); a name the
// build lacks is an error that lists the ones it has. Before the first
// step, `checkBackendSupports` refuses a program with an op the backend
// has no kernel for, naming the op and where it came from.
//
//===----------------------------------------------------------------------===//

#ifndef MERAK_RUNTIME_REGISTRY_H
#define MERAK_RUNTIME_REGISTRY_H

#include "merak/Runtime/Backend.h"
#include "merak/Runtime/Comm/Distributed.h"
#include "merak/Runtime/Program.h"

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace merak::runtime {

/// What a run asks of its backend.
struct DeviceOptions {
  /// Kernel threads; 0 leaves the choice to the backend.
  int threads = 0;
  /// Place the step's temporaries in the planned arena.
  bool arena = true;
  /// Backend-specific settings (the CPU backend's `gemm` = `onednn` or
  /// `blas`, `blas-threads` = `0` or `1`); a backend refuses one it does
  /// not know.
  std::map<std::string, std::string> settings;
};

struct BackendEntry {
  std::string name;
  std::string description;
  std::function<absl::StatusOr<std::unique_ptr<Backend>>(const DeviceOptions &)>
      create;
  /// The kernel libraries it uses, for `--profile` (may be empty).
  std::function<std::string()> libraries;
  /// Whether the backend can run on this machine (a GPU backend: a device
  /// and its driver), for `--device=auto`; `why` says why not. Unset:
  /// always.
  std::function<bool(std::string *why)> available;
  /// Whether it has a kernel for `fused` chains that can run here (the
  /// CUDA backend's needs NVRTC), so that `--fuse-elementwise=auto` fuses
  /// for it (Fusion.h). Unset: it has none.
  std::function<bool()> fusesElementwise;
  /// Compiles a fused kernel's source (`fusedKernelSource`) for an
  /// architecture ("sm_90") without running it, returning the machine
  /// code (`--compile-fused-kernels`); unset for a backend without them.
  std::function<absl::StatusOr<std::string>(const std::string &source,
                                            const std::string &arch)>
      compileFusedKernel;
  /// `--p2p=shm` on the device's own memory: pipeline transfers between
  /// ranks of one machine over the directions (from, to) of global ranks
  /// in `directions` that have this rank (the same list on every rank;
  /// every rank calls it). Unset: `--p2p=shm` goes through the host's
  /// shared memory (staged for a device backend).
  std::function<absl::StatusOr<std::unique_ptr<PeerLink>>(
      DistributedJob &,
      const std::vector<std::pair<int64_t, int64_t>> &directions, Backend &,
      std::chrono::milliseconds timeout)>
      createSharedMemoryLink;
};

struct CommunicatorEntry {
  std::string name;
  std::string description;
  /// Joins the run (rendezvous, heartbeat); the job then creates the
  /// communicator and the pipeline links.
  std::function<absl::StatusOr<std::unique_ptr<DistributedJob>>(
      const RendezvousOptions &, DistributedJob::FailureHandler)>
      join;
  /// Creates the communicator of `program`'s groups (bound to this rank)
  /// for `backend`'s tensors once the job has joined; every rank calls it
  /// with the same program. Unset: the job's Gloo communicator, for the
  /// CPU backend's tensors.
  std::function<absl::StatusOr<std::unique_ptr<Communicator>>(
      DistributedJob &, const Program &, Backend &,
      std::chrono::milliseconds timeout)>
      create;
  /// Pipeline transfers of `backend`'s tensors on the same library, over
  /// the directions (from, to) of global ranks in `directions` that have
  /// this rank (the same list on every rank); every rank calls it. Unset:
  /// the library has none, and the transfers go through the host.
  std::function<absl::StatusOr<std::unique_ptr<PeerLink>>(
      DistributedJob &,
      const std::vector<std::pair<int64_t, int64_t>> &directions, Backend &,
      std::chrono::milliseconds timeout)>
      createLink;
  /// The backend whose tensors `create`'s communicator moves ("cuda");
  /// empty for the CPU backend's.
  std::string device;
  /// Whether `create`'s communicator moves host copies of the device's
  /// tensors (Gloo in the runtime built alone): `--comm=auto` takes it
  /// only where the device's own communicator cannot run.
  bool stagedThroughHost = false;
  /// Whether it can run collectives among `localRanks` ranks of one mesh
  /// on this machine (NCCL: a GPU each; a pipeline's stages may share
  /// one); `why` says why not. Unset: always.
  std::function<bool(int64_t localRanks, std::string *why)> available;
};

/// Adds an entry; a second entry of the same name replaces the first.
void registerBackend(BackendEntry entry);
void registerCommunicator(CommunicatorEntry entry);

/// Every component this build has (the CPU backend, Gloo); idempotent.
void registerBuiltinComponents();

/// The named entry, or an error naming what this build has instead.
/// `auto` is the CUDA backend where this build has it and a GPU can be
/// used, else the CPU backend.
absl::StatusOr<const BackendEntry *> findBackend(const std::string &name);
absl::StatusOr<const CommunicatorEntry *>
findCommunicator(const std::string &name);
std::vector<std::string> backendNames();
std::vector<std::string> communicatorNames();

/// An error naming every op of `program` (by name and source location)
/// that `backend` has no kernel for; ok when it has them all.
absl::Status checkBackendSupports(const Program &program,
                                  const Backend &backend);

} // namespace merak::runtime

#endif // MERAK_RUNTIME_REGISTRY_H
