//===- RingChannel.cpp - pipeline transfers through a shared ring ---------===//
//
// The ring protocol (RingChannel.h) and the shared memory its control
// blocks live in.
//
//===----------------------------------------------------------------------===//

#include "merak/Runtime/Comm/RingChannel.h"

#include "absl/strings/str_cat.h"

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <fcntl.h>
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

absl::StatusOr<std::unique_ptr<SharedRegion>>
SharedRegion::create(const std::string &key, int64_t bytes) {
  static std::atomic<int64_t> counter{0};
  auto r = std::make_unique<SharedRegion>();
  r->path = absl::StrCat("/dev/shm/merak-ring-", key, "-", ::getpid(), "-",
                         counter++);
  int fd = ::open(r->path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0)
    return absl::UnavailableError(systemError("cannot create", r->path));
  r->named = true;
  if (::ftruncate(fd, off_t(bytes)) != 0) {
    std::string e = systemError("cannot size", r->path);
    ::close(fd);
    return absl::ResourceExhaustedError(e);
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
