//===- HardwareProfileTest.cpp - hardware profiles: files and lookups -----===//
//
// The profile file read back as written, the parser's errors (each naming
// the key that is wrong), the lookups the cost model prices with (GEMM
// rates, collectives, transfers), Galvatron's hardware-profile directories,
// the documented profiles in profiles/, and the probe's arithmetic that
// needs no machine (fits, /proc parsing).
//
//===----------------------------------------------------------------------===//

#include "merak/Hardware/HardwareProfile.h"
#include "merak/Runtime/HardwareProbe.h"

#include "FakeBackend.h"
#include "ScratchDir.h"

#include "gtest/gtest.h"

#include <cmath>
#include <cstdlib>
#include <fstream>

using namespace merak;
using merak::testing::ScratchDir;

namespace {

/// A profile with every field away from its default.
HardwareProfile fullProfile() {
  HardwareProfile p;
  p.name = "test-machine";
  p.source = "measured";
  p.device = "cpu (Test CPU @ 1.0GHz)";
  p.devicesPerNode = 4;
  p.peakFlops = 1.234567890123e11;
  p.memoryBandwidth = 9.87654321e9;
  p.memoryCapacity = 6.4e10;
  p.linkBandwidth = 1.1e9;
  p.linkLatency = 3.3e-5;
  p.opOverhead = 4.5e-7;
  p.collectiveBandwidth = 2.2e9;
  p.collectiveLatency = 7.7e-5;
  p.overlapCoefficient = 1.15;
  p.peakByType = {{"f32", 1.234567890123e11}, {"bf16", 9.1e11}};
  p.gemm["f32"] = {{65536, 4.4e10}, {524288, 1.1e11}, {1.7e10, 1.2e11}};
  p.gemm["bf16"] = {{65536, 3.0e9}, {2.68435456e8, 9.1e11}};
  p.intraNode = {1.1e9, 3.3e-5};
  p.interNode = {1.25e8, 1e-4};
  p.collectives = {{"allreduce", 2, false, 2.2e9, 7.7e-5, 6.1e-4},
                   {"alltoall", 4, false, 1.3e9, 9e-5, 0},
                   {"allgather", 8, true, 1e8, 2e-4, 1.5e-3}};
  return p;
}

void expectSame(const HardwareProfile &a, const HardwareProfile &b) {
  EXPECT_EQ(a.name, b.name);
  EXPECT_EQ(a.source, b.source);
  EXPECT_EQ(a.device, b.device);
  EXPECT_EQ(a.devicesPerNode, b.devicesPerNode);
  EXPECT_EQ(a.peakFlops, b.peakFlops);
  EXPECT_EQ(a.memoryBandwidth, b.memoryBandwidth);
  EXPECT_EQ(a.memoryCapacity, b.memoryCapacity);
  EXPECT_EQ(a.linkBandwidth, b.linkBandwidth);
  EXPECT_EQ(a.linkLatency, b.linkLatency);
  EXPECT_EQ(a.opOverhead, b.opOverhead);
  EXPECT_EQ(a.collectiveBandwidth, b.collectiveBandwidth);
  EXPECT_EQ(a.collectiveLatency, b.collectiveLatency);
  EXPECT_EQ(a.overlapCoefficient, b.overlapCoefficient);
  EXPECT_EQ(a.peakByType, b.peakByType);
  ASSERT_EQ(a.gemm.size(), b.gemm.size());
  for (const auto &[type, points] : a.gemm) {
    ASSERT_TRUE(b.gemm.count(type)) << type;
    const std::vector<GemmPoint> &other = b.gemm.at(type);
    ASSERT_EQ(points.size(), other.size()) << type;
    for (size_t i = 0; i < points.size(); ++i) {
      EXPECT_EQ(points[i].flops, other[i].flops) << type << "[" << i << "]";
      EXPECT_EQ(points[i].rate, other[i].rate) << type << "[" << i << "]";
    }
  }
  EXPECT_EQ(a.intraNode.bandwidth, b.intraNode.bandwidth);
  EXPECT_EQ(a.intraNode.latency, b.intraNode.latency);
  EXPECT_EQ(a.interNode.bandwidth, b.interNode.bandwidth);
  EXPECT_EQ(a.interNode.latency, b.interNode.latency);
  ASSERT_EQ(a.collectives.size(), b.collectives.size());
  for (size_t i = 0; i < a.collectives.size(); ++i) {
    const CollectivePoint &x = a.collectives[i], &y = b.collectives[i];
    EXPECT_EQ(x.op, y.op) << i;
    EXPECT_EQ(x.group, y.group) << i;
    EXPECT_EQ(x.interNode, y.interNode) << i;
    EXPECT_EQ(x.busBandwidth, y.busBandwidth) << i;
    EXPECT_EQ(x.latency, y.latency) << i;
    EXPECT_EQ(x.stall, y.stall) << i;
  }
}

/// The parser's error for `text` ("" when it parses).
std::string parseError(const std::string &text) {
  HardwareProfile p;
  return parseHardwareProfile(text, "hw.json", p);
}

TEST(HardwareProfileTest, PrintedProfileParsesBackToTheSameFigures) {
  HardwareProfile original = fullProfile();
  std::string text = printHardwareProfile(original);
  HardwareProfile parsed;
  ASSERT_EQ(parseHardwareProfile(text, "hw.json", parsed), "");
  expectSame(original, parsed);
  // And prints the same text again.
  EXPECT_EQ(printHardwareProfile(parsed), text);

  // The defaults too (no tables, no links).
  HardwareProfile defaults;
  ASSERT_EQ(
      parseHardwareProfile(printHardwareProfile(defaults), "d.json", parsed),
      "");
  expectSame(defaults, parsed);
}

TEST(HardwareProfileTest, MissingKeysKeepTheDefaults) {
  HardwareProfile p;
  ASSERT_EQ(parseHardwareProfile(R"({"name": "tiny", "peak_flops": 5e12})",
                                 "hw.json", p),
            "");
  EXPECT_EQ(p.name, "tiny");
  EXPECT_EQ(p.peakFlops, 5e12);
  EXPECT_EQ(p.memoryBandwidth, HardwareProfile().memoryBandwidth);
  EXPECT_TRUE(p.gemm.empty());
}

TEST(HardwareProfileTest, ErrorsNameTheKey) {
  EXPECT_EQ(parseError(R"({"nmae": "x"})"), "hw.json.nmae: unknown key");
  EXPECT_EQ(parseError(R"({"p2p": {"intra_node": {"bandwith": 1e9}}})"),
            "hw.json.p2p.intra_node.bandwith: unknown key");
  EXPECT_EQ(parseError(R"({"p2p": {"across": {}}})"),
            "hw.json.p2p.across: unknown key");
  EXPECT_EQ(parseError(R"({"gemm": {"fp8": []}})"),
            "hw.json.gemm.fp8: unknown key");
  EXPECT_EQ(parseError(R"({"peak_flops_by_type": {"int8": 1e15}})"),
            "hw.json.peak_flops_by_type.int8: unknown key");
  EXPECT_EQ(parseError(R"({"collectives": [{"op": "allreduce", "group": 2,
            "bus_bandwidth": 1e9, "algo": "ring"}]})"),
            "hw.json.collectives[0].algo: unknown key");

  // Wrong types.
  EXPECT_EQ(parseError(R"({"name": 3})"), "hw.json.name: expected a string");
  EXPECT_EQ(parseError(R"({"peak_flops": "fast"})"),
            "hw.json.peak_flops: expected a positive number");
  EXPECT_EQ(parseError(R"({"devices_per_node": 2.5})"),
            "hw.json.devices_per_node: expected a positive integer");
  EXPECT_EQ(parseError(R"({"collectives": {}})"),
            "hw.json.collectives: expected a list");
  EXPECT_EQ(parseError(R"({"gemm": {"f32": 3}})"),
            "hw.json.gemm.f32: expected a list of {flops, rate}");
  EXPECT_EQ(parseError(R"({"gemm": [1]})"), "hw.json.gemm: expected an object");
  EXPECT_EQ(parseError(R"({"collectives": [{"op": "allreduce", "group": 2,
            "bus_bandwidth": 1e9, "inter_node": 0}]})"),
            "hw.json.collectives[0].inter_node: expected true or false");
  EXPECT_EQ(parseError("[1, 2]"), "hw.json: expected an object");

  // Negative and zero numbers.
  EXPECT_EQ(parseError(R"({"memory_bandwidth": -1})"),
            "hw.json.memory_bandwidth: expected a positive number");
  EXPECT_EQ(parseError(R"({"memory_capacity": 0})"),
            "hw.json.memory_capacity: expected a positive number");
  EXPECT_EQ(parseError(R"({"link_latency": -1e-6})"),
            "hw.json.link_latency: expected a non-negative number");
  EXPECT_EQ(parseError(R"({"collectives": [{"op": "allreduce", "group": 2,
            "bus_bandwidth": 1e9, "stall": -1e-4}]})"),
            "hw.json.collectives[0].stall: expected a non-negative number");
  EXPECT_EQ(parseError(R"({"gemm": {"f32": [{"flops": 1e6, "rate": -2}]}})"),
            "hw.json.gemm.f32[0].rate: expected a positive number");
  EXPECT_EQ(parseError(R"({"devices_per_node": -8})"),
            "hw.json.devices_per_node: expected a positive integer");
  // Zero latencies are fine.
  EXPECT_EQ(parseError(R"({"link_latency": 0, "kernel_overhead": 0})"), "");

  // Collectives.
  EXPECT_EQ(parseError(R"({"collectives": [
              {"op": "allreduce", "group": 2, "bus_bandwidth": 1e9},
              {"op": "broadcast", "group": 2, "bus_bandwidth": 1e9}]})"),
            "hw.json.collectives[1].op: expected allreduce, allgather, "
            "reducescatter or alltoall, got 'broadcast'");
  EXPECT_EQ(
      parseError(R"({"collectives": [{"group": 2, "bus_bandwidth": 1}]})"),
      "hw.json.collectives[0].op: expected allreduce, allgather, "
      "reducescatter or alltoall, got ''");
  EXPECT_EQ(parseError(R"({"collectives": [{"op": "allgather", "group": 2}]})"),
            "hw.json.collectives[0]: needs bus_bandwidth");
  EXPECT_EQ(parseError(R"({"collectives": [{"op": "allgather", "group": 1,
            "bus_bandwidth": 1e9}]})"),
            "hw.json.collectives[0].group: expected an integer of at least 2");

  // GEMM tables ascend, one entry per size.
  EXPECT_EQ(parseError(R"({"gemm": {"f32": [{"flops": 2e6, "rate": 1e9},
                                            {"flops": 1e6, "rate": 2e9}]}})"),
            "hw.json.gemm.f32[1].flops: 1e+06 after 2e+06: entries must "
            "ascend in flops");
  EXPECT_EQ(parseError(R"({"gemm": {"bf16": [{"flops": 1e6, "rate": 1e9},
                                             {"flops": 1e6, "rate": 2e9}]}})"),
            "hw.json.gemm.bf16[1].flops: a second entry for 1e+06 FLOPs");
  EXPECT_EQ(parseError(R"({"gemm": {"f32": [{"flops": 1e6}]}})"),
            "hw.json.gemm.f32[0]: needs both flops and rate");

  // The source, and text that is not JSON.
  EXPECT_EQ(parseError(R"({"source": "guessed"})"),
            "hw.json.source: expected measured, documented or galvatron, got "
            "'guessed'");
  EXPECT_EQ(parseError("{\"name\": ").rfind("hw.json: not JSON", 0), 0u);
}

