//===- LaunchTest.cpp - launcher variables --------------------------------===//

#include "merak/Runtime/Comm/Launch.h"

#include "gtest/gtest.h"

#include <map>

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

} // namespace
