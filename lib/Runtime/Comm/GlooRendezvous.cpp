//===- GlooRendezvous.cpp - rendezvous, heartbeat and process groups ------===//
//
// A rank's membership in a run over Gloo: the TCPStore every rank joins,
// the heartbeat that finds dead or stuck ranks, barriers and small
// exchanges, and the Gloo process groups the collectives
// (GlooCollectives.cpp) and the pipeline transfers (GlooPointToPoint.cpp)
// run on.
//
//===----------------------------------------------------------------------===//

#include "GlooInternal.h"
#include "Heartbeat.h"

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>
#include <glog/logging.h>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <gloo/rendezvous/context.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <functional>
#include <future>
#include <map>
#include <mutex>
#include <optional>
#include <random>
#include <set>
#include <thread>
#include <unistd.h>

namespace merak::runtime {

namespace gloo {

namespace {
/// The first line of a c10/Gloo message, without the C++ backtrace.
std::string firstLine(const char *what) {
  std::string text = what;
  return text.substr(0, text.find('\n'));
}
} // namespace

std::string describe(const std::exception &e) {
  if (auto *c10 = dynamic_cast<const c10::Error *>(&e))
    return firstLine(c10->what_without_backtrace());
  return firstLine(e.what());
}

std::optional<std::pair<char, uint64_t>> processState(int64_t pid) {
  std::FILE *f = std::fopen(absl::StrCat("/proc/", pid, "/stat").c_str(), "r");
  if (!f)
    return std::nullopt;
  char buffer[1024];
  size_t n = std::fread(buffer, 1, sizeof(buffer) - 1, f);
  std::fclose(f);
  std::string text(buffer, n);
  // `pid (name) state ...`: the name may hold spaces and parentheses.
  size_t close = text.rfind(')');
  if (close == std::string::npos)
    return std::nullopt;
  std::vector<std::string> fields =
      absl::StrSplit(text.substr(close + 1), ' ', absl::SkipEmpty());
  uint64_t start = 0;
  // Field 22 of the line, the start time, is the 20th after the name.
  if (fields.size() < 20 || fields[0].size() != 1 ||
      !absl::SimpleAtoi(fields[19], &start))
    return std::nullopt;
  return std::make_pair(fields[0][0], start);
}

std::string seconds(std::chrono::milliseconds ms) {
  char text[32];
  std::snprintf(text, sizeof(text), "%g s", ms.count() / 1000.0);
  return text;
}

} // namespace gloo

namespace {

using gloo::describe;
using gloo::seconds;

using Clock = std::chrono::steady_clock;

/// Worker threads of each process group. One is enough for overlap: the
/// executor's thread runs kernels while the worker moves a collective's
/// bytes (and sums them, for an all-reduce). It runs the group's
/// collectives one at a time in the order they started (Gloo matches them
/// by that order), which is also the order the executor waits in; a second
/// worker would only run two of them at once, competing with the kernels
/// for the same cores (c10d's default is 2).
constexpr int kGlooThreadsPerGroup = 1;

constexpr const char *kAbortKey = "merak/abort";
constexpr const char *kFinishedKey = "merak/finished";

std::string heartbeatKey(int64_t rank) {
  return absl::StrCat("merak/hb/", rank);
}
std::string doneKey(int64_t rank) { return absl::StrCat("merak/done/", rank); }
/// Set by a rank once it has read the posted failure.
std::string abortSeenKey(int64_t rank) {
  return absl::StrCat("merak/abort_seen/", rank);
}
/// Set for a rank the failure's poster knows cannot read it (dead, frozen,
/// never joined).
std::string abortGoneKey(int64_t rank) {
  return absl::StrCat("merak/abort_gone/", rank);
}
std::string joinedKey(int64_t rank) {
  return absl::StrCat("merak/joined/", rank);
}
/// Every rank's process (`rank boot-id pid start-time` lines), posted by
/// rank 0 once all have joined.
constexpr const char *kProcessesKey = "merak/processes";

/// This process as `boot-id pid start-time`: the kernel it runs on, and a
/// pid that a later process cannot be mistaken for.
std::string processIdentity() {
  std::string boot = "-";
  if (std::FILE *f = std::fopen("/proc/sys/kernel/random/boot_id", "r")) {
    char text[64] = {};
    if (std::fscanf(f, "%63s", text) == 1)
      boot = text;
    std::fclose(f);
  }
  int64_t pid = ::getpid();
  auto stat = gloo::processState(pid);
  return absl::StrCat(boot, " ", pid, " ", stat ? stat->second : 0);
}

std::vector<uint8_t> toBytes(const std::string &s) {
  return std::vector<uint8_t>(s.begin(), s.end());
}
std::string toText(const std::vector<uint8_t> &v) {
  return std::string(v.begin(), v.end());
}

class RendezvousJob final : public gloo::Job {
public:
  RendezvousJob(RendezvousOptions options, FailureHandler onFailure)
      : options(std::move(options)), onFailure(std::move(onFailure)) {
    interval =
        std::clamp(this->options.timeout / 10, std::chrono::milliseconds(100),
                   std::chrono::milliseconds(500));
  }

