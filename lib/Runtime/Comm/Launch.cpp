//===- Launch.cpp - launcher variables and local multi-process launch -----===//

#include "merak/Runtime/Comm/Launch.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

#include <arpa/inet.h>
#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <dirent.h>
#include <dlfcn.h>
#include <netinet/in.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>

extern char **environ;

namespace merak::runtime {
namespace {

absl::StatusOr<int64_t> parseInt(const char *name, const char *text) {
  int64_t value;
  if (!absl::SimpleAtoi(text, &value))
    return absl::InvalidArgumentError(
        absl::StrCat(name, "='", text, "' is not an integer"));
  return value;
}

std::atomic<int> pendingSignal{0};
void onSignal(int sig) { pendingSignal.store(sig); }

std::string describeExit(int status) {
  if (WIFSIGNALED(status)) {
    int sig = WTERMSIG(status);
    const char *name = strsignal(sig);
    return absl::StrCat("was killed by signal ", sig,
                        name ? absl::StrCat(" (", name, ")") : "");
  }
  return absl::StrCat("exited with status ", WEXITSTATUS(status));
}

} // namespace

std::string firstSlurmHost(const std::string &nodeList) {
  // The first entry ends at a comma outside brackets.
  size_t depth = 0, end = nodeList.size();
  for (size_t i = 0; i < nodeList.size(); ++i) {
    if (nodeList[i] == '[')
      ++depth;
    else if (nodeList[i] == ']' && depth > 0)
      --depth;
    else if (nodeList[i] == ',' && depth == 0) {
      end = i;
      break;
    }
  }
  std::string entry = nodeList.substr(0, end);
  size_t open = entry.find('[');
  if (open == std::string::npos)
    return entry;
  // `prefix[03-05,7]suffix`: the first number of the range keeps its width.
  std::string prefix = entry.substr(0, open);
  size_t close = entry.find(']', open);
  std::string range =
      entry.substr(open + 1, close == std::string::npos ? std::string::npos
                                                        : close - open - 1);
  size_t stop = range.find_first_of("-,");
  std::string suffix =
      close == std::string::npos ? "" : entry.substr(close + 1);
  // A later bracket (`rack[1-2]-n[3-4]`) takes its first value too.
  return prefix + range.substr(0, stop) + firstSlurmHost(suffix);
}

absl::StatusOr<std::optional<LaunchEnvironment>>
readLaunchEnvironment(const std::function<const char *(const char *)> &getenv) {
  auto get = [&](const char *name) -> const char * {
    const char *v = getenv(name);
    return v && *v ? v : nullptr;
  };
  LaunchEnvironment env;
  const char *rankVar, *sizeVar, *localRankVar = nullptr,
                                 *localSizeVar = nullptr;
  if (get("RANK") || get("WORLD_SIZE")) {
    env.launcher = "torchrun";
    rankVar = "RANK", sizeVar = "WORLD_SIZE";
    localRankVar = "LOCAL_RANK", localSizeVar = "LOCAL_WORLD_SIZE";
  } else if (get("OMPI_COMM_WORLD_RANK") || get("OMPI_COMM_WORLD_SIZE")) {
    env.launcher = "mpirun";
    rankVar = "OMPI_COMM_WORLD_RANK", sizeVar = "OMPI_COMM_WORLD_SIZE";
    localRankVar = "OMPI_COMM_WORLD_LOCAL_RANK";
    localSizeVar = "OMPI_COMM_WORLD_LOCAL_SIZE";
  } else if (get("SLURM_PROCID") && get("SLURM_NTASKS")) {
    env.launcher = "slurm";
    rankVar = "SLURM_PROCID", sizeVar = "SLURM_NTASKS";
    localRankVar = "SLURM_LOCALID";
    localSizeVar = "SLURM_NTASKS_PER_NODE";
  } else {
    return std::nullopt;
  }
  if (!get(rankVar) || !get(sizeVar))
    return absl::InvalidArgumentError(
        absl::StrCat(env.launcher, " sets ", get(rankVar) ? rankVar : sizeVar,
                     " but not ", get(rankVar) ? sizeVar : rankVar));
  absl::StatusOr<int64_t> rank = parseInt(rankVar, get(rankVar));
  absl::StatusOr<int64_t> size = parseInt(sizeVar, get(sizeVar));
  if (!rank.ok())
    return rank.status();
  if (!size.ok())
    return size.status();
  if (*size < 1 || *rank < 0 || *rank >= *size)
    return absl::InvalidArgumentError(absl::StrCat(
        rankVar, "=", *rank, " is not a rank of ", sizeVar, "=", *size));
  env.rank = *rank;
  env.worldSize = *size;
  if (localRankVar && get(localRankVar)) {
    absl::StatusOr<int64_t> v = parseInt(localRankVar, get(localRankVar));
    if (!v.ok())
      return v.status();
    env.localRank = *v;
  }
  if (localSizeVar && get(localSizeVar)) {
    // Slurm writes `2(x3)` for uneven layouts; the leading count is enough.
    int64_t v = 0;
    std::string text = get(localSizeVar);
    if (absl::SimpleAtoi(text.substr(0, text.find('(')), &v))
      env.localWorldSize = v;
  }

  if (const char *addr = get("MASTER_ADDR")) {
    env.masterAddr = addr;
  } else if (env.launcher == "slurm") {
    const char *nodes = get("SLURM_STEP_NODELIST");
    if (!nodes)
      nodes = get("SLURM_JOB_NODELIST");
    if (!nodes)
      nodes = get("SLURM_NODELIST");
    if (nodes)
      env.masterAddr = firstSlurmHost(nodes);
  } else if (env.launcher == "mpirun" && env.localWorldSize &&
             env.localWorldSize != env.worldSize) {
    return absl::InvalidArgumentError(
        "mpirun runs ranks on several machines: set MASTER_ADDR (and "
        "MASTER_PORT) to rank 0's address, e.g. mpirun -x MASTER_ADDR=...");
  }
  if (const char *port = get("MASTER_PORT")) {
    absl::StatusOr<int64_t> v = parseInt("MASTER_PORT", port);
    if (!v.ok())
      return v.status();
    if (*v < 1 || *v > 65535)
      return absl::InvalidArgumentError(
          absl::StrCat("MASTER_PORT=", *v, " is not a TCP port"));
    env.port = int(*v);
  }
  return env;
}

absl::StatusOr<int> pickFreePort() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0)
    return absl::UnavailableError(
        absl::StrCat("cannot open a socket: ", std::strerror(errno)));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof(addr);
  if (::bind(fd, reinterpret_cast<sockaddr *>(&addr), sizeof(addr)) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr *>(&addr), &len) != 0) {
    std::string err = std::strerror(errno);
    ::close(fd);
    return absl::UnavailableError(
        absl::StrCat("cannot find a free port: ", err));
  }
  ::close(fd);
  return int(ntohs(addr.sin_port));
}

