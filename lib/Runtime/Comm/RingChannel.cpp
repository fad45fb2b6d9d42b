//===- RingChannel.cpp - pipeline transfers through a shared ring ---------===//
//
// The ring protocol (RingChannel.h) and the shared memory its control
// blocks live in.
//
//===----------------------------------------------------------------------===//

#include "merak/Runtime/Comm/RingChannel.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <dirent.h>
#include <fcntl.h>
#include <mutex>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

namespace merak::runtime {

void RingControl::init(uint64_t bytes) {
  std::memset(static_cast<void *>(this), 0, sizeof(*this));
  magic = kMagic;
  version = kVersion;
  ringBytes = bytes;
  headerSlots = kRingHeaderSlots;
}

std::string RingControl::check() const {
  if (magic != kMagic)
    return "not a ring's control block (its magic number differs)";
  if (version != kVersion)
    return absl::StrCat("a ring's control block of version ", version, ", not ",
                        kVersion);
  if (headerSlots != uint64_t(kRingHeaderSlots))
    return absl::StrCat("a ring's control block with ", headerSlots,
                        " header slots, not ", kRingHeaderSlots);
  if (ringBytes < 4 || ringBytes > (uint64_t(1) << 40))
    return absl::StrCat("a ring of ", ringBytes, " bytes");
  return "";
}

RingQueue::~RingQueue() = default;

std::vector<RingChunk> ringChunks(int64_t streamed, int64_t bytes,
                                  int64_t ringBytes) {
  const int64_t most = std::max<int64_t>(ringBytes / 4, 1);
  std::vector<RingChunk> chunks;
  for (int64_t done = 0; done < bytes;) {
    RingChunk c;
    c.offset = done;
    c.ringOffset = (streamed + done) % ringBytes;
    c.bytes = std::min({bytes - done, most, ringBytes - c.ringOffset});
    chunks.push_back(c);
    done += c.bytes;
  }
  return chunks;
}

RingProtocol::RingProtocol(RingControl &control, char *ring, RingQueue &queue)
    : control(control), ring(ring), queue(queue),
      ringBytes(int64_t(control.ringBytes)) {}

namespace {

absl::Status unusable() {
  return absl::AbortedError("the transfer ring was aborted");
}

uint64_t load(const uint64_t *word) {
  return __atomic_load_n(word, __ATOMIC_ACQUIRE);
}

void store(uint64_t *word, uint64_t value) {
  __atomic_store_n(word, value, __ATOMIC_RELEASE);
}

} // namespace

absl::Status RingProtocol::sendHeader(const PeerHeader &h) {
  if (unblocked)
    return unusable();
  const uint64_t slots = uint64_t(kRingHeaderSlots);
  if (headers >= slots)
    if (absl::Status s =
            queue.enqueueWaitAtLeast(&control.headersRead, headers + 1 - slots);
        !s.ok())
      return s;
  uint64_t *slot = control.slots[headers % slots];
  const int64_t words[4] = {h.magic, h.tag, h.bytes, h.sequence};
  for (int k = 0; k < 4; ++k)
    if (absl::Status s = queue.enqueueStore(&slot[k], uint64_t(words[k]));
        !s.ok())
      return s;
  ++headers;
  return queue.enqueueStore(&control.headersPosted, headers);
}

absl::Status RingProtocol::send(const void *data, int64_t bytes) {
  // Each chunk once the receiver has released the ring's bytes it takes.
  return stream(const_cast<void *>(data), bytes, /*toRing=*/true,
                control.bytesReleased, uint64_t(ringBytes),
                control.bytesWritten);
}

absl::Status RingProtocol::stream(void *data, int64_t bytes, bool toRing,
                                  const uint64_t &waitFor, uint64_t lag,
                                  uint64_t &done) {
  if (unblocked)
    return unusable();
  for (const RingChunk &c : ringChunks(int64_t(streamed), bytes, ringBytes)) {
    const uint64_t end = streamed + uint64_t(c.bytes);
    if (end > lag)
      if (absl::Status s = queue.enqueueWaitAtLeast(&waitFor, end - lag);
          !s.ok())
        return s;
    char *mine = static_cast<char *>(data) + c.offset;
    char *theirs = ring + c.ringOffset;
    if (absl::Status s = queue.enqueueBytes(toRing ? theirs : mine,
                                            toRing ? mine : theirs, c.bytes);
        !s.ok())
      return s;
    streamed = end;
    if (absl::Status s = queue.enqueueStore(&done, streamed); !s.ok())
      return s;
  }
  return absl::OkStatus();
}

absl::Status RingProtocol::recvHeader() {
  if (unblocked)
    return unusable();
  return queue.enqueueWaitAtLeast(&control.headersPosted, headers + 1);
}

PeerHeader RingProtocol::receivedHeader() {
  PeerHeader h;
  h.magic = 0; // a header an aborted ring never had
  if (unblocked)
    return h;
  const uint64_t *slot = control.slots[headers % uint64_t(kRingHeaderSlots)];
  h.magic = int64_t(load(&slot[0]));
  h.tag = int64_t(load(&slot[1]));
  h.bytes = int64_t(load(&slot[2]));
  h.sequence = int64_t(load(&slot[3]));
  ++headers;
  store(&control.headersRead, headers);
  return h;
}

absl::Status RingProtocol::recv(void *data, int64_t bytes) {
  // Each chunk once the sender has written it.
  return stream(data, bytes, /*toRing=*/false, control.bytesWritten, 0,
                control.bytesReleased);
}

void RingProtocol::unblock(bool sending) {
  unblocked = true;
  if (sending) {
    store(&control.headersRead, RingControl::kUnblocked);
    store(&control.bytesReleased, RingControl::kUnblocked);
  } else {
    store(&control.headersPosted, RingControl::kUnblocked);
    store(&control.bytesWritten, RingControl::kUnblocked);
  }
}

absl::StatusOr<int64_t> ringBytesSetting(int64_t fallback) {
  const char *text = std::getenv("MERAK_P2P_RING_BYTES");
  if (!text || !*text)
    return fallback;
  int64_t bytes = 0;
  if (!absl::SimpleAtoi(text, &bytes) || bytes < 64 ||
      bytes > (int64_t(1) << 40))
    return absl::InvalidArgumentError(
        absl::StrCat("MERAK_P2P_RING_BYTES must be a number of bytes from 64 "
                     "to 2^40, not '",
                     text, "'"));
  return bytes;
}

absl::Status
setUpRings(DistributedJob &job,
           const std::vector<std::pair<int64_t, int64_t>> &directions,
           const std::string &prefix, const RingSetup &setup) {
  const int64_t me = job.rank();
  auto key = [&](int64_t from, int64_t to) {
    return absl::StrCat(prefix, "/", from, "-", to);
  };
  std::vector<int64_t> incoming;
  for (const auto &[from, to] : directions) {
    if (to == me) {
      absl::StatusOr<std::string> shared = setup.makeIncoming(from);
      if (!shared.ok())
        return shared.status();
      absl::StatusOr<std::string> given =
          job.shareInGroup(key(from, to), {to, from}, *shared);
      if (!given.ok())
        return given.status();
      incoming.push_back(from);
    } else if (from == me) {
      absl::StatusOr<std::string> shared =
          job.shareInGroup(key(from, to), {to, from}, "");
      if (!shared.ok())
        return shared.status();
      if (absl::Status s = setup.openOutgoing(to, *shared); !s.ok())
        return s;
      absl::StatusOr<std::string> opened =
          job.shareInGroup(key(from, to) + "/opened", {from, to}, "1");
      if (!opened.ok())
        return opened.status();
    }
  }
  // Once each sender has its half open, no name is needed any more.
  for (int64_t from : incoming) {
    absl::StatusOr<std::string> opened =
        job.shareInGroup(key(from, me) + "/opened", {from, me}, "");
    if (!opened.ok())
      return opened.status();
    setup.unlink(from);
  }
  return absl::OkStatus();
}

//===----------------------------------------------------------------------===//
// SharedRegion
//===----------------------------------------------------------------------===//

namespace {

std::string systemError(const std::string &what, const std::string &path) {
  return absl::StrCat(what, " ", path, ": ", std::strerror(errno));
}

} // namespace

SharedRegion::~SharedRegion() {
  if (base)
    ::munmap(base, size_t(length));
  unlink();
}

absl::Status SharedRegion::mapFile(int fd, int64_t bytes) {
  void *p =
      ::mmap(nullptr, size_t(bytes), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  ::close(fd);
  if (p == MAP_FAILED)
    return absl::ResourceExhaustedError(systemError("cannot map", path));
  base = p;
  length = bytes;
  return absl::OkStatus();
}

void SharedRegion::unlink() {
  if (named)
    ::unlink(path.c_str());
  named = false;
}

namespace {

/// The process that made the region called `name` (merak-ring-KEY-PID-N),
/// or -1.
int64_t creatorOf(const std::string &name) {
  size_t last = name.rfind('-');
  if (last == std::string::npos || last == 0)
    return -1;
  size_t before = name.rfind('-', last - 1);
  int64_t pid = -1;
  if (before == std::string::npos ||
      !absl::SimpleAtoi(name.substr(before + 1, last - before - 1), &pid))
    return -1;
  return pid;
}

} // namespace

void SharedRegion::removeOrphans() {
  DIR *d = ::opendir("/dev/shm");
  if (!d)
    return;
  while (dirent *e = ::readdir(d)) {
    std::string name = e->d_name;
    if (name.rfind("merak-ring-", 0) != 0)
      continue;
    int64_t pid = creatorOf(name);
    if (pid > 0 && ::kill(pid_t(pid), 0) != 0 && errno == ESRCH)
      ::unlink(("/dev/shm/" + name).c_str());
  }
  ::closedir(d);
}

absl::StatusOr<std::unique_ptr<SharedRegion>>
SharedRegion::create(const std::string &key, int64_t bytes) {
  static std::atomic<int64_t> counter{0};
  static std::once_flag swept;
  std::call_once(swept, removeOrphans);
  auto r = std::make_unique<SharedRegion>();
  r->path = absl::StrCat("/dev/shm/merak-ring-", key, "-", ::getpid(), "-",
                         counter++);
  int fd = ::open(r->path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0)
    return absl::UnavailableError(systemError("cannot create", r->path));
  r->named = true;
  // Reserved whole: a full /dev/shm is this error, not a fault on a
  // later write into the mapping.
  if (int e = ::posix_fallocate(fd, 0, off_t(bytes)); e != 0) {
    errno = e;
    std::string why = systemError(
        absl::StrCat("cannot reserve ", bytes, " bytes for"), r->path);
    ::close(fd);
    return absl::ResourceExhaustedError(why);
  }
  if (absl::Status s = r->mapFile(fd, bytes); !s.ok())
    return s;
  return r;
}

absl::StatusOr<std::unique_ptr<SharedRegion>>
SharedRegion::open(const std::string &name, int64_t bytes) {
  auto r = std::make_unique<SharedRegion>();
  r->path = name;
  const std::string prefix = "/dev/shm/merak-ring-";
  if (name.rfind(prefix, 0) != 0 ||
      name.find('/', prefix.size()) != std::string::npos)
    return absl::InvalidArgumentError(
        absl::StrCat("'", name, "' is not a transfer ring's shared memory"));
  int fd = ::open(name.c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0)
    return absl::UnavailableError(systemError("cannot open", name));
  struct stat st;
  if (::fstat(fd, &st) != 0 || int64_t(st.st_size) < bytes) {
    ::close(fd);
    return absl::DataLossError(absl::StrCat(name, " holds fewer than the ",
                                            bytes, " bytes of a ring's block"));
  }
  if (absl::Status s = r->mapFile(fd, bytes); !s.ok())
    return s;
  return r;
}

} // namespace merak::runtime