  ~RendezvousJob() override { stopThreads(); }

  absl::Status connect() {
    std::string where = absl::StrCat(options.masterAddr, ":", options.port);
    auto open = [&](bool server, bool countWorker) {
      c10d::TCPStoreOptions so;
      so.port = uint16_t(options.port);
      so.isServer = server;
      so.timeout = options.timeout;
      so.waitWorkers = countWorker;
      if (countWorker)
        so.numWorkers = size_t(options.worldSize);
      return c10::make_intrusive<c10d::TCPStore>(options.masterAddr, so);
    };
    try {
      store = open(options.rank == 0, /*countWorker=*/false);
    } catch (const std::exception &e) {
      if (options.rank == 0)
        return absl::UnavailableError(
            absl::StrCat("rank 0 cannot host the rendezvous store on ", where,
                         ": ", describe(e)));
      return absl::UnavailableError(
          absl::StrCat("cannot join the rendezvous store at ", where,
                       " (hosted by rank 0) within ", seconds(options.timeout),
                       ": ", describe(e)));
    }
    if (absl::Status s = awaitEveryRank(where); !s.ok())
      return s;
    try {
      beatStore = open(false, false);
    } catch (const std::exception &e) {
      return absl::UnavailableError(absl::StrCat(
          "cannot open a second connection to the rendezvous store at ", where,
          ": ", describe(e)));
    }
    lastBeat.store(Clock::now().time_since_epoch().count());
    heartbeat = std::thread([this] { heartbeatLoop(); });
    watchdog = std::thread([this] { watchdogLoop(); });
    return absl::OkStatus();
  }

  /// Each rank posts that it joined and polls until every rank has. Not
  /// TCPStore's own wait for workers: it reads the server's reply without a
  /// time-out (a frozen rank 0 would hang the others) and names no one.
  /// Rank 0 posts the ranks missing at its deadline and keeps the store up
  /// for a moment, so that the others name them too.
  absl::Status awaitEveryRank(const std::string &where) {
    std::vector<std::string> keys;
    for (int64_t r = 0; r < options.worldSize; ++r)
      keys.push_back(joinedKey(r));
    try {
      store->set(joinedKey(options.rank), toBytes(processIdentity()));
      // A store wait also sets the time-out of every later reply.
      store->wait({joinedKey(options.rank)}, options.timeout);
      auto deadline = Clock::now() + options.timeout;
      while (!store->check(keys)) {
        if (store->check({kAbortKey})) {
          std::string message = toText(store->get(kAbortKey));
          mainReporting = true;
          acknowledgeFailure(*store);
          return absl::UnavailableError(absl::StrCat("stopping: ", message));
        }
        if (Clock::now() > deadline) {
          std::vector<int64_t> missing;
          for (int64_t r = 0; r < options.worldSize; ++r)
            if (!store->check({joinedKey(r)}))
              missing.push_back(r);
          std::string message = absl::StrCat(
              missing.size() == 1 ? "rank " : "ranks ",
              absl::StrJoin(missing, ", "), " did not join the run within ",
              seconds(options.timeout), " (rendezvous at ", where, ")");
          failing.store(true);
          postFailure(*store, message, missing);
          return absl::DeadlineExceededError(message);
        }
        std::this_thread::sleep_for(interval / 2);
      }
      learnProcesses();
    } catch (const std::exception &e) {
      if (options.rank == 0)
        return absl::UnavailableError(
            absl::StrCat("the rendezvous store failed: ", describe(e)));
      return absl::UnavailableError(
          absl::StrCat("rank 0, which hosts the rendezvous store at ", where,
                       ", did not answer within ", seconds(options.timeout),
                       " (", describe(e), ")"));
    }
    return absl::OkStatus();
  }

