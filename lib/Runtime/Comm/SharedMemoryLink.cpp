//===- SharedMemoryLink.cpp - pipeline transfers through /dev/shm ---------===//
//
// `--p2p=shm`: pipeline ranks on one machine hand each other their
// activations and gradients through POSIX shared memory (tmpfs files under
// /dev/shm) instead of Gloo's TCP loopback; ranks on other machines still
// go through Gloo.
//
// One transfer is one file. The sender writes it under a temporary name,
// renames it into place (so a file under its final name is always whole)
// and posts the receiver's named semaphore; the receiver's one mailbox
// thread, woken by it, maps the file, unlinks it and hands it to the
// receive, whose tensors read it in place (no copy on the receiving side). The
// name says who sent it (process id), to whom, under which tag and how many
// transfers of that tag went before, so the n-th receive of a tag from a peer
// reads the n-th send, the matching Gloo guarantees. A transfer is finished for
// the sender as soon as the file is in place. Files a killed sender left behind
// (its process gone) are removed when the next link on the machine is
// made.
//
//===----------------------------------------------------------------------===//

#include "../AtenDTypes.h"
#include "../CPU/CpuTensor.h"
#include "GlooInternal.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>

#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <csignal>
#include <cstring>
#include <dirent.h>
#include <fcntl.h>
#include <list>
#include <map>
#include <mutex>
#include <optional>
#include <semaphore.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <thread>
#include <unistd.h>

namespace merak::runtime::gloo {

namespace {

constexpr const char *kDirectory = "/dev/shm/";
constexpr const char *kPrefix = "merak-p2p-";
constexpr uint64_t kMagic = 0x5032504b4152454dULL; // "MERAKP2P"
/// Header bytes, and the alignment of every tensor in a transfer.
constexpr int64_t kAlign = 64;

std::string systemError(const std::string &what, const std::string &path) {
  return absl::StrCat(what, " ", path, ": ", std::strerror(errno));
}

/// Byte offsets of `types` after the header, each `kAlign`-aligned; the
/// file's size.
int64_t layout(const std::vector<TensorType> &types,
               std::vector<int64_t> &offsets) {
  int64_t total = kAlign;
  offsets.clear();
  for (const TensorType &t : types) {
    offsets.push_back(total);
    total += (t.byteSize() + kAlign - 1) / kAlign * kAlign;
  }
  return total;
}

/// Writes `size` bytes at `offset`, all of them or an error.
bool writeAll(int fd, const void *data, int64_t size, int64_t offset) {
  const char *p = static_cast<const char *>(data);
  while (size > 0) {
    ssize_t n = ::pwrite(fd, p, size_t(size), off_t(offset));
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0)
      return false;
    p += n, size -= n, offset += n;
  }
  return true;
}

/// A mapped transfer file; unmapped when the last tensor reading it goes.
struct Mapping {
  void *base = MAP_FAILED;
  size_t size = 0;
  ~Mapping() {
    if (base != MAP_FAILED)
      ::munmap(base, size);
  }
};

/// What a receive waits for, shared by the receive and the mailbox.
struct Arrival {
  std::string path;
  std::vector<TensorType> types;
  std::chrono::steady_clock::time_point deadline;
  std::mutex mutex;
  std::condition_variable changed;
  std::optional<absl::Status> status; // set once
  std::shared_ptr<Mapping> mapping;
};

/// Opens, checks, maps and unlinks `a`'s file if it is there: false when
/// it is not there yet, else `a.status` is set.
bool take(Arrival &a) {
  int fd = ::open(a.path.c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT)
      return false;
    a.status = absl::UnavailableError(systemError("cannot open", a.path));
    return true;
  }
  struct stat st;
  std::vector<int64_t> offsets;
  int64_t expected = layout(a.types, offsets);
  if (::fstat(fd, &st) != 0 || st.st_size != expected) {
    ::close(fd);
    ::unlink(a.path.c_str());
    a.status = absl::UnavailableError(absl::StrCat(
        a.path, " has ", int64_t(st.st_size), " bytes, expected ", expected));
    return true;
  }
  auto m = std::make_shared<Mapping>();
  m->size = size_t(expected);
  m->base = ::mmap(nullptr, m->size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  ::close(fd);
  ::unlink(a.path.c_str());
  if (m->base == MAP_FAILED) {
    a.status = absl::UnavailableError(systemError("cannot map", a.path));
    return true;
  }
  const uint64_t *header = static_cast<const uint64_t *>(m->base);
  if (header[0] != kMagic || header[1] != uint64_t(expected) ||
      header[2] != a.types.size()) {
    a.status = absl::UnavailableError(
        absl::StrCat(a.path, " is not the transfer of ", a.types.size(),
                     " tensors this rank expects"));
    return true;
  }
  a.mapping = std::move(m);
  a.status = absl::OkStatus();
  return true;
}

class SharedMemoryLink final : public PeerLink {
public:
  SharedMemoryLink(Job &job, std::unique_ptr<PeerLink> fallback,
                   std::map<int64_t, int64_t> localPids, std::string run,
                   std::chrono::milliseconds timeout)
      : job(job), fallback(std::move(fallback)),
        localPids(std::move(localPids)), run(std::move(run)), timeout(timeout) {
  }

