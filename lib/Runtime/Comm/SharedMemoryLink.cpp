//===- SharedMemoryLink.cpp - pipeline transfers through /dev/shm ---------===//
//
// `--p2p=shm`: pipeline ranks on one machine hand each other their
// activations and gradients through POSIX shared memory (tmpfs files under
// /dev/shm) instead of Gloo's TCP loopback; ranks on other machines still
// go through Gloo.
//
// One transfer is one file. The sender writes it under a temporary name and
// renames it into place, so a file under its final name is always whole;
// the receiver polls for that name, maps the file, unlinks it and reads the
// tensors in place (no copy on the receiving side). The name says who sent
// it (process id), to whom, under which tag and how many transfers of that
// tag went before, so the n-th receive of a tag from a peer reads the n-th
// send, the matching Gloo guarantees. A transfer is finished for the
// sender as soon as the file is in place. Files a killed sender left behind
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
#include <future>
#include <map>
#include <mutex>
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

class SharedMemoryLink final : public PeerLink {
public:
  SharedMemoryLink(Job &job, std::unique_ptr<PeerLink> fallback,
                   std::map<int64_t, int64_t> localPids, std::string run,
                   std::chrono::milliseconds timeout)
      : job(job), fallback(std::move(fallback)),
        localPids(std::move(localPids)), run(std::move(run)),
        timeout(timeout) {}

  absl::StatusOr<std::unique_ptr<PendingCollective>>
  send(int64_t peer, int64_t tag, const std::vector<DeviceTensor *> &tensors,
       const std::vector<TensorType> &types) override {
    if (!localPids.count(peer))
      return fallback->send(peer, tag, tensors, types);
    std::string path =
        fileName(::getpid(), job.rank(), peer, tag, sent[{peer, tag}]++);
    std::string part = path + ".part";
    std::vector<int64_t> offsets;
    int64_t total = layout(types, offsets);
    int fd = ::open(part.c_str(), O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC,
                    0600);
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
      return fail(systemError("cannot reserve " + std::to_string(total) +
                                  " bytes for",
                              part));
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
    progress->add();
    return std::unique_ptr<PendingCollective>(std::make_unique<Sent>());
  }

  absl::StatusOr<std::unique_ptr<PendingCollective>>
  recv(int64_t peer, int64_t tag,
       const std::vector<TensorType> &types) override {
    auto pid = localPids.find(peer);
    if (pid == localPids.end())
      return fallback->recv(peer, tag, types);
    auto pending = std::make_unique<Received>(*this, peer, types);
    std::string path =
        fileName(pid->second, peer, job.rank(), tag, received[{peer, tag}]++);
    pending->start(std::move(path));
    return std::unique_ptr<PendingCollective>(std::move(pending));
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
          limit, std::chrono::microseconds(200)));
  }

  /// Removes transfer files on this machine whose sender is gone.
  static void removeStale() {
    DIR *dir = ::opendir(kDirectory);
    if (!dir)
      return;
    while (dirent *e = ::readdir(dir)) {
      std::string name = e->d_name;
      if (name.rfind(kPrefix, 0) != 0)
        continue;
      std::vector<std::string> fields =
          absl::StrSplit(name.substr(std::strlen(kPrefix)), '-');
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

  /// A receive: a thread polls for the file, then maps it.
  class Received final : public PendingCollective {
  public:
    Received(SharedMemoryLink &link, int64_t peer,
             std::vector<TensorType> types)
        : link(link), peer(peer), types(std::move(types)) {}
    ~Received() override {
      abandoned = true;
      if (waiter.valid())
        waiter.wait();
    }

    void start(std::string path) {
      waiter = std::async(std::launch::async, [this, path = std::move(path)] {
        absl::Status s = take(path);
        link.progress->add();
        return s;
      });
    }

    bool ready() override {
      return result || waiter.wait_for(std::chrono::seconds(0)) ==
                           std::future_status::ready;
    }
    absl::Status wait() override {
      if (!result) {
        absl::Status s = waiter.get();
        // Diagnosed here, on the executor's thread, not on the poller's.
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
      layout(types, offsets);
      std::shared_ptr<Mapping> keep = std::move(mapping);
      char *base = static_cast<char *>(keep->base);
      for (size_t k = 0; k < types.size(); ++k) {
        const TensorType &t = types[k];
        at::Tensor part = at::from_blob(
            base + offsets[k], t.shape, [keep](void *) {},
            at::TensorOptions().dtype(toAten(t.dtype)));
        out.push_back(wrap(part));
      }
      return out;
    }

  private:
    /// Waits for `path`, maps it and unlinks it.
    absl::Status take(const std::string &path) {
      auto deadline = std::chrono::steady_clock::now() + link.timeout;
      int64_t pauseUs = 10;
      int fd = -1;
      for (;;) {
        fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
        if (fd >= 0)
          break;
        if (errno != ENOENT)
          return absl::UnavailableError(systemError("cannot open", path));
        if (abandoned)
          return absl::CancelledError("receive abandoned");
        if (std::chrono::steady_clock::now() > deadline)
          return absl::UnavailableError(absl::StrCat("nothing arrived in ",
                                          seconds(link.timeout)));
        std::this_thread::sleep_for(std::chrono::microseconds(pauseUs));
        pauseUs = std::min<int64_t>(pauseUs * 2, 500);
      }
      struct stat st;
      std::vector<int64_t> offsets;
      int64_t expected = layout(types, offsets);
      if (::fstat(fd, &st) != 0 || st.st_size != expected) {
        ::close(fd);
        ::unlink(path.c_str());
        return absl::UnavailableError(absl::StrCat(path, " has ", int64_t(st.st_size),
                                        " bytes, expected ", expected));
      }
      auto m = std::make_shared<Mapping>();
      m->size = size_t(expected);
      m->base = ::mmap(nullptr, m->size, PROT_READ | PROT_WRITE, MAP_SHARED,
                       fd, 0);
      ::close(fd);
      ::unlink(path.c_str());
      if (m->base == MAP_FAILED)
        return absl::UnavailableError(systemError("cannot map", path));
      const uint64_t *header = static_cast<const uint64_t *>(m->base);
      if (header[0] != kMagic || header[1] != uint64_t(expected) ||
          header[2] != types.size())
        return absl::UnavailableError(absl::StrCat(path, " is not the transfer of ",
                                        types.size(),
                                        " tensors this rank expects"));
      mapping = std::move(m);
      return absl::OkStatus();
    }

    SharedMemoryLink &link;
    int64_t peer;
    std::vector<TensorType> types;
    std::atomic<bool> abandoned{false};
    std::future<absl::Status> waiter;
    std::optional<absl::Status> result;
    std::shared_ptr<Mapping> mapping;
  };

  std::string fileName(int64_t senderPid, int64_t from, int64_t to,
                       int64_t tag, int64_t n) const {
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
};

} // namespace

std::unique_ptr<PeerLink>
makeSharedMemoryLink(Job &job, std::unique_ptr<PeerLink> fallback,
                     std::map<int64_t, int64_t> localPids,
                     const std::string &run,
                     std::chrono::milliseconds timeout) {
  SharedMemoryLink::removeStale();
  return std::make_unique<SharedMemoryLink>(job, std::move(fallback),
                                            std::move(localPids), run, timeout);
}

} // namespace merak::runtime::gloo