TEST(HardwareProfileTest, AFailedParseLeavesTheProfileAlone) {
  HardwareProfile p = fullProfile();
  EXPECT_NE(parseHardwareProfile(R"({"name": "other", "peak_flops": -1})",
                                 "hw.json", p),
            "");
  expectSame(p, fullProfile());
}

TEST(HardwareProfileTest, GemmRateInterpolatesLogLogAndClamps) {
  HardwareProfile p;
  p.peakFlops = 5e12;
  p.peakByType["bf16"] = 2e13;
  p.gemm["f32"] = {{1e6, 1e9}, {1e9, 1e11}, {1e12, 1e12}};
  // At the points.
  EXPECT_DOUBLE_EQ(p.gemmRate("f32", 1e6), 1e9);
  EXPECT_DOUBLE_EQ(p.gemmRate("f32", 1e9), 1e11);
  EXPECT_DOUBLE_EQ(p.gemmRate("f32", 1e12), 1e12);
  // Between: straight lines in log-log.
  EXPECT_NEAR(p.gemmRate("f32", std::sqrt(1e6 * 1e9)), 1e10, 1e10 * 1e-9);
  EXPECT_NEAR(p.gemmRate("f32", 1e10), std::pow(10, 11 + 1.0 / 3), 1e3);
  // Beyond the ends: the end's rate.
  EXPECT_DOUBLE_EQ(p.gemmRate("f32", 10), 1e9);
  EXPECT_DOUBLE_EQ(p.gemmRate("f32", 0), 1e9);
  EXPECT_DOUBLE_EQ(p.gemmRate("f32", std::nan("")), 1e9);
  EXPECT_DOUBLE_EQ(p.gemmRate("f32", 1e18), 1e12);
  // No table: the type's peak, else peak_flops.
  EXPECT_DOUBLE_EQ(p.gemmRate("bf16", 1e9), 2e13);
  EXPECT_DOUBLE_EQ(p.gemmRate("f16", 1e9), 5e12);
  EXPECT_DOUBLE_EQ(p.peak("bf16"), 2e13);
  EXPECT_DOUBLE_EQ(p.peak("tf32"), 5e12);
  // One point: that rate everywhere.
  p.gemm["f16"] = {{1e9, 3e12}};
  EXPECT_DOUBLE_EQ(p.gemmRate("f16", 1), 3e12);
  EXPECT_DOUBLE_EQ(p.gemmRate("f16", 1e15), 3e12);
}

