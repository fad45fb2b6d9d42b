//===- HardwareProfile.h - what a machine computes and moves ----*- C++ -*-===//
//
// The figures the cost model prices a plan with: arithmetic rates by GEMM
// size and element type, memory bandwidth and capacity, point-to-point and
// collective bandwidth and latency by group size and by whether the group
// crosses nodes. A profile is measured (`merak-exec --profile-hardware`),
// documented (vendor data sheets: profiles/*.json), or read from a
// Galvatron hardware-profile directory. Plain C++: the runtime writes
// profiles, the compiler reads them. docs/runtime.md (Hardware profiles)
// describes the file.
//
//===----------------------------------------------------------------------===//
#ifndef MERAK_HARDWARE_HARDWAREPROFILE_H
#define MERAK_HARDWARE_HARDWAREPROFILE_H

#include "merak/Hardware/CollectiveCost.h"

#include <map>
#include <string>
#include <vector>

namespace merak {

/// One measured GEMM: a problem of `flops` FLOPs ran at `rate` FLOP/s.
struct GemmPoint {
  double flops = 0;
  double rate = 0;
};

/// A collective measured on a group: `op` is allreduce, allgather,
/// reducescatter or alltoall; `busBandwidth` is bytes one rank sends per
/// second (the collective's bytes per rank as CollectiveCost.h counts
/// them, over the time less `latency`).
struct CollectivePoint {
  std::string op;
  int group = 2;
  bool interNode = false;
  double busBandwidth = 0;
  double latency = 0;
  /// What the collective costs on average above its lockstep time when the
  /// ranks reach it from compute and wait for it at once: their arrival
  /// skew, communication threads that wake late (0: nothing measured).
  double stall = 0;
};

/// A link between two devices.
struct LinkFigures {
  double bandwidth = 0;
  double latency = 0;
  /// What a receiver that waits for a transfer pays on average above the
  /// lockstep latency when it comes from compute (0: nothing measured).
  double stall = 0;
};

/// The machine the estimates are for. The scalar fields alone describe a
/// generic data-centre GPU (the defaults); the tables, when present, refine
/// them.
struct HardwareProfile {
  std::string name = "default";
  /// "measured", "documented" or "galvatron"; documented figures come from
  /// data sheets, not from this machine.
  std::string source = "documented";
  /// What the devices are ("cpu", "NVIDIA A100-SXM4-80GB", ...).
  std::string device = "generic";
  int devicesPerNode = 8;

  /// Peak arithmetic rate, FLOP/s (the fp32 rate unless `peakByType` says).
  double peakFlops = 100e12;
  /// Device memory bandwidth, bytes/s.
  double memoryBandwidth = 2e12;
  /// Device memory capacity, bytes.
  double memoryCapacity = 80e9;
  /// Bandwidth of the link between neighbouring pipeline ranks, bytes/s.
  double linkBandwidth = 50e9;
  /// Latency of one message on that link, seconds.
  double linkLatency = 5e-6;
  /// Fixed cost of launching one kernel, seconds (0: ignored).
  double opOverhead = 0;
  /// Bandwidth each rank sends and receives at in a collective, bytes/s.
  double collectiveBandwidth = 100e9;
  /// Latency of one collective, seconds.
  double collectiveLatency = 10e-6;

  /// Peak rate by element type ("f32", "tf32", "bf16", "f16").
  std::map<std::string, double> peakByType;
  /// Measured GEMM rates by element type, strictly ascending in `flops`
  /// (the parser refuses other orders).
  std::map<std::string, std::vector<GemmPoint>> gemm;
  /// Point-to-point links inside a node and between nodes; a zero
  /// bandwidth falls back to linkBandwidth / linkLatency.
  LinkFigures intraNode, interNode;
  /// Measured or documented collectives.
  std::vector<CollectivePoint> collectives;
  /// How much slower computation runs while a collective overlaps it
  /// (Galvatron's overlap coefficient; 1: no slowdown).
  double overlapCoefficient = 1.0;

  /// The rate a GEMM of `flops` FLOPs runs at in `type`: interpolated
  /// (log-log) in the measured table, clamped at its ends; the peak when
  /// there is no table for the type.
  double gemmRate(const std::string &type, double flops) const;
  /// Peak FLOP/s of `type` (peakFlops when the type is not listed).
  double peak(const std::string &type) const;
  /// Time of collective `op` over `group` ranks in which each rank sends
  /// `bytesPerRank` bytes: the nearest measured group size of the same
  /// span (its latency and bandwidth), else collectiveLatency /
  /// collectiveBandwidth (inter-node groups: the inter-node link's
  /// bandwidth when it is lower).
  double collectiveTime(const std::string &op, int group, bool interNode,
                        double bytesPerRank) const;
  /// The stall of collective `op` over `group` ranks (the same entry as
  /// collectiveTime's; 0 without one): what a step pays on top of
  /// collectiveTime for each such collective it waits for at once.
  double collectiveStall(const std::string &op, int group,
                         bool interNode) const;
  /// The entry collectiveTime prices `op` over `group` ranks by, or null.
  const CollectivePoint *nearestCollective(const std::string &op, int group,
                                           bool interNode) const;
  /// Time to send `bytes` to another device of the same or another node,
  /// as the receiver waiting for them sees it (the link's stall included).
  double transferTime(double bytes, bool interNode) const;
  /// Time of an all-reduce of a `bytes` tensor over `group` ranks by
  /// `algorithm`: its steps (CollectiveCost.h) at the link's latency each,
  /// plus the bytes each rank sends at the all-reduce's bandwidth (the
  /// nearest measured all-reduce of the span, else collectiveBandwidth).
  double allReduceTime(CollectiveAlgorithm algorithm, int group, bool interNode,
                       double bytes) const;
};

/// Parses a profile from JSON text. Returns an empty string, or an error
/// that names `sourceName` and the key that is wrong.
std::string parseHardwareProfile(const std::string &text,
                                 const std::string &sourceName,
                                 HardwareProfile &profile);
/// Reads a profile file, or a Galvatron hardware-profile directory (its
/// allreduce_bandwidth_*nodes_*gpus_per_node.json, p2p_bandwidth_*.json and
/// overlap_coefficient.json; documented defaults fill in the rest).
std::string loadHardwareProfile(const std::string &path,
                                HardwareProfile &profile);
/// The profile as JSON text (what parseHardwareProfile reads).
std::string printHardwareProfile(const HardwareProfile &profile);

} // namespace merak

#endif // MERAK_HARDWARE_HARDWAREPROFILE_H
