//===- FileRendezvous.cpp - a run's ranks meeting in a directory ----------===//
//
// See FileRendezvous.h. The directory holds:
//
//   epoch            rank 0's nonce for this run
//   join/<r>         rank r's "<epoch> <nonce> <pid> <host>"
//   ready            "<epoch>" and every rank's nonce, in rank order
//   kv/<key>         shared values (`/` in a key spelt `%2F`)
//   beat/<r>         rank r's heartbeat: "<count> <step> <instruction>"
//   failure          the first failure a rank reported
//   done/<r>         rank r ended cleanly
//
// Every file is written to a temporary name and renamed, so a reader sees
// a whole value or none; `failure` is linked into place, so the first
// report wins.
//
//===----------------------------------------------------------------------===//

#include "merak/Runtime/Comm/FileRendezvous.h"
#include "Heartbeat.h"

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <optional>
#include <random>
#include <set>
#include <signal.h>
#include <sstream>
#include <thread>
#include <unistd.h>

namespace merak::runtime {

DistributedJob::~DistributedJob() = default;

bool isLoopbackAddress(const std::string &addr) {
  return addr == "localhost" || addr == "::1" || addr.rfind("127.", 0) == 0;
}

std::string secondsText(std::chrono::milliseconds t) {
  return absl::StrCat(double(t.count()) / 1000, " s");
}

std::string ranksBehind(const std::map<int64_t, std::string> &beats,
                        int64_t myStep, int64_t myInstruction) {
  std::vector<std::string> late;
  for (const auto &[r, value] : beats) {
    long long count, step, inst;
    if (std::sscanf(value.c_str(), "%lld %lld %lld", &count, &step, &inst) != 3)
      continue;
    if (std::make_pair(int64_t(step), int64_t(inst)) <
        std::make_pair(myStep, myInstruction))
      late.push_back(absl::StrCat(
          "rank ", r, " is alive but has not reached this collective (",
          inst < 0 ? absl::StrCat("no collective yet in step ", step)
                   : absl::StrCat("its last was #", inst, " of step ", step),
          ")"));
  }
  if (late.empty())
    return "";
  return absl::StrCat(absl::StrJoin(late, "; "), "; this rank waits in #",
                      myInstruction, " of step ", myStep);
}

namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

std::string seconds(std::chrono::milliseconds t) { return secondsText(t); }

std::string nonce() {
  std::random_device device;
  std::mt19937_64 rng((uint64_t(device()) << 32) ^ device() ^
                      uint64_t(::getpid()));
  return absl::StrCat(absl::Hex(rng(), absl::kZeroPad16));
}

std::string hostName() {
  char name[256] = {};
  if (::gethostname(name, sizeof(name) - 1) != 0)
    return "?";
  return name;
}

/// The whole file, or none if it does not exist (or cannot be read).
std::optional<std::string> readFile(const fs::path &path) {
  std::ifstream in(path, std::ios::binary);
  if (!in)
    return std::nullopt;
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

/// Writes `value` to `path` whole: to a temporary beside it, then renamed.
absl::Status writeFile(const fs::path &path, const std::string &value) {
  fs::path temporary =
      path.parent_path() / absl::StrCat(".", path.filename().string(), ".",
                                        ::getpid(), ".", nonce());
  {
    std::ofstream out(temporary, std::ios::binary | std::ios::trunc);
    out << value;
    out.flush();
    if (!out)
      return absl::UnavailableError(absl::StrCat(
          "cannot write ", temporary.string(), ": ", std::strerror(errno)));
  }
  std::error_code ec;
  fs::rename(temporary, path, ec);
  if (ec) {
    fs::remove(temporary, ec);
    return absl::UnavailableError(
        absl::StrCat("cannot write ", path.string(), ": ", ec.message()));
  }
  return absl::OkStatus();
}

/// A key as one file name (a long one shortened by its hash).
std::string fileNameOf(const std::string &key) {
  std::string name;
  for (char c : key) {
    if (c == '/' || c == '%')
      name += absl::StrCat("%", absl::Hex(uint8_t(c), absl::kZeroPad2));
    else
      name += c;
  }
  if (name.size() > 160)
    name = absl::StrCat(
        name.substr(0, 120), "~",
        absl::Hex(std::hash<std::string>()(key), absl::kZeroPad16));
  return name;
}

class FileJob final : public DistributedJob {
public:
  FileJob(RendezvousOptions options, fs::path dir, FailureHandler onFailure)
      : options(std::move(options)), dir(std::move(dir)),
        onFailure(std::move(onFailure)) {
    interval =
        std::clamp(this->options.timeout / 10, std::chrono::milliseconds(100),
                   std::chrono::milliseconds(500));
  }
  ~FileJob() override { stopHeartbeat(); }

  absl::Status join() {
    const Clock::time_point deadline = Clock::now() + options.timeout;
    const std::string mine = nonce();
    std::string epoch;
    if (options.rank == 0) {
      epoch = nonce();
      if (absl::Status s = makeFresh(epoch); !s.ok())
        return s;
    }
    while (true) {
      if (options.rank != 0) {
        std::optional<std::string> current = readFile(dir / "epoch");
        if (current && *current != epoch) {
          epoch = *current; // a new run's directory: join it
          if (absl::Status s =
                  writeFile(dir / "join" / std::to_string(options.rank),
                            absl::StrCat(epoch, " ", mine, " ", ::getpid(), " ",
                                         hostName()));
              !s.ok() && !fs::exists(dir / "epoch"))
            epoch.clear(); // replaced under us: try again
        }
      } else if (!readyWritten) {
        if (absl::Status s = writeFile(
                dir / "join" / "0", absl::StrCat(epoch, " ", mine, " ",
                                                 ::getpid(), " ", hostName()));
            !s.ok())
          return s;
        readyWritten = tryWriteReady(epoch);
      }
      if (options.rank != 0 || readyWritten) {
        std::optional<std::string> ready = readFile(dir / "ready");
        if (ready && !epoch.empty()) {
          std::vector<std::string> words = absl::StrSplit(*ready, ' ');
          if (words.size() == size_t(options.worldSize) + 1 &&
              words[0] == epoch && words[1 + options.rank] == mine)
            break;
        }
      }
      if (Clock::now() > deadline)
        return absl::DeadlineExceededError(absl::StrCat(
            "rank ", options.rank, " did not meet ",
            missingRanks(epoch).empty()
                ? std::string("rank 0")
                : absl::StrCat("ranks ",
                               absl::StrJoin(missingRanks(epoch), ", ")),
            " in ", dir.string(), " within ", seconds(options.timeout)));
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    readPeers(epoch);
    heartbeat = std::thread([this] { beat(); });
    return absl::OkStatus();
  }

  int64_t rank() const override { return options.rank; }
  int64_t worldSize() const override { return options.worldSize; }

  absl::StatusOr<std::unique_ptr<Communicator>>
  createGlooCommunicator(const Program &) override {
    return noGloo();
  }
  absl::StatusOr<std::unique_ptr<PeerLink>>
  createPeerLink(PeerTransport) override {
    return noGloo();
  }
  absl::StatusOr<std::unique_ptr<PeerLink>>
  createChannelLink(const std::vector<std::pair<int64_t, int64_t>> &) override {
    return noGloo();
  }

  absl::StatusOr<std::vector<std::string>>
  gatherToRank0(const std::string &key, const std::string &value) override {
    std::string prefix = absl::StrCat("gather/", key, "/");
    if (absl::Status s = set(absl::StrCat(prefix, options.rank), value);
        !s.ok())
      return s;
    std::vector<std::string> result;
    if (options.rank != 0)
      return result;
    const Clock::time_point deadline = Clock::now() + options.timeout;
    for (int64_t r = 0; r < options.worldSize; ++r) {
      std::optional<std::string> v = get(absl::StrCat(prefix, r), deadline);
      if (!v) {
        std::string why = diagnose({r});
        return absl::DeadlineExceededError(absl::StrCat(
            "rank ", r, " did not send '", key, "' within ",
            seconds(options.timeout), why.empty() ? "" : ": ", why));
      }
      result.push_back(*std::move(v));
    }
    return result;
  }

  absl::Status barrier(const std::string &name) override {
    std::string prefix = absl::StrCat("barrier/", barriers++, "/", name, "/");
    if (absl::Status s = set(absl::StrCat(prefix, options.rank), "1"); !s.ok())
      return s;
    const Clock::time_point deadline = Clock::now() + options.timeout;
    for (int64_t r = 0; r < options.worldSize; ++r)
      if (!get(absl::StrCat(prefix, r), deadline)) {
        std::string why = diagnose({r});
        return absl::DeadlineExceededError(
            absl::StrCat("not every rank reached '", name, "' within ",
                         seconds(options.timeout),
                         why.empty() ? "" : absl::StrCat(": ", why)));
      }
    return absl::OkStatus();
  }

  absl::StatusOr<std::string>
  shareFromRank0(const std::string &key, const std::string &value) override {
    std::string full = absl::StrCat("share/", shares++, "/", key);
    if (options.rank == 0)
      if (absl::Status s = set(full, value); !s.ok())
        return s;
    std::optional<std::string> v = get(full, Clock::now() + options.timeout);
    if (!v)
      return absl::DeadlineExceededError(
          absl::StrCat("rank 0 did not share '", key, "' within ",
                       seconds(options.timeout)));
    return *std::move(v);
  }

  absl::StatusOr<std::string> shareInGroup(const std::string &key,
                                           const std::vector<int64_t> &ranks,
                                           const std::string &value) override {
    if (ranks.empty())
      return absl::InvalidArgumentError("a group without ranks");
    std::string full = absl::StrCat("group-share/", key);
    if (options.rank == ranks.front())
      if (absl::Status s = set(full, value); !s.ok())
        return s;
    std::optional<std::string> v = get(full, Clock::now() + options.timeout);
    if (!v) {
      std::string why = diagnose({ranks.front()});
      return absl::DeadlineExceededError(absl::StrCat(
          "rank ", ranks.front(), " did not share '", key, "' with ranks ",
          absl::StrJoin(ranks, ", "), " within ", seconds(options.timeout),
          why.empty() ? "" : absl::StrCat(": ", why)));
    }
    return *std::move(v);
  }

  absl::Status storeSet(const std::string &key,
                        const std::string &value) override {
    return set(absl::StrCat("store/", key), value);
  }

  absl::StatusOr<std::string>
  storeGet(const std::string &key, std::chrono::milliseconds timeout) override {
    std::optional<std::string> v =
        get(absl::StrCat("store/", key), Clock::now() + timeout);
    if (!v)
      return absl::DeadlineExceededError(
          absl::StrCat("no rank set '", key, "' in ", dir.string(), " within ",
                       seconds(timeout)));
    return *std::move(v);
  }

  void abort(const std::string &message) override {
    failing.store(true);
    postFailure(message);
  }

  absl::Status finish() override {
    stopHeartbeat();
    if (absl::Status s =
            writeFile(dir / "done" / std::to_string(options.rank), "1");
        !s.ok())
      return s;
    if (options.rank != 0)
      return absl::OkStatus();
    const Clock::time_point deadline = Clock::now() + options.timeout;
    std::vector<int64_t> missing;
    do {
      missing.clear();
      for (int64_t r = 0; r < options.worldSize; ++r)
        if (!fs::exists(dir / "done" / std::to_string(r)))
          missing.push_back(r);
      if (missing.empty())
        break;
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    } while (Clock::now() < deadline);
    if (!missing.empty())
      return absl::DeadlineExceededError(
          absl::StrCat(missing.size() == 1 ? "rank " : "ranks ",
                       absl::StrJoin(missing, ", "), " did not finish within ",
                       seconds(options.timeout)));
    std::error_code ec;
    fs::remove_all(dir, ec);
    return absl::OkStatus();
  }

  void setProgress(int64_t step, int64_t instruction) override {
    progressStep.store(step);
    progressInstruction.store(instruction);
  }

  std::string diagnose(const std::vector<int64_t> &ranks) override {
    if (std::optional<std::string> f = readFile(dir / "failure")) {
      mainReporting.store(true);
      return *f;
    }
    // Every rank is watched, not only `ranks`: a peer may wait on a rank
    // outside them. A live rank beats every interval; one that misses
    // three is gone.
    std::map<int64_t, std::string> first = beats();
    std::set<int64_t> alive;
    const auto watch =
        std::min<Clock::duration>(options.timeout, 3 * interval + interval / 2);
    const Clock::time_point start = Clock::now();
    while (Clock::now() - start < watch && alive.size() < first.size()) {
      std::this_thread::sleep_for(interval / 2);
      if (std::optional<std::string> f = readFile(dir / "failure")) {
        mainReporting.store(true);
        return *f;
      }
      for (const auto &[r, value] : beats())
        if (value != first[r])
          alive.insert(r);
    }
    std::vector<int64_t> stopped;
    for (const auto &[r, value] : first)
      if (!alive.count(r) && !fs::exists(dir / "done" / std::to_string(r)))
        stopped.push_back(r);
    if (!stopped.empty())
      return absl::StrCat(stopped.size() == 1 ? "rank " : "ranks ",
                          absl::StrJoin(stopped, ", "),
                          stopped.size() == 1 ? " has" : " have",
                          " stopped (no heartbeat)");
    // Live peers of `ranks` not yet at this rank's collective.
    std::map<int64_t, std::string> now = beats(), mine;
    for (int64_t r : ranks)
      if (auto it = now.find(r); it != now.end())
        mine.insert(*it);
    return ranksBehind(mine, progressStep.load(), progressInstruction.load());
  }

private:
  struct Peer {
    int64_t pid = 0;
    std::string host;
  };

  static absl::Status noGloo() {
    return absl::FailedPreconditionError(
        "the runtime built alone has no Gloo on the host's tensors: its "
        "pipeline transfers run on NCCL (--comm=nccl --p2p=nccl) or between "
        "the GPUs' memory (--p2p=shm)");
  }

  /// Rank 0: the directory of this run, replacing an earlier run's.
  absl::Status makeFresh(const std::string &epoch) {
    std::error_code ec;
    fs::path fresh = dir.parent_path() /
                     absl::StrCat(".", dir.filename().string(), ".", epoch);
    for (const char *sub : {"join", "kv", "beat", "done"})
      fs::create_directories(fresh / sub, ec);
    if (ec)
      return absl::UnavailableError(
          absl::StrCat("cannot create the rendezvous directory ",
                       fresh.string(), ": ", ec.message()));
    if (absl::Status s = writeFile(fresh / "epoch", epoch); !s.ok())
      return s;
    if (fs::exists(dir)) {
      fs::path stale =
          dir.parent_path() /
          absl::StrCat(".", dir.filename().string(), ".stale.", epoch);
      fs::rename(dir, stale, ec);
      fs::remove_all(stale, ec);
    }
    fs::rename(fresh, dir, ec);
    if (ec)
      return absl::UnavailableError(
          absl::StrCat("cannot create the rendezvous directory ", dir.string(),
                       ": ", ec.message()));
    return absl::OkStatus();
  }

  /// Rank 0: lists every rank's nonce once all joined under `epoch`.
  bool tryWriteReady(const std::string &epoch) {
    std::vector<std::string> nonces;
    for (int64_t r = 0; r < options.worldSize; ++r) {
      std::optional<std::string> j = readFile(dir / "join" / std::to_string(r));
      if (!j)
        return false;
      std::vector<std::string> words = absl::StrSplit(*j, ' ');
      if (words.size() < 2 || words[0] != epoch)
        return false;
      nonces.push_back(words[1]);
    }
    return writeFile(dir / "ready",
                     absl::StrCat(epoch, " ", absl::StrJoin(nonces, " ")))
        .ok();
  }

  std::vector<int64_t> missingRanks(const std::string &epoch) {
    std::vector<int64_t> missing;
    for (int64_t r = 0; r < options.worldSize; ++r) {
      std::optional<std::string> j = readFile(dir / "join" / std::to_string(r));
      if (!j || epoch.empty() || !absl::StartsWith(*j, epoch))
        missing.push_back(r);
    }
    return missing;
  }

  void readPeers(const std::string &epoch) {
    for (int64_t r = 0; r < options.worldSize; ++r) {
      std::optional<std::string> j = readFile(dir / "join" / std::to_string(r));
      std::vector<std::string> words;
      if (j)
        words = absl::StrSplit(*j, ' ');
      Peer p;
      if (words.size() >= 4 && words[0] == epoch &&
          absl::SimpleAtoi(words[2], &p.pid))
        p.host = words[3];
      peers.push_back(p);
    }
  }

  absl::Status set(const std::string &key, const std::string &value) {
    return writeFile(dir / "kv" / fileNameOf(key), value);
  }

  /// The value of `key` once some rank set it, or none by `deadline`.
  std::optional<std::string> get(const std::string &key,
                                 Clock::time_point deadline) {
    fs::path path = dir / "kv" / fileNameOf(key);
    std::chrono::microseconds pause(100);
    while (true) {
      if (std::optional<std::string> v = readFile(path))
        return v;
      if (Clock::now() > deadline)
        return std::nullopt;
      std::this_thread::sleep_for(pause);
      pause = std::min(pause * 2, std::chrono::microseconds(20000));
    }
  }

  std::map<int64_t, std::string> beats() {
    std::map<int64_t, std::string> result;
    for (int64_t r = 0; r < options.worldSize; ++r)
      if (r != options.rank)
        result[r] =
            readFile(dir / "beat" / std::to_string(r)).value_or(std::string());
    return result;
  }

  /// Posts `message` unless a failure is posted already.
  void postFailure(const std::string &message) {
    fs::path temporary =
        dir / absl::StrCat(".failure.", options.rank, ".", nonce());
    {
      std::ofstream out(temporary, std::ios::binary);
      out << message;
    }
    // A hard link fails where the name exists: the first report wins.
    (void)::link(temporary.c_str(), (dir / "failure").c_str());
    std::error_code ec;
    fs::remove(temporary, ec);
  }

  /// The heartbeat: beats, and watches for a reported failure, for peers
  /// whose beat stopped for the time-out, and for peers on this machine
  /// whose process is gone.
  void beat() {
    int64_t count = 0;
    std::map<int64_t, std::pair<std::string, Clock::time_point>> seen;
    const std::string host = hostName();
    std::unique_lock<std::mutex> lock(mutex);
    while (!stopping) {
      lock.unlock();
      (void)writeFile(dir / "beat" / std::to_string(options.rank),
                      absl::StrCat(count++, " ", progressStep.load(), " ",
                                   progressInstruction.load()));
      std::string failure;
      if (std::optional<std::string> f = readFile(dir / "failure")) {
        if (!failing.load())
          failure = *f;
      } else {
        const Clock::time_point now = Clock::now();
        for (int64_t r = 0; r < options.worldSize && failure.empty(); ++r) {
          if (r == options.rank || fs::exists(dir / "done" / std::to_string(r)))
            continue;
          std::string value =
              readFile(dir / "beat" / std::to_string(r)).value_or("");
          auto it = seen.find(r);
          if (it == seen.end() || it->second.first != value)
            seen[r] = {value, now};
          else if (now - it->second.second > options.timeout)
            failure = absl::StrCat("rank ", r,
                                   " stopped answering (no heartbeat for ",
                                   seconds(options.timeout), ")");
          const Peer &p = peers[size_t(r)];
          if (failure.empty() && p.pid > 0 && p.host == host &&
              ::kill(pid_t(p.pid), 0) != 0 && errno == ESRCH)
            failure =
                absl::StrCat("rank ", r, " (process ", p.pid, ") has exited");
        }
      }
      if (!failure.empty() && !failing.exchange(true)) {
        postFailure(failure);
        // The main thread read the failure meanwhile (a collective failed
        // with it) and reports it with its context; it ends the process,
        // or this thread does after the time-out.
        if (mainReporting.load())
          std::this_thread::sleep_for(options.timeout);
        if (onFailure)
          onFailure(failure);
        std::fflush(stdout);
        std::fflush(stderr);
        ::_exit(1);
      }
      lock.lock();
      changed.wait_for(lock, interval);
    }
  }

  void stopHeartbeat() {
    {
      std::lock_guard<std::mutex> lock(mutex);
      stopping = true;
      changed.notify_all();
    }
    if (heartbeat.joinable())
      heartbeat.join();
  }

  RendezvousOptions options;
  fs::path dir;
  FailureHandler onFailure;
  std::chrono::milliseconds interval;
  std::vector<Peer> peers;
  bool readyWritten = false;
  int64_t barriers = 0, shares = 0;
  std::atomic<int64_t> progressStep{0}, progressInstruction{-1};
  std::atomic<bool> failing{false}, mainReporting{false};
  std::mutex mutex;
  std::condition_variable changed;
  bool stopping = false;
  std::thread heartbeat;
};

} // namespace

std::string fileRendezvousDirectory(const RendezvousOptions &options) {
  if (const char *shared = std::getenv("MERAK_RENDEZVOUS_DIR");
      shared && *shared)
    return shared;
  // The system's temporary directory: TMPDIR where set.
  std::error_code ec;
  fs::path tmp = fs::temp_directory_path(ec);
  if (ec)
    tmp = fs::path("/") / "tmp";
  return (tmp / absl::StrCat("merak-rendezvous-", options.masterAddr, "-",
                             options.port))
      .string();
}

absl::StatusOr<std::unique_ptr<DistributedJob>>
joinFileRendezvous(const RendezvousOptions &options,
                   const std::string &directory,
                   DistributedJob::FailureHandler onPeerFailure) {
  auto job =
      std::make_unique<FileJob>(options, directory, std::move(onPeerFailure));
  if (absl::Status s = job->join(); !s.ok())
    return s;
  return std::unique_ptr<DistributedJob>(std::move(job));
}

absl::StatusOr<std::unique_ptr<DistributedJob>>
joinRunDirectory(const RendezvousOptions &options,
                 DistributedJob::FailureHandler onPeerFailure) {
  return joinFileRendezvous(options, fileRendezvousDirectory(options),
                            std::move(onPeerFailure));
}

} // namespace merak::runtime