TEST(HardwareProfileTest, CollectiveTimeTakesTheNearestGroupOfTheSameSpan) {
  HardwareProfile p;
  p.collectiveBandwidth = 1e9;
  p.collectiveLatency = 1e-3;
  p.collectives = {{"allreduce", 2, false, 10e9, 1e-5},
                   {"allreduce", 8, false, 20e9, 2e-5},
                   {"allgather", 4, false, 40e9, 3e-5},
                   {"allreduce", 16, true, 5e9, 5e-5}};
  const double bytes = 1e9;
  // The same op: the nearest group size by ratio.
  EXPECT_DOUBLE_EQ(p.collectiveTime("allreduce", 2, false, bytes),
                   1e-5 + bytes / 10e9);
  EXPECT_DOUBLE_EQ(p.collectiveTime("allreduce", 3, false, bytes),
                   1e-5 + bytes / 10e9);
  EXPECT_DOUBLE_EQ(p.collectiveTime("allreduce", 6, false, bytes),
                   2e-5 + bytes / 20e9);
  EXPECT_DOUBLE_EQ(p.collectiveTime("allreduce", 64, false, bytes),
                   2e-5 + bytes / 20e9);
  EXPECT_DOUBLE_EQ(p.collectiveTime("allgather", 8, false, bytes),
                   3e-5 + bytes / 40e9);
  // Another span is never used for this one.
  EXPECT_DOUBLE_EQ(p.collectiveTime("allreduce", 32, true, bytes),
                   5e-5 + bytes / 5e9);
  EXPECT_DOUBLE_EQ(p.collectiveTime("allreduce", 2, true, bytes),
                   5e-5 + bytes / 5e9);
  // An op that is not listed: the nearest collective of the span.
  EXPECT_DOUBLE_EQ(p.collectiveTime("reducescatter", 8, false, bytes),
                   2e-5 + bytes / 20e9);
  EXPECT_DOUBLE_EQ(p.collectiveTime("alltoall", 16, true, bytes),
                   5e-5 + bytes / 5e9);
  // A group of one moves nothing.
  EXPECT_EQ(p.collectiveTime("allreduce", 1, false, bytes), 0);

  // Nothing of the span: the scalar figures, across nodes bounded by the
  // inter-node link.
  p.collectives = {{"allreduce", 8, false, 20e9, 2e-5}};
  EXPECT_DOUBLE_EQ(p.collectiveTime("allreduce", 16, true, bytes),
                   1e-3 + bytes / 1e9);
  p.interNode = {0.5e9, 1e-4};
  EXPECT_DOUBLE_EQ(p.collectiveTime("allreduce", 16, true, bytes),
                   1e-3 + bytes / 0.5e9);
  p.collectives.clear();
  EXPECT_DOUBLE_EQ(p.collectiveTime("allgather", 4, false, bytes),
                   1e-3 + bytes / 1e9);
}