  /// Senders post a rank's semaphore after each file they put in place;
  /// its one mailbox thread waits on it and hands the files to the
  /// receives. Every local rank opens its own semaphore and its peers'
  /// here, then (after a barrier) removes its own name: the semaphores
  /// live as long as the processes that hold them, however those end.
  absl::Status openDoorbells() {
    doorbell = openDoorbell(::getpid(), job.rank());
    if (doorbell == SEM_FAILED)
      return absl::UnavailableError(systemError(
          "cannot create the semaphore", doorbellName(::getpid(), job.rank())));
    for (auto [peer, pid] : localPids) {
      sem_t *bell = openDoorbell(pid, peer);
      if (bell == SEM_FAILED)
        return absl::UnavailableError(
            systemError("cannot open the semaphore", doorbellName(pid, peer)));
      peerDoorbells[peer] = bell;
    }
    if (!localPids.empty())
      mailbox = std::thread([this] { deliver(); });
    if (absl::Status s = job.barrier("merak/p2p/shm-doorbells"); !s.ok())
      return s;
    ::sem_unlink(doorbellName(::getpid(), job.rank()).c_str());
    return absl::OkStatus();
  }

  ~SharedMemoryLink() override {
    stopping = true;
    if (doorbell != SEM_FAILED)
      ::sem_post(doorbell);
    if (mailbox.joinable())
      mailbox.join();
    if (doorbell != SEM_FAILED)
      ::sem_close(doorbell);
    for (auto &[peer, bell] : peerDoorbells)
      ::sem_close(bell);
  }

  absl::StatusOr<std::unique_ptr<PendingCollective>>
  send(int64_t peer, int64_t tag, const std::vector<DeviceTensor *> &tensors,
       const std::vector<TensorType> &types) override {
    auto pid = localPids.find(peer);
    if (pid == localPids.end())
      return fallback->send(peer, tag, tensors, types);
    std::string path =
        fileName(::getpid(), job.rank(), peer, tag, sent[{peer, tag}]++);
    std::string part = path + ".part";
    std::vector<int64_t> offsets;
    int64_t total = layout(types, offsets);
    int fd =
        ::open(part.c_str(), O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0600);
    if (fd < 0)
      return failed(job.rank(), peer, systemError("cannot create", part));
    auto fail = [&](const std::string &why) {
      ::close(fd);
      ::unlink(part.c_str());
      return failed(job.rank(), peer, why);
    };
    // Reserve the whole file first: a full /dev/shm is an error here, not
    // a fault later.
    if (int e = ::posix_fallocate(fd, 0, off_t(total)); e != 0) {
      errno = e;
      return fail(systemError(
          "cannot reserve " + std::to_string(total) + " bytes for", part));
    }
    uint64_t header[kAlign / 8] = {kMagic, uint64_t(total),
                                   uint64_t(types.size())};
    if (!writeAll(fd, header, kAlign, 0))
      return fail(systemError("cannot write", part));
    {
      c10::InferenceMode guard;
      for (size_t k = 0; k < tensors.size(); ++k) {
        at::Tensor t = unwrap(*tensors[k]).contiguous();
        int64_t bytes = t.numel() * int64_t(t.element_size());
        if (bytes != types[k].byteSize())
          return fail(absl::StrCat("tensor ", k, " has ", bytes,
                                   " bytes, its type says ",
                                   types[k].byteSize()));
        if (bytes && !writeAll(fd, t.data_ptr(), bytes, offsets[k]))
          return fail(systemError("cannot write", part));
      }
    }
    if (::close(fd) != 0) {
      ::unlink(part.c_str());
      return failed(job.rank(), peer, systemError("cannot close", part));
    }
    if (::rename(part.c_str(), path.c_str()) != 0) {
      std::string why = systemError("cannot rename", part);
      ::unlink(part.c_str());
      return failed(job.rank(), peer, why);
    }
    ::sem_post(peerDoorbells.at(peer));
    progress->add();
    return std::unique_ptr<PendingCollective>(std::make_unique<Sent>());
  }

