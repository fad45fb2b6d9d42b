//===- HardwareProbeTest.cpp - measuring a profile on the CPU backend -----===//
//
// The probe on one process and on two ranks (threads of this process
// joined through a TCPStore, as in CommunicatorTest), with a small budget:
// what the profile holds and that it reads back, never how fast anything
// is.
//
//===----------------------------------------------------------------------===//

#include "merak/Runtime/HardwareProbe.h"
#include "merak/Runtime/CPU/CpuBackend.h"
#include "merak/Runtime/Comm/Distributed.h"
#include "merak/Runtime/Comm/Launch.h"

#include "gtest/gtest.h"

#include <atomic>
#include <functional>
#include <thread>

using namespace merak;
using namespace merak::runtime;

namespace {

HardwareProbeOptions smallProbe() {
  HardwareProbeOptions options;
  options.seconds = 1;
  options.name = "probe-test";
  options.largestGemm = 128;
  options.bandwidthBytes = 8 << 20;
  return options;
}

void expectKernelFigures(const HardwareProfile &p) {
  EXPECT_EQ(p.source, "measured");
  EXPECT_EQ(p.name, "probe-test");
  EXPECT_EQ(p.device.rfind("cpu", 0), 0u) << p.device;
  ASSERT_TRUE(p.gemm.count("f32"));
  const std::vector<GemmPoint> &f32 = p.gemm.at("f32");
  // 32, 64 and 128: the three smallest are always measured.
  ASSERT_EQ(f32.size(), 3u);
  double best = 0;
  for (size_t i = 0; i < f32.size(); ++i) {
    double side = double(32 << i);
    EXPECT_DOUBLE_EQ(f32[i].flops, 2 * side * side * side);
    EXPECT_GT(f32[i].rate, 0);
    best = std::max(best, f32[i].rate);
  }
  EXPECT_EQ(p.peakFlops, best);
  EXPECT_EQ(p.peak("f32"), best);
  EXPECT_GT(p.memoryBandwidth, 0);
  EXPECT_GT(p.opOverhead, 0);
  EXPECT_GT(p.memoryCapacity, 0);
  // What the probe writes, the parser reads.
  HardwareProfile again;
  EXPECT_EQ(parseHardwareProfile(printHardwareProfile(p), "probe", again), "");
}

TEST(HardwareProbeTest, MeasuresOneProcess) {
  std::unique_ptr<Backend> backend = createCpuBackend({1});
  std::vector<std::string> lines;
  HardwareProbeOptions options = smallProbe();
  options.progress = [&](const std::string &line) { lines.push_back(line); };
  absl::StatusOr<HardwareProfile> profile =
      probeHardware(*backend, nullptr, options);
  ASSERT_TRUE(profile.ok()) << profile.status();
  expectKernelFigures(*profile);
  EXPECT_EQ(profile->devicesPerNode, 1);
  EXPECT_TRUE(profile->collectives.empty());
  EXPECT_EQ(profile->intraNode.bandwidth, 0);
  ASSERT_GE(lines.size(), 3u);
  EXPECT_EQ(lines[0].rfind("gemm f32: 32^3 to 128^3, best ", 0), 0u)
      << lines[0];
}

/// Both ranks' profiles from a two-rank run in this process, each probing
/// with the options `configure` gives for its job.
std::vector<absl::StatusOr<HardwareProfile>> probeTwoRanks(
    const std::function<HardwareProbeOptions(DistributedJob &)> &configure) {
  absl::StatusOr<int> port = pickFreePort();
  EXPECT_TRUE(port.ok());
  std::vector<absl::StatusOr<HardwareProfile>> results(
      2, absl::UnknownError("not run"));
  auto rankMain = [&](int64_t rank) {
    RendezvousOptions options;
    options.rank = rank;
    options.worldSize = 2;
    options.port = *port;
    options.timeout = std::chrono::milliseconds(30000);
    absl::StatusOr<std::unique_ptr<DistributedJob>> job =
        DistributedJob::join(options, [](const std::string &message) {
          ADD_FAILURE() << "peer failure: " << message;
        });
    if (!job.ok()) {
      results[rank] = job.status();
      return;
    }
    std::unique_ptr<Backend> backend = createCpuBackend({1});
    results[rank] = probeHardware(*backend, job->get(), configure(**job));
    if (absl::Status s = (*job)->finish(); !s.ok() && results[rank].ok())
      results[rank] = s;
  };
  std::vector<std::thread> threads;
  for (int64_t r = 0; r < 2; ++r)
    threads.emplace_back(rankMain, r);
  for (std::thread &t : threads)
    t.join();
  return results;
}

TEST(HardwareProbeTest, MeasuresCollectivesBetweenTwoRanks) {
  std::vector<absl::StatusOr<HardwareProfile>> results =
      probeTwoRanks([](DistributedJob &) { return smallProbe(); });
  for (int64_t r = 0; r < 2; ++r)
    ASSERT_TRUE(results[r].ok()) << "rank " << r << ": " << results[r].status();

  const HardwareProfile &p = *results[0];
  expectKernelFigures(p);
  EXPECT_EQ(p.devicesPerNode, 2);
  // Every collective over the one group size two ranks allow.
  std::vector<std::string> ops;
  for (const CollectivePoint &c : p.collectives) {
    ops.push_back(c.op);
    EXPECT_EQ(c.group, 2) << c.op;
    EXPECT_FALSE(c.interNode) << c.op;
    EXPECT_GT(c.busBandwidth, 0) << c.op;
    EXPECT_GE(c.latency, 0) << c.op;
  }
  EXPECT_EQ(ops, (std::vector<std::string>{"allreduce", "allgather",
                                           "reducescatter", "alltoall"}));
  // The scalar figures: the largest group's all-reduce, and the link.
  EXPECT_EQ(p.collectiveBandwidth, p.collectives[0].busBandwidth);
  EXPECT_EQ(p.collectiveLatency, p.collectives[0].latency);
  EXPECT_GT(p.intraNode.bandwidth, 0);
  EXPECT_EQ(p.interNode.bandwidth, 0);
  EXPECT_EQ(p.linkBandwidth, p.intraNode.bandwidth);
  EXPECT_EQ(p.linkLatency, p.intraNode.latency);
}

TEST(HardwareProbeTest, MeasuresThroughTheCommunicatorAndLinkItIsGiven) {
  // What a run on GPUs gives the probe (NCCL's communicator and link), here
  // Gloo's communicator and the device link's protocol on Gloo.
  std::atomic<int> communicators{0};
  std::vector<std::vector<std::pair<int64_t, int64_t>>> directions(2);
  std::vector<absl::StatusOr<HardwareProfile>> results =
      probeTwoRanks([&](DistributedJob &job) {
        HardwareProbeOptions options = smallProbe();
        options.communicator = [&job, &communicators](const Program &p) {
          ++communicators;
          return job.createGlooCommunicator(p);
        };
        options.link = [&job, &directions](
                           const std::vector<std::pair<int64_t, int64_t>> &d) {
          directions[size_t(job.rank())] = d;
          return job.createChannelLink(d);
        };
        return options;
      });
  for (int64_t r = 0; r < 2; ++r)
    ASSERT_TRUE(results[r].ok()) << "rank " << r << ": " << results[r].status();
  // One communicator per group size and the overlap's, on each rank.
  EXPECT_EQ(communicators, 2 * 2);
  const std::vector<std::pair<int64_t, int64_t>> both = {{0, 1}, {1, 0}};
  EXPECT_EQ(directions[0], both);
  EXPECT_EQ(directions[1], both);
  EXPECT_GT(results[0]->intraNode.bandwidth, 0);
  EXPECT_GT(results[0]->collectives.size(), 0u);
}

} // namespace
