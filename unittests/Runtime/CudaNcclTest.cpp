//===- CudaNcclTest.cpp - the NCCL communicators' bootstrap, no GPU -------===//
//
// Four ranks of a 2x2 mesh as threads of one process, joined through the
// rendezvous store as separate processes are: each process group's first
// rank makes an NCCL unique id (which needs no GPU) and its members read
// it from the store. Every member of a group gets the same id, different
// groups different ones; a group whose first rank never shares makes its
// members fail within the time-out, naming that rank.
//
//===----------------------------------------------------------------------===//

#if MERAK_TEST_HAVE_NCCL

#include "merak/Runtime/CUDA/CudaBackend.h"
#include "merak/Runtime/CUDA/IpcLink.h"
#include "merak/Runtime/CUDA/Nccl.h"
#include "merak/Runtime/Comm/Distributed.h"
#include "merak/Runtime/Comm/Launch.h"
#include "merak/Runtime/Mesh.h"
#include "merak/Runtime/Registry.h"

#include "gtest/gtest.h"

#include <map>
#include <thread>

using namespace merak::runtime;

namespace {

/// A program's groups alone: over dp, over tp, and over both.
Program groupsOf(int64_t rank) {
  const std::vector<int64_t> mesh = {2, 2};
  Program p;
  for (std::vector<int64_t> axes :
       {std::vector<int64_t>{0}, std::vector<int64_t>{1},
        std::vector<int64_t>{0, 1}})
    p.groups.push_back({axes, processGroup(mesh, rank, axes)});
  return p;
}

std::unique_ptr<DistributedJob> join(int64_t rank, int64_t world, int port,
                                     std::chrono::milliseconds timeout) {
  RendezvousOptions options;
  options.rank = rank;
  options.worldSize = world;
  options.port = port;
  options.timeout = timeout;
  absl::StatusOr<std::unique_ptr<DistributedJob>> job = DistributedJob::join(
      options, [](const std::string &message) { (void)message; });
  EXPECT_TRUE(job.ok()) << job.status();
  return job.ok() ? *std::move(job) : nullptr;
}

TEST(CudaNcclTest, EachGroupSharesTheIdItsFirstRankMade) {
  absl::StatusOr<int> port = pickFreePort();
  ASSERT_TRUE(port.ok());
  constexpr int64_t kWorld = 4;
  std::vector<std::vector<std::string>> ids(kWorld);
  std::vector<std::string> errors(kWorld);
  auto rankMain = [&](int64_t rank) {
    std::unique_ptr<DistributedJob> job =
        join(rank, kWorld, *port, std::chrono::milliseconds(30000));
    if (!job)
      return;
    absl::StatusOr<std::vector<std::string>> shared =
        shareNcclIds(*job, groupsOf(rank), /*generation=*/0);
    if (!shared.ok())
      errors[rank] = std::string(shared.status().message());
    else
      ids[rank] = *shared;
    (void)job->finish();
  };
  std::vector<std::thread> threads;
  for (int64_t r = 0; r < kWorld; ++r)
    threads.emplace_back(rankMain, r);
  for (std::thread &t : threads)
    t.join();
  for (int64_t r = 0; r < kWorld; ++r) {
    ASSERT_EQ(errors[r], "") << "rank " << r;
    ASSERT_EQ(ids[r].size(), 3u);
    for (const std::string &id : ids[r])
      EXPECT_EQ(id.size(), 128u); // NCCL_UNIQUE_ID_BYTES
  }
  // Members of a group hold one id: dp groups {0, 2} and {1, 3}, tp
  // groups {0, 1} and {2, 3}, and all four ranks.
  EXPECT_EQ(ids[0][0], ids[2][0]);
  EXPECT_EQ(ids[1][0], ids[3][0]);
  EXPECT_EQ(ids[0][1], ids[1][1]);
  EXPECT_EQ(ids[2][1], ids[3][1]);
  for (int64_t r = 1; r < kWorld; ++r)
    EXPECT_EQ(ids[r][2], ids[0][2]);
  // Every group its own.
  std::map<std::string, int> distinct;
  for (int64_t r = 0; r < kWorld; ++r)
    for (const std::string &id : ids[r])
      distinct[id]++;
  EXPECT_EQ(distinct.size(), 5u);
}

TEST(CudaNcclTest, EachTransferDirectionSharesItsSendersId) {
  // Three pipeline ranks: the directions a pipeline of three ranks has,
  // rank 1 talking to both others and rank 0 only receiving from rank 2.
  absl::StatusOr<int> port = pickFreePort();
  ASSERT_TRUE(port.ok());
  constexpr int64_t kWorld = 3;
  const std::vector<std::pair<int64_t, int64_t>> directions = {
      {0, 1}, {1, 0}, {1, 2}, {2, 0}, {2, 1}};
  std::vector<std::map<std::pair<int64_t, int64_t>, std::string>> ids(kWorld);
  std::vector<std::string> errors(kWorld);
  auto rankMain = [&](int64_t rank) {
    std::unique_ptr<DistributedJob> job =
        join(rank, kWorld, *port, std::chrono::milliseconds(30000));
    if (!job)
      return;
    auto shared = shareNcclChannelIds(*job, directions, /*generation=*/7);
    if (!shared.ok())
      errors[rank] = std::string(shared.status().message());
    else
      ids[rank] = *shared;
    (void)job->finish();
  };
  std::vector<std::thread> threads;
  for (int64_t r = 0; r < kWorld; ++r)
    threads.emplace_back(rankMain, r);
  for (std::thread &t : threads)
    t.join();
  std::map<std::string, int> distinct;
  for (int64_t r = 0; r < kWorld; ++r) {
    ASSERT_EQ(errors[r], "") << "rank " << r;
    // Each rank holds the directions it is in, and only those.
    std::vector<std::pair<int64_t, int64_t>> mine;
    for (const auto &d : directions)
      if (d.first == r || d.second == r)
        mine.push_back(d);
    std::vector<std::pair<int64_t, int64_t>> held;
    for (const auto &[d, id] : ids[r]) {
      held.push_back(d);
      EXPECT_EQ(id.size(), 128u);
      distinct[id]++;
    }
    EXPECT_EQ(held, mine) << "rank " << r;
  }
  // Both ends of a direction hold its id; directions differ.
  for (const auto &d : directions)
    EXPECT_EQ(ids[d.first].at(d), ids[d.second].at(d));
  EXPECT_EQ(distinct.size(), directions.size());
}

TEST(CudaNcclTest, AFirstRankThatNeverSharesIsNamed) {
  absl::StatusOr<int> port = pickFreePort();
  ASSERT_TRUE(port.ok());
  std::string error;
  auto rankMain = [&](int64_t rank) {
    std::unique_ptr<DistributedJob> job =
        join(rank, 2, *port, std::chrono::milliseconds(5000));
    if (!job)
      return;
    if (rank == 1) {
      // Rank 0 made no id for the group of both ranks.
      absl::StatusOr<std::string> id =
          job->shareInGroup("nccl/test/0,1/0", {0, 1}, "");
      EXPECT_FALSE(id.ok());
      error = std::string(id.status().message());
    } else {
      std::this_thread::sleep_for(std::chrono::milliseconds(7000));
    }
    (void)job->finish();
  };
  std::thread r0(rankMain, 0), r1(rankMain, 1);
  r0.join();
  r1.join();
  EXPECT_NE(error.find("rank 0 did not share 'nccl/test/0,1/0' with ranks "
                       "0, 1 within 5 s"),
            std::string::npos)
      << error;
}

TEST(CudaNcclTest, NoGpuIsAReason) {
  if (cudaDeviceAvailable())
    GTEST_SKIP() << "a GPU is here";
  std::string why;
  EXPECT_FALSE(ncclUsable(1, &why));
  EXPECT_NE(why.find("no CUDA device can be used on this machine"),
            std::string::npos)
      << why;
  EXPECT_EQ(ncclDescription().rfind("NCCL 2.", 0), 0u) << ncclDescription();
}

TEST(CudaIpcTest, TheSharedMemoryLinkIsTheCudaBackends) {
  // --p2p=shm between GPUs is the CUDA backend's (IpcLink.h): registered
  // with it, and a clear error for another backend's tensors.
  registerBuiltinComponents();
  absl::StatusOr<const BackendEntry *> cuda = findBackend("cuda");
  ASSERT_TRUE(cuda.ok());
  EXPECT_TRUE(bool((*cuda)->createSharedMemoryLink));
  absl::StatusOr<const BackendEntry *> cpu = findBackend("cpu");
  ASSERT_TRUE(cpu.ok());
  EXPECT_FALSE(bool((*cpu)->createSharedMemoryLink));
  absl::StatusOr<int> port = pickFreePort();
  ASSERT_TRUE(port.ok());
  std::unique_ptr<DistributedJob> job =
      join(0, 1, *port, std::chrono::seconds(5));
  ASSERT_NE(job, nullptr);
  absl::StatusOr<std::unique_ptr<Backend>> backend = (*cpu)->create({});
  ASSERT_TRUE(backend.ok());
  auto link =
      createIpcPeerLink(*job, {{0, 1}}, **backend, std::chrono::seconds(5));
  EXPECT_EQ(link.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(link.status().message(),
            "--p2p=shm between GPUs moves the CUDA backend's tensors, not the "
            "cpu backend's");
}

} // namespace

#endif // MERAK_TEST_HAVE_NCCL