  absl::StatusOr<std::unique_ptr<PendingCollective>>
  recv(int64_t peer, int64_t tag,
       const std::vector<TensorType> &types) override {
    auto pid = localPids.find(peer);
    if (pid == localPids.end())
      return fallback->recv(peer, tag, types);
    auto arrival = std::make_shared<Arrival>();
    arrival->path =
        fileName(pid->second, peer, job.rank(), tag, received[{peer, tag}]++);
    arrival->types = types;
    arrival->deadline = std::chrono::steady_clock::now() + timeout;
    {
      std::lock_guard<std::mutex> guard(waitingMutex);
      waiting.push_back(arrival);
    }
    // It may be there already: the mailbox looks at once.
    ::sem_post(doorbell);
    return std::unique_ptr<PendingCollective>(
        std::make_unique<Received>(*this, peer, std::move(arrival)));
  }

  int64_t finished() override {
    return progress->count() + fallback->finished();
  }

  void waitForProgress(int64_t since,
                       std::chrono::microseconds limit) override {
    auto deadline = std::chrono::steady_clock::now() + limit;
    // Gloo's transfers count in the fallback, not here: look at both.
    while (finished() == since && std::chrono::steady_clock::now() < deadline)
      progress->waitFor(std::min<std::chrono::microseconds>(
          limit, std::chrono::microseconds(1000)));
  }

  /// Removes transfer files and semaphores on this machine whose process
  /// is gone.
  static void removeStale() {
    DIR *dir = ::opendir(kDirectory);
    if (!dir)
      return;
    while (dirent *e = ::readdir(dir)) {
      std::string name = e->d_name;
      std::string rest;
      if (name.rfind(kPrefix, 0) == 0)
        rest = name.substr(std::strlen(kPrefix));
      else if (name.rfind(std::string("sem.") + kPrefix, 0) == 0)
        rest = name.substr(4 + std::strlen(kPrefix));
      else
        continue;
      std::vector<std::string> fields = absl::StrSplit(rest, '-');
      int64_t pid = 0;
      if (fields.empty() || !absl::SimpleAtoi(fields[0], &pid) || pid <= 0)
        continue;
      if (::kill(pid_t(pid), 0) != 0 && errno == ESRCH)
        ::unlink((kDirectory + name).c_str());
    }
    ::closedir(dir);
  }

private:
  struct Progress {
    std::mutex mutex;
    std::condition_variable changed;
    int64_t completed = 0;
    void add() {
      std::lock_guard<std::mutex> guard(mutex);
      ++completed;
      changed.notify_all();
    }
    int64_t count() {
      std::lock_guard<std::mutex> guard(mutex);
      return completed;
    }
    void waitFor(std::chrono::microseconds limit) {
      std::unique_lock<std::mutex> lock(mutex);
      int64_t now = completed;
      changed.wait_for(lock, limit, [&] { return completed != now; });
    }
  };

  /// A send: the file is in place when `send` returns.
  class Sent final : public PendingCollective {
  public:
    absl::Status wait() override { return absl::OkStatus(); }
    absl::StatusOr<std::vector<TensorHandle>> finish() override {
      return std::vector<TensorHandle>{};
    }
  };

  /// A receive: done when the mailbox has taken its file (or given up).
  class Received final : public PendingCollective {
  public:
    Received(SharedMemoryLink &link, int64_t peer,
             std::shared_ptr<Arrival> arrival)
        : link(link), peer(peer), arrival(std::move(arrival)) {}
    ~Received() override { link.forget(arrival); }

    bool ready() override {
      std::lock_guard<std::mutex> guard(arrival->mutex);
      return arrival->status.has_value();
    }
    absl::Status wait() override {
      if (!result) {
        std::unique_lock<std::mutex> lock(arrival->mutex);
        arrival->changed.wait(lock,
                              [&] { return arrival->status.has_value(); });
        absl::Status s = *arrival->status;
        lock.unlock();
        // Diagnosed here, on the executor's thread.
        result = s.ok() ? s
                        : link.failed(peer, link.job.rank(),
                                      std::string(s.message()));
      }
      return *result;
    }
    absl::StatusOr<std::vector<TensorHandle>> finish() override {
      if (absl::Status s = wait(); !s.ok())
        return s;
      c10::InferenceMode guard;
      std::vector<TensorHandle> out;
      std::vector<int64_t> offsets;
      layout(arrival->types, offsets);
      std::shared_ptr<Mapping> keep = std::move(arrival->mapping);
      char *base = static_cast<char *>(keep->base);
      for (size_t k = 0; k < arrival->types.size(); ++k) {
        const TensorType &t = arrival->types[k];
        // The tensors read the mapped file in place; the mapping goes
        // with the last of them.
        at::Tensor part = at::from_blob(
            base + offsets[k], t.shape, [keep](void *) {},
            at::TensorOptions().dtype(toAten(t.dtype)));
        out.push_back(wrap(part));
      }
      return out;
    }

