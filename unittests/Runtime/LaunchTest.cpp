//===- LaunchTest.cpp - launcher variables --------------------------------===//

#include "merak/Runtime/Comm/Launch.h"
#include "ScratchDir.h"

#include "gtest/gtest.h"

#include <sys/prctl.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>
#include <thread>

using namespace merak::runtime;

namespace {

using Env = std::map<std::string, std::string>;

absl::StatusOr<std::optional<LaunchEnvironment>> read(const Env &env) {
  return readLaunchEnvironment([&](const char *name) -> const char * {
    auto it = env.find(name);
    return it == env.end() ? nullptr : it->second.c_str();
  });
}

TEST(LaunchTest, NoLauncherIsOneProcess) {
  absl::StatusOr<std::optional<LaunchEnvironment>> env = read({});
  ASSERT_TRUE(env.ok());
  EXPECT_FALSE(*env);
  // Slurm's variables alone need both the rank and the task count.
  env = read({{"SLURM_PROCID", "0"}});
  ASSERT_TRUE(env.ok());
  EXPECT_FALSE(*env);
}

TEST(LaunchTest, Torchrun) {
  absl::StatusOr<std::optional<LaunchEnvironment>> env =
      read({{"RANK", "3"},
            {"WORLD_SIZE", "4"},
            {"LOCAL_RANK", "1"},
            {"LOCAL_WORLD_SIZE", "2"},
            {"MASTER_ADDR", "10.0.0.1"},
            {"MASTER_PORT", "1234"},
            // torchrun under Slurm: torchrun's variables win.
            {"SLURM_PROCID", "0"},
            {"SLURM_NTASKS", "1"}});
  ASSERT_TRUE(env.ok()) << env.status();
  ASSERT_TRUE(*env);
  EXPECT_EQ((*env)->launcher, "torchrun");
  EXPECT_EQ((*env)->rank, 3);
  EXPECT_EQ((*env)->worldSize, 4);
  EXPECT_EQ((*env)->localRank, 1);
  EXPECT_EQ((*env)->localWorldSize, 2);
  EXPECT_EQ((*env)->masterAddr, "10.0.0.1");
  EXPECT_EQ((*env)->port, 1234);
}

TEST(LaunchTest, DefaultsToLocalhostAndPort29500) {
  absl::StatusOr<std::optional<LaunchEnvironment>> env =
      read({{"RANK", "0"}, {"WORLD_SIZE", "2"}});
  ASSERT_TRUE(env.ok());
  EXPECT_EQ((*env)->masterAddr, "127.0.0.1");
  EXPECT_EQ((*env)->port, kDefaultMasterPort);
}

TEST(LaunchTest, Mpirun) {
  absl::StatusOr<std::optional<LaunchEnvironment>> env =
      read({{"OMPI_COMM_WORLD_RANK", "1"},
            {"OMPI_COMM_WORLD_SIZE", "2"},
            {"OMPI_COMM_WORLD_LOCAL_RANK", "1"},
            {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"}});
  ASSERT_TRUE(env.ok()) << env.status();
  EXPECT_EQ((*env)->launcher, "mpirun");
  EXPECT_EQ((*env)->rank, 1);
  EXPECT_EQ((*env)->worldSize, 2);
  EXPECT_EQ((*env)->masterAddr, "127.0.0.1");
  // On several machines the rendezvous address must be given.
  env = read({{"OMPI_COMM_WORLD_RANK", "1"},
              {"OMPI_COMM_WORLD_SIZE", "4"},
              {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"}});
  ASSERT_FALSE(env.ok());
  EXPECT_NE(env.status().message().find("MASTER_ADDR"), std::string::npos);
}

TEST(LaunchTest, SlurmTakesTheFirstNode) {
  absl::StatusOr<std::optional<LaunchEnvironment>> env =
      read({{"SLURM_PROCID", "5"},
            {"SLURM_NTASKS", "8"},
            {"SLURM_LOCALID", "1"},
            {"SLURM_NTASKS_PER_NODE", "4(x2)"},
            {"SLURM_JOB_NODELIST", "gpu[07-08]"}});
  ASSERT_TRUE(env.ok()) << env.status();
  EXPECT_EQ((*env)->launcher, "slurm");
  EXPECT_EQ((*env)->rank, 5);
  EXPECT_EQ((*env)->worldSize, 8);
  EXPECT_EQ((*env)->localRank, 1);
  EXPECT_EQ((*env)->localWorldSize, 4);
  EXPECT_EQ((*env)->masterAddr, "gpu07");
  EXPECT_EQ((*env)->port, kDefaultMasterPort);
}

TEST(LaunchTest, SlurmNodeLists) {
  EXPECT_EQ(firstSlurmHost("node1"), "node1");
  EXPECT_EQ(firstSlurmHost("node1,node2"), "node1");
  EXPECT_EQ(firstSlurmHost("node[03-05,7],gpu1"), "node03");
  EXPECT_EQ(firstSlurmHost("rack[2,4]-n[1-3]"), "rack2-n1");
}

TEST(LaunchTest, MalformedValuesAreErrors) {
  auto message = [](const Env &env) {
    absl::StatusOr<std::optional<LaunchEnvironment>> r = read(env);
    return r.ok() ? std::string("ok") : std::string(r.status().message());
  };
  EXPECT_EQ(message({{"RANK", "x"}, {"WORLD_SIZE", "2"}}),
            "RANK='x' is not an integer");
  EXPECT_EQ(message({{"RANK", "2"}, {"WORLD_SIZE", "2"}}),
            "RANK=2 is not a rank of WORLD_SIZE=2");
  EXPECT_EQ(message({{"RANK", "0"}}), "torchrun sets RANK but not WORLD_SIZE");
  EXPECT_EQ(message({{"RANK", "0"}, {"WORLD_SIZE", "1"}, {"MASTER_PORT", "0"}}),
            "MASTER_PORT=0 is not a TCP port");
}

TEST(LaunchTest, PickFreePort) {
  absl::StatusOr<int> port = pickFreePort();
  ASSERT_TRUE(port.ok()) << port.status();
  EXPECT_GT(*port, 0);
  EXPECT_LT(*port, 65536);
}

/// Where a forked rank writes what it saw.
std::string rankFile(const std::string &dir, const char *rank) {
  return dir + "/rank-" + (rank ? rank : "none");
}

TEST(LaunchTest, ForkedRanksRunTheCallbackWithTheirVariables) {
  // Forking needs a process without other threads: a test run with threads
  // left by another test would execute this binary instead.
  if (!readyToFork())
    GTEST_SKIP() << "this process runs other threads";
  merak::testing::ScratchDir scratch("merak-launch");
  const std::string dir = scratch.path;
  ::setenv("MERAK_LAUNCH_TEST", "kept", 1);
  LocalLaunch launch;
  launch.nproc = 3;
  // Executed instead of forked, a child would run this binary with no
  // test, write nothing, and the checks below would fail.
  launch.argv = {"MerakRuntimeTests", "--gtest_filter=-*"};
  launch.env = {{"MERAK_NPROC_CHILD", "1"}};
  launch.grace = std::chrono::milliseconds(2000);
  launch.runRank = [dir] {
    const char *rank = std::getenv("RANK");
    char name[16] = {};
    ::prctl(PR_GET_NAME, name);
    std::ofstream out(rankFile(dir, rank));
    for (const char *v :
         {"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR",
          "MERAK_NPROC_CHILD", "MERAK_LAUNCH_TEST"}) {
      const char *value = std::getenv(v);
      out << v << "=" << (value ? value : "-") << "\n";
    }
    out << "name=" << name << "\n";
    out.close();
    // Rank 2 fails: the launcher names it and returns 1.
    return rank && std::string(rank) == "2" ? 3 : 0;
  };
  testing::internal::CaptureStderr();
  int status = runLocalRanks(launch);
  std::string said = testing::internal::GetCapturedStderr();
  EXPECT_EQ(status, 1);
  EXPECT_NE(said.find("error: rank 2 exited with status 3"), std::string::npos)
      << said;
  for (int r = 0; r < 3; ++r) {
    std::string rank = std::to_string(r);
    std::ifstream in(rankFile(dir, rank.c_str()));
    ASSERT_TRUE(in) << "rank " << r << " did not run the callback";
    std::stringstream text;
    text << in.rdbuf();
    EXPECT_EQ(text.str(), "RANK=" + rank +
                              "\nWORLD_SIZE=3\nLOCAL_RANK=" + rank +
                              "\nLOCAL_WORLD_SIZE=3\nMASTER_ADDR=127.0.0.1\n"
                              "MERAK_NPROC_CHILD=1\nMERAK_LAUNCH_TEST=kept\n"
                              "name=merak-rank-" +
                              rank + "\n");
  }
  ::unsetenv("MERAK_LAUNCH_TEST");
  // The launcher's own variables are untouched.
  EXPECT_EQ(std::getenv("RANK"), nullptr);
}

TEST(LaunchTest, ThreadsAreCounted) {
  if (!readyToFork())
    GTEST_SKIP() << "this process runs other threads";
  std::thread waiting(
      [] { std::this_thread::sleep_for(std::chrono::milliseconds(200)); });
  EXPECT_FALSE(runsOneThread());
  EXPECT_FALSE(readyToFork());
  waiting.join();
}

} // namespace