TEST(HardwareProfileTest, TransferTimeUsesTheLinkOfTheSpan) {
  HardwareProfile p;
  p.linkBandwidth = 1e9;
  p.linkLatency = 1e-5;
  // Without link tables: the scalar link both ways.
  EXPECT_DOUBLE_EQ(p.transferTime(1e6, false), 1e-5 + 1e6 / 1e9);
  EXPECT_DOUBLE_EQ(p.transferTime(1e6, true), 1e-5 + 1e6 / 1e9);
  EXPECT_EQ(p.transferTime(0, false), 0);
  p.intraNode = {100e9, 2e-6};
  p.interNode = {10e9, 8e-6};
  EXPECT_DOUBLE_EQ(p.transferTime(1e6, false), 2e-6 + 1e6 / 100e9);
  EXPECT_DOUBLE_EQ(p.transferTime(1e6, true), 8e-6 + 1e6 / 10e9);
}

TEST(HardwareProfileTest, AllReduceTimeBySteps) {
  HardwareProfile p;
  p.linkLatency = 1e-6;
  p.collectiveBandwidth = 1e9;
  using A = CollectiveAlgorithm;
  // 8 ranks, 8 MB: 14 steps and 14 MB as a ring, 6 steps and 14 MB as a
  // tree.
  EXPECT_DOUBLE_EQ(p.allReduceTime(A::Ring, 8, false, 8e6),
                   14e-6 + 2 * 7.0 / 8 * 8e6 / 1e9);
  EXPECT_DOUBLE_EQ(p.allReduceTime(A::Tree, 8, false, 8e6),
                   6e-6 + 2 * 7.0 / 8 * 8e6 / 1e9);
  // A measured all-reduce of the span gives the bandwidth; the link its
  // latency per step.
  p.intraNode = {100e9, 2e-6};
  p.collectives.push_back({"allreduce", 8, false, 50e9, 30e-6});
  EXPECT_DOUBLE_EQ(p.allReduceTime(A::Ring, 8, false, 8e6),
                   14 * 2e-6 + 2 * 7.0 / 8 * 8e6 / 50e9);
  EXPECT_EQ(p.allReduceTime(A::Tree, 1, false, 8e6), 0);
}