  private:
    SharedMemoryLink &link;
    int64_t peer;
    std::shared_ptr<Arrival> arrival;
    std::optional<absl::Status> result;
  };

  /// The mailbox: after each ring (or every 50 ms, for the time-outs) takes
  /// the files that have arrived for the waiting receives.
  void deliver() {
    while (!stopping) {
      timespec until;
      ::clock_gettime(CLOCK_REALTIME, &until);
      until.tv_nsec += 50 * 1000 * 1000;
      if (until.tv_nsec >= 1000000000L)
        until.tv_sec += 1, until.tv_nsec -= 1000000000L;
      ::sem_timedwait(doorbell, &until);
      std::vector<std::shared_ptr<Arrival>> done;
      {
        std::lock_guard<std::mutex> guard(waitingMutex);
        auto now = std::chrono::steady_clock::now();
        for (auto it = waiting.begin(); it != waiting.end();) {
          Arrival &a = **it;
          std::lock_guard<std::mutex> one(a.mutex);
          bool finished = take(a);
          if (!finished && now > a.deadline) {
            a.status = absl::UnavailableError(
                absl::StrCat("nothing arrived in ", seconds(timeout)));
            finished = true;
          }
          if (finished) {
            done.push_back(*it);
            it = waiting.erase(it);
          } else {
            ++it;
          }
        }
      }
      for (auto &a : done) {
        a->changed.notify_all();
        progress->add();
      }
    }
  }

  /// A receive dropped before it finished stops waiting.
  void forget(const std::shared_ptr<Arrival> &a) {
    std::lock_guard<std::mutex> guard(waitingMutex);
    waiting.remove(a);
  }

  std::string doorbellName(int64_t pid, int64_t rank) const {
    return absl::StrCat("/", kPrefix, pid, "-", run, "-", rank);
  }
  sem_t *openDoorbell(int64_t pid, int64_t rank) const {
    return ::sem_open(doorbellName(pid, rank).c_str(), O_CREAT, 0600, 0);
  }

  std::string fileName(int64_t senderPid, int64_t from, int64_t to, int64_t tag,
                       int64_t n) const {
    return absl::StrCat(kDirectory, kPrefix, senderPid, "-", run, "-", from,
                        "-", to, "-", tag, "-", n);
  }

  absl::Status failed(int64_t from, int64_t to, const std::string &why) {
    std::string peers = job.diagnose({from, to});
    return absl::UnavailableError(absl::StrCat(
        "shared-memory transfer from rank ", from, " to rank ", to,
        " failed: ", why, peers.empty() ? "" : absl::StrCat(" (", peers, ")")));
  }

  Job &job;
  std::unique_ptr<PeerLink> fallback;
  std::map<int64_t, int64_t> localPids; // local peer rank -> pid
  std::string run;
  std::chrono::milliseconds timeout;
  std::map<std::pair<int64_t, int64_t>, int64_t> sent, received;
  std::shared_ptr<Progress> progress = std::make_shared<Progress>();
  sem_t *doorbell = SEM_FAILED;
  std::map<int64_t, sem_t *> peerDoorbells;
  std::mutex waitingMutex;
  std::list<std::shared_ptr<Arrival>> waiting;
  std::atomic<bool> stopping{false};
  std::thread mailbox;
};

} // namespace

absl::StatusOr<std::unique_ptr<PeerLink>>
makeSharedMemoryLink(Job &job, std::unique_ptr<PeerLink> fallback,
                     std::map<int64_t, int64_t> localPids,
                     const std::string &run,
                     std::chrono::milliseconds timeout) {
  SharedMemoryLink::removeStale();
  auto link = std::make_unique<SharedMemoryLink>(
      job, std::move(fallback), std::move(localPids), run, timeout);
  if (absl::Status s = link->openDoorbells(); !s.ok())
    return s;
  return std::unique_ptr<PeerLink>(std::move(link));
}

} // namespace merak::runtime::gloo