bool runsOneThread() {
  DIR *dir = ::opendir("/proc/self/task");
  if (!dir)
    return false;
  int threads = 0;
  while (const dirent *e = ::readdir(dir))
    threads += e->d_name[0] != '.';
  ::closedir(dir);
  return threads == 1;
}

bool readyToFork() {
  // OpenBLAS (which LibTorch's libraries load) starts its threads when
  // loaded and stops them before any fork (its own pthread_atfork handler):
  // stopped here already, they do not count. It starts them again when
  // next called.
  using ShutdownFn = int (*)();
  if (auto shutdown = reinterpret_cast<ShutdownFn>(
          dlsym(RTLD_DEFAULT, "blas_thread_shutdown_")))
    shutdown();
  return runsOneThread();
}

int runLocalRanks(const LocalLaunch &launch) {
  auto say = [&](const std::string &message) {
    std::fflush(stdout);
    std::fprintf(stderr, "%s: %s\n", launch.tool.c_str(), message.c_str());
    std::fflush(stderr);
  };
  absl::StatusOr<int> port = pickFreePort();
  if (!port.ok()) {
    say(absl::StrCat("error: ", port.status().message()));
    return 1;
  }

  // Everything the children need is built before fork: between fork and
  // exec only async-signal-safe calls are allowed.
  std::vector<std::string> args = launch.argv;
  std::vector<char *> argv;
  for (std::string &a : args)
    argv.push_back(a.data());
  argv.push_back(nullptr);
  const char *overridden[] = {"RANK",        "WORLD_SIZE",
                              "LOCAL_RANK",  "LOCAL_WORLD_SIZE",
                              "MASTER_ADDR", "MASTER_PORT"};
  std::vector<std::string> base;
  for (char **e = environ; *e; ++e) {
    std::string entry = *e;
    std::string name = entry.substr(0, entry.find('='));
    bool skip = false;
    for (const char *o : overridden)
      skip |= name == o;
    for (const auto &[k, v] : launch.env)
      skip |= name == k;
    if (!skip)
      base.push_back(entry);
  }
  for (const auto &[k, v] : launch.env)
    base.push_back(k + "=" + v);
  base.push_back(absl::StrCat("WORLD_SIZE=", launch.nproc));
  base.push_back(absl::StrCat("LOCAL_WORLD_SIZE=", launch.nproc));
  base.push_back("MASTER_ADDR=127.0.0.1");
  base.push_back(absl::StrCat("MASTER_PORT=", *port));
  std::vector<std::vector<std::string>> envs(launch.nproc, base);
  std::vector<std::vector<char *>> envps(launch.nproc);
  for (int r = 0; r < launch.nproc; ++r) {
    envs[r].push_back(absl::StrCat("RANK=", r));
    envs[r].push_back(absl::StrCat("LOCAL_RANK=", r));
    for (std::string &e : envs[r])
      envps[r].push_back(e.data());
    envps[r].push_back(nullptr);
  }

  struct sigaction action {
  }, oldInt{}, oldTerm{};
  action.sa_handler = onSignal;
  sigemptyset(&action.sa_mask);
  sigaction(SIGINT, &action, &oldInt);
  sigaction(SIGTERM, &action, &oldTerm);

  const char *mode = std::getenv("MERAK_LAUNCH");
  const bool forkOnly =
      launch.runRank && readyToFork() && !(mode && std::string(mode) == "exec");
  std::vector<std::string> rankNames;
  for (int r = 0; r < launch.nproc; ++r)
    rankNames.push_back(absl::StrCat("merak-rank-", r).substr(0, 15));
  // What the launcher printed so far is not printed again by a child.
  std::fflush(nullptr);

  pid_t parent = getpid();
  std::vector<pid_t> pids(launch.nproc, -1);
  std::vector<bool> running(launch.nproc, false);
  auto killAll = [&](int sig) {
    for (int r = 0; r < launch.nproc; ++r)
      if (running[r])
        ::kill(pids[r], sig);
  };
  int result = 0;
  for (int r = 0; r < launch.nproc; ++r) {
    pid_t pid = ::fork();
    if (pid == 0) {
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (::getppid() != parent)
        _exit(1);
      if (forkOnly) {
        // One thread: the child may run anything. It starts as an
        // executed rank would, with the default SIGINT and SIGTERM.
        sigaction(SIGINT, &oldInt, nullptr);
        sigaction(SIGTERM, &oldTerm, nullptr);
        environ = envps[r].data();
        // /proc/PID/environ keeps the launcher's variables: the name says
        // which rank this is (ps, /proc/PID/comm).
        ::prctl(PR_SET_NAME, rankNames[r].c_str());
        int status = launch.runRank();
        std::fflush(nullptr);
#if defined(__SANITIZE_ADDRESS__)
        // LeakSanitizer checks at exit.
        std::exit(status);
#else
        // Without the static destructors, whose writes would copy the
        // pages the child shares with the launcher (LibTorch's take a
        // second to unregister its operators).
        _exit(status);
#endif
      }
      ::execve("/proc/self/exe", argv.data(), envps[r].data());
      const char msg[] = "merak-exec: error: cannot start a rank\n";
      (void)!::write(2, msg, sizeof(msg) - 1);
      _exit(127);
    }
    if (pid < 0) {
      say(absl::StrCat("error: cannot start rank ", r, ": ",
                       std::strerror(errno)));
      killAll(SIGKILL);
      result = 1;
      break;
    }
    pids[r] = pid;
    running[r] = true;
  }

  using Clock = std::chrono::steady_clock;
  std::optional<Clock::time_point> deadline;
  if (result != 0)
    deadline = Clock::now();
  int live = 0;
  for (bool b : running)
    live += b;
  while (live > 0) {
    int status = 0;
    pid_t pid = ::waitpid(-1, &status, WNOHANG);
    if (pid > 0) {
      int r = 0;
      while (r < launch.nproc && pids[r] != pid)
        ++r;
      if (r == launch.nproc)
        continue;
      running[r] = false;
      --live;
      bool failed = !WIFEXITED(status) || WEXITSTATUS(status) != 0;
      if (failed && result == 0) {
        say(absl::StrCat("error: rank ", r, " ", describeExit(status),
                         live > 0 ? "; stopping the other ranks" : ""));
        result = 1;
        deadline = Clock::now() + launch.grace;
      }
      continue;
    }
    if (pid < 0 && errno != EINTR && errno != ECHILD)
      break;
    if (int sig = pendingSignal.exchange(0)) {
      if (result == 0)
        say(absl::StrCat("received signal ", sig, "; stopping the ranks"));
      killAll(SIGTERM);
      result = 128 + sig;
      deadline = Clock::now() + launch.grace;
    }
    if (deadline && Clock::now() > *deadline) {
      std::vector<int> left;
      for (int r = 0; r < launch.nproc; ++r)
        if (running[r])
          left.push_back(r);
      say(absl::StrCat(
          "killing rank", left.size() == 1 ? " " : "s ",
          absl::StrJoin(left, ", "), ", still running ",
          std::chrono::duration_cast<std::chrono::milliseconds>(launch.grace)
                  .count() /
              1000.0,
          " s after the failure"));
      killAll(SIGKILL);
      deadline.reset();
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  sigaction(SIGINT, &oldInt, nullptr);
  sigaction(SIGTERM, &oldTerm, nullptr);
  return result;
}

} // namespace merak::runtime