TEST(HardwareProfileTest, ReadsAGalvatronDirectory) {
  ScratchDir dir("merak-hardware");
  dir.write("allreduce_bandwidth_1nodes_8gpus_per_node.json",
            R"({"allreduce_size_8_consec_1": 160.4,
                "allreduce_size_4_consec_1": 150.2,
                "allreduce_size_4_consec_0": 149.9,
                "allreduce_size_2_consec_1": 120.5})");
  dir.write("p2p_bandwidth_1nodes_8gpus_per_node.json",
            R"({"pp_size_2": 147.3, "pp_size_4": 140.1})");
  dir.write("overlap_coefficient.json", R"({"overlap_coe": 1.15})");
  dir.write("computation_profiling.json", R"({"layer": 1})"); // not read

  HardwareProfile p;
  ASSERT_EQ(loadHardwareProfile(dir.path, p), "");
  EXPECT_EQ(p.source, "galvatron");
  EXPECT_EQ(p.name.rfind("galvatron:merak-hardware-", 0), 0u) << p.name;
  EXPECT_EQ(p.devicesPerNode, 8);
  EXPECT_DOUBLE_EQ(p.overlapCoefficient, 1.15);
  ASSERT_EQ(p.collectives.size(), 4u);
  for (const CollectivePoint &c : p.collectives) {
    EXPECT_EQ(c.op, "allreduce");
    EXPECT_FALSE(c.interNode) << c.group;
  }
  // GB/s of bus bandwidth become bytes/s.
  const double bytes = 1e9;
  EXPECT_DOUBLE_EQ(p.collectiveTime("allreduce", 8, false, bytes),
                   p.collectiveLatency + bytes / 160.4e9);
  EXPECT_DOUBLE_EQ(p.collectiveTime("allreduce", 2, false, bytes),
                   p.collectiveLatency + bytes / 120.5e9);
  // The slowest pipeline bounds the link.
  EXPECT_DOUBLE_EQ(p.intraNode.bandwidth, 140.1e9);
  EXPECT_EQ(p.interNode.bandwidth, 0);
  EXPECT_DOUBLE_EQ(p.transferTime(bytes, false),
                   p.linkLatency + bytes / 140.1e9);

  // A trailing slash names the same directory.
  HardwareProfile again;
  ASSERT_EQ(loadHardwareProfile(dir.path + "/", again), "");
  EXPECT_EQ(again.name, p.name);
}

