//===- HardwareProbe.h - measures a hardware profile ------------*- C++ -*-===//
//
// `merak-exec --profile-hardware`: the figures of a HardwareProfile
// measured on this machine through the runtime's own interfaces, so that
// they are what a training step would see. GEMM rates by size and element
// type and the cost of a kernel launch come from the backend's kernels,
// memory bandwidth from an elementwise op on tensors far larger than the
// caches, collectives and point-to-point transfers from the communicator
// and the peer link of a run of several ranks. docs/runtime.md (Hardware
// profiles) describes the measurements and the file.
//
//===----------------------------------------------------------------------===//

#ifndef MERAK_RUNTIME_HARDWAREPROBE_H
#define MERAK_RUNTIME_HARDWAREPROBE_H

#include "merak/Hardware/HardwareProfile.h"
#include "merak/Runtime/Backend.h"
#include "merak/Runtime/Comm/Distributed.h"

#include "absl/status/statusor.h"

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

namespace merak::runtime {

struct HardwareProbeOptions {
  /// Wall time the whole measurement aims at, in seconds. Sizes that would
  /// not fit are left out (the smallest few are always measured), so a
  /// small budget gives a coarser table, not an error.
  double seconds = 60;
  /// The profile's `name`.
  std::string name = "local";
  /// Ranks on this machine (LOCAL_WORLD_SIZE): the profile's
  /// `devices_per_node`, which share its memory, and the group size beyond
  /// which a group of consecutive ranks crosses machines. 0: every rank of
  /// the run is local.
  int64_t localWorldSize = 0;
  /// The largest matrix side of the GEMM table (powers of two from 32).
  int64_t largestGemm = 2048;
  /// Bytes of each operand of the memory-bandwidth add; 0 chooses them
  /// from the last-level cache (docs/runtime.md).
  int64_t bandwidthBytes = 0;
  /// How the transfers between ranks 0 and 1 travel (merak-exec --p2p).
  PeerTransport p2p = PeerTransport::Gloo;
  /// The communicator of a program's groups for the backend's tensors
  /// (NCCL's for the CUDA backend); unset: the job's Gloo communicator.
  /// Every rank calls it with the same programs in the same order.
  std::function<absl::StatusOr<std::unique_ptr<Communicator>>(const Program &)>
      communicator;
  /// The link between ranks 0 and 1 (both directions) for the backend's
  /// tensors; unset: the job's link of `p2p`. Every rank calls it.
  std::function<absl::StatusOr<std::unique_ptr<PeerLink>>(
      const std::vector<std::pair<int64_t, int64_t>> &directions)>
      link;
  /// Progress lines for a person (rank 0's), or null.
  std::function<void(const std::string &)> progress;
};

/// Measures this machine. Every rank of a run calls it with its `job` (null
/// for one process) and the same options; the ranks measure their kernels
/// at the same time, each on its share of the cores as in training, then
/// the collectives over every group size the ranks allow (the powers of
/// two that divide the world size, and the world size) and the transfers
/// between ranks 0 and 1. Rank 0's measurements make the profile (other
/// ranks get it too, less the facts only rank 0 reads). Errors name the
/// measurement.
absl::StatusOr<HardwareProfile>
probeHardware(Backend &backend, DistributedJob *job,
              const HardwareProbeOptions &options);

/// Latency and bandwidth from timed messages `{bytes, seconds}` (any
/// order): the latency is the time of the smallest message, the bandwidth
/// that of the largest once that latency is taken off, so that
/// `latency + bytes / bandwidth` gives both ends back. One message gives
/// its bytes over its time and no latency.
LinkFigures fitLatencyBandwidth(std::vector<std::pair<double, double>> timed);

/// `MemTotal` of /proc/meminfo's text in bytes, or 0 when absent.
int64_t memTotalBytes(const std::string &meminfo);
/// The first `model name` of /proc/cpuinfo's text, or empty.
std::string cpuModelName(const std::string &cpuinfo);

} // namespace merak::runtime

#endif // MERAK_RUNTIME_HARDWAREPROBE_H
