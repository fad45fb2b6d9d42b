//===- Launch.h - how a rank learns its place, and --nproc -----*- C++ -*-===//
//
// A rank reads its rank, the world size and the rendezvous address from the
// variables its launcher sets (torchrun, Slurm, mpirun, or merak-exec
// --nproc itself), and `runLocalRanks` starts N local copies of a program
// with those variables, waits for them, and stops the others when one fails.
// Plain POSIX; no LibTorch.
//
//===----------------------------------------------------------------------===//

#ifndef MERAK_RUNTIME_COMM_LAUNCH_H
#define MERAK_RUNTIME_COMM_LAUNCH_H

#include "absl/status/statusor.h"

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace merak::runtime {

/// The default rendezvous port (torchrun's).
constexpr int kDefaultMasterPort = 29500;

struct LaunchEnvironment {
  int64_t rank = 0;
  int64_t worldSize = 1;
  int64_t localRank = 0;
  /// Ranks on this machine (LOCAL_WORLD_SIZE, ...), 0 when unknown.
  int64_t localWorldSize = 0;
  std::string masterAddr = "127.0.0.1";
  int port = kDefaultMasterPort;
  /// "torchrun", "mpirun", "slurm": which variables were read.
  std::string launcher;
};

/// Reads the launcher's variables through `getenv`, in this order:
/// RANK/WORLD_SIZE (torchrun and --nproc; LOCAL_RANK, LOCAL_WORLD_SIZE),
/// OMPI_COMM_WORLD_RANK/OMPI_COMM_WORLD_SIZE (mpirun), SLURM_PROCID/
/// SLURM_NTASKS (srun). MASTER_ADDR and MASTER_PORT give the rendezvous;
/// without MASTER_ADDR, Slurm's first node of SLURM_JOB_NODELIST, else
/// 127.0.0.1 on one machine. nullopt when no launcher set a rank (a single
/// process); an error for malformed values.
absl::StatusOr<std::optional<LaunchEnvironment>>
readLaunchEnvironment(const std::function<const char *(const char *)> &getenv);

/// The first host of a Slurm node list: `node[03-05,7],gpu1` -> `node03`.
std::string firstSlurmHost(const std::string &nodeList);

/// A TCP port on 127.0.0.1 that was free a moment ago.
absl::StatusOr<int> pickFreePort();

struct LocalLaunch {
  int nproc = 1;
  /// The program and its arguments (argv[0] is replaced by the running
  /// executable, /proc/self/exe).
  std::vector<std::string> argv;
  /// Extra variables for every child (the parent's environment is kept).
  std::vector<std::pair<std::string, std::string>> env;
  /// After the first rank fails, how long the others get to report and
  /// exit by themselves before they are killed.
  std::chrono::milliseconds grace{5000};
  /// Prefix of the launcher's own messages ("merak-exec").
  std::string tool = "merak-exec";
  /// Where set, a child forked from a launcher with no thread but its own
  /// runs this in place of executing `argv` again, with its rank's
  /// environment, and exits with what it returns: the libraries the
  /// launcher has loaded serve the ranks, which then start in a fraction
  /// of the time (loading LibTorch's libraries takes about a second of
  /// CPU per process). Such a rank is named `merak-rank-R` (ps,
  /// /proc/PID/comm; its /proc/PID/environ is still the launcher's). A
  /// launcher with threads (a fork copies only the calling one), or
  /// MERAK_LAUNCH=exec in the environment, executes `argv`.
  std::function<int()> runRank;
};

/// Starts `nproc` children with RANK, WORLD_SIZE, LOCAL_RANK,
/// LOCAL_WORLD_SIZE, MASTER_ADDR=127.0.0.1 and MASTER_PORT (a free port)
/// set, and waits. When one fails (non-zero status or a signal) it names the
/// rank on stderr, gives the others `grace` to exit, kills those left, and
/// returns 1. SIGINT and SIGTERM are passed on. Children die with the parent.
/// Returns the exit status for the parent: 0 when every rank succeeded.
int runLocalRanks(const LocalLaunch &launch);

/// Whether the calling process runs one thread (/proc/self/task); false
/// where that cannot be read.
bool runsOneThread();

/// Stops the idle thread pool OpenBLAS starts when loaded (as its own fork
/// handler would) and says whether the process then runs one thread: a
/// launcher that does forks its ranks (LocalLaunch::runRank).
bool readyToFork();

} // namespace merak::runtime

#endif // MERAK_RUNTIME_COMM_LAUNCH_H