  /// Rank 0 posts every rank's process (one key, read once by each rank:
  /// not N reads each); each rank keeps the other ranks' processes on its
  /// own machine. The store's server reads each request whole: a rank
  /// frozen in the middle of one (stopped by a signal or a debugger) stalls
  /// it for everyone, and then no rank can learn through it which one
  /// froze. On one machine /proc still tells.
  void learnProcesses() {
    if (options.rank == 0) {
      std::string table;
      for (int64_t r = 0; r < options.worldSize; ++r)
        absl::StrAppend(&table, r, " ", toText(store->get(joinedKey(r))), "\n");
      store->set(kProcessesKey, toBytes(table));
    }
    store->wait({kProcessesKey}, options.timeout);
    std::string mine = processIdentity();
    std::string boot = mine.substr(0, mine.find(' '));
    for (absl::string_view line : absl::StrSplit(
             toText(store->get(kProcessesKey)), '\n', absl::SkipEmpty())) {
      std::vector<std::string> f = absl::StrSplit(line, ' ');
      Process p;
      if (f.size() == 4 && f[1] == boot && boot != "-" &&
          absl::SimpleAtoi(f[0], &p.rank) && absl::SimpleAtoi(f[2], &p.pid) &&
          absl::SimpleAtoi(f[3], &p.start) && p.rank != options.rank)
        localPeers.push_back(p);
    }
  }

  /// The ranks on this machine that are stopped, as `rank 1 (pid 4242 on
  /// this host) is stopped`; empty if none. A rank that has exited is not
  /// one: its connection closed with it, which does not stall the store.
  std::string frozenPeers() const {
    std::vector<std::string> frozen;
    for (const Process &p : localPeers) {
      auto state = gloo::processState(p.pid);
      if (!state || state->second != p.start)
        continue;
      if (state->first == 'T' || state->first == 't')
        frozen.push_back(absl::StrCat(
            "rank ", p.rank, " (pid ", p.pid, " on this host) is stopped",
            state->first == 't' ? " in a debugger" : ""));
    }
    return absl::StrJoin(frozen, "; ");
  }

  /// When the store stops answering (`why`) and a rank on this machine is
  /// stopped, the message that names it; empty otherwise.
  std::string stalledStore(const std::string &why) const {
    std::string frozen = frozenPeers();
    if (frozen.empty())
      return "";
    if (absl::StartsWith(frozen, "rank 0 "))
      return absl::StrCat(frozen,
                          ", and with it the rendezvous store it "
                          "hosts at ",
                          options.masterAddr, ":", options.port, " (", why,
                          ")");
    return absl::StrCat(frozen, ", and the rendezvous store at ",
                        options.masterAddr, ":", options.port,
                        " has stopped answering: a rank frozen in the middle "
                        "of a request stalls it (",
                        why, ")");
  }

  int64_t rank() const override { return options.rank; }
  int64_t worldSize() const override { return options.worldSize; }

  absl::StatusOr<std::unique_ptr<Communicator>>
  createGlooCommunicator(const Program &program) override;

  absl::StatusOr<std::unique_ptr<PeerLink>>
  createPeerLink(PeerTransport transport) override;
  absl::StatusOr<std::unique_ptr<PeerLink>> createChannelLink(
      const std::vector<std::pair<int64_t, int64_t>> &directions) override;
  absl::StatusOr<std::unique_ptr<PeerLink>> createRingChannelLink(
      const std::vector<std::pair<int64_t, int64_t>> &directions) override;
  /// A Gloo process group of every rank for point-to-point transfers.
  absl::StatusOr<c10::intrusive_ptr<c10d::ProcessGroupGloo>>
  pointToPointGroup();

  absl::StatusOr<std::vector<std::string>>
  gatherToRank0(const std::string &key, const std::string &value) override {
    std::string prefix = absl::StrCat("merak/gather/", key, "/");
    std::vector<std::string> result;
    try {
      store->set(absl::StrCat(prefix, options.rank), toBytes(value));
      if (options.rank != 0)
        return result;
      for (int64_t r = 0; r < options.worldSize; ++r)
        result.push_back(toText(store->get(absl::StrCat(prefix, r))));
    } catch (const std::exception &e) {
      // Name the ranks whose value is missing, and why.
      std::vector<int64_t> missing;
      try {
        for (int64_t r = 0; r < options.worldSize; ++r)
          if (!store->check({absl::StrCat(prefix, r)}))
            missing.push_back(r);
      } catch (const std::exception &) {
      }
      std::string why = diagnose(missing.empty() ? allRanks() : missing);
      return absl::DeadlineExceededError(absl::StrCat(
          missing.empty()
              ? std::string("not every rank")
              : absl::StrCat(missing.size() == 1 ? "rank " : "ranks ",
                             absl::StrJoin(missing, ", "), " did not"),
          missing.empty() ? " sent '" : " send '", key, "' within ",
          seconds(options.timeout), why.empty() ? "" : ": ", why, " (",
          describe(e), ")"));
    }
    return result;
  }

