//===- HostGlooTest.cpp - Gloo's collectives on host memory ---------------===//
//
// Ranks are threads of this process, each with its own Gloo device on the
// loopback address, connected through one in-process store (or the file
// rendezvous's): every call in every element type against its answer, the
// grouped sends and receives, and the failures a run can meet.
//
//===----------------------------------------------------------------------===//

#include "merak/Runtime/Comm/HostGloo.h"
#include "merak/Runtime/Comm/FileRendezvous.h"
#include "merak/Runtime/Mesh.h"

#include "ScratchDir.h"

#include "gtest/gtest.h"

#include <gloo/rendezvous/hash_store.h>
#include <gloo/rendezvous/prefix_store.h>

#include <cstdio>
#include <functional>
#include <thread>

using namespace merak::runtime;

namespace {

using Millis = std::chrono::milliseconds;

/// One group of `world` ranks (a one-axis mesh), bound to `rank`.
std::vector<ProcessGroupSpec> oneGroup(int64_t rank, int64_t world) {
  ProcessGroupSpec spec;
  spec.meshAxes = {0};
  spec.members = processGroup({world}, rank, {0});
  return {spec};
}

/// Runs `body(rank, collectives)` on `world` threads connected through one
/// store; returns each rank's connection status.
std::vector<absl::Status>
onRanks(int64_t world,
        const std::function<void(int64_t, HostGlooCollectives &)> &body,
        Millis timeout = Millis(20000), int64_t present = -1) {
  ::gloo::rendezvous::HashStore store;
  std::vector<absl::Status> connected(world);
  std::vector<std::thread> threads;
  for (int64_t rank = 0; rank < (present < 0 ? world : present); ++rank)
    threads.emplace_back([&, rank] {
      auto device = openHostGlooDevice("127.0.0.1", "");
      if (!device.ok()) {
        connected[rank] = device.status();
        return;
      }
      auto host = HostGlooCollectives::connect(store, *device,
                                               oneGroup(rank, world), timeout);
      connected[rank] = host.status();
      if (host.ok())
        body(rank, **host);
    });
  for (std::thread &t : threads)
    t.join();
  return connected;
}

void expectConnected(const std::vector<absl::Status> &connected) {
  for (size_t r = 0; r < connected.size(); ++r)
    EXPECT_TRUE(connected[r].ok()) << "rank " << r << ": " << connected[r];
}

/// `values` as bits of `dtype` (f16 or bf16).
std::vector<uint16_t> halves(DType dtype, const std::vector<float> &values) {
  std::vector<uint16_t> bits;
  for (float v : values)
    bits.push_back(dtype == DType::BF16 ? floatToBFloat16Bits(v)
                                        : floatToHalfBits(v));
  return bits;
}

std::vector<float> floats(DType dtype, const std::vector<uint16_t> &bits) {
  std::vector<float> values;
  for (uint16_t b : bits)
    values.push_back(dtype == DType::BF16 ? bfloat16BitsToFloat(b)
                                          : halfBitsToFloat(b));
  return values;
}

TEST(HostGlooTest, AllReducesInEveryElementType) {
  constexpr int64_t kWorld = 3;
  std::vector<std::vector<double>> got(kWorld);
  expectConnected(onRanks(kWorld, [&](int64_t rank, HostGlooCollectives &c) {
    double r = double(rank + 1); // 1, 2, 3
    std::vector<double> &out = got[rank];
    auto check = [&](absl::Status s) { EXPECT_TRUE(s.ok()) << s; };

    std::vector<float> f32 = {float(r), -2.5f * float(r), 0.5f};
    check(c.allReduce(0, f32.data(), f32.data(), 3, DType::F32,
                      DeviceReduction::Sum));
    out.insert(out.end(), f32.begin(), f32.end());

    std::vector<double> f64 = {r, -r}, f64out(2);
    check(c.allReduce(0, f64.data(), f64out.data(), 2, DType::F64,
                      DeviceReduction::Max));
    out.insert(out.end(), f64out.begin(), f64out.end());

    std::vector<int32_t> i32 = {int32_t(r), int32_t(10 - r)};
    check(c.allReduce(0, i32.data(), i32.data(), 2, DType::I32,
                      DeviceReduction::Min));
    out.insert(out.end(), i32.begin(), i32.end());

    std::vector<int64_t> i64 = {int64_t(r) + 1, int64_t(r) * 10 + 1};
    check(c.allReduce(0, i64.data(), i64.data(), 2, DType::I64,
                      DeviceReduction::Product));
    out.insert(out.end(), i64.begin(), i64.end());
    std::vector<int64_t> avg = {int64_t(r) * 3 + 1};
    check(c.allReduce(0, avg.data(), avg.data(), 1, DType::I64,
                      DeviceReduction::Average));
    out.push_back(double(avg[0]));

    for (DType half : {DType::BF16, DType::F16}) {
      std::vector<uint16_t> h = halves(half, {float(r), 0.25f * float(r)});
      check(c.allReduce(0, h.data(), h.data(), 2, half, DeviceReduction::Sum));
      for (float v : floats(half, h))
        out.push_back(v);
      std::vector<uint16_t> a = halves(half, {float(r) * 2});
      check(c.allReduce(0, a.data(), a.data(), 1, half,
                        DeviceReduction::Average));
      out.push_back(floats(half, a)[0]);
    }

    // Booleans: a sum is an or, a minimum an and.
    std::vector<uint8_t> b = {uint8_t(rank == 1), uint8_t(rank != 1), 1};
    std::vector<uint8_t> any = b, all = b;
    check(c.allReduce(0, any.data(), any.data(), 3, DType::Bool,
                      DeviceReduction::Sum));
    check(c.allReduce(0, all.data(), all.data(), 3, DType::Bool,
                      DeviceReduction::Min));
    out.insert(out.end(), any.begin(), any.end());
    out.insert(out.end(), all.begin(), all.end());
  }));
  // 1 + 2 + 3 = 6; products (2 3 4) and (11 21 31); the average of 4, 7
  // and 10 is 7; f16 and bf16 sums and averages of small values are exact.
  const std::vector<double> expected = {
      6, -15, 1.5, 3, -1, 1, 7, 24, 7161, 7, // f32, f64, i32, i64
      6, 1.5, 4,                             // bf16
      6, 1.5, 4,                             // f16
      1, 1,   1,   0, 0,  1};                // bool: or, and
  for (int64_t r = 0; r < kWorld; ++r)
    EXPECT_EQ(got[r], expected) << "rank " << r;
}

TEST(HostGlooTest, GathersScattersBroadcastsAndExchanges) {
  constexpr int64_t kWorld = 3;
  std::vector<absl::Status> failures(kWorld);
  expectConnected(onRanks(kWorld, [&](int64_t rank, HostGlooCollectives &c) {
    auto check = [&](absl::Status s, const char *what) {
      EXPECT_TRUE(s.ok()) << what << " on rank " << rank << ": " << s;
    };
    float r = float(rank);
    EXPECT_EQ(c.groupSize(0), kWorld);

    std::vector<float> mine = {r, r + 0.5f}, all(6, -1);
    check(c.allGather(0, mine.data(), all.data(), 2, DType::F32), "gather");
    EXPECT_EQ(all, (std::vector<float>{0, 0.5, 1, 1.5, 2, 2.5}));
    // In place: this member's block is already where it goes.
    std::vector<float> inPlace(6, -1);
    inPlace[2 * rank] = r;
    inPlace[2 * rank + 1] = r + 0.5f;
    check(c.allGather(0, inPlace.data() + 2 * rank, inPlace.data(), 2,
                      DType::F32),
          "gather in place");
    EXPECT_EQ(inPlace, all);

    // Block k of every member's (k + 1, 10 (k + 1)) times (r + 1).
    std::vector<float> blocks;
    for (int k = 0; k < kWorld; ++k)
      blocks.insert(blocks.end(),
                    {float(k + 1) * (r + 1), 10 * float(k + 1) * (r + 1)});
    std::vector<float> block(2);
    check(c.reduceScatter(0, blocks.data(), block.data(), 2, DType::F32,
                          DeviceReduction::Sum),
          "reduce-scatter");
    EXPECT_EQ(block,
              (std::vector<float>{6 * float(rank + 1), 60 * float(rank + 1)}));

    std::vector<int64_t> root = {int64_t(rank) * 7, 5}, got(2, -1);
    check(c.broadcast(0, root.data(), got.data(), 2, DType::I64, 1),
          "broadcast");
    EXPECT_EQ(got, (std::vector<int64_t>{7, 5}));

    // Member k sends k + 1 elements (100 rank + k) to member k, itself
    // included.
    std::vector<std::vector<float>> out(kWorld), in(kWorld);
    std::vector<DeviceTransfer> sends, receives;
    for (int64_t k = 0; k < kWorld; ++k) {
      out[k].assign(k + 1, 100 * r + float(k));
      in[k].assign(rank + 1, -1);
      sends.push_back({out[k].data(), k + 1, k});
      receives.push_back({in[k].data(), rank + 1, k});
    }
    check(c.exchange(0, DType::F32, sends, receives), "exchange");
    for (int64_t k = 0; k < kWorld; ++k)
      EXPECT_EQ(in[k], std::vector<float>(rank + 1, 100 * float(k) + r))
          << "from member " << k << " on rank " << rank;
  }));
}

TEST(HostGlooTest, AMemberThatNeverComesIsNamed) {
  std::vector<absl::Status> connected = onRanks(
      3, [](int64_t, HostGlooCollectives &) {}, Millis(500), /*present=*/2);
  for (int64_t r = 0; r < 2; ++r) {
    EXPECT_EQ(connected[r].code(), absl::StatusCode::kUnavailable);
    EXPECT_NE(connected[r].message().find("among ranks 0, 1, 2 within 0.5 s"),
              std::string::npos)
        << connected[r];
  }
}

TEST(HostGlooTest, ACollectiveAMemberSkipsFailsWithinTheTimeOut) {
  std::vector<absl::Status> results(2);
  expectConnected(onRanks(
      2,
      [&](int64_t rank, HostGlooCollectives &c) {
        if (rank == 1) {
          // Stays connected, never joins the all-reduce.
          std::this_thread::sleep_for(Millis(1500));
          return;
        }
        float x = 1;
        results[rank] =
            c.allReduce(0, &x, &x, 1, DType::F32, DeviceReduction::Sum);
      },
      Millis(700)));
  EXPECT_EQ(results[0].code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(results[0].message().find("Gloo's all-reduce among ranks 0, 1 "
                                      "failed (time-out 0.7 s)"),
            std::string::npos)
      << results[0];
}

TEST(HostGlooTest, RanksConnectThroughTheFileRendezvous) {
  merak::testing::ScratchDir scratch;
  const std::string dir = scratch.file("run");
  constexpr int64_t kWorld = 2;
  std::vector<double> sums(kWorld, -1);
  std::vector<std::thread> threads;
  for (int64_t rank = 0; rank < kWorld; ++rank)
    threads.emplace_back([&, rank] {
      RendezvousOptions options;
      options.rank = rank;
      options.worldSize = kWorld;
      options.timeout = Millis(20000);
      auto job = joinFileRendezvous(options, dir, [](const std::string &m) {
        std::fprintf(stderr, "%s\n", m.c_str());
      });
      ASSERT_TRUE(job.ok()) << job.status();
      auto device = openHostGlooDevice("", "");
      ASSERT_TRUE(device.ok()) << device.status();
      auto store = makeJobGlooStore(**job, "test/", options.timeout);
      auto host = HostGlooCollectives::connect(
          *store, *device, oneGroup(rank, kWorld), options.timeout);
      ASSERT_TRUE(host.ok()) << host.status();
      double x = double(rank) + 0.25;
      absl::Status s = (*host)->allReduce(0, &x, &sums[rank], 1, DType::F64,
                                          DeviceReduction::Sum);
      EXPECT_TRUE(s.ok()) << s;
      // A key nobody sets is named after the time-out.
      auto missing = (*job)->storeGet("nobody", Millis(50));
      EXPECT_EQ(missing.status().code(), absl::StatusCode::kDeadlineExceeded);
      EXPECT_NE(missing.status().message().find("no rank set 'nobody'"),
                std::string::npos)
          << missing.status();
      EXPECT_TRUE((*job)->finish().ok());
    });
  for (std::thread &t : threads)
    t.join();
  EXPECT_EQ(sums, (std::vector<double>{1.5, 1.5}));
}

} // namespace