TEST(HardwareProfileTest, GalvatronGroupsAcrossNodes) {
  ScratchDir dir("merak-hardware");
  dir.write("allreduce_bandwidth_2nodes_8gpus_per_node.json",
            R"({"allreduce_size_16_consec_1": 20.5,
                "allreduce_size_8_consec_1": 150.0,
                "allreduce_size_8_consec_0": 22.0})");
  dir.write("p2p_bandwidth_2nodes_8gpus_per_node.json",
            R"({"pp_size_2": 12.5})");
  HardwareProfile p;
  ASSERT_EQ(loadHardwareProfile(dir.path, p), "");
  ASSERT_EQ(p.collectives.size(), 3u);
  std::map<std::pair<int, bool>, double> byGroup;
  for (const CollectivePoint &c : p.collectives)
    byGroup[{c.group, c.interNode}] = c.busBandwidth;
  // Consecutive 8 fit a node; 16, and 8 strided over both nodes, do not.
  EXPECT_DOUBLE_EQ((byGroup[{8, false}]), 150e9);
  EXPECT_DOUBLE_EQ((byGroup[{16, true}]), 20.5e9);
  EXPECT_DOUBLE_EQ((byGroup[{8, true}]), 22e9);
  // Two stages of eight: neighbours on different nodes.
  EXPECT_DOUBLE_EQ(p.interNode.bandwidth, 12.5e9);
  EXPECT_EQ(p.intraNode.bandwidth, 0);
}

TEST(HardwareProfileTest, RefusesDirectoriesWithoutGalvatronFiles) {
  ScratchDir dir("merak-hardware");
  HardwareProfile p;
  std::string error = loadHardwareProfile(dir.path, p);
  EXPECT_NE(error.find(dir.path + ": a directory without Galvatron hardware "
                                  "files"),
            std::string::npos)
      << error;
  dir.write("notes.json", "{}");
  EXPECT_NE(loadHardwareProfile(dir.path, p).find("without Galvatron"),
            std::string::npos);

  // Files it reads, with what is wrong in them named.
  dir.write("overlap_coefficient.json", R"({"overlap": 1.1})");
  error = loadHardwareProfile(dir.path, p);
  EXPECT_NE(error.find("overlap_coefficient.json: overlap: unknown key"),
            std::string::npos)
      << error;
  dir.write("overlap_coefficient.json", R"({"overlap_coe": -1})");
  error = loadHardwareProfile(dir.path, p);
  EXPECT_NE(error.find("overlap_coe: expected a positive number"),
            std::string::npos)
      << error;
  dir.write("overlap_coefficient.json", R"({"overlap_coe": 1.1})");
  dir.write("allreduce_bandwidth_1nodes_8gpus_per_node.json",
            R"({"allgather_size_8_consec_1": 100})");
  error = loadHardwareProfile(dir.path, p);
  EXPECT_NE(error.find("allgather_size_8_consec_1: unknown key"),
            std::string::npos)
      << error;
  dir.write("allreduce_bandwidth_1nodes_8gpus_per_node.json",
            R"({"allreduce_size_99999999999_consec_1": 100})");
  error = loadHardwareProfile(dir.path, p);
  EXPECT_NE(error.find("expected a group of 2 to 10^7 ranks"),
            std::string::npos)
      << error;
  dir.write("allreduce_bandwidth_1nodes_8gpus_per_node.json", "{oops");
  error = loadHardwareProfile(dir.path, p);
  EXPECT_NE(error.find("allreduce_bandwidth_1nodes_8gpus_per_node.json: not "
                       "JSON"),
            std::string::npos)
      << error;

  EXPECT_NE(loadHardwareProfile(dir.path + "/missing.json", p)
                .find("missing.json: cannot open"),
            std::string::npos);
}