  absl::Status barrier(const std::string &name) override {
    std::string key = absl::StrCat("merak/barrier/", barriers++, "/", name);
    try {
      if (store->add(key, 1) == options.worldSize)
        store->set(key + "/done", toBytes("1"));
      store->wait({key + "/done"}, options.timeout);
    } catch (const std::exception &e) {
      std::string why = diagnose(allRanks());
      return absl::DeadlineExceededError(absl::StrCat(
          "not every rank reached '", name, "' within ",
          seconds(options.timeout), why.empty() ? "" : absl::StrCat(": ", why),
          " (", describe(e), ")"));
    }
    return absl::OkStatus();
  }

  absl::StatusOr<std::string>
  shareFromRank0(const std::string &key, const std::string &value) override {
    // Numbered like barriers: every rank shares in the same order, and a
    // key shared again (a checkpoint id per save) must not find the value
    // of the time before.
    std::string full = absl::StrCat("merak/share/", shares++, "/", key);
    try {
      if (options.rank == 0)
        store->set(full, toBytes(value));
      return toText(store->get(full));
    } catch (const std::exception &e) {
      return absl::DeadlineExceededError(
          absl::StrCat("rank 0 did not share '", key, "' within ",
                       seconds(options.timeout), ": ", describe(e)));
    }
  }

  absl::StatusOr<std::string> shareInGroup(const std::string &key,
                                           const std::vector<int64_t> &ranks,
                                           const std::string &value) override {
    if (ranks.empty())
      return absl::InvalidArgumentError("a group without ranks");
    std::string full = absl::StrCat("merak/group-share/", key);
    try {
      if (options.rank == ranks.front())
        store->set(full, toBytes(value));
      return toText(store->get(full));
    } catch (const std::exception &e) {
      std::string why = diagnose(ranks);
      return absl::DeadlineExceededError(absl::StrCat(
          "rank ", ranks.front(), " did not share '", key, "' with ranks ",
          absl::StrJoin(ranks, ", "), " within ", seconds(options.timeout),
          why.empty() ? "" : absl::StrCat(": ", why), " (", describe(e), ")"));
    }
  }

  absl::Status storeSet(const std::string &key,
                        const std::string &value) override {
    try {
      store->set("merak/kv/" + key, toBytes(value));
    } catch (const std::exception &e) {
      return absl::UnavailableError(
          absl::StrCat("cannot set '", key, "' in the store: ", describe(e)));
    }
    return absl::OkStatus();
  }

  absl::StatusOr<std::string>
  storeGet(const std::string &key, std::chrono::milliseconds timeout) override {
    try {
      store->wait({"merak/kv/" + key}, timeout);
      return toText(store->get("merak/kv/" + key));
    } catch (const std::exception &e) {
      return absl::DeadlineExceededError(
          absl::StrCat("no rank set '", key, "' in the store within ",
                       seconds(timeout), " (", describe(e), ")"));
    }
  }

  void abort(const std::string &message) override {
    // This rank's own heartbeat must not report the message back to it.
    failing.store(true);
    postFailure(*store, message);
  }

