//===- FileRendezvousTest.cpp - ranks meeting in a directory --------------===//
//
// The rendezvous of the runtime built alone (FileRendezvous.h), with ranks
// as threads of one process meeting in a temporary directory as separate
// processes would: the values they share, barriers, gathers, a stale
// directory an earlier run left, a rank that never comes, and (in child
// processes, since the heartbeat ends the process) a failure one rank
// reports and a rank whose heartbeat stops.
//
//===----------------------------------------------------------------------===//

#include "merak/Runtime/Comm/FileRendezvous.h"

#include "gtest/gtest.h"

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <thread>
#include <unistd.h>

using namespace merak::runtime;

namespace {

namespace fs = std::filesystem;

/// A fresh directory for one test's run.
std::string runDirectory(const std::string &name) {
  fs::path dir = fs::temp_directory_path() / ("merak-file-rendezvous-" + name +
                                              "-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  return dir.string();
}

RendezvousOptions optionsOf(int64_t rank, int64_t world,
                            std::chrono::milliseconds timeout) {
  RendezvousOptions o;
  o.rank = rank;
  o.worldSize = world;
  o.timeout = timeout;
  return o;
}

std::unique_ptr<DistributedJob>
joinOrFail(int64_t rank, int64_t world, const std::string &dir,
           std::chrono::milliseconds timeout = std::chrono::seconds(20)) {
  auto job = joinFileRendezvous(
      optionsOf(rank, world, timeout), dir,
      [](const std::string &m) { std::fprintf(stderr, "%s\n", m.c_str()); });
  EXPECT_TRUE(job.ok()) << job.status();
  return job.ok() ? *std::move(job) : nullptr;
}

TEST(FileRendezvousTest, RanksShareGatherAndMeet) {
  const std::string dir = runDirectory("share");
  constexpr int64_t kWorld = 4;
  std::vector<std::string> fromRank0(kWorld), inGroup(kWorld);
  std::vector<std::vector<std::string>> gathered(kWorld);
  std::vector<std::string> errors(kWorld);
  auto rankMain = [&](int64_t rank) {
    std::unique_ptr<DistributedJob> job = joinOrFail(rank, kWorld, dir);
    if (!job)
      return;
    EXPECT_EQ(job->rank(), rank);
    EXPECT_EQ(job->worldSize(), kWorld);
    auto shared = job->shareFromRank0("checkpoint", rank == 0 ? "id-7" : "");
    // The same key again: the second value, not the first.
    auto again = job->shareFromRank0("checkpoint", rank == 0 ? "id-8" : "");
    // Ranks 1 and 3 form a group whose first member is rank 1.
    absl::StatusOr<std::string> group = std::string("-");
    if (rank % 2 == 1)
      group =
          job->shareInGroup("nccl/0/1/1", {1, 3}, rank == 1 ? "group-id" : "");
    auto all = job->gatherToRank0("names", "rank" + std::to_string(rank));
    absl::Status barrier = job->barrier("end");
    if (!shared.ok() || !again.ok() || !group.ok() || !all.ok() ||
        !barrier.ok()) {
      errors[rank] = "a call failed";
      return;
    }
    EXPECT_EQ(*again, "id-8");
    fromRank0[rank] = *shared;
    inGroup[rank] = *group;
    gathered[rank] = *all;
    absl::Status finished = job->finish();
    EXPECT_TRUE(finished.ok()) << finished;
  };
  std::vector<std::thread> threads;
  for (int64_t r = 0; r < kWorld; ++r)
    threads.emplace_back(rankMain, r);
  for (auto &t : threads)
    t.join();
  EXPECT_EQ(errors, std::vector<std::string>(kWorld));
  EXPECT_EQ(fromRank0, std::vector<std::string>(kWorld, "id-7"));
  EXPECT_EQ(inGroup,
            (std::vector<std::string>{"-", "group-id", "-", "group-id"}));
  EXPECT_EQ(gathered[0],
            (std::vector<std::string>{"rank0", "rank1", "rank2", "rank3"}));
  EXPECT_TRUE(gathered[1].empty());
  // Rank 0 removes the directory at the clean end.
  EXPECT_FALSE(fs::exists(dir));
}

TEST(FileRendezvousTest, AStaleRunsDirectoryIsReplaced) {
  // What a crashed run left: its epoch, its ready list and a shared value
  // under the key this run shares first.
  const std::string dir = runDirectory("stale");
  fs::create_directories(fs::path(dir) / "kv");
  std::ofstream(fs::path(dir) / "epoch") << "old";
  std::ofstream(fs::path(dir) / "ready") << "old aaaa bbbb";
  std::ofstream(fs::path(dir) / "kv" / "share%2F0%2Fk") << "stale";
  std::vector<std::string> got(2);
  auto rankMain = [&](int64_t rank) {
    if (rank == 0) // the other rank finds the stale directory first
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
    std::unique_ptr<DistributedJob> job = joinOrFail(rank, 2, dir);
    if (!job)
      return;
    auto v = job->shareFromRank0("k", rank == 0 ? "fresh" : "");
    got[rank] = v.ok() ? *v : std::string(v.status().message());
    EXPECT_TRUE(job->finish().ok());
  };
  std::thread r1(rankMain, 1), r0(rankMain, 0);
  r0.join();
  r1.join();
  EXPECT_EQ(got, (std::vector<std::string>{"fresh", "fresh"}));
}

TEST(FileRendezvousTest, ARankThatNeverComesIsNamed) {
  const std::string dir = runDirectory("missing");
  auto job = joinFileRendezvous(optionsOf(0, 3, std::chrono::milliseconds(300)),
                                dir, nullptr);
  ASSERT_FALSE(job.ok());
  EXPECT_EQ(job.status().message(),
            "rank 0 did not meet ranks 1, 2 in " + dir + " within 0.3 s");
  fs::remove_all(dir);
}

TEST(FileRendezvousTest, AGroupsFirstRankThatNeverSharesIsNamed) {
  const std::string dir = runDirectory("group");
  std::string error;
  auto rankMain = [&](int64_t rank) {
    std::unique_ptr<DistributedJob> job =
        joinOrFail(rank, 2, dir, std::chrono::milliseconds(1000));
    if (!job)
      return;
    if (rank == 1) {
      auto id = job->shareInGroup("nccl/test", {0, 1}, "");
      EXPECT_FALSE(id.ok());
      error = std::string(id.status().message());
    }
    (void)job->barrier("done");
    (void)job->finish();
  };
  std::thread r0(rankMain, 0), r1(rankMain, 1);
  r0.join();
  r1.join();
  EXPECT_EQ(error.rfind("rank 0 did not share 'nccl/test' with ranks 0, 1 "
                        "within 1 s",
                        0),
            0u)
      << error;
}

TEST(FileRendezvousTest, TheDirectoryComesFromTheEnvironment) {
  RendezvousOptions o;
  o.masterAddr = "10.0.0.1";
  o.port = 29500;
  ::setenv("MERAK_RENDEZVOUS_DIR", "/shared/run", 1);
  EXPECT_EQ(fileRendezvousDirectory(o), "/shared/run");
  ::unsetenv("MERAK_RENDEZVOUS_DIR");
  // TMPDIR, where it is a directory.
  const fs::path scratch = runDirectory("tmpdir");
  fs::create_directories(scratch);
  ::setenv("TMPDIR", scratch.c_str(), 1);
  EXPECT_EQ(fileRendezvousDirectory(o),
            (scratch / "merak-rendezvous-10.0.0.1-29500").string());
  ::unsetenv("TMPDIR");
  fs::remove_all(scratch);
  EXPECT_EQ(
      fileRendezvousDirectory(o),
      (fs::temp_directory_path() / "merak-rendezvous-10.0.0.1-29500").string());
}

// The heartbeat ends the process on a peer's failure: these run in a
// child process.
using FileRendezvousDeathTest = ::testing::Test;

/// A death test's directory: the child process (which runs the test from
/// its start again) takes the one its parent made, so that the parent
/// removes what the child wrote.
std::string deathTestDirectory(const std::string &name) {
  if (const char *inherited = std::getenv("MERAK_DEATH_TEST_DIRECTORY"))
    return inherited;
  std::string dir = runDirectory(name);
  ::setenv("MERAK_DEATH_TEST_DIRECTORY", dir.c_str(), 1);
  return dir;
}

/// Removes a death test's directory once its child has exited.
void removeDeathTestDirectory(const std::string &dir) {
  ::unsetenv("MERAK_DEATH_TEST_DIRECTORY");
  fs::remove_all(dir);
}

TEST(FileRendezvousDeathTest, AReportedFailureStopsTheOthers) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  const std::string dir = deathTestDirectory("failure");
  EXPECT_EXIT(
      {
        std::unique_ptr<DistributedJob> jobs[2];
        // Rank 0's main thread reads the failure below, so its heartbeat
        // leaves it the time-out to report it first.
        auto timeout = std::chrono::milliseconds(1000);
        std::thread r1([&] { jobs[1] = joinOrFail(1, 2, dir, timeout); });
        jobs[0] = joinOrFail(0, 2, dir, timeout);
        r1.join();
        // Rank 1 fails; rank 0's heartbeat reads it and stops the process.
        jobs[1]->abort("rank 1 failed: out of memory in step 3");
        EXPECT_EQ(jobs[0]->diagnose({1}),
                  "rank 1 failed: out of memory in step 3");
        std::this_thread::sleep_for(std::chrono::seconds(30));
      },
      ::testing::ExitedWithCode(1), "rank 1 failed: out of memory in step 3");
  removeDeathTestDirectory(dir);
}

TEST(FileRendezvousDeathTest, ARankWhoseHeartbeatStopsIsNamed) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  const std::string dir = deathTestDirectory("heartbeat");
  EXPECT_EXIT(
      {
        std::unique_ptr<DistributedJob> jobs[2];
        auto timeout = std::chrono::milliseconds(1000);
        std::thread r1([&] { jobs[1] = joinOrFail(1, 2, dir, timeout); });
        jobs[0] = joinOrFail(0, 2, dir, timeout);
        r1.join();
        jobs[1].reset(); // gone without finishing: its heartbeat stops
        std::this_thread::sleep_for(std::chrono::seconds(30));
      },
      ::testing::ExitedWithCode(1),
      "rank 1 stopped answering \\(no heartbeat for 1 s\\)");
  removeDeathTestDirectory(dir);
}

} // namespace