TEST(HardwareProfileTest, DocumentedProfilesParse) {
  for (const char *name : {"dgx-a100.json", "dgx-h100.json"}) {
    HardwareProfile p;
    std::string path = std::string(MERAK_SOURCE_DIR) + "/profiles/" + name;
    ASSERT_EQ(loadHardwareProfile(path, p), "") << path;
    EXPECT_EQ(p.source, "documented") << name;
    EXPECT_EQ(p.devicesPerNode, 8) << name;
    EXPECT_GT(p.peak("bf16"), p.peak("f32")) << name;
    EXPECT_GT(p.intraNode.bandwidth, p.interNode.bandwidth) << name;
    EXPECT_LT(p.collectiveTime("allreduce", 8, false, 1e9),
              p.collectiveTime("allreduce", 16, true, 1e9))
        << name;
    // And reads back as written.
    HardwareProfile again;
    ASSERT_EQ(parseHardwareProfile(printHardwareProfile(p), name, again), "");
    expectSame(p, again);
  }
}

//===----------------------------------------------------------------------===//
// The probe's arithmetic
//===----------------------------------------------------------------------===//

using merak::runtime::cpuModelName;
using merak::runtime::fitLatencyBandwidth;
using merak::runtime::memTotalBytes;

TEST(HardwareProbeTest, FitGivesBothEndsBack) {
  const double latency = 5e-5, bandwidth = 2e9;
  auto time = [&](double bytes) { return latency + bytes / bandwidth; };
  // Any order; the sizes between do not change the fit.
  LinkFigures fit = fitLatencyBandwidth({{33554432, time(33554432)},
                                         {8192, time(8192)},
                                         {2097152, time(2097152) * 1.5}});
  EXPECT_DOUBLE_EQ(fit.latency, time(8192));
  EXPECT_NEAR(fit.latency + 33554432 / fit.bandwidth, time(33554432), 1e-12);

  // One message: its rate, no latency.
  fit = fitLatencyBandwidth({{1e6, 1e-3}});
  EXPECT_DOUBLE_EQ(fit.bandwidth, 1e9);
  EXPECT_EQ(fit.latency, 0);
  // The large message no slower than the small one: its rate.
  fit = fitLatencyBandwidth({{1e3, 2e-3}, {1e6, 1e-3}});
  EXPECT_DOUBLE_EQ(fit.bandwidth, 1e9);
  EXPECT_EQ(fit.latency, 0);
  fit = fitLatencyBandwidth({});
  EXPECT_EQ(fit.bandwidth, 0);
}

TEST(HardwareProbeTest, ReadsTheMachineFromProc) {
  EXPECT_EQ(memTotalBytes("MemFree:  100 kB\nMemTotal:       24684084 kB\n"
                          "MemAvailable: 5 kB\n"),
            int64_t(24684084) * 1024);
  EXPECT_EQ(memTotalBytes("MemFree: 100 kB\n"), 0);
  EXPECT_EQ(memTotalBytes("MemTotal: lots\n"), 0);
  EXPECT_EQ(memTotalBytes(""), 0);
  EXPECT_EQ(cpuModelName("processor\t: 0\nvendor_id\t: GenuineIntel\n"
                         "model name\t: Intel(R) Xeon(R) Processor\n"
                         "processor\t: 1\nmodel name\t: Other\n"),
            "Intel(R) Xeon(R) Processor");
  // Arm kernels have no model name.
  EXPECT_EQ(cpuModelName("processor\t: 0\nBogoMIPS\t: 50.00\n"), "");
}

TEST(HardwareProbeTest, RefusesABackendWithoutTheKernelsItTimes) {
  merak::runtime::FakeBackend backend; // add and mul, no matmul
  absl::StatusOr<HardwareProfile> profile =
      merak::runtime::probeHardware(backend, nullptr, {});
  ASSERT_FALSE(profile.ok());
  EXPECT_EQ(profile.status().message(),
            "the 'fake' backend has no matmul or add kernel to time");
  merak::runtime::HardwareProbeOptions options;
  options.seconds = 0;
  profile = merak::runtime::probeHardware(backend, nullptr, options);
  ASSERT_FALSE(profile.ok());
  EXPECT_NE(profile.status().message().find("positive number of seconds"),
            std::string::npos);
}

} // namespace