  absl::Status finish() override {
    stopThreads();
    try {
      store->set(doneKey(options.rank), toBytes("1"));
      store->add(kFinishedKey, 1);
      if (options.rank != 0)
        return absl::OkStatus();
      auto deadline = Clock::now() + options.timeout;
      while (store->add(kFinishedKey, 0) < options.worldSize) {
        if (Clock::now() > deadline) {
          std::vector<int64_t> missing;
          for (int64_t r = 0; r < options.worldSize; ++r)
            if (!store->check({doneKey(r)}))
              missing.push_back(r);
          return absl::DeadlineExceededError(absl::StrCat(
              "rank", missing.size() == 1 ? " " : "s ",
              absl::StrJoin(missing, ", "), " did not finish within ",
              seconds(options.timeout)));
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
    } catch (const std::exception &e) {
      if (std::string stalled = stalledStore(describe(e)); !stalled.empty())
        return absl::UnavailableError(
            absl::StrCat("while this rank finished: ", stalled));
      if (options.rank != 0)
        return absl::UnavailableError(absl::StrCat(
            "rank 0, which hosts the rendezvous store, stopped answering "
            "while this rank finished (",
            describe(e), ")"));
      return absl::UnavailableError(absl::StrCat(
          "lost the rendezvous store while finishing: ", describe(e)));
    }
    return absl::OkStatus();
  }

  std::string diagnose(const std::vector<int64_t> &ranks) override {
    return diagnose(ranks, progressStep.load(), progressInstruction.load());
  }

  /// As `diagnose`, for a failure of the collective at (step,
  /// instruction): a live peer is late when it has not started that one.
  std::string diagnose(const std::vector<int64_t> &ranks, int64_t step,
                       int64_t instruction) override {
    try {
      return diagnoseOrThrow(ranks, step, instruction);
    } catch (const std::exception &e) {
      if (std::string stalled = stalledStore(describe(e)); !stalled.empty())
        return stalled;
      if (options.rank == 0)
        return absl::StrCat("the rendezvous store failed: ", describe(e));
      return absl::StrCat("rank 0, which hosts the rendezvous store, has "
                          "stopped (",
                          describe(e), ")");
    }
  }

  void setProgress(int64_t step, int64_t instruction) override {
    progressStep.store(step);
    progressInstruction.store(instruction);
  }

  const RendezvousOptions &rendezvous() const { return options; }

  /// One device (a listening socket and its event loop) serves every group
  /// of the job.
  absl::Status openDevice() {
    try {
      if (!device) {
        if (isLoopbackAddress(options.masterAddr))
          device = c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1");
        else if (!options.interface.empty())
          device = c10d::ProcessGroupGloo::createDeviceForInterface(
              options.interface);
        else
          device = c10d::ProcessGroupGloo::createDefaultDevice();
      }
    } catch (const std::exception &e) {
      return absl::UnavailableError(
          absl::StrCat("cannot open a Gloo device",
                       options.interface.empty()
                           ? std::string()
                           : absl::StrCat(" on interface ", options.interface),
                       ": ", describe(e)));
    }
    return absl::OkStatus();
  }
  c10::intrusive_ptr<c10d::Store> mainStore() const { return store; }

private:
  std::vector<int64_t> allRanks() const {
    std::vector<int64_t> ranks;
    for (int64_t r = 0; r < options.worldSize; ++r)
      ranks.push_back(r);
    return ranks;
  }

  std::string diagnoseOrThrow(const std::vector<int64_t> &ranks, int64_t step,
                              int64_t instruction) {
    auto reported = [&]() -> std::string {
      if (!store->check({kAbortKey}))
        return "";
      std::string message = toText(store->get(kAbortKey));
      mainReporting = true;
      acknowledgeFailure(*store);
      return message;
    };
    if (std::string r = reported(); !r.empty())
      return r;
    // Every rank is watched, not only `ranks`: a peer may wait on a rank
    // outside them (a pipeline transfer on a data-parallel all-reduce).
    std::map<int64_t, std::string> first;
    std::set<int64_t> alive;
    for (int64_t r : allRanks())
      if (r != options.rank)
        first[r] = store->check({heartbeatKey(r)})
                       ? toText(store->get(heartbeatKey(r)))
                       : "";
    // A live rank beats every interval; one that misses three is gone.
    auto watch =
        std::min<Clock::duration>(options.timeout, 3 * interval + interval / 2);
    auto start = Clock::now();
    while (Clock::now() - start < watch) {
      std::this_thread::sleep_for(interval / 2);
      if (std::string r = reported(); !r.empty())
        return r;
      for (auto &[r, value] : first) {
        if (alive.count(r) || !store->check({heartbeatKey(r)}))
          continue;
        std::string now = toText(store->get(heartbeatKey(r)));
        if (now != value)
          alive.insert(r), value = now;
      }
      if (alive.size() == first.size())
        return behind(peersOf(first, ranks), step, instruction);
    }
    std::vector<int64_t> stopped;
    for (auto &[r, value] : first)
      if (!alive.count(r) && !store->check({doneKey(r)}))
        stopped.push_back(r);
    if (stopped.empty())
      return behind(peersOf(first, ranks), step, instruction);
    return absl::StrCat(
        stopped.size() == 1 ? "rank " : "ranks ", absl::StrJoin(stopped, ", "),
        stopped.size() == 1 ? " has" : " have", " stopped (no heartbeat)");
  }

  /// The entries of `beats` for `ranks`.
  static std::map<int64_t, std::string>
  peersOf(const std::map<int64_t, std::string> &beats,
          const std::vector<int64_t> &ranks) {
    std::map<int64_t, std::string> peers;
    for (int64_t r : ranks)
      if (auto it = beats.find(r); it != beats.end())
        peers.insert(*it);
    return peers;
  }

  /// Of live peers (by their last heartbeat), those not yet at (myStep,
  /// myInst): Heartbeat.h.
  std::string behind(const std::map<int64_t, std::string> &beats,
                     int64_t myStep, int64_t myInst) {
    return ranksBehind(beats, myStep, myInst);
  }

  /// Posts `message` for the others unless a failure is posted already,
  /// with the ranks it knows cannot read it, and acknowledges the failure
  /// posted.
  void postFailure(c10d::TCPStore &client, const std::string &message,
                   const std::vector<int64_t> &gone = {}) {
    try {
      client.compareSet(kAbortKey, {}, toBytes(message));
      for (int64_t r : gone)
        client.set(abortGoneKey(r), toBytes("1"));
    } catch (const std::exception &) {
      // The store is gone: the others find out by themselves.
      return;
    }
    acknowledgeFailure(client);
  }

  /// Marks this rank as having read the posted failure (once). Rank 0
  /// hosts the store: it then keeps it up until every other rank has read
  /// the failure, is known gone or has finished (bounded by the time-out,
  /// and by 5 s), or they would find the store gone and blame rank 0.
  void acknowledgeFailure(c10d::TCPStore &client) {
    // A second thread waits for the first's linger: returning at once
    // would let it end the process under the first.
    std::lock_guard<std::mutex> guard(acknowledging);
    if (acknowledged)
      return;
    acknowledged = true;
    try {
      client.set(abortSeenKey(options.rank), toBytes("1"));
      if (options.rank != 0)
        return;
      auto deadline =
          Clock::now() +
          std::min<Clock::duration>(options.timeout, std::chrono::seconds(5));
      std::vector<int64_t> waiting;
      for (int64_t r = 1; r < options.worldSize; ++r)
        waiting.push_back(r);
      while (!waiting.empty() && Clock::now() < deadline) {
        waiting.erase(std::remove_if(waiting.begin(), waiting.end(),
                                     [&](int64_t r) {
                                       return client.check({abortSeenKey(r)}) ||
                                              client.check({abortGoneKey(r)}) ||
                                              client.check({doneKey(r)});
                                     }),
                      waiting.end());
        if (!waiting.empty())
          std::this_thread::sleep_for(std::chrono::milliseconds(20));
      }
    } catch (const std::exception &) {
      // The store is gone: the others find out by themselves.
    }
  }

  /// Reports `message` once and ends the process; with `storeAnswers`, on
  /// the heartbeat's thread, first posts it for the others (the main
  /// thread, failing meanwhile, reports and ends the process instead).
  void fail(const std::string &message, bool storeAnswers,
            const std::vector<int64_t> &gone = {}) {
    if (failing.exchange(true)) {
      // Another thread is already reporting a failure and will exit.
      while (true)
        std::this_thread::sleep_for(std::chrono::hours(1));
    }
    if (storeAnswers)
      postFailure(*beatStore, message, gone);
    if (mainReporting) {
      // The main thread read the failure meanwhile (in a collective that
      // failed with it) and reports it with its context; it ends the
      // process, or this thread does after the time-out.
      std::this_thread::sleep_for(options.timeout);
    }
    if (onFailure)
      onFailure(message);
    std::fflush(stdout);
    std::fflush(stderr);
    _exit(1);
  }

  void heartbeatLoop() {
    // Each rank watches a few successors; whoever finds a dead one posts
    // it under kAbortKey, which every rank polls.
    std::vector<int64_t> watched;
    for (int64_t k = 1; k <= std::min<int64_t>(8, options.worldSize - 1); ++k)
      watched.push_back((options.rank + k) % options.worldSize);
    std::map<int64_t, std::pair<std::string, Clock::time_point>> seen;
    for (int64_t w : watched)
      seen[w] = {"", Clock::now()};
    std::set<int64_t> done;
    int64_t beat = 0;
    std::unique_lock<std::mutex> lock(mutex);
    while (!stopping) {
      lock.unlock();
      try {
        beatStore->set(heartbeatKey(options.rank),
                       toBytes(absl::StrCat(++beat, " ", progressStep.load(),
                                            " ", progressInstruction.load())));
        if (!failing && beatStore->check({kAbortKey})) {
          std::string message = toText(beatStore->get(kAbortKey));
          if (!failing)
            fail(absl::StrCat("stopping: ", message), true);
        }
        for (int64_t w : watched) {
          if (done.count(w))
            continue;
          std::string value = beatStore->check({heartbeatKey(w)})
                                  ? toText(beatStore->get(heartbeatKey(w)))
                                  : "";
          auto now = Clock::now();
          auto &[last, when] = seen[w];
          if (value != last) {
            last = value;
            when = now;
          } else if (now - when > options.timeout) {
            if (beatStore->check({doneKey(w)})) {
              done.insert(w);
              continue;
            }
            std::string message = absl::StrCat(
                "rank ", w, " stopped answering: no heartbeat for ",
                seconds(options.timeout));
            if (!failing)
              fail(message, true, {w});
          }
        }
      } catch (const std::exception &e) {
        if (stopping || failing)
          break;
        if (std::string stalled = stalledStore(describe(e)); !stalled.empty())
          fail(stalled, false);
        else
          fail(absl::StrCat("lost the rendezvous store at ", options.masterAddr,
                            ":", options.port,
                            options.rank == 0 ? "" : ", which rank 0 hosts",
                            options.rank == 0 ? "" : " (rank 0 has stopped)",
                            ": ", describe(e)),
               false);
      }
      lastBeat.store(Clock::now().time_since_epoch().count());
      lock.lock();
      wake.wait_for(lock, interval, [&] { return stopping; });
    }
  }

  void watchdogLoop() {
    std::unique_lock<std::mutex> lock(mutex);
    while (!stopping) {
      wake.wait_for(lock, interval, [&] { return stopping; });
      if (stopping)
        break;
      auto last = Clock::time_point(Clock::duration(lastBeat.load()));
      if (Clock::now() - last > options.timeout + 2 * interval && !failing) {
        lock.unlock();
        if (std::string stalled = stalledStore(
                absl::StrCat("no answer for ", seconds(options.timeout)));
            !stalled.empty())
          fail(stalled, false);
        else
          fail(absl::StrCat(
                   "the rendezvous store at ", options.masterAddr, ":",
                   options.port, options.rank == 0 ? "" : " (hosted by rank 0)",
                   " has not answered for ", seconds(options.timeout),
                   options.rank == 0 ? "" : ": rank 0 stopped answering"),
               false);
      }
    }
  }

  void stopThreads() {
    {
      std::lock_guard<std::mutex> guard(mutex);
      stopping = true;
    }
    wake.notify_all();
    if (heartbeat.joinable())
      heartbeat.join();
    if (watchdog.joinable())
      watchdog.join();
  }

  RendezvousOptions options;
  FailureHandler onFailure;
  std::chrono::milliseconds interval;
  c10::intrusive_ptr<c10d::TCPStore> store;     // the main thread's
  c10::intrusive_ptr<c10d::TCPStore> beatStore; // the heartbeat's
  std::thread heartbeat, watchdog;
  std::mutex mutex;
  std::condition_variable wake;
  bool stopping = false; // guarded by `mutex`
  std::atomic<bool> failing{false};
  /// Set when the main thread has read a posted failure and will report
  /// it.
  std::atomic<bool> mainReporting{false};
  std::mutex acknowledging;
  bool acknowledged = false; // guarded by `acknowledging`
  std::atomic<Clock::rep> lastBeat{0};
  std::atomic<int64_t> progressStep{0}, progressInstruction{-1};
  struct Process {
    int64_t rank = 0, pid = 0;
    uint64_t start = 0;
  };
  /// The other ranks on this machine (by its boot id), learnt at join.
  std::vector<Process> localPeers;
  int64_t barriers = 0, shares = 0;
  int64_t communicators = 0;
  std::shared_ptr<::gloo::transport::Device> device;
};

absl::StatusOr<c10::intrusive_ptr<c10d::ProcessGroupGloo>>
RendezvousJob::pointToPointGroup() {
  if (absl::Status s = openDevice(); !s.ok())
    return s;
  auto groupOptions =
      c10d::ProcessGroupGloo::Options::create(this->options.timeout);
  groupOptions->devices.push_back(device);
  groupOptions->threads = kGlooThreadsPerGroup;
  try {
    return c10::make_intrusive<c10d::ProcessGroupGloo>(
        c10::make_intrusive<c10d::PrefixStore>(
            absl::StrCat("merak/p2p/", communicators++), store),
        int(options.rank), int(options.worldSize), groupOptions);
  } catch (const std::exception &e) {
    std::string why = diagnose(allRanks());
    return absl::UnavailableError(absl::StrCat(
        "cannot connect the ranks for point-to-point transfers within ",
        seconds(this->options.timeout),
        why.empty() ? "" : absl::StrCat(": ", why), " (", describe(e), ")"));
  }
}

absl::StatusOr<std::unique_ptr<PeerLink>>
RendezvousJob::createPeerLink(PeerTransport transport) {
  absl::StatusOr<c10::intrusive_ptr<c10d::ProcessGroupGloo>> pg =
      pointToPointGroup();
  if (!pg.ok())
    return pg.status();
  std::unique_ptr<PeerLink> link = gloo::makePeerLink(*this, *std::move(pg));
  if (transport == PeerTransport::Gloo)
    return link;
  // Files of this run are told apart from another run's on the machine by
  // a name rank 0 picks.
  absl::StatusOr<std::string> run = shareFromRank0(
      "merak/p2p/shm-run",
      absl::StrCat(absl::Hex(std::random_device{}()), absl::Hex(::getpid())));
  if (!run.ok())
    return run.status();
  std::map<int64_t, int64_t> local;
  for (const Process &p : localPeers)
    local[p.rank] = p.pid;
  return gloo::makeSharedMemoryLink(*this, std::move(link), std::move(local),
                                    *run, this->options.timeout);
}

absl::StatusOr<std::unique_ptr<PeerLink>> RendezvousJob::createRingChannelLink(
    const std::vector<std::pair<int64_t, int64_t>> &directions) {
  return gloo::makeRingChannelLink(*this, directions, this->options.timeout);
}

absl::StatusOr<std::unique_ptr<PeerLink>> RendezvousJob::createChannelLink(
    const std::vector<std::pair<int64_t, int64_t>> &directions) {
  absl::StatusOr<c10::intrusive_ptr<c10d::ProcessGroupGloo>> pg =
      pointToPointGroup();
  if (!pg.ok())
    return pg.status();
  return gloo::makeChannelLink(*this, *std::move(pg), directions,
                               this->options.timeout);
}

absl::StatusOr<std::unique_ptr<Communicator>>
RendezvousJob::createGlooCommunicator(const Program &program) {
  if (program.groups.empty())
    return gloo::makeCommunicator(*this, {});
  if (absl::Status s = openDevice(); !s.ok())
    return s;
  std::vector<gloo::Group> groups;
  int64_t generation = communicators++;
  for (const ProcessGroupSpec &spec : program.groups) {
    // Groups over the same axes are disjoint: the first member names one.
    // Every rank creates communicators in the same order, so `generation`
    // keeps a later communicator's keys apart from an earlier one's.
    std::string prefix = absl::StrCat("merak/group/", generation, "/",
                                      absl::StrJoin(spec.meshAxes, ","), "/",
                                      spec.members.ranks.front());
    auto options =
        c10d::ProcessGroupGloo::Options::create(this->options.timeout);
    options->devices.push_back(device);
    options->threads = kGlooThreadsPerGroup;
    try {
      auto pg = c10::make_intrusive<c10d::ProcessGroupGloo>(
          c10::make_intrusive<c10d::PrefixStore>(prefix, store),
          int(spec.members.index), int(spec.members.ranks.size()), options);
      gloo::Group group{std::move(pg), spec, nullptr, nullptr};
      // The plan's all-reduces as trees: Gloo's halving-doubling, on a
      // context of the group's own (c10d runs its ring).
      if (program.mesh && program.mesh->allReduceAlgorithm == "tree") {
        auto context = std::make_shared<::gloo::rendezvous::Context>(
            int(spec.members.index), int(spec.members.ranks.size()));
        context->setTimeout(this->options.timeout);
        c10d::ProcessGroupGloo::GlooStore glooStore(
            c10::make_intrusive<c10d::PrefixStore>(prefix + "/tree", store));
        context->connectFullMesh(glooStore, device);
        group.halvingDoubling = std::move(context);
        group.worker = std::make_shared<gloo::SerialWorker>();
      }
      groups.push_back(std::move(group));
    } catch (const std::exception &e) {
      std::string why = diagnose(spec.members.ranks);
      return absl::UnavailableError(absl::StrCat(
          "cannot connect the process group of ranks ",
          absl::StrJoin(spec.members.ranks, ", "), " within ",
          seconds(this->options.timeout),
          why.empty() ? "" : absl::StrCat(": ", why), " (", describe(e), ")"));
    }
  }
  return gloo::makeCommunicator(*this, std::move(groups));
}

} // namespace

absl::StatusOr<std::unique_ptr<DistributedJob>>
DistributedJob::join(const RendezvousOptions &options,
                     FailureHandler onPeerFailure) {
  if (options.worldSize < 1 || options.rank < 0 ||
      options.rank >= options.worldSize)
    return absl::InvalidArgumentError(absl::StrCat(
        "rank ", options.rank, " is outside a world of ", options.worldSize));
  if (options.port < 1 || options.port > 65535)
    return absl::InvalidArgumentError(
        absl::StrCat("invalid rendezvous port ", options.port));
  // c10d logs its own time-outs and retries through glog; merak-exec
  // reports each failure once, naming the rank, so only fatal ones pass
  // unless GLOG_minloglevel asks for more. Once per process: ranks that
  // join from threads of one process (the unit tests) would race on it.
  static std::once_flag quietGlog;
  std::call_once(quietGlog, [] {
    if (!std::getenv("GLOG_minloglevel"))
      FLAGS_minloglevel = google::GLOG_FATAL;
  });
  auto job = std::make_unique<RendezvousJob>(options, std::move(onPeerFailure));
  if (absl::Status s = job->connect(); !s.ok())
    return s;
  return std::unique_ptr<DistributedJob>(std::move(job));
}

} // namespace merak::runtime
