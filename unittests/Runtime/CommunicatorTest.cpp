//===- CommunicatorTest.cpp - mesh collectives through Gloo ---------------===//
//
// Four ranks of a 2x2 mesh as threads of one process, joined through a
// TCPStore like separate processes: every collective the executor runs,
// over every kind of group (one axis, both axes, both in swapped order),
// against the same computation done with ATen on all ranks' inputs.
// reduce_scatter is Gloo's all-to-all plus a local reduction, so these
// check that arithmetic too.
//
//===----------------------------------------------------------------------===//

#include "merak/Runtime/CPU/CpuBackend.h"
#include "merak/Runtime/Comm/Distributed.h"
#include "merak/Runtime/Comm/Launch.h"
#include "merak/Runtime/Executor.h"
#include "merak/Runtime/Pipeline.h"

#include "CollectiveCases.h"

#include "gtest/gtest.h"

#include <ATen/ATen.h>

#include <cstring>
#include <functional>
#include <thread>

using namespace merak::runtime;
using namespace merak::runtime::testing;

namespace {

HostTensor toHost(const at::Tensor &t) {
  HostTensor h = HostTensor::allocate(
      {DType::F32, Shape(t.sizes().begin(), t.sizes().end())});
  std::memcpy(h.mutableBytes(), t.contiguous().data_ptr(), h.byteSize());
  return h;
}

at::Tensor fromHost(const HostTensor &h) {
  at::Tensor t = at::empty(h.type.shape, at::kFloat);
  std::memcpy(t.data_ptr(), h.data, h.byteSize());
  return t;
}

/// As toHost / fromHost, for f32, i64 and bool tensors.
HostTensor toHostTyped(const at::Tensor &t) {
  DType dtype = t.scalar_type() == at::kLong   ? DType::I64
                : t.scalar_type() == at::kBool ? DType::Bool
                                               : DType::F32;
  HostTensor h =
      HostTensor::allocate({dtype, Shape(t.sizes().begin(), t.sizes().end())});
  std::memcpy(h.mutableBytes(), t.contiguous().data_ptr(), h.byteSize());
  return h;
}

at::Tensor fromHostTyped(const HostTensor &h) {
  at::ScalarType type = h.type.dtype == DType::I64    ? at::kLong
                        : h.type.dtype == DType::Bool ? at::kBool
                                                      : at::kFloat;
  at::Tensor t = at::empty(h.type.shape, type);
  std::memcpy(t.data_ptr(), h.data, h.byteSize());
  return t;
}

TEST(CommunicatorTest, EveryCollectiveOnA2x2Mesh) {
  absl::StatusOr<int> port = pickFreePort();
  ASSERT_TRUE(port.ok());
  std::vector<Case> all = cases();
  // results[case][rank]
  std::vector<std::vector<HostTensor>> results(all.size(),
                                               std::vector<HostTensor>(kWorld));
  std::vector<std::string> failures(kWorld);
  auto rankMain = [&](int64_t rank) {
    RendezvousOptions options;
    options.rank = rank;
    options.worldSize = kWorld;
    options.port = *port;
    options.timeout = std::chrono::milliseconds(30000);
    absl::StatusOr<std::unique_ptr<DistributedJob>> job =
        DistributedJob::join(options, [](const std::string &message) {
          ADD_FAILURE() << "peer failure: " << message;
        });
    if (!job.ok()) {
      failures[rank] = std::string(job.status().message());
      return;
    }
    std::unique_ptr<Backend> backend = createCpuBackend({1});
    for (size_t k = 0; k < all.size(); ++k) {
      Program program = collectiveProgram(all[k], rank);
      absl::StatusOr<std::unique_ptr<Communicator>> comm =
          (*job)->createGlooCommunicator(program);
      if (!comm.ok()) {
        failures[rank] = std::string(comm.status().message());
        return;
      }
      absl::StatusOr<std::unique_ptr<Executor>> exec =
          Executor::create(program, *backend, comm->get());
      if (!exec.ok()) {
        failures[rank] = std::string(exec.status().message());
        return;
      }
      std::vector<HostTensor> out;
      absl::StatusOr<StepOutcome> step = (*exec)->runStep(
          StepContext{}, {toHost(input(all[k].in, rank))}, false, &out);
      if (!step.ok()) {
        failures[rank] =
            all[k].name + ": " + std::string(step.status().message());
        return;
      }
      results[k][rank] = out[0];
    }
    if (absl::Status s = (*job)->barrier("end"); !s.ok())
      failures[rank] = std::string(s.message());
    absl::StatusOr<std::string> shared =
        (*job)->shareFromRank0("word", rank == 0 ? "hello" : "ignored");
    if (!shared.ok() || *shared != "hello")
      failures[rank] = "shareFromRank0 did not give rank 0's value";
    if (absl::Status s = (*job)->finish(); !s.ok())
      failures[rank] = std::string(s.message());
  };
  std::vector<std::thread> threads;
  for (int64_t r = 0; r < kWorld; ++r)
    threads.emplace_back(rankMain, r);
  for (std::thread &t : threads)
    t.join();
  for (int64_t r = 0; r < kWorld; ++r)
    ASSERT_EQ(failures[r], "") << "rank " << r;

  for (size_t k = 0; k < all.size(); ++k) {
    std::vector<at::Tensor> xs;
    for (int64_t r = 0; r < kWorld; ++r)
      xs.push_back(input(all[k].in, r));
    for (int64_t r = 0; r < kWorld; ++r) {
      at::Tensor expected = all[k].expect(xs, r).contiguous();
      at::Tensor got = fromHost(results[k][r]);
      // Exact but for the product, whose rounding depends on the order.
      EXPECT_TRUE(at::allclose(got, expected, /*rtol=*/1e-6, /*atol=*/0))
          << all[k].name << " on rank " << r << ": got " << got << " expected "
          << expected;
    }
  }
}

/// Collectives in flight over two groups while kernels run, then read:
///   %1 = all_reduce(x) over dp; %2 = all_gather(x) over tp;
///   %3 = neg(x); %4 = all_reduce(%3, average) over both;
///   %5 = add(%1, %3); %6 = mul(%5, %4); results %6, %2.
Program overlapProgram(int64_t rank, CollectiveMode mode) {
  Program p;
  p.function = "overlap";
  p.mesh = MeshLayout{"mesh", kMesh, {"dp", "tp"}};
  auto f32 = [](Shape shape) {
    return ValueInfo{TensorType{DType::F32, shape}};
  };
  p.values = {f32({4, 4}), f32({4, 4}), f32({8, 4}), f32({4, 4}),
              f32({4, 4}), f32({4, 4}), f32({4, 4})};
  Argument x;
  x.value = 0;
  x.role = ArgumentRole::Input;
  x.name = "x";
  p.arguments = {x};
  auto inst = [](OpKind kind, OpAttrs attrs, std::vector<ValueId> operands,
                 ValueId result) {
    Instruction i;
    i.kind = kind;
    i.attrs = std::move(attrs);
    i.operands = std::move(operands);
    i.results = {result};
    return i;
  };
  p.instructions = {inst(OpKind::AllReduce, collective({0}), {0}, 1),
                    inst(OpKind::AllGather, collective({1}), {0}, 2),
                    inst(OpKind::Neg, OpAttrs(), {0}, 3),
                    inst(OpKind::AllReduce,
                         collective({0, 1}, CollectiveReduction::Average), {3},
                         4),
                    inst(OpKind::Add, OpAttrs(), {1, 3}, 5),
                    inst(OpKind::Mul, OpAttrs(), {5, 4}, 6)};
  ResultInfo r6, r2;
  r6.value = 6;
  r2.value = 2;
  p.results = {r6, r2};
  EXPECT_TRUE(bindToRank(p, rank, mode).ok());
  return p;
}

TEST(CommunicatorTest, OverlappedCollectivesGiveTheBlockingResults) {
  absl::StatusOr<int> port = pickFreePort();
  ASSERT_TRUE(port.ok());
  const CollectiveMode modes[] = {CollectiveMode::Overlapped,
                                  CollectiveMode::Blocking};
  // results[mode][rank]
  std::vector<std::vector<std::vector<HostTensor>>> results(
      2, std::vector<std::vector<HostTensor>>(kWorld));
  std::vector<std::string> failures(kWorld);
  auto rankMain = [&](int64_t rank) {
    RendezvousOptions options;
    options.rank = rank;
    options.worldSize = kWorld;
    options.port = *port;
    options.timeout = std::chrono::milliseconds(30000);
    absl::StatusOr<std::unique_ptr<DistributedJob>> job =
        DistributedJob::join(options, [](const std::string &message) {
          ADD_FAILURE() << "peer failure: " << message;
        });
    if (!job.ok()) {
      failures[rank] = std::string(job.status().message());
      return;
    }
    std::unique_ptr<Backend> backend = createCpuBackend({1});
    for (int m = 0; m < 2; ++m) {
      Program program = overlapProgram(rank, modes[m]);
      int waits = 0;
      for (const Instruction &inst : program.instructions)
        waits += inst.kind == OpKind::Wait;
      EXPECT_EQ(waits, m == 0 ? 3 : 0);
      absl::StatusOr<std::unique_ptr<Communicator>> comm =
          (*job)->createGlooCommunicator(program);
      if (!comm.ok()) {
        failures[rank] = std::string(comm.status().message());
        return;
      }
      absl::StatusOr<std::unique_ptr<Executor>> exec =
          Executor::create(program, *backend, comm->get());
      if (!exec.ok()) {
        failures[rank] = std::string(exec.status().message());
        return;
      }
      // Twice: the second step starts with nothing left in flight.
      for (int step = 0; step < 2; ++step) {
        absl::StatusOr<StepOutcome> outcome =
            (*exec)->runStep(StepContext{}, {toHost(input({4, 4}, rank))},
                             false, &results[m][rank]);
        if (!outcome.ok()) {
          failures[rank] = std::string(outcome.status().message());
          return;
        }
      }
    }
    if (absl::Status s = (*job)->finish(); !s.ok())
      failures[rank] = std::string(s.message());
  };
  std::vector<std::thread> threads;
  for (int64_t r = 0; r < kWorld; ++r)
    threads.emplace_back(rankMain, r);
  for (std::thread &t : threads)
    t.join();
  for (int64_t r = 0; r < kWorld; ++r)
    ASSERT_EQ(failures[r], "") << "rank " << r;

  std::vector<at::Tensor> xs;
  for (int64_t r = 0; r < kWorld; ++r)
    xs.push_back(input({4, 4}, r));
  for (int64_t r = 0; r < kWorld; ++r) {
    at::Tensor mean = -at::stack(xs).sum(0) / 4;
    at::Tensor expected =
        (at::stack(members(xs, r, {0})).sum(0) - xs[r]) * mean;
    at::Tensor gathered = at::cat(members(xs, r, {1}), 0);
    for (int m = 0; m < 2; ++m) {
      ASSERT_EQ(results[m][r].size(), 2u);
      EXPECT_TRUE(at::allclose(fromHost(results[m][r][0]), expected, 1e-6, 0))
          << "mode " << m << " rank " << r;
      EXPECT_TRUE(at::equal(fromHost(results[m][r][1]), gathered))
          << "mode " << m << " rank " << r;
    }
    // Bit for bit the same either way.
    EXPECT_EQ(std::memcmp(results[0][r][0].data, results[1][r][0].data,
                          results[0][r][0].byteSize()),
              0)
        << "rank " << r;
  }
}

// Pipeline transfers: mixed element types in one message, receives posted
// before their sends, two tags between the same pair matched by tag, and
// `ready` / `finished` telling a rank that a transfer has arrived.
TEST(CommunicatorTest, PeerLinkMovesTensorsBetweenRanks) {
  absl::StatusOr<int> port = pickFreePort();
  ASSERT_TRUE(port.ok());
  const std::vector<TensorType> types = {TensorType{DType::F32, {2, 3}},
                                         TensorType{DType::I64, {5}},
                                         TensorType{DType::Bool, {}}};
  std::vector<std::string> failures(2);
  std::vector<std::vector<at::Tensor>> got(2);
  auto rankMain = [&](int64_t rank) {
    auto fail = [&](const absl::Status &s) {
      failures[rank] = std::string(s.message());
    };
    RendezvousOptions options;
    options.rank = rank;
    options.worldSize = 2;
    options.port = *port;
    options.timeout = std::chrono::milliseconds(30000);
    absl::StatusOr<std::unique_ptr<DistributedJob>> job =
        DistributedJob::join(options, nullptr);
    if (!job.ok())
      return fail(job.status());
    absl::StatusOr<std::unique_ptr<PeerLink>> link =
        (*job)->createPeerLink(PeerTransport::Gloo);
    if (!link.ok())
      return fail(link.status());
    std::unique_ptr<Backend> backend = createCpuBackend({1});
    int64_t peer = 1 - rank;
    // Each rank posts both receives first, then sends tag 8 before tag 7.
    absl::StatusOr<std::unique_ptr<PendingCollective>> first =
        (*link)->recv(peer, 7, types);
    absl::StatusOr<std::unique_ptr<PendingCollective>> second =
        (*link)->recv(peer, 8, {TensorType{DType::F32, {1}}});
    if (!first.ok() || !second.ok())
      return fail(!first.ok() ? first.status() : second.status());
    auto upload = [&](const at::Tensor &t) {
      return *backend->upload(toHostTyped(t));
    };
    std::vector<TensorHandle> out = {
        upload(at::arange(6, at::kFloat).reshape({2, 3}) + rank),
        upload(at::arange(5, at::kLong) * (rank + 1)),
        upload(at::full({}, rank == 0, at::kBool))};
    TensorHandle marker = upload(at::full({1}, 100.0f + rank));
    absl::StatusOr<std::unique_ptr<PendingCollective>> sendMarker =
        (*link)->send(peer, 8, {marker.get()}, {TensorType{DType::F32, {1}}});
    absl::StatusOr<std::unique_ptr<PendingCollective>> sendMain = (*link)->send(
        peer, 7, {out[0].get(), out[1].get(), out[2].get()}, types);
    if (!sendMarker.ok() || !sendMain.ok())
      return fail(!sendMarker.ok() ? sendMarker.status() : sendMain.status());
    out.clear(); // the link keeps what it sends
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (!(*first)->ready() || !(*second)->ready()) {
      if (std::chrono::steady_clock::now() > deadline)
        return fail(absl::DeadlineExceededError("never ready"));
      (*link)->waitForProgress((*link)->finished(),
                               std::chrono::milliseconds(5));
    }
    absl::StatusOr<std::vector<TensorHandle>> a = (*first)->finish();
    absl::StatusOr<std::vector<TensorHandle>> b = (*second)->finish();
    if (!a.ok() || !b.ok())
      return fail(!a.ok() ? a.status() : b.status());
    for (size_t k = 0; k < types.size(); ++k)
      got[rank].push_back(
          fromHostTyped(*backend->download(*(*a)[k], types[k])));
    got[rank].push_back(fromHostTyped(
        *backend->download(*(*b)[0], TensorType{DType::F32, {1}})));
    for (auto *p : {&*sendMarker, &*sendMain})
      if (absl::Status s = (*p)->wait(); !s.ok())
        return fail(s);
    if (absl::Status s = (*job)->finish(); !s.ok())
      fail(s);
  };
  std::thread t0(rankMain, 0), t1(rankMain, 1);
  t0.join();
  t1.join();
  for (int64_t r = 0; r < 2; ++r) {
    ASSERT_EQ(failures[r], "") << "rank " << r;
    int64_t peer = 1 - r;
    ASSERT_EQ(got[r].size(), 4u);
    EXPECT_TRUE(
        at::equal(got[r][0], at::arange(6, at::kFloat).reshape({2, 3}) + peer));
    EXPECT_TRUE(at::equal(got[r][1], at::arange(5, at::kLong) * (peer + 1)));
    EXPECT_EQ(got[r][2].dim(), 0);
    EXPECT_EQ(got[r][2].item<bool>(), peer == 0);
    EXPECT_EQ(got[r][3].item<float>(), 100.0f + peer);
  }
}

TEST(CommunicatorTest, JoiningWithoutRankZeroTimesOut) {
  absl::StatusOr<int> port = pickFreePort();
  ASSERT_TRUE(port.ok());
  RendezvousOptions options;
  options.rank = 1;
  options.worldSize = 2;
  options.port = *port;
  options.timeout = std::chrono::milliseconds(2500);
  auto start = std::chrono::steady_clock::now();
  absl::StatusOr<std::unique_ptr<DistributedJob>> job =
      DistributedJob::join(options, nullptr);
  ASSERT_FALSE(job.ok());
  EXPECT_NE(job.status().message().find("cannot join the rendezvous store at "
                                        "127.0.0.1:"),
            std::string::npos)
      << job.status();
  // Rank 1 retries until the time-out, then gives up: bounded.
  auto waited = std::chrono::steady_clock::now() - start;
  EXPECT_GE(waited, std::chrono::milliseconds(1000)) << job.status();
  EXPECT_LT(waited, std::chrono::seconds(10));
}

} // namespace
